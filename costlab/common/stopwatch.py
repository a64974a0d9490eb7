"""Seconds spent per phase of a long job, added up over its calls: ``with stopwatch(clock, "build"):`` adds the
block's seconds to ``clock["build"]`` (nothing when ``clock`` is None), however the block ends."""

from __future__ import annotations

import time
from contextlib import contextmanager


@contextmanager
def stopwatch(clock: dict | None, phase: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        if clock is not None:
            clock[phase] = clock.get(phase, 0.0) + time.perf_counter() - start
