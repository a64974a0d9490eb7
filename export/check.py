"""Tuned programs checked before they are reported: each task's best measured programs run on random inputs
beside a reference build of the same task (the unscheduled module, TVM's default lowering; for a GPU target
it runs on the host CPU), and their outputs are compared (``np.allclose``, MetaSchedule's
``validate_database`` tolerances). The fastest program that matches is the task's result; a program whose
output differs, or that fails to build or run, is reported and never chosen.

The scheduled module is built as it is, its weight-layout rewrite blocks included (so it takes the original
layout, as the reference does), and both run in a worker process, so a kernel that crashes ends the worker,
not the tuning run.
"""

from __future__ import annotations

import math
import os

import numpy as np

from costlab.common.errors import last_line
from costlab.common.host import usable_cores
from costlab.datasets.records import record_latency
from costlab.metaschedule.pools import result_of, worker_pool
from costlab.metaschedule.structure import index_bounds, narrow_float_sums
from costlab.metaschedule.targets import device_of, is_gpu
from costlab.metaschedule.traces import plain_json, replay, trace_text

RTOL, ATOL = 1e-3, 2e-3
# float16 sums (tensor-core programs accumulate in float16) round at every add, in another order than the
# reference's: tolerances relative to the output's largest value, far below what a wrong
# program gives
HALF_RTOL = 2e-2
# bfloat16 and the float8 kinds (numpy's extension types of ml_dtypes, which numpy does not count as inexact):
# the same comparison, at this many times the format's own epsilon (bfloat16: 0.0625), at most LOW_PRECISION_MAX:
# the float8 kinds' epsilons (0.125, 0.25) times 8 are tolerances of 1 and 2, under which an output of all zeros
# (or the reference negated) is "close" to any reference
LOW_PRECISION_EPS = 8
LOW_PRECISION_MAX = 0.25
# a long sum in a narrow accumulator (float16 over 16,384 values: a correct program that adds in another order than
# the reference differs by up to 4.4% of the output's largest value, over 65,536 by 8.2%; about 0.35 times the
# format's epsilon times the square root of the length, ``benchmarks/half_sums.py``): the tolerance grows to this
# many times epsilon times that root (6.25% and 12.5%), below what a program that drops a sixteenth of the sum
# differs by (14-38%, 1.5 to 7 times the tolerance); at most LOW_PRECISION_MAX (bfloat16, of 8 times float16's
# epsilon, reaches it at 4,096 values: there a correct sum and one missing a sixteenth are too coarse to tell apart)
NARROW_SUM_EPS = 0.5
# check workers at once on a GPU: each makes a CUDA context (hundreds of MiB of the GPU's memory)
GPU_WORKERS = 4


def narrow_sum_rtol(sums: dict) -> float:
    """The tolerance, relative to an output's largest value, that the narrow float sums of a module
    (``structure.narrow_float_sums``: accumulator dtype -> longest sum) call for: ``NARROW_SUM_EPS`` times the
    accumulator's epsilon times the square root of the sum's length, the largest of them, at most
    ``LOW_PRECISION_MAX``; 0 for none."""
    import ml_dtypes  # lazy: TVM's own dependency, which knows the extension float types' epsilons

    return max([min(NARROW_SUM_EPS * float(ml_dtypes.finfo(dtype).eps) * math.sqrt(n), LOW_PRECISION_MAX)
                for dtype, n in sums.items() if n > 1], default=0.0)


