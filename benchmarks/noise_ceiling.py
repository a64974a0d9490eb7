"""How well measurement itself ranks a task's best programs: the ceiling of the tail metrics.

The tail metrics (``costmodels.metrics.tail_metrics``) score a model against each record's one tuning
measurement. Within a task's best quarter the programs lie a few percent apart, about as far as two
measurements of one program; no model can agree with the labels more often than a fresh measurement does.
This benchmark takes the held-out runs that ``benchmarks/heldout_trajectories.py`` scores models on (the
tuning benchmark's archived runs, ``a`` and ``a1000``, seed 0), re-measures each task's best quarter (by its
recorded latency) with the runner settings tuning measured with, each program built once and run twice in
turn (``rounds=2``: all programs once, then all again), and scores

- ``oracle``: the first re-measurement as the prediction, against the recorded latency, exactly as a model is
  scored (pairwise and top-1 within the best quarter and the best tenth): the most a model that knew each
  program's true time could score, given one noisy label per program;
- ``repeat``: the first re-measurement against the second (two measurements a few minutes apart, no tuning
  between them): how often two measurements of the same programs agree on an order.

It measures: run it only while nothing else builds or measures (it takes the CPU lock per run), on the CPU the
runs were measured on (the archive's host; another CPU is refused).

    .venv/bin/python benchmarks/noise_ceiling.py --out bench/noise --limit 96

``--limit`` re-measures at most that many programs of a task's best quarter, spread evenly over its ranks,
the best tenth's among them (the pairwise estimate stays unbiased; it bounds the time of the 1000-trial
runs). The re-measurements are kept (``measured-ARM.npz``) and read back unless ``--again``; ``--models`` scores
models on the re-measured programs against the recorded labels and against the mean of the two
re-measurements. Writes ``results.json`` (host, settings, per workload and overall figures) and prints tables.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from heldout_trajectories import RUNS, build  # noqa: E402

from costlab.common.files import write_atomically  # noqa: E402


def picks(task: np.ndarray, latency: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows to re-measure (each task's best quarter, at most ``limit`` of them spread evenly over its ranks,
    every row of the best tenth first among those kept) and a boolean of which of them lie in the best tenth,
    both by the recorded latency as ``metrics.best_part`` draws them."""
    from costlab.costmodels.metrics import TAILS, best_part

    q25, q10 = best_part(task, latency, TAILS["q25"]), set(best_part(task, latency, TAILS["q10"]).tolist())
    keep = []
    for t in np.unique(task[q25]):
        rows = q25[task[q25] == t]
        rows = rows[np.argsort(latency[rows], kind="stable")]
        if len(rows) > limit:
            rows = rows[np.unique(np.linspace(0, len(rows) - 1, limit).round().astype(int))]
        keep.append(rows)
    rows = np.concatenate(keep) if keep else np.zeros(0, np.int64)
    return rows, np.array([r in q10 for r in rows], bool)


def pair_scores(task, pred, latency, in_q10) -> dict:
    """Pairwise accuracy and mean top-1 within the best quarter (every row given) and the best tenth."""
    from costlab.costmodels.metrics import mean_topk, pairwise_accuracy

    out = {}
    for name, mask in (("q25", np.ones(len(task), bool)), ("q10", in_q10)):
        t, p, lat = task[mask], pred[mask], latency[mask]
        out[f"pairwise_{name}"] = float(pairwise_accuracy(t, p, lat))
        out[f"top1_{name}"] = float(mean_topk(t, p, lat, 1))
    return out


def spread(task, latency) -> float:
    """Median over tasks of the best quarter's relative spread: (slowest − fastest) / fastest."""
    vals = [float(latency[task == t].max() / latency[task == t].min() - 1) for t in np.unique(task)]
    return float(np.median(vals)) if vals else float("nan")


