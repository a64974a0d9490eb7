"""A network's final programs chosen by a second measurement, not by the search's first one.

Tuning keeps each task's fastest record, and the fastest of many programs whose times lie within the
runner's noise of each other is mostly the one whose one measurement came out lowest (with screening, its
repeats sized to a short kernel). A network built from those picks pays that luck back on every task. So
after the search each task's fastest records within ``within`` of its best (at most ``top``) are measured
again together, in interleaved rounds (``build_and_run``: each built once, all run once, then all again), and
ordered by that measurement; the output check then takes them in that order. These runs measure no new
program and count against no trial budget; their seconds are part of the run's wall time.
"""

from __future__ import annotations

import math
import time

from costlab.datasets.records import record_latency
from costlab.export.check import fastest_records
from costlab.metaschedule.runners import build_and_run

TOP, WITHIN, ROUNDS = 4, 1.15, 2


def contenders(database, mod, top: int = TOP, within: float = WITHIN) -> list:
    """The task's fastest measured records (up to ``top``) whose latency is within ``within`` x the fastest's."""
    recs = fastest_records(database, mod, top)
    return [r for r in recs if record_latency(r.run_secs) <= within * record_latency(recs[0].run_secs)]


def remeasure(database, mods: list, builder, runner, target, top: int = TOP, within: float = WITHIN,
              rounds: int = ROUNDS) -> tuple[list[list], dict]:
    """Per module (a task), its contenders ordered by their new measurement, fastest first, each as
    ``(record, seconds)`` (``inf``: failed now); and ``stats``: programs measured again, tasks whose first
    pick changed, seconds spent. A task with one contender is not measured again."""
    start = time.time()
    groups = [contenders(database, m, top, within) for m in mods]
    todo = [(i, r) for i, g in enumerate(groups) if len(g) > 1 for r in g]
    results = build_and_run(builder, runner, target, [r.as_measure_candidate() for _, r in todo],
                            rounds=rounds) if todo else []
    again: dict[int, list] = {}
    for (i, rec), (costs, error, _msg) in zip(todo, results):
        again.setdefault(i, []).append((rec, record_latency(costs) if not error else math.inf))
    out, changed = [], 0
    for i, g in enumerate(groups):
        if i in again:
            order = sorted(again[i], key=lambda x: x[1])  # stable: ties keep the search's order
            changed += order[0][0] is not g[0]
            out.append(order)
        else:
            out.append([(r, record_latency(r.run_secs)) for r in g])
    return out, dict(measured=len(todo), changed=changed, seconds=round(time.time() - start, 2))
