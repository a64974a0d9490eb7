"""MetaSchedule traces: as JSON (the form a tuning database stores and a dataset keeps as a record's schedule),
and replayed on a workload.

- ``trace_json`` / ``compact_json`` / ``trace_text``: a trace as MetaSchedule's database writes it, its
  canonical text (what program ids hash), and the two together: a trace's identity wherever it is compared;
  ``plain_json`` makes any of TVM's ``as_json()`` / ``export()`` values plain;
- ``replay``: a trace (JSON text or value, or a tuning record's ``Trace``, optionally with a seed and the
  postprocessors) applied to a workload module, the one replay every layer uses (featurizers, measurement,
  transfer-tuning, exploitation, the search strategies, the check of tuned programs); ``replay_candidate``
  makes the result a measure candidate.

TVM is imported lazily, by the functions that need it.
"""

from __future__ import annotations

import json
import sys

import orjson

from costlab.common.errors import last_line
from costlab.metaschedule import intrinsics


def plain_json(value, bools_as_ints: bool = False):
    """TVM's ``as_json()`` / ``export()`` return FFI containers and ``IntImm``/``FloatImm`` leaves; the plain
    Python value (lists, dicts, int, float, str, bool, None) that ``json.dumps`` writes.

    ``bools_as_ints`` writes booleans as 1 / 0, as MetaSchedule's database writer does in traces (a
    ``Split``'s ``preserve_unit_iters`` is ``true`` in ``Trace.as_json()`` but ``1`` in the file).
    """
    if isinstance(value, bool):
        return int(value) if bools_as_ints else value
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return str(value)
    kind = type(value).__name__
    if kind in ("IntImm", "FloatImm", "Bool"):
        return plain_json(value.value, bools_as_ints)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): plain_json(v, bools_as_ints) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or hasattr(value, "__len__"):
        return [plain_json(v, bools_as_ints) for v in value]
    raise TypeError(f"cannot write {kind} as JSON")


def trace_json(trace):
    """A schedule trace (``tvm.s_tir.schedule.Trace``) as MetaSchedule's database writes it
    (``database_tuning_record.json``), as a plain Python value: the postprocessing included, booleans as
    integers. The one JSON form of a trace in costlab: what datasets store, what a record's program id
    hashes, what the TLP tokenizer reads of live candidates, so a program has one text wherever it comes from."""
    return plain_json(trace.as_json(remove_postproc=False), bools_as_ints=True)


def _orjson_may_differ(out: bytes) -> bool:
    """Whether orjson's text may differ from ``json.dumps``'s: negative exponents and tiny floats (Python
    writes 1e-07 and 5e-05, orjson 1e-7 and 0.00005), DEL and non-ASCII (Python escapes them), and null
    (orjson writes NaN and infinities as null). Substring tests only: this runs once per record."""
    return b"e-" in out or b"0.0000" in out or b"null" in out or b"\x7f" in out or not out.isascii()


def compact_json(value) -> str:
    """The canonical text of a trace: ``json.dumps`` with no spaces (the form program ids hash).

    orjson writes the same bytes ~20x faster for everything but the cases ``_orjson_may_differ`` catches,
    which fall back to ``json.dumps``, so the text (and every program id) is exactly ``json.dumps``'s.
    """
    try:
        out = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):  # e.g. integers beyond 64 bits
        return json.dumps(value, separators=(",", ":"))
    if _orjson_may_differ(out):
        return json.dumps(value, separators=(",", ":"))
    return out.decode()


def trace_text(trace) -> str:
    """A trace's identity: the canonical text of its one JSON form (``compact_json(trace_json(trace))``), for a
    ``Trace`` or a trace's JSON value (booleans written either way: a ``Trace.as_json()`` value with ``true``
    and the database's ``1`` give one text)."""
    value = trace_json(trace) if hasattr(trace, "as_json") else plain_json(trace, bools_as_ints=True)
    return compact_json(value)


