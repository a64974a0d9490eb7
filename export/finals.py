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
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext

from costlab.datasets.records import record_latency
from costlab.export.check import fastest_records
from costlab.metaschedule.runners import build_and_run, cold_runs

TOP, WITHIN, ROUNDS = 4, 1.15, 2
MEASURES = ("cold", "warm")  # how the second measurement times a program


def contenders(database, mod, top: int = TOP, within: float = WITHIN) -> list:
    """The task's fastest measured records (up to ``top``) whose latency is within ``within`` x the fastest's."""
    recs = fastest_records(database, mod, top)
    return [r for r in recs if record_latency(r.run_secs) <= within * record_latency(recs[0].run_secs)]


def remeasure(database, mods: list, builder, runner, target, top: int = TOP, within: float = WITHIN,
              rounds: int = ROUNDS, cold: bool = False) -> tuple[list[list], dict]:
    """Per module (a task), its contenders ordered by their new measurement, fastest first, each as
    ``(record, seconds)`` (``inf``: failed now); and ``stats``: programs measured again, tasks whose first
    pick changed, seconds spent, and how they were measured (``cold`` or ``warm``). A task with one
    contender is not measured again. ``cold``: caches flushed before every timed run (a local runner)."""
    start = time.time()
    groups = [contenders(database, m, top, within) for m in mods]
    todo = [(i, r) for i, g in enumerate(groups) if len(g) > 1 for r in g]
    results = []
    if todo:
        with cold_runs(runner) if cold else nullcontext(runner):
            results = build_and_run(builder, runner, target, [r.as_measure_candidate() for _, r in todo], rounds=rounds)
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
    return out, dict(measured=len(todo), changed=changed, seconds=round(time.time() - start, 2),
                     measure="cold" if cold else "warm")