def measure(data: Path, limit: int, number: int, repeat: int, min_repeat_ms: int) -> dict:
    """One held-out dataset's best quarters re-measured twice; rows, recorded and re-measured latencies."""
    import tvm

    from costlab.common.host import describe_host, host_difference, host_info, same_host
    from costlab.datasets.measure import MeasureOptions
    from costlab.datasets.store import open_dataset
    from costlab.featurizers.ms_records import task_module
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import build_and_run, close_runner, make_runner
    from costlab.metaschedule.targets import runnable_target
    from costlab.metaschedule.traces import replay_candidate

    archived = json.loads((RUNS.parent / "benchmark.json").read_text())["host"]
    if not same_host(archived, host_info()):
        raise SystemExit(f"error: the held-out runs were measured on {describe_host(archived)}; this host is "
                         f"{describe_host(host_info())} ({host_difference(archived, host_info())}): re-measuring "
                         "them here would compare two CPUs, not two measurements")
    with open_dataset(data) as ds:
        (platform,) = ds.record_platforms()
        table = ds.records(platform)
        task, latency = table.task, table.latency()
        rows, in_q10 = picks(task, latency, limit)
        schedules = table.schedules(rows)
        tasks = {int(t): ds.tasks[int(t)] for t in np.unique(task[rows])}
        names = {t: next((n for n, pairs in ds.networks.items() if any(i == t for i, _ in pairs)), tk.name)
                 for t, tk in tasks.items()}
        target_value = runnable_target(ds.platforms[platform].target)
    target = tvm.target.Target(target_value)
    cands = [replay_candidate(task_module(tasks[int(task[r])]), s) for r, s in zip(rows, schedules)]
    runner = make_runner(MeasureOptions(target=target_value, number=number, repeat=repeat,
                                        min_repeat_ms=min_repeat_ms), target)
    builder = make_builder(pooled=True)
    try:
        results = build_and_run(builder, runner, target, cands, rounds=2)
    finally:
        close_runner(runner)
        builder.close()
    first = np.array([np.mean(c[:repeat]) if not msg else np.inf for c, _, msg in results])
    second = np.array([np.mean(c[repeat:2 * repeat]) if not msg else np.inf for c, _, msg in results])
    return dict(row=rows, task=task[rows], recorded=latency[rows], first=first, second=second, in_q10=in_q10,
                names=np.array([names[int(t)] for t in task[rows]]))


def measured(m: dict) -> np.ndarray:
    """Which re-measured programs ran in both rounds (a failure in either leaves a program out)."""
    return np.isfinite(m["first"]) & np.isfinite(m["second"])


def model_scores(model: str, data: Path, m: dict) -> dict:
    """A model's pairwise and top-1 on the re-measured programs against their recorded labels (as
    ``heldout_trajectories.py`` scores it) and against the mean of the two re-measurements, taken together
    minutes apart: a model that ranks the tail better than the recorded labels can show gains on the second."""
    from costlab.train.evaluate import evaluate

    ok = measured(m)
    pred = evaluate(model, data, split=None)["_arrays"]["pred"][m["row"][ok]]
    task, q10 = m["task"][ok], m["in_q10"][ok]
    return dict(recorded=pair_scores(task, pred, m["recorded"][ok], q10),
                remeasured=pair_scores(task, pred, (m["first"][ok] + m["second"][ok]) / 2, q10))


def load_or_measure(data: Path, saved: Path, args) -> dict:
    """The re-measurement kept in ``saved`` (``.npz``) when it was taken with the same settings, else taken
    now under the CPU lock and kept."""
    from costlab.common.cpu_lock import cpu_lock

    settings = np.array([args.limit, args.number, args.repeat, args.min_repeat_ms])
    if saved.exists() and not args.again:
        with np.load(saved) as z:
            if np.array_equal(z["settings"], settings):
                return {k: z[k] for k in z.files if k != "settings"}
    with cpu_lock():
        m = measure(data, args.limit, args.number, args.repeat, args.min_repeat_ms)
    buf = io.BytesIO()
    np.savez(buf, settings=settings, **m)
    write_atomically(saved, buf.getvalue())
    return m


