"""Featurization speed of TLP, PaCM and PSA against TVM's own per-store feature extraction, in one run.

On the records of one platform of a dataset (``costlab dataset measure`` output), each featurizer turns
the same records into features; the script prints records/s and the ratio to the baseline.

Baseline: what MetaSchedule does to feature a record it has only as a trace: replay the trace on the
workload (``Schedule`` + ``Trace.apply_json_to_schedule``) and run ``PerStoreFeature`` (which lowers the
schedule with the feature passes and walks the stores, in C++) on it. Its extraction alone (schedules
already replayed) is printed too. Every featurizer gets one warm-up record first (TVM import, first
compilation of the feature passes), then is timed over all records, per-task set-up included.

Targets: PSA >= 3x faster per record than the baseline; PaCM no more than 2x slower.

    flock /tmp/costlab-cpu.lock .venv/bin/python benchmarks/featurize.py DATA.h5
    .venv/bin/python benchmarks/featurize.py DATA.h5 --limit 200      # a quick, smaller run
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def per_store_baseline(ds, platform: str, rows: np.ndarray) -> tuple[float, float, int]:
    """(seconds replay + extraction, seconds extraction alone, records) of TVM's PerStoreFeature."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.featurizers.ms_records import feature_context, task_module
    from costlab.metaschedule.traces import ReplayError, replay

    plat = ds.platforms[platform]
    target = tvm.target.Target(dict(plat.target))
    table = ds.records(platform)
    tasks = table.column("task", rows)
    schedules = table.schedules(rows)
    extractor = ms.feature_extractor.PerStoreFeature()
    by_task: dict = {}
    for i, t in enumerate(tasks.tolist()):
        by_task.setdefault(t, []).append(i)
    total = extract = 0.0
    done = 0
    for t, idx in by_task.items():
        t0 = time.perf_counter()
        mod = task_module(ds.tasks[t])
        ctx = feature_context(mod, target, 1)  # TuneContext without its 20-60 s tensor-intrinsic import
        func = next(f for _, f in mod.functions_items() if type(f).__name__ == "PrimFunc")
        args = ms.arg_info.ArgInfo.from_prim_func(func)
        cands = []
        for i in idx:
            try:
                cands.append(ms.MeasureCandidate(replay(mod, schedules[i]), args))
            except ReplayError:
                pass
        t1 = time.perf_counter()
        feats = extractor.extract_from(ctx, cands)
        t2 = time.perf_counter()
        assert len(feats) == len(cands)
        total += t2 - t0
        extract += t2 - t1
        done += len(cands)
    return total, extract, done


def time_featurizer(name: str, ds, platform: str, rows: np.ndarray, config=None) -> tuple[float, dict]:
    from costlab.featurizers import create

    f = create(name, config)
    if not f.is_fitted:
        f.fit(ds, [platform])
    f.featurize_records(ds, platform, rows[:1])  # warm-up
    for cache in ("_tasks", "_contexts"):  # per-task set-up is part of the cost, as in the baseline
        if hasattr(f, cache):
            getattr(f, cache).clear()
    t0 = time.perf_counter()
    out = f.featurize_records(ds, platform, rows)
    dt = time.perf_counter() - t0
    return dt, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", metavar="DATA.h5")
    ap.add_argument("--platform", help="platform id (default: the one with most records)")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N records (0: all)")
    ap.add_argument("--featurizers", default="tlp,pacm,psa,psa-tir",
                    help="comma-separated: tlp, pacm, psa (trace simulation), psa-tir (replay + TIR walk)")
    args = ap.parse_args(argv)

    from costlab.datasets import open_dataset

    with open_dataset(args.data) as ds:
        platform = args.platform or max(ds.record_platforms(), key=ds.num_records)
        n = ds.num_records(platform)
        rows = np.arange(min(n, args.limit) if args.limit else n)
        tasks = len(np.unique(ds.records(platform).column("task", rows)))
        from costlab.common.host import describe_host, host_info

        print(f"host: {describe_host(host_info())}")  # the records/s below are this machine's
        print(f"{args.data}: platform {platform}, {rows.size} records of {tasks} tasks")
        per_store_baseline(ds, platform, rows[:1])  # warm-up
        base_total, base_extract, base_n = per_store_baseline(ds, platform, rows)
        base_rate = base_n / base_total
        print(f"{'featurizer':<34}{'records/s':>12}{'ms/record':>12}{'vs PerStoreFeature':>20}")
        print(f"{'PerStoreFeature (replay + extract)':<34}{base_rate:>12.1f}{1e3 / base_rate:>12.2f}{1.0:>19.2f}x")
        ex_rate = base_n / base_extract
        print(f"{'  extraction alone (replayed)':<34}{ex_rate:>12.1f}{1e3 / ex_rate:>12.2f}{ex_rate / base_rate:>19.2f}x")
        results = {}
        for name in [x.strip() for x in args.featurizers.split(",") if x.strip()]:
            fname, config = ("psa", {"mode": "tir"}) if name == "psa-tir" else (name, None)
            try:
                dt, out = time_featurizer(fname, ds, platform, rows, config)
            except (ImportError, ValueError) as exc:
                print(f"{name:<34}  skipped: {exc}")
                continue
            rate = rows.size / dt
            invalid = int(np.count_nonzero(~np.asarray(out["valid"], bool))) if "valid" in out else 0
            results[name] = rate / base_rate
            note = f"  ({invalid} invalid)" if invalid else ""
            label = {"psa": "PSA (trace simulation)", "psa-tir": "PSA (replay + TIR walk)", "tlp": "TLP",
                     "pacm": "PaCM"}.get(name, name)
            print(f"{label:<34}{rate:>12.1f}{1e3 / rate:>12.2f}{rate / base_rate:>19.2f}x{note}")
        print()
        if "psa" in results:
            ok = results["psa"] >= 3.0
            print(f"PSA: {results['psa']:.1f}x the baseline's records/s (target >= 3x): {'met' if ok else 'NOT met'}")
        if "pacm" in results:
            slow = 1.0 / results["pacm"]
            print(f"PaCM: {slow:.2f}x the baseline's time per record (target <= 2x): "
                  f"{'met' if slow <= 2.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
