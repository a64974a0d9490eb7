"""The stop request of a run: the first Ctrl-C / SIGTERM of ``costlab tune``, ``transfer`` or ``exploit``
(``costlab/commands/signals.py``). Without TVM: the command line imports it."""

from __future__ import annotations

# The first Ctrl-C / SIGTERM of a tuning run is recorded here (``request_stop``), not raised: raised inside
# a callback that MetaSchedule's C++ loop called, it unwinds through C++ with worker threads running, which
# can crash the process. Every round checks it before it starts, so the run ends after the round in flight
# with every measured batch in the database.
_STOP: dict = {"signal": None}


def request_stop(signum: int) -> None:
    _STOP["signal"] = signum


def stop_requested() -> int | None:
    return _STOP["signal"]


def clear_stop() -> None:
    _STOP["signal"] = None


# what a result says when its worker ended (TVM's ChildProcessError) or was interrupted inside its task
_SIGNALLED = ("Subprocess terminated", "KeyboardInterrupt")


def recordable(failed: bool, message: str | None = None, stopping: bool | None = None) -> bool:
    """Whether a measured program's result becomes a record. A terminal's Ctrl-C, or a job's time limit sent to
    a process group, also reaches the workers of TVM's own pools in the command's group (MetaSchedule's builder
    and runner under ``--ms-defaults``, the RPC runner's local worker): a build or run that fails while the run
    is being stopped, and whose ``message`` says its worker ended or was interrupted, failed for that alone, so
    it is not recorded (nor counted against a budget) and a re-run measures the program. costlab's own workers
    run in sessions of their own (``metaschedule/pools.worker_pool``), which such a signal does not reach: their
    failures in the round a stop lets finish are the programs' own, and recorded. A deadline reaches no worker:
    only the signal counts. ``stopping`` (default: whether a stop was requested) is the one rule for every kind
    of result: ``build_and_run``'s tuples, MetaSchedule's runner results (``export/callbacks.recorded``)."""
    if not failed:
        return True
    if stopping is None:
        stopping = stop_requested() is not None
    return not (stopping and any(s in (message or "") for s in _SIGNALLED))
