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


def recordable(failed: bool, stopping: bool | None = None) -> bool:
    """Whether a measured program's result becomes a record. The signal that stops a run reaches its whole
    process group, the builder's and runner's workers too: a build or run that fails while the run is being
    stopped failed for that alone, so it is not recorded (nor counted against a budget) and a re-run measures
    the program. A deadline does not reach the workers: only the signal counts. ``stopping`` (default: whether a
    stop was requested) is the one rule for every kind of result: ``build_and_run``'s tuples, MetaSchedule's
    runner results (``export/callbacks.recorded``)."""
    if stopping is None:
        stopping = stop_requested() is not None
    return not (failed and stopping)
