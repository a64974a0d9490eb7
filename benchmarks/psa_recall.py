"""How well PSA drafts: per task, keep PSA's best fraction of the candidates; does the best program survive?

For every task of one platform with enough records, all its records are the candidate pool (failed builds
and runs included: a search proposes those too). PSA ranks them; the top ``--keep`` fraction (default 25%)
survives. Reported over tasks:

- survival: in how many tasks the best measured program is among the survivors (target >= 80%);
- ratio: the geometric mean of ``best latency / best surviving latency`` (1.0 = nothing lost; target
  >= 0.95);
- the same for a random 25% (expected values, exact) as the no-information baseline, and the Spearman
  rank correlation of PSA's estimate with the measured latency over the measured records;
- how often a program within 3% of the best survives, and how often the runner-up is itself within 3% of
  the best (then which of them is "the best" is down to measurement noise).

Both ways of obtaining the program (trace simulation, and replay + TIR walk) are run on the same records
with their time per record, so the cheaper one can be checked to rank as well.

    flock /tmp/costlab-cpu.lock .venv/bin/python benchmarks/psa_recall.py DATA.h5
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

NEAR = 0.03  # "as good as the best": within this fraction of its latency


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if a.size < 3:
        return float("nan")
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    ra -= ra.mean()
    rb -= rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den else float("nan")


def random_baseline(latency: np.ndarray, keep: int) -> tuple[float, float]:
    """Expected (survival, log ratio) of keeping ``keep`` of the candidates uniformly at random."""
    n = latency.size
    lat = np.sort(np.where(np.isfinite(latency), latency, np.inf))
    best = lat[0]
    # P(best surviving is the i-th best) = C(n-1-i, keep-1) / C(n, keep)
    total = math.comb(n, keep)
    surv = keep / n
    log_ratio = 0.0
    for i in range(n - keep + 1):
        p = math.comb(n - 1 - i, keep - 1) / total
        if np.isfinite(lat[i]):
            log_ratio += p * math.log(best / lat[i])
        else:
            log_ratio += p * math.log(1e-6)  # no measured program survives: treated as a 1e6x loss
    return surv, log_ratio


def evaluate(ds, platform: str, mode: str, keep_frac: float, min_records: int):
    from costlab.featurizers import create

    psa = create("psa", {"mode": mode})
    rows_all, per_task = [], []
    for tr in ds.iter_tasks(platform):
        if len(tr) < min_records or not np.isfinite(tr.latency).any():
            continue
        per_task.append(tr)
        rows_all.append(tr.rows)
    if not per_task:
        raise SystemExit(f"no task on {platform} has {min_records} records with a measured one")
    psa.featurize_records(ds, platform, per_task[0].rows[:1])  # warm-up (TVM import)
    psa._tasks.clear()
    t0 = time.perf_counter()
    outs = [psa.featurize_records(ds, platform, tr.rows) for tr in per_task]
    seconds = time.perf_counter() - t0
    n_records = sum(len(tr) for tr in per_task)
    rows = []
    for tr, out in zip(per_task, outs):
        est = np.where(out["valid"], out["estimate"], np.inf)
        lat = tr.latency
        keep = max(1, int(math.ceil(keep_frac * len(tr))))
        order = np.argsort(est, kind="stable")
        kept = order[:keep]
        best = lat[np.isfinite(lat)].min()
        best_kept = lat[kept][np.isfinite(lat[kept])].min() if np.isfinite(lat[kept]).any() else np.inf
        ok = np.isfinite(lat) & np.isfinite(est)
        near = np.isfinite(lat) & (lat <= best * (1 + NEAR))
        second = np.sort(lat[np.isfinite(lat)])[1] if np.isfinite(lat).sum() > 1 else np.inf
        rows.append(dict(task=tr.task.name or str(tr.task.index), n=len(tr), keep=keep,
                         survived=bool(best_kept <= best), ratio=best / best_kept if np.isfinite(best_kept) else 0.0,
                         near=bool(near[kept].any()), tie=bool(second <= best * (1 + NEAR)),
                         rho=_spearman(est[ok], lat[ok]), rand=random_baseline(lat, keep)))
    return rows, seconds / n_records, dict(psa.stats)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", metavar="DATA.h5")
    ap.add_argument("--platform", help="platform id (default: the one with most records)")
    ap.add_argument("--keep", type=float, default=0.25, help="fraction of each task's candidates PSA keeps")
    ap.add_argument("--min-records", type=int, default=8, help="skip tasks with fewer records")
    ap.add_argument("--modes", default="trace,tir", help="trace, tir or both (comma-separated)")
    ap.add_argument("--per-task", action="store_true", help="print one line per task")
    args = ap.parse_args(argv)

    from costlab.datasets import open_dataset

    with open_dataset(args.data) as ds:
        platform = args.platform or max(ds.record_platforms(), key=ds.num_records)
        from costlab.common.host import describe_host, host_info

        print(f"host: {describe_host(host_info())}")  # the ms/record below are this machine's
        print(f"{args.data}: platform {platform}, keep {args.keep:.0%} of each task's candidates")
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            rows, per_rec, stats = evaluate(ds, platform, mode, args.keep, args.min_records)
            n = len(rows)
            surv = sum(r["survived"] for r in rows) / n
            ratios = np.array([max(r["ratio"], 1e-6) for r in rows])
            gmean = float(np.exp(np.log(ratios).mean()))
            r_surv = float(np.mean([r["rand"][0] for r in rows]))
            r_gmean = float(np.exp(np.mean([r["rand"][1] for r in rows])))
            rho = np.nanmean([r["rho"] for r in rows])
            label = {"trace": "trace simulation", "tir": "replay + TIR walk"}[mode]
            print(f"\nPSA ({label}): {n} tasks, {sum(r['n'] for r in rows)} records, {1e3 * per_rec:.2f} ms/record"
                  f"  {stats}")
            if args.per_task:
                for r in rows:
                    print(f"  {r['task'][:40]:<40} n={r['n']:<4} keep={r['keep']:<3} "
                          f"{'survives' if r['survived'] else 'lost    '} ratio={r['ratio']:.3f} rho={r['rho']:+.2f}")
            print(f"  best program survives in {surv:.0%} of tasks (target >= 80%; random keep: {r_surv:.0%})")
            print(f"  geomean best / best surviving latency: {gmean:.3f} (target >= 0.95; random keep: {r_gmean:.3f})")
            print(f"  mean Spearman rho (estimate vs latency, measured records): {rho:+.2f}")
            near = sum(r["near"] for r in rows) / n
            ties = sum(r["tie"] for r in rows) / n
            print(f"  a program within {NEAR:.0%} of the best survives in {near:.0%} of tasks; in {ties:.0%} of tasks "
                  f"the second-best program is itself within {NEAR:.0%} of the best (measurement noise decides which "
                  f"one is 'the best')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
