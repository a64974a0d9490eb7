"""MetaSchedule records of a dataset in TVM: a task's workload module (cached), the feature extractor's tune
context, a batch of records to featurize. Traces are replayed by ``costlab.metaschedule.traces.replay``.

A workload whose buffers share a name (te's unnamed placeholders) is featurized under names told apart
(``metaschedule.workloads.unique_buffer_names``), records and live candidates alike (``named_apart``): TVM's
per-store features order tied buffers by name and then by address, so the same program's features would
change from one process to the next, and PSA follows buffers by name.

Shared by the featurizers that need TVM (PSA's fallback, PaCM, the benchmarks). TVM is imported lazily.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from costlab.common.errors import last_line
from costlab.metaschedule.targets import is_gpu
from costlab.metaschedule.traces import ReplayError, replay
from costlab.metaschedule.tune_context import tune_context
from costlab.metaschedule.workloads import decode_workload, unique_buffer_names


class _LRU(OrderedDict):
    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get_or(self, key, make):
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = make()
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)
        return value


_MODULES = _LRU(256)


def task_module(task):
    """The IRModule of a MetaSchedule task (``datasets.Task`` with dialect ``ms``), cached per workload."""
    if task.dialect != "ms":
        raise ReplayError(f"task {task.index} is an {task.dialect} task, not a MetaSchedule workload")

    def make():
        try:
            return unique_buffer_names(decode_workload(task.workload_hash or "0", task.workload))
        except Exception as exc:
            raise ReplayError(f"task {task.index}: workload does not decode ({last_line(exc)})") from None

    return _MODULES.get_or((task.workload_hash, task.workload[:64], len(task.workload)), make)


_RENAMED = _LRU(64)


def named_apart(mod, schedules: list):
    """``(mod, schedules)`` of a tuning run's live candidates, with the buffers named apart as ``task_module``
    names a dataset's: the module renamed (cached by structural hash) and each candidate's trace replayed on
    it; unchanged when the names already are apart, and a candidate whose trace does not replay stays as it is."""
    import tvm_ffi

    if not schedules:
        return mod, schedules

    def make():  # None: the names are apart already
        renamed = unique_buffer_names(mod)
        return None if renamed is mod else renamed

    renamed = _RENAMED.get_or(int(tvm_ffi.structural_hash(mod)), make)
    if renamed is None or not tvm_ffi.structural_equal(renamed, mod):
        return mod, schedules
    out = []
    for sch in schedules:
        try:
            out.append(replay(renamed, sch.trace))
        except Exception:  # noqa: BLE001  the candidate keeps its own module
            out.append(sch)
    return renamed, out


def feature_context(mod, target, num_threads: int = 1):
    """A ``TuneContext`` holding just what ``FeatureExtractor.extract_from`` reads (module, target, threads),
    made without the tensor-intrinsic registry (``metaschedule.tune_context``)."""
    return tune_context(mod, target, num_threads=num_threads, space=None)


def record_batch(ds, platform: str, rows):
    """What a featurizer needs to featurize some records of a platform: ``(rows as int64, the Platform,
    whether its target is a GPU, the records' task indices, their schedules)``."""
    rows = np.asarray(rows, np.int64)
    plat = ds.platforms[platform]
    table = ds.records(platform)
    # read in increasing order, each row once (what HDF5 takes), and given back in the caller's order
    once, order = np.unique(rows, return_inverse=True)
    task_ids = table.column("task", once)[order] if rows.size else np.zeros(0, np.int32)
    schedules = table.schedules(once)
    return rows, plat, is_gpu(plat.target), task_ids, [schedules[i] for i in order.tolist()]
