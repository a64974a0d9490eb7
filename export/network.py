"""A tuned network end to end, timed beside what a user gets without tuning.

Both builds start from the module exactly as the tasks were extracted from it (``datasets.extract.
network_module``: legalized and fused already), so every fused function is, structurally, the task that was
tuned for it: preparing it a second time would annotate the fused functions again (an ``op_pattern``
attribute they did not have when extracted) and no tuning record would match them. Only what extraction
left as Relax operators is lowered first (library dispatch, which turns scans such as GPT-2's cumsum into
TIR, and legalization). The tuned build applies the tuning database (``MetaScheduleApplyDatabase``); both
then schedule the functions that have no record
with DLight's CPU rules (``s_tir.dlight.cpu``: GEMV and reductions; the rest stays as TVM lowers it), and
run Relax's CPU lowering and finalizing passes. MetaSchedule's own ``compile_relax`` leaves untuned
functions unscheduled on a CPU, which would flatter any tuning. On a GPU every function needs a schedule
(its loops bound to blocks and threads): DLight's GPU rules give one (``default_rules``; ``Fallback`` for
what no other rule takes), before Relax's own lowering and finalizing passes.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from costlab.export.check import HALF_RTOL
from costlab.metaschedule.builders import check_build_room
from costlab.metaschedule.pools import result_of, shutdown_pool, worker_pool
from costlab.metaschedule.runners import device_name, pin_threads, runner_threads
from costlab.metaschedule.targets import device_of, is_gpu
from costlab.metaschedule.traces import plain_json

BASELINE = "Relax's default CPU pipeline with s_tir.dlight.cpu rules (GEMV, Reduction) where they apply"


def _arrays(inputs) -> list:
    """The network's inputs as numpy arrays (PyTorch tensors detached)."""
    return [np.asarray(x.detach().numpy() if hasattr(x, "detach") else x) for x in inputs]


def time_network(executable, inputs, device, repeat: int = 10) -> float:
    """Median seconds of one call of the compiled network's ``main`` on ``inputs``."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(x, device) for x in _arrays(inputs)]
    timer = vm.time_evaluator("main", device, number=5, repeat=repeat, min_repeat_ms=100)
    return float(np.median(timer(*args).results))


def _lower_passes(target) -> list:
    """Relax's default passes after fusion (lowering, then finalizing) for ``target``, from its backend's
    ``pipeline`` module itself (``relax.backend.cpu_generic.pipeline``, ``relax.backend.cuda.pipeline``): TVM
    0.27's ``relax.pipeline.dataflow_lower_passes`` looks them up on the backend package, which does not export
    them (AttributeError)."""
    import importlib

    backend = "cuda" if is_gpu(plain_json(target.export())) else "cpu_generic"
    passes = importlib.import_module(f"tvm.relax.backend.{backend}.pipeline")
    return [*passes.dataflow_lower_passes(target), *passes.finalize_passes(target)]


def default_rules(target) -> list:
    """DLight's rules for the functions no tuning record schedules: on a CPU, GEMV and reductions (the rest as
    TVM lowers it); on a GPU, matmuls, GEMV, reductions, then ``Fallback`` for every other function (its loops
    bound to blocks and threads), in the order TVM's GPU pipelines apply them."""
    from tvm.s_tir import dlight as dl

    if is_gpu(plain_json(target.export())):
        return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    return [dl.cpu.GEMV(), dl.cpu.Reduction()]


def untuned_schedule(mod, target):
    """A task's module (its function ``main``) as the untuned build schedules it (``default_rules``), scheduled
    on a copy: DLight schedules a module that it alone holds in place, and ``mod`` is the task's own."""
    from tvm.s_tir import dlight as dl

    with target:
        return dl.ApplyDefaultSchedule(*default_rules(target))(mod.clone())


def tuned_functions(mod, database) -> tuple[int, int]:
    """``(functions with a tuning record in database, functions)`` over the module's TIR functions, matched
    as ``MetaScheduleApplyDatabase`` matches them (the function as ``main``, structurally)."""
    import tvm

    def applies(func) -> bool:  # a workload whose records all failed has none to apply (get_top_k leaves them out)
        task = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        return bool(database.has_workload(task) and database.get_top_k(database.commit_workload(task), 1))

    funcs = [f for f in mod.functions.values() if type(f).__name__ == "PrimFunc"]
    return sum(applies(f) for f in funcs), len(funcs)