class ReplayError(ValueError):
    """A trace that does not apply to its workload (or is no trace). ``reason``: why, in TVM's words where TVM
    refused it (the last line of its message)."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


def parse_trace(text):
    """A trace given as JSON text (a record's schedule) or already parsed, as ``[instructions, decisions]``;
    ReplayError when it is not one."""
    if isinstance(text, (list, tuple)):
        return text
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        try:  # orjson refuses integers beyond 64 bits, which json reads
            value = json.loads(text)
        except ValueError:
            raise ReplayError(f"schedule is not JSON ({exc})") from None
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)):
        raise ReplayError("schedule is not a MetaSchedule trace ([instructions, decisions])")
    return value


# what a trace that tensorizes holds: the instruction, or the annotation MetaSchedule's RewriteTensorize acts on
TENSORIZE_MARKERS = ("Tensorize", "auto_tensorize")


def needs_registry(trace) -> bool:
    """Whether a trace as a database holds it (JSON text or value) tensorizes: replaying it looks intrinsics up
    by name, so the registry (``tvm.s_tir.tensor_intrin``) must be loaded first."""
    text = trace if isinstance(trace, str) else json.dumps(trace)
    return any(word in text for word in TENSORIZE_MARKERS)


def load_registry_for(trace) -> None:
    """Load the tensor-intrinsic registry if replaying ``trace`` needs it (``needs_registry``). A ``Trace`` object
    needs no check: it comes from a design space or a database, and either loaded the registry already when
    it tensorizes (``tune_context.space_generator``, ``databases.json_database``)."""
    if hasattr(trace, "apply_to_schedule") or intrinsics.PACKAGE in sys.modules:  # a Trace, or all loaded
        return
    text = trace if isinstance(trace, str) else json.dumps(trace)
    if needs_registry(text):
        intrinsics.load(intrinsics.kind_for(text))


def replay(mod, trace, seed: int | None = None, postprocs=None):
    """A ``tvm.s_tir.Schedule`` of ``mod`` (its random state ``seed``; default TVM's) with a trace applied.

    ``trace`` as a database holds it, JSON text or value: applied with its postprocessing steps; ReplayError
    saying why when it does not apply. A ``Trace`` object (a tuning record's): applied with its postprocessing
    steps, TVM's error raised as it comes; with ``postprocs``, replayed as MetaSchedule's ``ThreadedTraceApply``
    does for a new population member: the postprocessors' instructions are dropped, applied again, and marked
    as postprocessing (``enter_postproc``), so that the evolution's replays of its mutants drop them (a layout
    rewrite replayed as a schedule instruction changes the blocks' outputs); ValueError when a postprocessor
    rejects the program."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    load_registry_for(trace)
    if hasattr(trace, "apply_to_schedule"):  # a Trace object
        sch = Schedule(mod) if seed is None else Schedule(mod, seed=seed)
        if postprocs is None:
            trace.apply_to_schedule(sch, remove_postproc=False)
            return sch
        trace.apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        for post in postprocs:
            if not post.apply(sch):
                raise ValueError("postprocessor rejected the program")
        return sch
    if postprocs is not None:
        raise TypeError("replay applies postprocessors to a Trace object, not to a trace's JSON")
    trace = parse_trace(trace)
    try:
        sch = Schedule(mod) if seed is None else Schedule(mod, seed=seed)
        Trace.apply_json_to_schedule(trace, sch)
    except Exception as exc:  # noqa: BLE001  TVM says why a trace does not apply
        reason = last_line(exc)
        raise ReplayError(f"trace does not replay ({reason})", reason) from None
    return sch


def replay_candidate(mod, schedule):
    """A MetaSchedule measure candidate of ``mod`` scheduled by a recorded trace (``schedule``: the trace's JSON
    text as a dataset stores it, or its value), built as ``TuningRecord.as_measure_candidate`` builds one."""
    from tvm.s_tir import meta_schedule as ms

    sch = replay(mod, schedule)
    args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    return ms.MeasureCandidate(sch, args)
