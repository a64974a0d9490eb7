"""Measured records: the batch that writers take, program ids and derived labels."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from costlab.metaschedule.results import ERROR_NONE

# Error codes stored with each record: Ansor/TenSet logs keep their own `error_no` (1..8); MetaSchedule
# records get those of ``costlab.metaschedule.results`` (0 = ok).
ERROR_MIN, ERROR_MAX = -(1 << 15), (1 << 15) - 1  # the stored error column is int16
# a mean of run_secs at or above this is no latency: MetaSchedule's failure value averaged with a few real runs
LATENCY_MAX_SECS = 1e9


def program_id(dialect: str, workload_hash: str, schedule: str) -> int:
    """64-bit id of a program: one workload with one schedule, so that a program measured on several
    platforms lines up record by record."""
    digest = hashlib.blake2b(
        f"{dialect}:{workload_hash}\n{schedule}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little")


@dataclass
class RecordBatch:
    """Columns of records to append to one platform of a dataset."""

    task: list = field(default_factory=list)  # task index in the dataset
    schedule: list = field(default_factory=list)  # trace / step list as logged (JSON text: str or UTF-8 bytes)
    costs: list = field(default_factory=list)  # raw measured costs in seconds (list of floats)
    error: list = field(default_factory=list)  # error code, 0 = ok
    timestamp: list = field(default_factory=list)  # seconds since the epoch
    program_id: list = field(default_factory=list)  # see program_id()

    def append(self, task, schedule, costs, error, timestamp, pid):
        self.task.append(task)
        self.schedule.append(schedule)
        self.costs.append(costs)
        self.error.append(error)
        self.timestamp.append(timestamp)
        self.program_id.append(pid)

    def __len__(self) -> int:
        return len(self.task)


def mean_latency(values: np.ndarray, offsets: np.ndarray, error: np.ndarray) -> np.ndarray:
    """Per record: mean of its raw costs; ``inf`` for failed records (error, no costs, or a mean not in
    (0, ``LATENCY_MAX_SECS``): MetaSchedule's failure value, alone or averaged with real runs, NaN)."""
    n = len(offsets) - 1
    counts = np.diff(offsets)
    lat = np.full(n, np.inf)
    has = counts > 0
    if values.size:
        sums = np.add.reduceat(values.astype(np.float64), offsets[:-1][has].astype(np.int64))
        lat[has] = sums / counts[has]
    ok = (np.asarray(error) == ERROR_NONE) & has & (lat < LATENCY_MAX_SECS) & (lat > 0)
    lat[~ok] = np.inf
    return lat


def record_latency(run_secs) -> float:
    """Mean latency (seconds) of one record's ``run_secs``, ``math.inf`` when it has none: no runs (``None``
    or empty), or a mean that is not in (0, ``LATENCY_MAX_SECS``) (a failure, NaN, inf). Values may be
    numbers or TVM ``FloatImm`` (their ``.value``), as a MetaSchedule database or runner gives them.
    The scalar side of ``mean_latency`` (which, on a dataset's columns, also has the records' error codes)."""
    if not run_secs:
        return math.inf
    vals = [float(s.value if hasattr(s, "value") else s) for s in run_secs]
    mean = sum(vals) / len(vals)
    return mean if 0 < mean < LATENCY_MAX_SECS else math.inf


def scores(task: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Label of each record: ``best latency of its task / its latency`` in (0, 1]; failed records score 0."""
    task = np.asarray(task)
    out = np.zeros(len(latency))
    if len(task) == 0:
        return out
    ntask = int(task.max()) + 1
    best = np.full(ntask, np.inf)
    np.minimum.at(best, task, latency)
    ok = np.isfinite(latency)
    out[ok] = best[task[ok]] / latency[ok]
    return out
