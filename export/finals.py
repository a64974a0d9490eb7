"""A network's final programs chosen by a second measurement, not by the search's first one.

Tuning keeps each task's fastest record, and the fastest of many programs whose times lie within the
runner's noise of each other is mostly the one whose one measurement came out lowest (with screening, its
repeats sized to a short kernel). A network built from those picks pays that luck back on every task. So
after the search each task's fastest records within ``within`` of its best (at most ``top``) are measured
again together, in interleaved rounds (``build_and_run``: each built once, all run once, then all again), and
ordered by that measurement; the output check then takes them in that order. These runs measure no new
program and count against no trial budget; their seconds are part of the run's wall time.

``cold``: the second measurement times each run with the CPU's caches flushed of the kernel's weights and
output (``metaschedule/runners.cold_runs``), as the kernel meets them inside the network; programs that tie
warm can differ by up to 1.5x there.

``untuned``: each task's program as the untuned build schedules it (``export/network.default_rules``, what a
network's function without a tuned program gets) is measured beside its contenders, in the same rounds, so a
run can keep that schedule where no program it found beats it (``keep_untuned``): on a GPU, DLight's schedules
of small elementwise and reduction kernels often beat the first programs a search samples.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext

from costlab.datasets.records import record_latency
from costlab.export.check import fastest_records
from costlab.export.network import untuned_schedule
from costlab.metaschedule.runners import build_and_run, cold_runs

TOP, WITHIN, ROUNDS = 4, 1.15, 2
MEASURES = ("cold", "warm")  # how the second measurement times a program
KEEP_UNTUNED = ("auto", "on", "off")  # whether it measures each task's untuned program too (auto: on a GPU)


def contenders(database, mod, top: int = TOP, within: float = WITHIN) -> list:
    """The task's fastest measured records (up to ``top``) whose latency is within ``within`` x the fastest's."""
    recs = fastest_records(database, mod, top)
    return [r for r in recs if record_latency(r.run_secs) <= within * record_latency(recs[0].run_secs)]


def untuned_candidate(mod, target):
    """The task's module as the untuned build schedules it, as a candidate to measure; None where those rules
    fail on it."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    try:
        return ms.MeasureCandidate(Schedule(untuned_schedule(mod, target)),
                                   ms.arg_info.ArgInfo.from_prim_func(mod["main"]))
    except Exception:  # noqa: BLE001  a task DLight cannot schedule is compared with nothing: its tuned program stays
        return None


def remeasure(database, mods: list, builder, runner, target, top: int = TOP, within: float = WITHIN,
              rounds: int = ROUNDS, cold: bool = False, untuned: bool = False) -> tuple[list[list], dict]:
    """Per module (a task), its contenders ordered by their new measurement, fastest first, each as
    ``(record, seconds)`` (``inf``: failed now); and ``stats``: programs measured again, tasks whose first
    pick changed, seconds spent, and how they were measured (``cold`` or ``warm``). A task with one
    contender is not measured again. ``cold``: caches flushed before every timed run (a local runner).
    ``untuned``: each measured task's untuned program is measured with its contenders (its one contender too),
    its seconds per task in ``stats["untuned_s"]`` (None: not measured; ``inf``: failed)."""
    start = time.time()
    groups = [contenders(database, m, top, within) for m in mods]
    base = [untuned_candidate(m, target) if untuned and g else None for m, g in zip(mods, groups)]
    todo = [(i, r) for i, g in enumerate(groups) if len(g) > 1 or base[i] is not None for r in g]
    made = [_candidate(r) for _, r in todo] + [b for b in base if b is not None]
    measured = iter([])
    if any(c is not None for c in made):
        with cold_runs(runner) if cold else nullcontext(runner):
            measured = iter(build_and_run(builder, runner, target, [c for c in made if c is not None],
                                          rounds=rounds))
    results = [_seconds(next(measured)) if c is not None else math.inf for c in made]  # inf: did not replay
    again: dict[int, list] = {}
    for (i, rec), secs in zip(todo, results):
        again.setdefault(i, []).append((rec, secs))
    out, changed = [], 0
    for i, g in enumerate(groups):
        if i in again:
            order = sorted(again[i], key=lambda x: x[1])  # stable: ties keep the search's order
            changed += order[0][0] is not g[0]
            out.append(order)
        else:
            out.append([(r, record_latency(r.run_secs)) for r in g])
    stats = dict(measured=len(todo), changed=changed, seconds=round(time.time() - start, 2),
                 measure="cold" if cold else "warm")
    if untuned:
        rest = iter(results[len(todo):])
        stats["untuned_s"] = [None if b is None else next(rest) for b in base]
    return out, stats


def _candidate(rec):
    """A record's program to measure again; None where its trace no longer replays on the task (TVM's replay
    can refuse one, e.g. an instruction whose outputs differ in number): it is never the result."""
    try:
        return rec.as_measure_candidate()
    except Exception:  # noqa: BLE001  TVM raises its own errors; the other contenders are still measured
        return None


def _seconds(result) -> float:
    costs, error, _msg = result
    return record_latency(costs) if not error else math.inf


def keep_untuned(chosen: list, finals: list, untuned_s: list) -> list[bool]:
    """Per task, whether it keeps its untuned schedule: its chosen record (None: none) measured slower than the
    untuned program in the same rounds of ``remeasure``. Those tasks' entries of ``chosen`` become None (the
    result and the network's build then give them the untuned schedule). A chosen record that was not among
    the measured contenders (the check fell back past them) has no figure to compare and stays."""
    kept = []
    for i, (rec, base) in enumerate(zip(chosen, untuned_s)):
        secs = next((s for r, s in finals[i] if r is rec), None) if rec is not None else None
        keep = secs is not None and base is not None and base < secs
        if keep:
            chosen[i] = None
        kept.append(keep)
    return kept
