"""The machine to one measuring job at a time.

Timings are noisy when anything else builds or measures, so every long job of costlab's that measures (the
benchmarks, the corpus and trajectory jobs) holds an exclusive ``flock`` on one file while it builds and
measures, and a test run or another job that takes the same lock waits for it. ``scripts/make_corpus.sh``
takes the same file with ``flock(1)``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from costlab.common.locks import take_lock

CPU_LOCK = "/tmp/costlab-cpu.lock"
LOCK_ENV = "COSTLAB_CPU_LOCK"  # another lock file (a test of a job, run while the machine's lock is held)


@contextlib.contextmanager
def cpu_lock(path: str | None = None) -> Iterator[None]:
    """Hold the machine's measuring lock for the ``with`` block (waits while another job holds it)."""
    with take_lock(path or os.environ.get(LOCK_ENV) or CPU_LOCK):
        yield
