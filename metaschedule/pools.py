"""TVM's worker pools (``PopenPoolExecutor``, behind MetaSchedule's builders and local runner): started ahead
of their first task, and shut down without the deadlock TVM's destructor can run into.
"""

from __future__ import annotations

import weakref


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
    destructor (run by the garbage collector, maybe mid-way through other TVM work) does not deadlock."""
    for fut in _PENDING.pop(pool, []):
        try:
            fut.result(timeout=120)
        except Exception:  # noqa: BLE001  a warm-up that failed or timed out: the shutdown goes on
            pass
    try:
        pool.shutdown()
    except Exception:  # noqa: BLE001
        lock = getattr(pool, "_lock", None)
        if lock is not None and lock.locked():
            lock.release()
        for worker in list(getattr(pool, "_worker_map", {}).values()):
            proc = getattr(worker, "_proc", None)
            try:
                if proc is not None:
                    proc.kill()
            except Exception:  # noqa: BLE001
                pass
        pool._shutdown = True