def close(expected, got, narrow_rtol: float = 0.0) -> bool:
    """Whether an output matches the reference's (``RTOL``/``ATOL``; float16 outputs ``HALF_RTOL``, bfloat16 and
    float8 ones ``LOW_PRECISION_EPS`` times their epsilon, both relative to the output's largest value; every float
    output of a module that sums in a narrow float type at least ``narrow_rtol`` of its largest value
    (``narrow_sum_rtol``: a float16 accumulator cast to a float32 output rounds as the float16 output would);
    integer and boolean outputs exactly: their sums round nowhere, and an int32 accumulator of thousands was let
    off by several units under ``RTOL``)."""
    if expected.shape != got.shape:
        return False
    if not _floating(expected.dtype):
        return bool(np.array_equal(expected, got))
    a, b = expected.astype(np.float64), got.astype(np.float64)
    # the output's largest value, below 1 too: a float16 softmax over 128 columns (values near 1/128) was "close"
    # to zeros, or to another row's, within an atol of 2% of 1
    scale = float(np.max(np.abs(a[np.isfinite(a)]), initial=0.0))
    if np.issubdtype(expected.dtype, np.inexact) and expected.dtype != np.float16:  # float32, float64
        # ATOL of an output whose largest value is at least 1; of a smaller one, that share of ATOL: an output of
        # small values (a softmax over thousands, a mean) is otherwise "close" to zeros or to any other row's
        rtol, atol = max(RTOL, narrow_rtol), max(ATOL * min(1.0, scale), narrow_rtol * scale)
        return bool(np.allclose(expected, got, rtol=rtol, atol=atol, equal_nan=True))
    import ml_dtypes  # lazy: TVM's own dependency, needed only for outputs of its extension float types

    eps = float(ml_dtypes.finfo(expected.dtype).eps)
    rtol = HALF_RTOL if expected.dtype == np.float16 else min(LOW_PRECISION_EPS * eps, LOW_PRECISION_MAX)
    rtol = max(rtol, narrow_rtol)
    return bool(np.allclose(a, b, rtol=rtol, atol=rtol * scale, equal_nan=True))


def _floating(dtype) -> bool:
    """Whether an array of ``dtype`` holds floating-point values: numpy's own, or the extension types TVM takes
    from ml_dtypes (bfloat16, float8_e4m3fn, ...), which numpy does not count as inexact."""
    return np.issubdtype(dtype, np.inexact) or dtype.name.startswith(("bfloat", "float"))


def reference_cpu_target() -> dict:
    """The target a GPU task's reference is built for: this machine's own CPU, by LLVM's name of it. Generic
    x86-64 code has no half-precision conversions (F16C): a float16 reference ran about 10x slower without them,
    27 s for an unscheduled 1024x1024x1024 matmul on a 2-core Zen 4 (``benchmarks/check_reference.py``). The real
    CPU's name, never a faked one (``$COSTLAB_HOST_FILES``): the code runs here."""
    from tvm.target import codegen

    return {"kind": "llvm", "mcpu": str(codegen.llvm_get_system_cpu())}


def _compare_worker(reference, candidates, target_json: dict, seed: int) -> list:
    """In a worker process: build the reference and each candidate, run all on the same random inputs, and
    say per candidate ``"ok"`` or what differs."""

    import tvm
    from tvm.s_tir.meta_schedule.arg_info import TensorInfo

    target = tvm.target.Target(target_json)
    gpu = is_gpu(target_json)
    dev = device_of(target)
    # A GPU reference runs on the host CPU: the unscheduled module binds no threads, which a GPU build refuses.
    ref_target, ref_dev = (tvm.target.Target(reference_cpu_target()), tvm.cpu(0)) if gpu else (target, dev)
    rng = np.random.default_rng(seed)
    infos = TensorInfo.from_prim_func(reference["main"])
    # an int32/int64 argument beside float ones is taken for indices into them (an embedding's token ids, a
    # gather): drawn below every float argument's extents, as a take without bounds checks reads out of its table
    # otherwise, and the reference itself then differs from run to run
    # (extents of 1 left out: a batch of one, or an output's axis of one, bounds no index, and drawing every index
    # 0 would leave a gather that reads the wrong row unseen); an argument whose values select along a buffer's
    # axis (read or written through it, or through a copy of it) is drawn below that axis's extent, whatever it is
    # (a table of one row: RoBERTa's token types with type_vocab_size 1), and only that argument: the others (an
    # integer table gathered from, the index of another axis) are not all drawn 0 with it
    index_high = min([8, *(int(x) for i in infos if str(i.dtype).startswith(("float", "bfloat")) for x in i.shape
                           if int(x) > 1)])
    bounds = index_bounds(reference, default=index_high)
    narrow_rtol = narrow_sum_rtol(narrow_float_sums(reference))
    inputs = []
    for pos, info in enumerate(infos):
        dtype, shape = str(info.dtype), [int(x) for x in info.shape]
        if dtype.startswith(("float", "bfloat")):
            inputs.append(rng.uniform(-1, 1, shape).astype(dtype))
        elif dtype == "bool":
            inputs.append(rng.integers(0, 2, shape).astype(dtype))
        else:
            # an index of another integer type (int8, int16, uint8, ...) is bounded by the axis it selects along too
            # (a bound per row of a gather_nd's indices: an array that broadcasts over the argument)
            high = np.minimum(index_high if dtype in ("int32", "int64") else 8, bounds.get(pos, 8))
            high = np.maximum(1, high)
            inputs.append(rng.integers(0, high, shape).astype(dtype))

    def run(mod, target=target, dev=dev, on_gpu=gpu) -> list:
        lib = tvm.compile(mod, target=target)
        args = [tvm.runtime.tensor(x.copy(), device=dev) for x in inputs]
        try:
            lib[lib.entry_name](*args) if hasattr(lib, "entry_name") else lib["main"](*args)
            dev.sync()
            return [a.numpy() for a in args]
        except Exception:
            if on_gpu:
                # a kernel that faulted on a GPU leaves the process's CUDA context unusable: every later run in
                # this worker would fail too. The worker ends; the check takes this job's programs again, each
                # in a fresh worker, and the pool starts a fresh one for the tasks after it.
                os._exit(3)
            raise

    expected = run(reference, ref_target, ref_dev, on_gpu=False)
    out = []
    for mod in candidates:
        try:
            got = run(mod)
        except Exception as exc:  # noqa: BLE001  a program that does not build or run is reported as such
            lines = [x for x in str(exc).strip().splitlines() if x.strip()]
            out.append(f"failed: {lines[-1][:200] if lines else type(exc).__name__}")
            continue
        bad = [i for i, (a, b) in enumerate(zip(expected, got)) if not close(a, b, narrow_rtol)]
        if bad:
            i = bad[0]
            diff = float(np.max(np.abs(expected[i].astype(np.float64) - got[i].astype(np.float64))))
            out.append(f"wrong output: argument {i} differs from the reference by up to {diff:.3g}")
        else:
            out.append("ok")
    return out


