"""How long-running commands end on Ctrl-C and SIGTERM: ``Terminated`` (SIGTERM raised like Ctrl-C, which
``costlab.cli.main`` turns into exit 143) and ``signals_end_cleanly`` (a stop after the round in flight, for
``costlab tune``, ``costlab transfer`` and ``costlab exploit``)."""

from __future__ import annotations

import contextlib

from costlab.export.stop import clear_stop, request_stop, stop_requested


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, `kill` and job schedulers send), raised like Ctrl-C so that every transaction
    and temporary file is undone on the way out."""


@contextlib.contextmanager
def signals_end_cleanly():
    """Ctrl-C or SIGTERM during tuning ends like any costlab command: one line, exit 130 or 143, the database
    holding every batch measured before. The first signal asks the run to stop after the round in flight
    (``export/stop.py``'s ``request_stop``: raised inside MetaSchedule's C++ loop, an interrupt can crash the
    process); a second one interrupts at once."""
    import signal

    def interrupt(signum):
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def on_signal(signum, frame):
        if stop_requested() is not None:
            interrupt(signum)
        request_stop(signum)

    clear_stop()
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # a background job started with SIGINT ignored keeps it
            previous[sig] = signal.signal(sig, on_signal)
    try:
        yield
    except BaseException as exc:
        got = stop_requested()
        if got is not None and not isinstance(exc, KeyboardInterrupt):
            interrupt(got)  # an error on the way out after a signal is that signal
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stop_requested() is not None:
        interrupt(stop_requested())
