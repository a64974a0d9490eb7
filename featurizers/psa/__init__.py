"""PSA, Pruner's static analyzer: the cheap *draft* cost model, a formula rather than a network.

- ``featurizer``: the featurizer registered as ``psa`` (estimates of dataset records and live candidates);
- ``formula``: the estimate of one scheduled program against a hardware spec;
- ``loopnest``: the loop-nest ``Program`` the formula reads, built two ways: ``trace_nest`` (a MetaSchedule
  trace simulated on a per-task analysis of the workload) and ``tir_nest`` (a walk of the scheduled TIR);
- ``hardware``: the ``HardwareSpec`` of CPUs (detected) and GPUs (a table).
"""

from costlab.featurizers.psa.featurizer import PSA

__all__ = ["PSA"]
