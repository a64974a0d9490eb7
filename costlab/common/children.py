"""Child commands run to their end: a benchmark or corpus job stopped by SIGTERM (a lease's or a job's time
limit) ends only once the tuning run it started has, so that no run left behind builds and measures beside
whatever comes next (a retime, the next job)."""

from __future__ import annotations

import signal
import subprocess
import threading

TERMINATED = 143  # the exit status of a command stopped by SIGTERM (128 + 15)


def run_to_end(cmd: list[str], **popen) -> int:
    """Run ``cmd`` (``subprocess.Popen`` keywords: stdout, cwd, env, ...) and wait for its end; its exit status.

    SIGTERM to this process meanwhile (from the moment the command starts) is passed on to the command, and
    waited out; the status is then ``TERMINATED`` whatever the command's own, so that the caller stops too. A
    costlab tuning run that gets one SIGTERM stops after its round in flight; one that gets two stops at once:
    sent to a whole process group (``timeout`` without ``--foreground``), the signal reaches the run directly
    as well as passed on. Any other exception while waiting (Ctrl-C) stops the command the same way before it
    is raised. Outside the main thread, where no handler can be installed, the command is only waited for."""
    if threading.current_thread() is not threading.main_thread():
        with subprocess.Popen(cmd, **popen) as proc:
            return proc.wait()
    procs: list = []
    got: list[int] = []

    def forward(signum, frame):
        got.append(signum)
        if procs and procs[0].poll() is None:
            procs[0].send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        procs.append(subprocess.Popen(cmd, **popen))
        if got:  # came while the command was starting
            procs[0].send_signal(signal.SIGTERM)
        code = procs[0].wait()
    except BaseException:
        while procs and procs[0].poll() is None:  # a Ctrl-C again while it stops: one more SIGTERM (at once)
            procs[0].send_signal(signal.SIGTERM)
            try:
                procs[0].wait()
            except KeyboardInterrupt:
                continue
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return TERMINATED if got else code


def run_or_stop(cmd: list[str], **popen) -> int:
    """``run_to_end`` for a job that stops with its command: once a SIGTERM's command has ended, one line and
    ``SystemExit(TERMINATED)``; else the command's exit status."""
    code = run_to_end(cmd, **popen)
    if code == TERMINATED:
        print("  stopped by SIGTERM; the run ended", flush=True)
        raise SystemExit(TERMINATED)
    return code
