"""The arithmetic of benchmarks/networks.py, without TVM: each arm's estimated end-to-end latency during its run
(sum over the network's tasks of weight x best latency so far, a task with no program yet at its untuned
latency), that estimate calibrated to the arm's final build as timed, the seconds at which one curve first
gets to a latency, and the benchmark's figures over networks and seeds.

A run's history is a list of snapshots ``(elapsed_s, trials, {task: best_us})``: from `costlab tune`'s
progress.jsonl (one row per measured batch, the batch's task best) or from MetaSchedule's task scheduler log
(its statistics table after every round: each task's best latency and trials, under a timestamp).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path


def costlab_history(progress: Path) -> list[tuple[float, int, dict]]:
    """Snapshots of a `costlab tune` run, one per row of its progress.jsonl (bests carried forward)."""
    best: dict = {}
    out = []
    for line in progress.read_text().splitlines() if progress.exists() else []:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line an interruption cut short
        if row.get("best_us"):
            best[row["task"]] = min(best.get(row["task"], math.inf), row["best_us"])
        out.append((float(row["elapsed_s"]), int(row["trials"]), dict(best)))
    return out


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d+))?")
_ROW = re.compile(r"^\s*(\d+)\s*\|\s*(\S+)\s*\|[^|]*\|\s*([\d.]+)\s*\|[^|]*\|\s*(\S+)\s*\|[^|]*\|\s*(\d+)\s*\|")
_TOTAL = re.compile(r"Total trials:\s*(\d+)")


def ms_history(log: Path, started: float) -> tuple[list[tuple[float, int, dict]], dict]:
    """Snapshots of a MetaSchedule run from its task_scheduler.log (the table it prints after every round:
    ID | Name | FLOP | Weight | Speed | Latency (us) | Weighted Latency | Trials | Done), seconds counted from
    ``started`` (epoch seconds; the log's stamps are local time), and the tasks' weights from the table."""
    out, weights, stamp, best = [], {}, None, {}
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        m = _STAMP.match(line)
        if m:
            stamp = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + float("0." + (m.group(2) or "0"))
            best = {}
            continue
        m = _ROW.match(line)
        if m:
            name, weight, latency = m.group(2), float(m.group(3)), m.group(4)
            weights[name] = weight
            if latency not in ("N/A", "nan") and int(m.group(5)) > 0:
                best[name] = float(latency)
            continue
        m = _TOTAL.search(line)
        if m and stamp is not None:
            out.append((round(stamp - started, 3), int(m.group(1)), dict(best)))
    return out, weights


def estimate(history, weights: dict, untuned_us: dict) -> list[tuple[float, int, float]]:
    """``(elapsed_s, trials, ms)`` per snapshot: sum of weight x (best so far, else untuned) over the tasks,
    starting from the untuned network at 0 s."""
    def total(best):
        return sum(w * best.get(t, untuned_us[t]) for t, w in weights.items()) / 1e3
    return [(0.0, 0, total({}))] + [(s, n, total(b)) for s, n, b in history]


def calibrated(curve, final_ms: float | None) -> list[tuple[float, int, float]]:
    """The estimate scaled so that its last point is the arm's final build as timed: the curve in the units
    of the end-to-end timings the figures compare (checkpoint builds say how well it follows them)."""
    if not curve or not final_ms:
        return []
    scale = final_ms / curve[-1][2]
    return [(s, n, ms * scale) for s, n, ms in curve]


def reach(curve, goal_ms: float) -> float | None:
    """Seconds at which ``curve`` first gets to ``goal_ms`` or below (None: never)."""
    return next((s for s, _n, ms in curve if ms <= goal_ms * (1 + 1e-9)), None)


def at_time(curve, seconds: float) -> tuple[int, float] | None:
    """``(trials, ms)`` of the last point of ``curve`` at or before ``seconds``."""
    pts = [(n, ms) for s, n, ms in curve if s <= seconds]
    return pts[-1] if pts else None


def figures(runs: dict, earlier: dict | None = None) -> dict:
    """The benchmark's figures from ``runs[(network, seed)] = {arm: dict(curve, final_ms, tune_s)}`` (curves
    calibrated): per arm X other than stock, X's seconds to reach stock's final over stock's seconds, and k's
    to reach a's over a's: the geometric mean of the runs' ratios (``ratio``; ``pooled``: their seconds summed
    over the goals' seconds summed), a run that never reaches counted at the longer of its own and the goal's
    full seconds (``counted``: a miss is never better than the goal's arm, nor than the time it ran without
    reaching); X's final over stock's (geometric mean, worst); per run, every figure. ``earlier``: per-run
    figures of runs not in ``runs`` (``"net/sSEED"`` -> row, as an earlier table recorded them), taken in too."""
    def reach_or_full(run, arm, goal_arm):
        r = reach(run[arm]["curve"], run[goal_arm]["final_ms"])
        return (r if r is not None else run[arm]["tune_s"]), r is not None

    def counted(c) -> float:
        return c["seconds"] if c["reached"] else max(c["seconds"], c["of"])

    pairs = [("a", "stock"), ("k-nolib", "stock"), ("k", "stock"), ("k", "a"), ("k", "k-nolib")]
    out: dict = {"per_run": dict(earlier or {}), "reach": {}, "final": {}}
    for (net, seed), run in sorted(runs.items()):
        row = {}
        for arm, goal in pairs:
            if arm in run and goal in run and run[arm].get("curve") and run[goal].get("final_ms"):
                secs, hit = reach_or_full(run, arm, goal)
                cell = dict(seconds=secs, reached=hit, of=run[goal]["tune_s"])
                row[f"{arm}_to_{goal}"] = dict(cell, ratio=counted(cell) / cell["of"])
                if goal == "stock" or (arm, goal) == ("k", "k-nolib"):
                    row[f"{arm}_over_{goal}"] = run[arm]["final_ms"] / run[goal]["final_ms"]
        out["per_run"][f"{net}/s{seed}"] = row
    for arm, goal in pairs:
        cells = [r[f"{arm}_to_{goal}"] for r in out["per_run"].values() if f"{arm}_to_{goal}" in r]
        if cells:
            ratios = [counted(c) / c["of"] for c in cells]  # earlier tables' rows too, under this rule
            out["reach"][f"{arm}_to_{goal}"] = dict(
                ratio=math.exp(sum(math.log(max(r, 1e-9)) for r in ratios) / len(ratios)),  # 0: reached at once
                pooled=sum(map(counted, cells)) / sum(c["of"] for c in cells), runs=len(cells),
                reached=sum(c["reached"] for c in cells), worst=max(ratios))
        vals = [r[f"{arm}_over_{goal}"] for r in out["per_run"].values() if f"{arm}_over_{goal}" in r]
        if vals:
            out["final"][f"{arm}_over_{goal}"] = dict(geomean=math.exp(sum(map(math.log, vals)) / len(vals)),
                                                      worst=max(vals), runs=len(vals))
    return out


TARGETS = {"k_to_stock": 0.1, "k_to_a": 0.25, "k_over_stock": 0.95}


def plot(runs: dict, checkpoints: dict, path: Path) -> Path | None:
    """One panel per network: each arm's calibrated curve per seed (ms against wall seconds), its checkpoint
    builds as timed (markers), and stock's final as a dashed line."""
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nets = sorted({n for n, _ in runs})
    colors = {"stock": "tab:gray", "a": "tab:blue", "k-nolib": "tab:orange", "k": "tab:green"}
    fig, axes = plt.subplots(1, len(nets), figsize=(5.2 * len(nets), 4), squeeze=False)
    for ax, net in zip(axes[0], nets):
        for (n, seed), run in sorted(runs.items()):
            if n != net:
                continue
            for arm, r in run.items():
                if not r.get("curve"):
                    continue
                xs, ys = [p[0] for p in r["curve"]], [p[2] for p in r["curve"]]
                ax.step(xs, ys, where="post", color=colors.get(arm), ls="-" if seed == 0 else "--", lw=1.2,
                        label=f"{arm} s{seed}")
                pts = checkpoints.get((n, seed), {}).get(arm, [])
                ax.plot([p["at_s"] for p in pts], [p["median_ms"] for p in pts], "o", color=colors.get(arm), ms=4)
            if run.get("stock", {}).get("final_ms"):
                ax.axhline(run["stock"]["final_ms"], color="tab:gray", ls=":", lw=0.8)
        ax.set_title(net)
        ax.set_xlabel("wall seconds of the run")
        ax.set_ylabel("end-to-end latency (ms)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("sum of weight x task best so far, scaled to the arm's final build\n"
                 "dots: builds of the database at that point, timed; dotted: stock's final", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