def scores(m: dict) -> dict:
    ok = measured(m)
    task, rec, a, b, q10 = (m[k][ok] for k in ("task", "recorded", "first", "second", "in_q10"))
    # A prediction is "higher is better": the negated latency.
    return dict(programs=int(ok.sum()), failed=int((~ok).sum()), tasks=int(len(np.unique(task))),
                spread_q25=spread(task, rec), oracle=pair_scores(task, -a, rec, q10),
                repeat=pair_scores(task, -a, b, q10),
                recorded_vs_remeasured=float(np.median(a / rec)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--arms", default="a,a1000", help="run lengths of the tuning benchmark to re-measure")
    p.add_argument("--limit", type=int, default=96, help="programs re-measured per task at most")
    p.add_argument("--number", type=int, default=3, help="runs averaged into one cost (tuning's setting)")
    p.add_argument("--repeat", type=int, default=1, help="costs per program and round (tuning's setting)")
    p.add_argument("--min-repeat-ms", type=int, default=100, help="tuning's setting")
    p.add_argument("--models", default="", help="comma-separated models scored on the re-measured programs")
    p.add_argument("--again", action="store_true", help="re-measure even when a kept measurement exists")
    args = p.parse_args(argv)
    if args.limit < 2:
        raise SystemExit(f"error: --limit must be at least 2, not {args.limit}")
    from costlab.common.host import describe_host, host_info
    from costlab.costmodels.predictors import weights_sha256

    args.out.mkdir(parents=True, exist_ok=True)
    results = dict(host=host_info(), at=time.strftime("%Y-%m-%d %H:%M:%S"), runs=str(RUNS),
                   settings=dict(limit=args.limit, number=args.number, repeat=args.repeat,
                                 min_repeat_ms=args.min_repeat_ms, rounds=2), arms={},
                   models={m: weights_sha256(m) for m in args.models.split(",") if m})
    for arm in [a for a in args.arms.split(",") if a]:
        data = build(args.out, arm)
        started = time.time()
        m = load_or_measure(data, args.out / f"measured-{arm}.npz", args)
        per = {str(n): scores({k: v[m["names"] == n] for k, v in m.items()}) for n in np.unique(m["names"])}
        results["arms"][arm] = dict(all=scores(m), workloads=per, seconds=round(time.time() - started),
                                    models={model: model_scores(model, data, m) for model in results["models"]})
        print(f"[{time.strftime('%H:%M:%S')}] {arm}: {results['arms'][arm]['all']['programs']} programs re-measured "
              f"(or read back) in {results['arms'][arm]['seconds']} s", flush=True)
    write_atomically(args.out / "results.json", json.dumps(results, indent=1).encode())
    print(f"host: {describe_host(results['host'])}")
    print("| held out | workload | programs | best ¼ spread | oracle pairwise ¼ | oracle pairwise ⅒ | oracle top-1 ¼ | "
          "repeat pairwise ¼ | repeat pairwise ⅒ |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for arm, r in results["arms"].items():
        for name, s in [*r["workloads"].items(), ("all", r["all"])]:
            o, q = s["oracle"], s["repeat"]
            print(f"| {arm} | {name} | {s['programs']} | {s['spread_q25']:.1%} | {o['pairwise_q25']:.3f} | "
                  f"{o['pairwise_q10']:.3f} | {o['top1_q25']:.3f} | {q['pairwise_q25']:.3f} | {q['pairwise_q10']:.3f} |")
    if results["models"]:
        print("\n| held out | model | recorded labels: pairwise ¼ / ⅒ | re-measured labels: pairwise ¼ / ⅒ |")
        print("| --- | --- | --- | --- |")
        for arm, r in results["arms"].items():
            for model, s in r["models"].items():
                a, b = s["recorded"], s["remeasured"]
                print(f"| {arm} | {model} | {a['pairwise_q25']:.3f} / {a['pairwise_q10']:.3f} | "
                      f"{b['pairwise_q25']:.3f} / {b['pairwise_q10']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
