"""A trace's sampling decisions as coordinates: where they are, their valid values, their neighbours.

MetaSchedule's design space is its sampling instructions: ``SamplePerfectTile`` (the factors of one loop,
whose product is the loop's extent), ``SampleCategorical`` (one of a list of values: unroll depth,
vectorize width) and ``SampleComputeLocation`` (the loop a block is computed at). A program is its trace
with one decision per sampling instruction, so a search can move in decision space, as Droplet's
coordinate descent does and as transfer-tuning does when it adapts a schedule to new loop extents:

- ``sites(mod, trace)`` replays the trace once and records each sampling decision with what bounds it
  (the loop's extent and the tile's length for a tiling, the number of values for a categorical);
- ``tilings(extent, n, max_innermost)`` are every perfect tiling of a loop (divisors only: a factor that
  does not divide would make TVM repair it into a degenerate tiling);
- ``neighbours(sites, radius)`` are the decisions at the r-th nearest distinct distance of each site;
- ``apply(mod, trace, changes, postprocs)`` is the program with some decisions changed, its postprocessors
  applied as on any new candidate; ``nearest_tiling`` adapts a tiling to another extent.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from costlab.common.errors import last_line
from costlab.metaschedule.traces import replay

SAMPLING = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")
MAX_TILINGS = 200_000  # tilings of one loop enumerated at most (a loop with more keeps its own)


@dataclass(frozen=True)
class Site:
    index: int  # position of the sampling instruction in the trace
    kind: str
    decision: object  # tuple of factors (tile), int (categorical index, compute-at loop)
    extent: int = 0  # tile: the loop's extent
    length: int = 0  # tile: the number of factors
    max_innermost: int = -1  # tile: the largest innermost factor allowed (-1: any)
    choices: int = 0  # categorical: the number of values


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@functools.lru_cache(maxsize=4096)
def tilings(extent: int, n: int, max_innermost: int = -1) -> tuple[tuple[int, ...], ...]:
    """Every ordered n-tuple of positive factors whose product is ``extent`` (the innermost at most
    ``max_innermost`` when that is positive); empty when there would be more than ``MAX_TILINGS``."""
    out: list[tuple[int, ...]] = []

    def rec(rest: int, k: int, prefix: tuple) -> bool:
        if k == 1:
            if max_innermost > 0 and rest > max_innermost:
                return True
            out.append(prefix + (rest,))
            return len(out) <= MAX_TILINGS
        for d in _divisors(rest):
            if not rec(rest // d, k - 1, prefix + (d,)):
                return False
        return True

    if extent < 1 or n < 1:
        return ()
    return tuple(out) if rec(int(extent), int(n), ()) else ()


def tiling_distance(a, b, inner_weight: float = 0.0) -> float:
    """Sum over factors of |log2 a_i - log2 b_i|; ``inner_weight`` > 0 weighs inner factors more (factor i
    of n by 1 + inner_weight * i / n), so that a change keeps the inner factors where it can."""
    n = len(a)
    return sum((1.0 + inner_weight * i / max(1, n)) * abs(math.log2(x) - math.log2(y))
               for i, (x, y) in enumerate(zip(a, b)))


def nearest_tiling(old, extent: int, max_innermost: int = -1):
    """The perfect tiling of ``extent`` nearest to ``old`` (same length), inner factors kept where they divide;
    None when the loop has no tiling of that length (or too many to enumerate)."""
    old = tuple(int(x) for x in old)
    options = tilings(int(extent), len(old), max_innermost)
    if not options:
        return None
    return min(options, key=lambda t: (tiling_distance(old, t, inner_weight=1.0), t))


def _plain(decision):
    if decision is None:
        return None
    if hasattr(decision, "__len__") and not isinstance(decision, str):
        return tuple(int(x) for x in decision)
    return int(decision)


def sites(mod, trace) -> list[Site]:
    """The trace's sampling decisions, each with its bounds, from one replay of the trace on ``mod``."""
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(mod)
    insts = list(trace.insts)
    found: list[Site] = []
    cursor = [0]

    def index_of(inst) -> int:
        for i in range(cursor[0], len(insts)):
            if insts[i].same_as(inst):
                cursor[0] = i + 1
                return i
        return -1

    def record(inst, inputs, attrs, decision):
        name = inst.kind.name
        if name in SAMPLING and decision is not None:
            i = index_of(inst)
            if name == "SamplePerfectTile":
                found.append(Site(i, name, _plain(decision), extent=int(sch.get(inputs[0]).extent),
                                  length=int(attrs[0]), max_innermost=int(attrs[1])))
            elif name == "SampleCategorical":
                found.append(Site(i, name, _plain(decision), choices=len(attrs[0])))
            else:
                found.append(Site(i, name, _plain(decision)))
        return decision

    trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=record)
    return found


def _shells(values: list, distance) -> list[list]:
    """``values`` grouped by distance, nearest group first (distance 0 left out)."""
    by: dict = {}
    for v in values:
        d = round(distance(v), 9)
        if d > 0:
            by.setdefault(d, []).append(v)
    return [by[d] for d in sorted(by)]


def site_moves(site: Site, radius: int) -> list:
    """The decisions of one site at radius ``radius``: the r-th nearest distinct distance of perfect tilings
    of its loop, the categorical values r places away, the compute-at loops r places away."""
    if radius < 1:
        return []
    if site.kind == "SamplePerfectTile":
        shells = _shells(list(tilings(site.extent, site.length, site.max_innermost)),
                         lambda t: tiling_distance(site.decision, t))
        return shells[radius - 1] if radius <= len(shells) else []
    if site.kind == "SampleCategorical":
        return [v for v in (site.decision - radius, site.decision + radius) if 0 <= v < site.choices]
    return [v for v in (site.decision - radius, site.decision + radius) if v >= -2]


def neighbours(all_sites: list[Site], radius: int, rng, combos: int = 0) -> list[dict]:
    """Decision changes ``{instruction index: decision}`` at ``radius``: every single-site move, and
    ``combos`` random pairs of moves on two sites."""
    moves = [(s.index, d) for s in all_sites for d in site_moves(s, radius)]
    out = [{i: d} for i, d in moves]
    seen = {tuple(sorted(m.items())) for m in out}
    for _ in range(combos * 4):
        if len(out) >= len(moves) + combos or len(moves) < 2:
            break
        a, b = rng.choice(len(moves), 2, replace=False)
        if moves[a][0] == moves[b][0]:
            continue
        change = dict([moves[a], moves[b]])
        key = tuple(sorted(change.items()))
        if key not in seen:
            seen.add(key)
            out.append(change)
    return out


def with_decisions(trace, changes: dict):
    """The trace with the decisions of the instructions at the given indices replaced."""
    insts = list(trace.insts)
    for i, d in changes.items():
        trace = trace.with_decision(insts[i], list(d) if isinstance(d, tuple) else int(d), remove_postproc=True)
    return trace


def apply(mod, trace, changes: dict, postprocs, seed: int = 1):
    """The program of ``trace`` with ``changes``: replayed without its postprocessing, then the
    postprocessors applied (as on any new candidate). Raises ValueError when a postprocessor rejects it, or
    the instruction a decision feeds no longer applies."""
    try:
        return replay(mod, with_decisions(trace, changes), seed, postprocs)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001  TVM's error when a decision does not apply (a compute-at loop gone)
        raise ValueError(last_line(exc)) from None
