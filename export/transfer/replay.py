"""A source schedule replayed on a new task, its sampling decisions adapted to the new loops.

TVM replays a trace instruction by instruction, and ``Trace.apply_to_schedule(..., decision_provider=f)``
hands each sampling instruction's inputs, already mapped into the new schedule, to ``f`` before it runs:
a ``SamplePerfectTile`` sees the new loop and its extent there. A tiling whose product is not the new
extent becomes the nearest perfect tiling of it (``search.decisions.nearest_tiling``: divisors only, inner
factors kept where they divide); without this TVM would silently turn it into a degenerate tiling.
Categorical decisions (unroll, vectorize) are kept. A compute-at decision that no longer applies falls
back to one the new schedule samples itself (seeded).

``same`` matches replay the whole trace with blocks renamed; ``anchor`` matches go through MetaSchedule's
``schedule_using_anchor_trace`` with the tile decisions left to sample (its own replay has no decision
provider), and a second replay of the result puts the source's tilings back, adapted. Either way the
target's postprocessors are applied last, as on any new candidate.
"""

from __future__ import annotations

import math

from costlab.common.errors import last_line
from costlab.export.search.decisions import nearest_tiling
from costlab.export.transfer.match import structure
from costlab.metaschedule.traces import ReplayError, replay


class TransferError(ValueError):
    """A source schedule that does not apply to the new task; the message says why. ``retry``: a refusal that
    depends on the loops' extents, which a replay with its compute-at locations sampled anew may change."""

    def __init__(self, message: str, retry: bool = False):
        super().__init__(message)
        self.retry = retry


def source_trace(mod, trace_json):
    """The trace of a measured record (JSON, as databases hold it) on its own workload, postprocessing
    removed."""
    try:
        sch = replay(mod, trace_json)
    except ReplayError as exc:  # a record that does not replay on its own workload
        raise TransferError(f"the source record does not replay on its workload ({exc.reason[:200]})") from None
    return sch.trace.simplified(remove_postproc=True)


def renamed(trace, names: dict, drop=()):
    """``trace`` with ``GetSBlock`` instructions asking for the blocks ``names`` maps to, and the decisions
    of the instruction kinds in ``drop`` removed (so that a replay samples them)."""
    from tvm.s_tir.schedule import Instruction, Trace

    insts, decisions, old = [], {}, dict(trace.decisions.items()) if hasattr(trace.decisions, "items") else {}
    for inst in trace.insts:
        new = inst
        if inst.kind.name == "GetSBlock" and names:
            name = str(inst.attrs[0])
            if name in names:
                new = Instruction(inst.kind, list(inst.inputs), [names[name], *list(inst.attrs)[1:]], list(inst.outputs))
        insts.append(new)
        if inst in old and inst.kind.name not in drop:
            decisions[new] = old[inst]
    return Trace(insts, decisions)


def tile_decisions(trace) -> list:
    """The ``SamplePerfectTile`` decisions of a trace, in order."""
    out = []
    decisions = dict(trace.decisions.items())
    for inst in trace.insts:
        if inst.kind.name == "SamplePerfectTile" and inst in decisions:
            out.append([int(x) for x in decisions[inst]])
    return out


class _Adapt:
    """The decision provider: tilings made perfect tilings of the loops they now split; with ``tiles``, the
    ``SamplePerfectTile`` decisions replaced by these, in order, first."""

    def __init__(self, sch, tiles=None, drop_compute_at: bool = False):
        self.sch, self.tiles, self.drop = sch, list(tiles) if tiles is not None else None, drop_compute_at
        self.adapted = self.used = 0
        self.error: TransferError | None = None  # raised here, it reaches the replay as TVM's error

    def __call__(self, inst, inputs, attrs, decision):
        try:
            return self._decide(inst, inputs, attrs, decision)
        except TransferError as exc:
            self.error = exc
            raise

    def _decide(self, inst, inputs, attrs, decision):
        kind = inst.kind.name
        if kind == "SampleComputeLocation" and self.drop:
            return None
        if kind != "SamplePerfectTile":
            return decision
        if self.tiles is not None:
            if self.used >= len(self.tiles):
                raise TransferError("the schedule has more tilings than the source's")
            decision = self.tiles[self.used]
            self.used += 1
        extent = self.sch.get(inputs[0]).extent
        if not hasattr(extent, "value") and not isinstance(extent, int):
            raise TransferError("a loop of the new task has a symbolic extent")
        extent, old, inner = int(extent), [int(x) for x in decision], int(attrs[1])
        if math.prod(old) == extent and (inner <= 0 or old[-1] <= inner):
            return old
        new = nearest_tiling(old, extent, inner)
        if new is None:  # a loop's extent: another compute-at location may give the loop another one
            raise TransferError(f"a loop of {extent} has no perfect tiling in {len(old)} factors", retry=True)
        self.adapted += 1
        return list(new)


