"""Child commands run to their end: a benchmark or corpus job stopped by SIGTERM (a lease's or a job's time
limit) ends only once the tuning run it started has, so that no run left behind builds and measures beside
whatever comes next (a retime, the next job)."""

from __future__ import annotations

import signal
import subprocess

TERMINATED = 143  # the exit status of a command stopped by SIGTERM (128 + 15)


def run_to_end(cmd: list[str], **popen) -> int:
    """Run ``cmd`` (``subprocess.Popen`` keywords: stdout, cwd, env, ...) and wait for its end; its exit status.

    SIGTERM to this process meanwhile is passed on to the command, and waited out: a costlab tuning run stops
    after its round in flight, or at once when the signal also reached it through its process group (its
    second). The status is then ``TERMINATED`` whatever the command's own, so that the caller stops too."""
    proc = subprocess.Popen(cmd, **popen)
    got: list[int] = []

    def forward(signum, frame):
        got.append(signum)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        code = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return TERMINATED if got else code
