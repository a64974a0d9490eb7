"""``costlab.export.measuring(target)``: costlab's builder and runner for MetaSchedule's own tuning functions
(``tune_tir``, ``tune_tasks``, ``tune_relax``), released when the ``with`` block ends.

MetaSchedule's defaults ("local") start fresh build workers for every batch, each importing TVM's tensor-intrinsic
registry, and time kernels on half of this machine's logical cores. costlab's builder keeps one pool of workers
for the run without that import, and its runner runs kernels on the target's ``num-cores`` threads: what
``costlab tune`` and ``costlab dataset measure`` measure with."""

from __future__ import annotations

import contextlib

from costlab.export.tasks import measuring_target
from costlab.export.workdir import MeasuringStack
from costlab.metaschedule.targets import target_cores
from costlab.metaschedule.traces import plain_json


@contextlib.contextmanager
def measuring(target, builder_timeout: float = 30.0, number: int | None = None, repeat: int | None = None):
    """``with measuring(target) as (builder, runner):`` costlab's builder and runner for ``target`` (a
    ``tvm.target.Target``, a JSON dict, ``host``, or the ``llvm -mcpu=...`` form), to pass to MetaSchedule's tuning
    functions as ``builder=`` and ``runner=``; their worker pools are shut down when the block ends. ``number``
    and ``repeat``: the runner's evaluator (runs averaged into one measurement, and the measurements a candidate
    gets), by default ``costlab dataset measure``'s."""
    spec = plain_json(target.export()) if hasattr(target, "export") else target
    tgt = measuring_target(spec)
    evaluator = {k: v for k, v in dict(number=number, repeat=repeat).items() if v is not None}
    stack = MeasuringStack()
    try:
        yield stack.start(tgt, workers=target_cores(tgt), builder_timeout=builder_timeout, warm=True, **evaluator)
    finally:
        stack.close()
