"""TVM's worker pools (``PopenPoolExecutor``, behind MetaSchedule's builders and local runner, and the checks of
best programs): costlab's workers (``worker_pool``), started ahead of their first task, and shut down without the
deadlock TVM's destructor can run into.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import weakref


def worker_pool(**kwargs):
    """A ``PopenPoolExecutor`` (same arguments) whose worker processes differ from TVM's in two ways:

    - they run ``costlab.metaschedule.worker``: TVM without PyTorch, which ``import tvm`` would otherwise import
      first (about 1.1 s of each worker's start-up and a few hundred MB of its memory, for nothing a worker runs);
    - each starts in a session of its own, so a Ctrl-C at the terminal, which reaches the whole foreground
      process group, reaches only the command: a worker that was importing TVM printed a traceback of the
      interruption. The command stops its workers itself when it ends (``shutdown_pool``), and the kernel kills
      a worker whose command is gone (``worker.end_with_parent``)."""
    return _pool_class()(**kwargs)


@functools.lru_cache(maxsize=None)
def _pool_class():
    from tvm.support.popen_pool import PopenPoolExecutor, PopenWorker, kill_child_processes

    class Worker(PopenWorker):
        def _start(self):
            """TVM's ``PopenWorker._start`` (POSIX), with costlab's worker program in a session of its own."""
            if self._proc is not None:
                return
            main_read, worker_write = os.pipe()
            worker_read, main_write = os.pipe()
            cmd = [sys.executable, "-m", "costlab.metaschedule.worker", str(os.getpid()), str(worker_read),
                   str(worker_write)]
            self._proc = subprocess.Popen(cmd, pass_fds=(worker_read, worker_write), stdout=self._stdout,
                                          stderr=self._stderr, start_new_session=True)
            os.close(worker_read)
            os.close(worker_write)
            self._reader = os.fdopen(main_read, "rb")
            self._writer = os.fdopen(main_write, "wb")

        def kill(self):
            """TVM's ``PopenWorker.kill``, the process (and the compilers it started) killed first: TVM closes the
            pipe it reads answers from first, and that close waited for a read in progress, so a pool shut down
            with a task running (a Ctrl-C during a check or a network's timing) waited for the task to end."""
            if self._proc is not None:
                try:
                    kill_child_processes(self._proc.pid)
                    self._proc.kill()
                except (OSError, TypeError):
                    pass
            super().kill()

        def _child_process_error(self):
            """TVM's "Subprocess terminated" for a worker that ended during its task, with how it ended: the
            signal that killed it (SIGKILL: the kernel's out-of-memory killer, among others) or its exit status."""
            how = ended_how(self._proc)
            err = super()._child_process_error()  # (kills what is left of the worker)
            return ChildProcessError(f"{err} ({how})") if how else err

    class Pool(PopenPoolExecutor):
        def _worker_run(self, fn, args, kwargs):
            """TVM's ``PopenPoolExecutor._worker_run``: one worker per thread of the pool, costlab's."""
            import threading

            with self._lock:
                proc = self._worker_map.get(threading.get_ident())
                if proc is None:
                    proc = self._worker_map[threading.get_ident()] = Worker(
                        self._initializer, self._initargs, self._maximum_process_uses, self._stdout, self._stderr)
            proc.send(fn, args, kwargs, self._timeout)
            return proc.recv()

    return Pool


def ended_how(proc) -> str | None:
    """How a worker process whose answers' pipe closed ended, in words; None while it still runs (after a second's
    wait: its pipe closes as it exits) or when there is none."""
    if proc is None:
        return None
    try:
        code = proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return None
    if code >= 0:
        return f"the worker exited with status {code}"
    import signal

    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    oom = "; the kernel's out-of-memory killer sends it" if -code == signal.SIGKILL else ""
    return f"the worker was killed by {name}{oom}"


def result_of(future):
    """``future.result()``, waited for in short waits: TVM's tuning re-installs Python's SIGINT handler with
    SA_RESTART, so one long wait on a lock is not woken by a Ctrl-C (or a SIGTERM), and every stop would wait for
    the worker's whole task; Python runs the handlers between the short waits."""
    import concurrent.futures

    while not concurrent.futures.wait([future], timeout=0.2).done:
        pass
    return future.result()


def warm_worker(hold: float = 0.2) -> None:
    """Run in a fresh builder or runner worker: what its first task would import, imported ahead. ``hold``:
    seconds the worker stays busy after, so that the pool's next warm-up task starts another."""
    import time

    import tvm.driver  # noqa: F401
    import tvm.s_tir.meta_schedule.runner  # noqa: F401

    time.sleep(hold)


def start_workers(pool, n: int) -> None:
    """Start ``n`` of a pool's worker processes in the background (each imports TVM)."""
    for _ in range(n):
        track_start(pool, pool.submit(warm_worker))


def track_start(pool, future) -> None:
    """A task that starts one of ``pool``'s workers: ``shutdown_pool`` waits for it."""
    _PENDING.setdefault(pool, []).append(future)


def warm_up(builder) -> None:
    """Start a pooled builder's worker processes in the background (costlab's local runner starts its one worker
    itself: ``runners.StartingRunner``)."""
    if hasattr(builder, "warm_up"):
        builder.warm_up()


# warm-up tasks in flight per worker pool: a pool shut down while one of its workers is still starting
# breaks TVM's PopenPoolExecutor (it kills a worker that has no pipe yet, with its lock held)
_PENDING: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def shutdown_pool(pool) -> None:
    """Shut a TVM worker pool down once its warm-up tasks are done. Should TVM's shutdown fail anyway, the
    pool's lock is released, its worker processes killed and the pool marked shut down, so that its
    destructor (run by the garbage collector, maybe mid-way through other TVM work) does not deadlock. Tasks
    still queued (a batch's builds when Ctrl-C stops the command) are cancelled, not run: TVM's shutdown kills
    the workers and then waited for every queued task, each starting a worker again to run it."""
    for fut in _PENDING.pop(pool, []):
        try:
            fut.result(timeout=120)
        except Exception:  # noqa: BLE001  a warm-up that failed or timed out: the shutdown goes on
            pass
    threads = getattr(pool, "_threadpool", None)
    if threads is not None:
        threads.shutdown(wait=False, cancel_futures=True)
    try:
        pool.shutdown()
    except BaseException as exc:  # noqa: BLE001  a Ctrl-C too: one inside TVM's shutdown left its lock held, and the
        # pool's destructor (the garbage collector's, later) waited on it for good
        lock = getattr(pool, "_lock", None)
        if lock is not None and lock.locked():
            lock.release()
        kill_workers(pool)
        pool._shutdown = True
        if not isinstance(exc, Exception):
            raise


def kill_workers(pool) -> None:
    """Kill a TVM worker pool's worker processes, without TVM's ``kill``, which closes a worker's answers' pipe first
    and so waits for a read in progress (a worker blocked in its task)."""
    for worker in list(getattr(pool, "_worker_map", {}).values()):
        proc = getattr(worker, "_proc", None)
        try:
            if proc is not None:
                proc.kill()
        except Exception:  # noqa: BLE001  gone already
            pass
