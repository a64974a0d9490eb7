"""A tuned network end to end, timed beside what a user gets without tuning.

Both builds run Relax's default CPU passes (legalize, fuse, lower, finalize; the same preparation as
``extract_tasks``, so the database's keys match), and both schedule the functions that have no tuning record
with DLight's CPU rules (``s_tir.dlight.cpu``: GEMV and reductions; the rest stays as TVM lowers it). The
tuned build first applies the tuning database (``MetaScheduleApplyDatabase``). MetaSchedule's own
``compile_relax`` leaves untuned functions unscheduled on a CPU, which would flatter any tuning.
"""

from __future__ import annotations

import os

import numpy as np

BASELINE = "Relax's default CPU pipeline with s_tir.dlight.cpu rules (GEMV, Reduction) where they apply"


def _time(executable, inputs, device, repeat: int = 10) -> float:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(np.asarray(x.detach().numpy() if hasattr(x, "detach") else x), device) for x in inputs]
    timer = vm.time_evaluator("main", device, number=5, repeat=repeat, min_repeat_ms=100)
    return float(np.median(timer(*args).results))


def _lower_passes(target) -> list:
    """Relax's default passes after fusion (lowering, then finalizing) for ``target``. For a CPU they come from
    ``relax.backend.cpu_generic.pipeline`` itself: TVM 0.27's ``relax.pipeline.dataflow_lower_passes`` looks
    them up on the ``cpu_generic`` package, which does not export them (AttributeError)."""
    from tvm.relax import pipeline as relax_pipeline

    if target.kind.name == "llvm":
        from tvm.relax.backend.cpu_generic import pipeline as cpu

        return [*cpu.dataflow_lower_passes(target), *cpu.finalize_passes(target)]
    return [*relax_pipeline.dataflow_lower_passes(target), *relax_pipeline.finalize_passes(target)]


def build(mod, target, database=None):
    """The network compiled for ``target``: with the tuning ``database`` applied first when one is given,
    DLight's CPU rules on every function still unscheduled."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline
    from tvm.relax.transform import MetaScheduleApplyDatabase
    from tvm.s_tir import dlight as dl
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(m, _ctx):
        m = tvm.transform.Sequential([
            *relax_pipeline.library_dispatch_passes(target),
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
            relax.transform.FuseOps(), relax.transform.FuseTIR()])(m)
        if database is not None:
            m = MetaScheduleApplyDatabase()(m)
        m = dl.ApplyDefaultSchedule(dl.cpu.GEMV(), dl.cpu.Reduction())(m)
        return tvm.transform.Sequential(_lower_passes(target))(m)

    with target, (database if database is not None else MemoryDatabase()), tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=target, relax_pipeline=pipeline)


def end_to_end(mod, inputs, target, database, cores: int) -> dict:
    """Median latency of the network compiled with ``database`` and without any tuning (``BASELINE``)."""
    import tvm

    os.environ["TVM_NUM_THREADS"] = str(cores)  # this process runs the network: the target's threads
    device = tvm.cpu(0) if target.kind.name == "llvm" else tvm.device(target.kind.name, 0)
    t_tuned = _time(build(mod, target, database), inputs, device)
    t_untuned = _time(build(mod, target), inputs, device)
    return dict(tuned_ms=round(t_tuned * 1e3, 4), untuned_ms=round(t_untuned * 1e3, 4),
                speedup=round(t_untuned / t_tuned, 3) if t_tuned > 0 else None, threads=cores, untuned=BASELINE)
