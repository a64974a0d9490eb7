"""The runners costlab measures MetaSchedule candidates with (``LocalRunner`` on the target's threads, or
``RPCRunner`` through a tracker behind ``rpc.guarded_runner``), and ``build_and_run``: candidates built,
run and their results as raw costs and error codes.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager

from costlab.common.errors import CostlabError, last_line
from costlab.common.stopwatch import stopwatch
from costlab.metaschedule.builders import check_build_room
from costlab.metaschedule.pools import shutdown_pool, track_start, warm_worker, worker_pool
from costlab.metaschedule.results import ERROR_MS_FAILED, MS_FAILURE_SECS, costs_and_error
from costlab.metaschedule.rpc import guarded_runner
from costlab.metaschedule.targets import device_of
from costlab.metaschedule.traces import plain_json


class RunnerUnavailable(CostlabError):
    """The local runner's worker could not start, or cannot use the target's device."""


def pin_threads(n: int) -> None:
    """Runs first in the local runner's worker (and the worker a network is timed in): the kernels get the
    target's ``num-cores`` threads. TVM's
    thread pool is sized from ``TVM_NUM_THREADS`` when a kernel first runs; MetaSchedule leaves it at the
    machine's core count whatever the target says, so a 1-core platform would be measured on 2 cores."""
    os.environ["TVM_NUM_THREADS"] = str(n)


def runner_threads() -> int:
    """Threads TVM's runtime uses in this process (sized when its first kernel ran): a runner worker's, read back
    by the test of ``pin_threads``; the worker's a network is timed in."""
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def _start_worker(device: str) -> None:
    """Run first in a local runner's worker: what its first program would import, imported ahead, and the
    device's context made (on a GPU, the CUDA context: its first program would otherwise pay for it)."""
    import tvm

    warm_worker(hold=0)  # the pool's one worker
    tvm.runtime.empty((1,), "float32", tvm.runtime.device(device, 0))


def device_name(target) -> str:
    """The device a runner runs ``target``'s programs on, by the name runners take ("cpu", "cuda"), not the
    target's kind ("llvm")."""
    return str(device_of(target)).split(":")[0]


def alloc_arguments(device, args_info, alloc_repeat: int) -> list:
    """The arguments a program is timed on, as MetaSchedule allocates them (``random_fill_for_measure``), but int32
    and int64 arguments all 0: that fill gives such an argument a float's bits (values near 10^18 for int64),
    and a take or gather (an embedding's token ids, a network's index tensors) reads its table at them without
    bounds checks, so every program of such a task was killed by SIGSEGV or timed reading garbage. 0 is an index
    into any table; int8/uint8 data keeps its random values. Runs in the runner's worker."""
    import tvm

    return _alloc(tvm.get_global_func("tvm.contrib.random.random_fill_for_measure"), device, args_info, alloc_repeat)


def alloc_remote_arguments(session, device, args_info, alloc_repeat: int) -> list:
    """``alloc_arguments`` on an RPC device: the device's own fill, int32 and int64 arguments all 0."""
    return _alloc(session.get_function("tvm.contrib.random.random_fill_for_measure"), device, args_info,
                  alloc_repeat)


def _alloc(random_fill, device, args_info, alloc_repeat: int) -> list:
    import numpy as np
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    def fill(arg) -> None:
        if str(arg.dtype) in ("int32", "int64"):
            arg.copyfrom(np.zeros([int(x) for x in arg.shape], str(arg.dtype)))
        else:
            random_fill(arg)

    return alloc_argument_common(fill, device, args_info, alloc_repeat)


@functools.lru_cache(maxsize=None)
def _runner_class():
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    @derived_object
    class StartingRunner(LocalRunner._cls):
        """MetaSchedule's ``LocalRunner`` whose worker starts in the background. ``LocalRunner`` starts its
        worker in its constructor and waits for it (it imports TVM: 1.6 s here, longer on a cold machine) to
        check that the runner functions it was given exist; costlab gives MetaSchedule's, but for
        ``alloc_arguments``, a function of its own module, so there is nothing to check, and the caller goes on
        with its model and first search meanwhile. The worker
        also makes the device's context. The first run waits for that start, and a worker that could not start
        (or a device that is not there) is one clear error then rather than a failure of every candidate."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made = self.pool  # TVM's, no worker started yet: costlab's workers instead (``pools.worker_pool``)
            self.pool = worker_pool(max_workers=1, timeout=made._timeout, initializer=made._initializer,
                                    stderr=made._stderr)
            made.shutdown()

        def _sanity_check(self) -> None:
            self.started = self.failure = None

        def start(self, device: str) -> None:
            """Start the worker now, in the background, with ``device``'s context."""
            self.device = device
            self.started = self.pool.submit(_start_worker, device)
            track_start(self.pool, self.started)

        def ready(self) -> None:
            """Wait until the worker has started (at once after the first time); RunnerUnavailable, every time,
            if it could not."""
            if self.failure is not None:
                raise self.failure
            started, self.started = self.started, None
            if started is None:
                return
            try:
                started.result()
            except Exception as exc:  # noqa: BLE001  whatever stopped it, said in one line
                self.failure = RunnerUnavailable(f"the runner's worker could not run programs on {self.device}: "
                                                 f"{last_line(exc)}")
                raise self.failure from None

        def run(self, runner_inputs):
            self.ready()
            return super().run(runner_inputs)

    return StartingRunner


