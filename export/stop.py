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