def fastest_records(database, mod, top: int) -> list:
    """The task's fastest records in ``database`` (up to ``top``), those with a latency only (failures left out)."""
    if not database.has_workload(mod):
        return []
    workload = database.commit_workload(mod)
    got = database.get_top_k(workload, top)
    out = [r for r in got if math.isfinite(record_latency(r.run_secs))]
    if len(out) < top and len(got) == top:  # a damaged record (0 s or less) sorts first in MetaSchedule's top-k
        out = [r for r in database.get_top_k(workload, len(database))
               if math.isfinite(record_latency(r.run_secs))][:top]
    return out


WORKER_ENDED = "failed: the check's worker ended"


def _verdicts_of(jobs: list, target: dict, seed: int, timeout: float, workers: int = 1,
                 done=None) -> list[list[str]]:
    """``_compare_worker``'s verdicts for each job (``(mod, scheduled programs)``), the jobs spread over a pool
    of ``workers`` worker processes that each start once (TVM imported, a GPU's context made) and check job
    after job; a job whose worker crashed or timed out gets every program failed (nothing can be vouched for),
    and the pool starts a fresh worker for the jobs after it. ``done(i)`` is called as job i's verdicts are
    in, in the jobs' order."""
    pool = worker_pool(max_workers=max(1, min(workers, len(jobs))), timeout=timeout)
    try:
        futures = [pool.submit(_compare_worker, mod, scheduled, target, seed) for mod, scheduled in jobs]
        out = []
        for future, (_, scheduled) in zip(futures, jobs):
            try:
                out.append(result_of(future))  # a Ctrl-C or SIGTERM heard while a worker checks
            except Exception as exc:  # noqa: BLE001
                # the class (a TimeoutError is told apart below), and how a worker that died ended (its signal)
                how = f": {exc}" if isinstance(exc, ChildProcessError) and str(exc) else ""
                out.append([f"{WORKER_ENDED} ({type(exc).__name__}{how})"] * len(scheduled))
            if done is not None:
                done(len(out) - 1)
        return out
    finally:
        pool.shutdown()


def _verdicts(mod, scheduled: list, target: dict, seed: int, timeout: float) -> list[str]:
    """``_compare_worker``'s verdicts from a worker process of its own."""
    return _verdicts_of([(mod, scheduled)], target, seed, timeout)[0]


def _contenders(database, mod, top: int, records: list | None, skip: list | None) -> list:
    """The records a task's check tries, in order: ``records`` first, then the database's fastest others (not in
    ``skip``), up to ``top`` (or as many as ``records``), those with a latency only."""
    recs = list(records or ())
    given = {trace_text(r.trace) for r in [*recs, *(skip or ())]}  # then the fastest others, should all be wrong
    recs += [r for r in fastest_records(database, mod, top + len(skip or ())) if trace_text(r.trace) not in given]
    return [r for r in recs[:max(top, len(records or ()))] if math.isfinite(record_latency(r.run_secs))]


