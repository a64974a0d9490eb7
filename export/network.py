"""A tuned network end to end: compiled with the tuning database (MetaSchedule's Relax integration, untuned
functions scheduled by DLight) and timed beside the same network compiled without any tuning record."""

from __future__ import annotations

import os

import numpy as np


def _time(executable, inputs, device, repeat: int = 10) -> float:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(np.asarray(x.detach().numpy() if hasattr(x, "detach") else x), device) for x in inputs]
    timer = vm.time_evaluator("main", device, number=5, repeat=repeat, min_repeat_ms=100)
    return float(np.median(timer(*args).results))


def end_to_end(mod, inputs, target, database, cores: int) -> dict:
    """Median latency (seconds) of the network compiled with ``database`` and with an empty one."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import compile_relax

    os.environ["TVM_NUM_THREADS"] = str(cores)  # this process runs the network: the target's threads
    device = tvm.cpu(0) if target.kind.name == "llvm" else tvm.device(target.kind.name, 0)
    tuned = compile_relax(database, mod, target, params=None)
    untuned = compile_relax(ms.database.MemoryDatabase(), mod, target, params=None)
    t_tuned, t_untuned = _time(tuned, inputs, device), _time(untuned, inputs, device)
    return dict(tuned_ms=round(t_tuned * 1e3, 4), untuned_ms=round(t_untuned * 1e3, 4),
                speedup=round(t_untuned / t_tuned, 3) if t_tuned > 0 else None, threads=cores)