def make_runner(opts, target, on_lost=None):
    """The runner costlab measures with: a ``LocalRunner`` (``StartingRunner``: its worker started at once in
    the background) whose worker runs kernels on the target's ``num-cores`` threads, or MetaSchedule's
    ``RPCRunner`` through a tracker when ``opts.rpc_key`` is set, guarded (``rpc.guarded_runner``) so that a
    tracker or device that stops answering gives no failed records: ``on_lost(reason)`` is called and the
    caller stops."""
    from tvm.s_tir import meta_schedule as ms

    evaluator = ms.runner.EvaluatorConfig(number=opts.number, repeat=opts.repeat,
                                          min_repeat_ms=opts.min_repeat_ms, enable_cpu_cache_flush=False)
    if opts.rpc_key:
        config = ms.runner.RPCConfig(tracker_host=opts.rpc_host, tracker_port=opts.rpc_port,
                                     tracker_key=opts.rpc_key, session_timeout_sec=int(max(opts.runner_timeout, 10)))
        inner = ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator, max_workers=1,
                                    f_alloc_argument=alloc_remote_arguments)
        return guarded_runner(inner, opts.rpc_host, opts.rpc_port, opts.rpc_key, opts.rpc_wait, on_lost)
    cores = int(target.attrs.get("num-cores", 0) or 0)
    init = functools.partial(pin_threads, cores) if cores > 0 else None
    runner = _runner_class()(timeout_sec=opts.runner_timeout, evaluator_config=evaluator, initializer=init,
                             f_alloc_argument=alloc_arguments)
    runner.start(device_name(target))
    return runner


def runner_failure(runner) -> RunnerUnavailable | None:
    """Why ``runner`` (costlab's, or a runner wrapping it as ``inner``) could not start, if it could not. Raised
    inside MetaSchedule's tuning loop, the error comes out of it as a RuntimeError: the caller re-raises this."""
    for obj in (runner, getattr(runner, "inner", None)):
        failure = getattr(obj, "failure", None) if obj is not None else None
        if failure is not None:
            return failure
    return None


COLD_REPEATS = 10  # timed runs of a program measured cold, each after a flush


@contextmanager
def cold_runs(runner):
    """Within the block, ``runner`` (a ``LocalRunner``) times every run of a program with the CPU's caches
    flushed of all its arguments but the first (MetaSchedule's ``cache_flush_cpu_non_first_arg``): one run per
    repeat, ``COLD_REPEATS`` of them. Inside a network a kernel's input has just been written by the kernel
    before it while its weights come from memory; tuning's warm, repeated runs time it with the weights in
    cache, and programs alike when warm differ by up to 1.5x this way (docs/search.md). Restored after."""
    saved = runner.evaluator_config
    runner.evaluator_config = saved._replace(number=1, repeat=max(COLD_REPEATS, saved.repeat), min_repeat_ms=0,
                                             enable_cpu_cache_flush=True)
    try:
        yield runner
    finally:
        runner.evaluator_config = saved


def close_runner(runner) -> None:
    """Shut a runner's worker pool down now rather than when the garbage collector gets to it: TVM's
    ``PopenPoolExecutor`` destructor can deadlock when it runs in the middle of other TVM work (its own
    docstring warns of it), which a long process (a test session, a notebook) then hangs in."""
    for obj in (runner, getattr(runner, "inner", None)):
        pool = getattr(obj, "pool", None) if obj is not None else None
        if pool is not None and not getattr(pool, "_shutdown", False):
            shutdown_pool(pool)


def build_and_run(builder, runner, target, candidates, rounds: int = 1,
                  clock: dict | None = None) -> list[tuple[list[float], int, str | None]]:
    """``(raw costs, error code, error message)`` per candidate; failures get MetaSchedule's ``[1e10]``.
    ``clock``: seconds spent building and running are added to its ``build`` and ``run``.

    ``rounds`` > 1: each candidate is built once and run ``rounds`` times, the candidates in turn (all of
    them once, then all again), its costs of every round in one list; so programs compared with each other
    meet the machine's drift alike. A failure in any round fails the candidate."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import remove_build_dir

    check_build_room(loaded_here=False)  # as costlab's own error: raised in a build, TVM's FFI makes it a RuntimeError
    device = device_name(target)
    with stopwatch(clock, "build"):
        built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in candidates])
    out: list = [None] * len(candidates)
    inputs, where = [], []
    for i, b in enumerate(built):
        if b.error_msg is None:
            inputs.append(ms.runner.RunnerInput(b.artifact_path, device, candidates[i].args_info))
            where.append(i)
        else:
            out[i] = ([MS_FAILURE_SECS], ERROR_MS_FAILED, str(b.error_msg))
    try:
        if hasattr(runner, "ready"):  # a worker that could not start: RunnerUnavailable here, not through TVM's FFI
            runner.ready()
        runs: dict = {i: [] for i in where}
        with stopwatch(clock, "run"):
            for _ in range(max(1, int(rounds))):
                live = [k for k, i in enumerate(where) if out[i] is None]  # a program that failed is not run again
                if not live:
                    break
                for k, fut in zip(live, runner.run([inputs[k] for k in live])):
                    i, res = where[k], fut.result()
                    if res.error_msg is not None or res.run_secs is None:
                        out[i] = ([MS_FAILURE_SECS], ERROR_MS_FAILED, str(res.error_msg))
                    else:
                        runs[i].extend(float(plain_json(x)) for x in res.run_secs)
        for i in where:
            if out[i] is None:
                costs, error = costs_and_error(runs[i])
                out[i] = (costs, error, None)
    finally:
        for i in where:
            try:
                remove_build_dir(built[i].artifact_path)
            except OSError:
                pass
    return out