def _answer(recs: list, verdicts: list[str]) -> dict:
    checked = [dict(tuned_us=round(record_latency(r.run_secs) * 1e6, 3), result=v) for r, v in zip(recs, verdicts)]
    for i, v in enumerate(verdicts):
        if v == "ok":
            return dict(status="ok" if i == 0 else "replaced", best_us=checked[i]["tuned_us"],
                        checked=checked[:i + 1], record=recs[i], tried=recs[:i + 1])
    return dict(status="wrong", best_us=None, checked=checked, record=None, tried=recs)


def check_tasks(database, items: list, target, top: int = 3, seed: int = 0, timeout: float = 300.0,
                workers: int | None = None, progress=None) -> list[dict]:
    """``check_task`` for many tasks at once: ``items`` are ``(mod, records, skip)`` per task, and the answers
    come in their order. The tasks are checked in a pool of ``workers`` processes (default: one a core, on a
    GPU at most ``GPU_WORKERS``; at most one a task), each started once for all the tasks it checks: a task
    checked in a worker of its own pays the worker's start (TVM's import, a GPU's context) every time, most of
    a small task's check.
    ``progress(i)`` is called as task i's programs are checked (a task with nothing measured: at once)."""
    contenders = [_contenders(database, mod, top, records, skip) for mod, records, skip in items]
    todo = [i for i, recs in enumerate(contenders) if recs]
    # a record whose trace does not replay on the task (a database edited, another TVM) is failed, not checked
    replayed = [[_replayed(items[i][0], rec, seed + 1) for rec in contenders[i]] for i in todo]
    jobs = [(items[i][0], [m for m in progs if not isinstance(m, str)]) for i, progs in zip(todo, replayed)]
    tjson = plain_json(target.export())
    if progress is not None:
        for i, recs in enumerate(contenders):
            if not recs:
                progress(i)
    if workers is None:  # one a core; on a GPU at most GPU_WORKERS, each holding a context in its memory
        workers = min(usable_cores(), GPU_WORKERS) if is_gpu(tjson) else usable_cores()
    verdicts = _verdicts_of(jobs, tjson, seed, timeout, workers,
                            None if progress is None else (lambda j: progress(todo[j])))
    answers = [dict(status="none", best_us=None, checked=[], record=None, tried=[]) for _ in items]
    for i, (mod, scheduled), got, progs in zip(todo, jobs, verdicts, replayed):
        if len(scheduled) > 1 and all(v.startswith(WORKER_ENDED) and "TimeoutError" not in v for v in got):
            # one program that crashes the process (an out-of-bounds read) ended the check of all: each on its
            # own (not after a timeout: each would take the whole timeout again)
            got = [_verdicts(mod, [s], tjson, seed, timeout)[0] for s in scheduled]
        checked = iter(got)
        answers[i] = _answer(contenders[i], [m if isinstance(m, str) else next(checked) for m in progs])
    return answers


def _replayed(mod, record, seed: int):
    """The record's program (its trace replayed on ``mod``), or the verdict of a trace that does not replay."""
    try:
        return replay(mod, record.trace, seed).mod
    except Exception as exc:  # noqa: BLE001  TVM's error of a trace that does not apply to this workload
        return f"failed: its trace does not replay on the task ({last_line(exc)[:160]})"


def check_task(database, mod, target, top: int = 3, seed: int = 0, timeout: float = 300.0,
               records: list | None = None, skip: list | None = None) -> dict:
    """The task's fastest programs (up to ``top``; ``records``: these, in this order, e.g. ordered by a second
    measurement, ``export/finals.py``; ``skip``: records never checked nor chosen, e.g. those that failed that
    measurement) checked against the reference, fastest first, until one matches.
    Returns ``best_us`` and ``record`` (of the first that matches, None if none does), ``checked`` (what each
    checked program got, with its tuning latency), ``tried`` (the records checked, in that order: all but a
    matching last one computed a wrong result) and ``status``: ``ok`` (the fastest matched), ``replaced``
    (a faster one was wrong and is not the result), ``wrong`` (none of them matched), ``none`` (nothing
    measured)."""
    return check_tasks(database, [(mod, records, skip)], target, top, seed, timeout, workers=1)[0]
