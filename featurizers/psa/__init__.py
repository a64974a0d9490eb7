"""PSA, Pruner's static analyzer: the cheap *draft* cost model, a formula rather than a network.

- ``featurizer``: the featurizer registered as ``psa`` (estimates of dataset records and live candidates);
- ``formula``: the estimate of one scheduled program against a hardware spec;
- ``loopnest``: the loop-nest ``Program`` the formula reads, built two ways: ``trace_nest`` (a MetaSchedule
  trace simulated on a per-task analysis of the workload) and ``tir_nest`` (a walk of the scheduled TIR);
- ``hardware``: the ``HardwareSpec`` of CPUs (detected) and GPUs (a table);
- ``scale``: ``TaskScale``, the one map of a task's PSA scores to MetaSchedule cost-model scores (the
  draft stage and ``--model psa`` alike).

The names below are the public API, what the rest of costlab uses (PaCM reads the same programs, specs and
estimate); the modules' other names are theirs. Pure Python: TVM is imported only where a schedule is
replayed or walked.
"""

from costlab.featurizers.psa.featurizer import PSA
from costlab.featurizers.psa.formula import estimate
from costlab.featurizers.psa.hardware import (GPU_TABLE, CPUSpec, GPUSpec, HardwareSpec, detect_cpu, gpu_spec,
                                              spec_for, spec_for_platform, spec_for_target, target_dict)
from costlab.featurizers.psa.loopnest import Access, Loop, Program, Stmt, flat_strides, footprints
from costlab.featurizers.psa.scale import TaskScale
from costlab.featurizers.psa.tir_nest import program_of
from costlab.featurizers.psa.trace_nest import TaskModel, Unsupported, simulate

__all__ = [
    "PSA",
    "estimate",
    "Program", "Stmt", "Loop", "Access", "flat_strides", "footprints",
    "program_of", "TaskModel", "Unsupported", "simulate",
    "TaskScale",
    "HardwareSpec", "CPUSpec", "GPUSpec", "GPU_TABLE", "detect_cpu", "gpu_spec",
    "spec_for", "spec_for_platform", "spec_for_target", "target_dict",
]
