"""The machine to one measuring job at a time.

Timings are noisy when anything else builds or measures, so every long job of costlab's that measures (the
benchmarks, the corpus and trajectory jobs) holds an exclusive ``flock`` on one file while it builds and
measures, and a test run or another job that takes the same lock waits for it. ``scripts/make_corpus.sh``
takes the same file with ``flock(1)``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from costlab.common.locks import take_lock

CPU_LOCK = "/tmp/costlab-cpu.lock"
LOCK_ENV = "COSTLAB_CPU_LOCK"  # another lock file (a test of a job, run while the machine's lock is held)


@contextlib.contextmanager
def cpu_lock(path: str | None = None) -> Iterator[None]:
    """Hold the machine's measuring lock for the ``with`` block (waits while another job holds it, saying so on
    stderr: a command started under ``flock`` on the same file would otherwise wait for itself in silence)."""
    lock = path or os.environ.get(LOCK_ENV) or CPU_LOCK

    def waiting() -> None:
        print(f"waiting for {lock}: another job holds it (a test run, benchmark or corpus job). A command started "
              f"under `flock {lock}` waits here for itself: start it without flock, it takes the lock on its own",
              file=sys.stderr, flush=True)

    with take_lock(lock, on_wait=waiting):
        yield
