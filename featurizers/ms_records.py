"""MetaSchedule records in TVM: a task's workload module, a record's trace, replaying one on the other.

Shared by the featurizers that need TVM (PSA's fallback, PaCM, the benchmarks). TVM is imported lazily.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import orjson

from costlab.common.errors import last_line


class ReplayError(Exception):
    """A record's trace does not apply to its workload (or the workload does not decode)."""


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
        from tvm.s_tir.meta_schedule.database import Workload

        try:
            return Workload.from_json([task.workload_hash or "0", task.workload]).mod
        except Exception as exc:
            raise ReplayError(f"task {task.index}: workload does not decode ({last_line(exc)})") from None

    return _MODULES.get_or((task.workload_hash, task.workload[:64], len(task.workload)), make)


def parse_trace(text):
    """A record's schedule (trace JSON text) as ``[instructions, decisions]``."""
    if isinstance(text, (list, tuple)):
        return text
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ReplayError(f"schedule is not JSON ({exc})") from None
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)):
        raise ReplayError("schedule is not a MetaSchedule trace ([instructions, decisions])")
    return value


def replay(mod, trace):
    """A ``tvm.s_tir.Schedule`` of ``mod`` with the trace applied (postprocessing steps included)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    trace = parse_trace(trace)
    try:
        sch = Schedule(mod)
        Trace.apply_json_to_schedule(trace, sch)
    except Exception as exc:
        raise ReplayError(f"trace does not replay ({last_line(exc)})") from None
    return sch


def trace_json(sch) -> list:
    """The trace of a live schedule as plain JSON, as a MetaSchedule database stores it.

    Taken from TVM's own ``Trace.as_json`` (index maps of layout transforms come as JSON text), with the
    few TVM scalars it leaves (``IntImm``, ``Bool``) made plain.
    """
    return orjson.loads(orjson.dumps(sch.trace.as_json(), default=_plain))


def _plain(obj):
    for attr in ("value",):
        if hasattr(obj, attr):
            return getattr(obj, attr)
    if hasattr(obj, "__iter__"):
        return list(obj)
    return str(obj)


def feature_context(mod, target, num_threads: int = 1):
    """A ``TuneContext`` holding just what ``FeatureExtractor.extract_from`` reads (module, target, threads),
    made without the tensor-intrinsic registry (``datasets.tune_context``)."""
    from costlab.datasets.tune_context import tune_context

    return tune_context(mod, target, num_threads=num_threads, space=None)


def is_gpu(target: dict) -> bool:
    kind = str(target.get("kind", ""))
    return kind in ("cuda", "rocm", "vulkan", "opencl", "metal", "nvptx") or "gpu" in (target.get("keys") or [])


def tvm_target(target: dict):
    import tvm

    return tvm.target.Target(dict(target))




def record_batch(ds, platform: str, rows):
    """What a featurizer needs to featurize some records of a platform: ``(rows as int64, the Platform,
    whether its target is a GPU, the records' task indices, their schedules)``."""
    rows = np.asarray(rows, np.int64)
    plat = ds.platforms[platform]
    table = ds.records(platform)
    task_ids = table.column("task", rows) if rows.size else np.zeros(0, np.int32)
    return rows, plat, is_gpu(plat.target), task_ids, table.schedules(rows)