def _replay(mod, trace, seed: int, tiles=None):
    """``trace`` replayed on ``mod`` with tilings adapted; a compute-at that does not apply is sampled anew."""
    from tvm.s_tir.schedule import Schedule

    last = None
    for drop in (False, True):
        sch = Schedule(mod, seed=seed)
        adapt = _Adapt(sch, tiles, drop_compute_at=drop)
        try:
            trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=adapt)
        except TransferError:
            raise
        except Exception as exc:  # noqa: BLE001  TVM refuses an instruction (a compute-at loop gone, ...)
            if adapt.error is not None and not adapt.error.retry:  # no compute-at location would change it
                raise adapt.error from None
            last = adapt.error or exc
            continue
        if tiles is not None and adapt.used != len(tiles):
            raise TransferError("the schedule lost some of the source's tilings")
        return sch, adapt.adapted, drop
    if isinstance(last, TransferError):
        raise last
    raise TransferError(f"the schedule does not apply ({last_line(last)[:200]})")


def _inline_others(sch, mod, match) -> None:
    """The task's blocks the source has no counterpart of, inlined where TVM can (producers into their
    consumers, epilogues but the last into the next), so that at most one fused epilogue is left for
    ``schedule_using_anchor_trace`` to schedule (it refuses more)."""
    st = structure(mod)
    kept = set(match.names.values()) | {st.names[st.anchor]}
    others = [n for n in st.names if n not in kept and n not in match.names]
    for name in others[:-1] if others and st.names.index(others[-1]) > st.anchor else others:
        try:
            sch.compute_inline(sch.get_sblock(name))
        except Exception:  # noqa: BLE001  not inlinable (a reduction, a block with several consumers)
            try:
                sch.reverse_compute_inline(sch.get_sblock(name))
            except Exception:  # noqa: BLE001  left to schedule_using_anchor_trace
                pass


def transfer_schedule(src_mod, trace_json, mod, match, target, postprocs, seed: int = 1):
    """The program of a source record on ``mod`` (``match``: ``match.match``'s result); returns
    ``(schedule, tilings adapted, compute-at resampled)``. Raises ``TransferError`` saying why not."""
    from tvm.s_tir.schedule import Schedule

    trace = source_trace(src_mod, trace_json)
    if match.kind == "same":
        sch, adapted, fallback = _replay(mod, renamed(trace, match.names), seed)
    else:
        from tvm.s_tir.meta_schedule.trace_apply import schedule_using_anchor_trace

        first = Schedule(mod, seed=seed)
        _inline_others(first, mod, match)
        try:
            schedule_using_anchor_trace(first, renamed(trace, match.names, drop=("SamplePerfectTile",)), target)
        except Exception as exc:  # noqa: BLE001  the anchor trace does not apply to this task
            raise TransferError(f"the anchor schedule does not apply ({last_line(exc)[:200]})") from None
        sch, adapted, fallback = _replay(mod, first.trace.simplified(remove_postproc=True), seed,
                                         tiles=tile_decisions(trace))
    sch.enter_postproc()
    for post in postprocs:
        if not post.apply(sch):
            raise TransferError("a postprocessor rejected the program")
    return sch, adapted, fallback