def build(mod, target, database=None):
    """The network compiled for ``target``, and ``(functions the database has a record for, functions)``:
    ``mod`` as the tasks were extracted from it (legalized and fused), the tuning ``database`` applied first
    when one is given, DLight's rules (``default_rules``) on every function still unscheduled."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline
    from tvm.relax.transform import MetaScheduleApplyDatabase
    from tvm.s_tir import dlight as dl
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    mod = mod.clone()  # the passes replace functions of the module they are given: the caller's stays as it was
    matched = [0, 0]

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(m, _ctx):
        # operators extraction left as Relax calls (scans and sorts such as cumsum are dispatched, not
        # legalized) become TIR functions; the fused ones stay as extracted: no annotating or fusing again
        m = tvm.transform.Sequential([*relax_pipeline.library_dispatch_passes(target),
                                      relax.transform.LegalizeOps()])(m)
        if database is not None:
            matched[:] = tuned_functions(m, database)  # counted on the very module the database is applied to
            m = MetaScheduleApplyDatabase()(m)
        m = dl.ApplyDefaultSchedule(*default_rules(target))(m)
        return tvm.transform.Sequential(_lower_passes(target))(m)

    with target, (database if database is not None else MemoryDatabase()), tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=target, relax_pipeline=pipeline), tuple(matched)


def output_tolerances(reference, rtol: float = 1e-3) -> tuple[float, float]:
    """``(rtol, atol)`` a network's output is checked with: ``rtol``, and an absolute 1e-4 of the output's largest
    finite magnitude (at least 1) for elements near zero; a float16 output the float16 tolerances of a task's
    check (``check.HALF_RTOL``, of that magnitude too): its sums round at every add, in another order than
    PyTorch's, and a network of programs each task's check accepted would differ."""
    ref = np.asarray(reference)
    values = np.abs(ref[np.isfinite(ref)].astype(np.float64))
    scale = max(1.0, float(values.max(initial=0.0)))
    if ref.dtype == np.float16:
        return max(rtol, HALF_RTOL), HALF_RTOL * scale
    return rtol, 1e-4 * scale


def check_output(executable, inputs, device, reference, rtol: float = 1e-3) -> dict:
    """The compiled network's output on ``inputs`` against PyTorch's (``reference``): ``status`` ok when every
    element is within the tolerances of it (``output_tolerances``) and every element PyTorch computes as inf or
    NaN is the same, else differs, with the largest difference of the finite elements."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(x, device) for x in _arrays(inputs)]
    out = vm["main"](*args)
    while not hasattr(out, "numpy") and len(out):  # a tuple of outputs: the first, as PyTorch's first
        out = out[0]
    got, ref = np.asarray(out.numpy(), np.float64), np.asarray(reference, np.float64)
    if got.shape != ref.shape:
        return dict(status="differs", reason=f"shape {list(got.shape)} against PyTorch's {list(ref.shape)}")
    finite = np.isfinite(ref)
    # an element PyTorch computes as inf, -inf or NaN (log(0), a -inf mask) matches only the same value
    same = (got == ref) | (np.isnan(got) & np.isnan(ref))
    unfinite, special = int(np.count_nonzero(~np.isfinite(got) & finite)), int(np.count_nonzero(~finite & ~same))
    if unfinite or special:  # a NaN has no difference to report (and JSON no NaN to write)
        why = ([f"{unfinite} of {got.size} output elements are not finite where PyTorch's are"] if unfinite else []) + (
            [f"{special} of {got.size} differ from PyTorch's inf or NaN there"] if special else [])
        return dict(status="differs", reason="; ".join(why))
    rtol, atol = output_tolerances(reference, rtol)
    diff = np.abs(got[finite] - ref[finite])
    ok = bool(np.all(diff <= atol + rtol * np.abs(ref[finite])))
    return dict(status="ok" if ok else "differs", max_abs_diff=float(diff.max(initial=0.0)), rtol=rtol, atol=atol)


def _timed_exported(paths: list[str], inputs: list, device: str, repeat: int) -> tuple[list[float], int]:
    """Run in a fresh worker of costlab's pool (its thread pool sized by ``TVM_NUM_THREADS``): each exported
    network's median seconds on ``inputs`` (``time_network``), and the threads its runtime ran them on."""
    import tvm

    dev = tvm.runtime.device(device, 0)
    return [time_network(tvm.runtime.load_module(p), inputs, dev, repeat) for p in paths], runner_threads()


def time_networks(executables: list, inputs, target, cores: int, repeat: int = 10) -> tuple[list[float], int]:
    """Median seconds of each compiled network on ``inputs`` (``time_network``), and the threads they ran on.

    On a CPU they are timed in a worker process of their own on the target's ``cores`` threads: TVM sizes a
    process's thread pool once, from ``TVM_NUM_THREADS`` when its first kernel runs, so a process that ran one
    before (a notebook's earlier tuning or timing) would time the network on that pool's threads, whatever the
    target says. On a GPU the kernels run on the device, and this process times them."""
    device = device_of(target)
    if is_gpu(plain_json(target.export())):
        return [time_network(exe, inputs, device, repeat) for exe in executables], cores
    arrays = _arrays(inputs)
    # LLVM ends the whole process on a write that fails ("LLVM ERROR: IO failure on output stream"): a full or
    # noexec temporary folder is found before the export, and the tuning's summary says why the network was not timed
    check_build_room()
    with tempfile.TemporaryDirectory(prefix="costlab-network-") as tmp:
        paths = [os.path.join(tmp, f"network{i}.so") for i in range(len(executables))]
        for exe, path in zip(executables, paths):
            exe.export_library(path)
        pool = worker_pool(max_workers=1, timeout=None, initializer=pin_threads, initargs=(cores,))
        try:
            return result_of(pool.submit(_timed_exported, paths, arrays, device_name(target), repeat))
        finally:
            shutdown_pool(pool)


def end_to_end(mod, inputs, target, database, cores: int, reference=None) -> dict:
    """Median latency of the network compiled with ``database`` and without any tuning (``BASELINE``), on the
    target's ``cores`` threads (``time_networks``); with ``reference`` (PyTorch's output), the tuned build's output
    checked against it (``output_check``)."""
    tuned, (hit, n) = build(mod, target, database)
    untuned = build(mod, target)[0]
    (t_tuned, t_untuned), threads = time_networks([tuned, untuned], inputs, target, cores)
    out = dict(tuned_ms=round(t_tuned * 1e3, 4), untuned_ms=round(t_untuned * 1e3, 4),
               speedup=round(t_untuned / t_tuned, 3) if t_tuned > 0 else None, threads=threads, untuned=BASELINE,
               tuned_functions=hit, functions=n)
    if threads != cores:  # TVM's runtime runs no more threads than this machine has cores
        out["threads_note"] = (f"timed on {threads} thread(s), not the target's num-cores {cores}: this machine's "
                               "TVM runtime runs no more threads than it has cores")
    if reference is not None:
        out["output_check"] = check_output(tuned, inputs, device_of(target), reference)
    return out
