"""The screening runner against today's runner: the same tuning, in one process, seconds per trial and finals.

Arms, each a `costlab tune` run (``export.tune.tune``, MetaSchedule's evolutionary search + XGBoost, costlab's
builder and runner, seed fixed) of every workload:
  off     --screen 0: every candidate measured in full (number=3, min_repeat_ms=100)
  screen  --screen 1.5: one first run each; those >= 1.5x their task's best keep it, the rest measured in full
  sized   screen, with phase 2's min_repeat_ms sized to the kernel's first run (metaschedule/screening.py); the
          default of `costlab tune`

Per arm and workload: wall seconds and runner seconds (``run_s`` of progress.jsonl) per trial, candidates
screened out. Finals: each run's three fastest programs by their tuning measurement, all arms' programs of a
workload built once and run in turn (``tuning._measure_bests``: number=3, ``--repeat`` costs, ``--rounds``
rounds), so that they meet the machine's drift alike; an arm's final is the lowest median of its programs.
Everything runs under /tmp/costlab-cpu.lock; the host is recorded with the results.

    .venv/bin/python benchmarks/screening.py --out bench/screening [--trials 256] [--workload GMM:1,128,128,128 ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tuning import _measure_bests  # noqa: E402

from costlab.common.cpu_lock import cpu_lock  # noqa: E402
from costlab.common.files import write_atomically  # noqa: E402
from costlab.common.host import describe_host, host_info  # noqa: E402
from costlab.export.workdir import WorkDir  # noqa: E402

ARMS = {"off": dict(screen=0.0), "screen": dict(screen=1.5, sized_repeats=False),
        "sized": dict(screen=1.5, sized_repeats=True)}
WORKLOADS = ["GMM:1,128,128,128", "C2D:1,28,28,128,128,3,1,1"]


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _tune(arm: str, workload: str, args, work: Path) -> dict:
    from costlab.export.tune import TuneOptions, tune

    if work.exists():
        shutil.rmtree(work)  # every run starts from nothing
    opts = TuneOptions(work_dir=str(work), workloads=[workload], target=args.target, trials=args.trials,
                       seed=args.seed, progress=False, check_output=False, started_at=time.time(), **ARMS[arm])
    summary = tune(opts)
    rows = [json.loads(x) for x in (work / WorkDir.PROGRESS).read_text().splitlines()]
    trials = summary["tasks"][0]["trials"]
    run_s = sum(r.get("run_s") or 0 for r in rows)
    out = dict(trials=trials, wall_s=summary["wall_s"], s_per_trial=summary["wall_s"] / trials,
               run_s=round(run_s, 2), run_s_per_trial=run_s / trials, tuning_best_us=summary["tasks"][0]["best_us"],
               screening=summary.get("screening"))
    print(f"[{time.strftime('%H:%M:%S')}] {workload} {arm}: {trials} trials in {out['wall_s']:.1f} s "
          f"({out['s_per_trial']:.3f} s/trial, runner {out['run_s_per_trial']:.3f} s/trial), tuning best "
          f"{out['tuning_best_us']} us" + (f", screened out {out['screening']['screened_out']}"
                                           if out["screening"] else ""), flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="bench/screening")
    p.add_argument("--workload", action="append", default=[])
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--trials", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="host")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if not arms or any(a not in ARMS for a in arms):
        raise SystemExit(f"error: --arms takes some of {', '.join(ARMS)}, not {args.arms!r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = dict(host=host_info(), trials=args.trials, seed=args.seed, target=args.target, rounds=args.rounds,
                   repeat=args.repeat, workloads={}, started=time.strftime("%Y-%m-%d %H:%M:%S"))
    print(f"host: {describe_host(results['host'])}", flush=True)
    with cpu_lock():
        for workload in args.workload or WORKLOADS:
            row = results["workloads"][workload] = {}
            works = {arm: out / "runs" / arm / _slug(workload) for arm in arms}
            for arm in arms:
                row[arm] = _tune(arm, workload, args, works[arm])
            for (work, programs), arm in zip(_measure_bests(list(works.values()), args.target, args.rounds,
                                                            args.repeat), arms):
                medians = [q["median_us"] for q in programs if q["median_us"]]
                row[arm]["final_us"] = min(medians) if medians else None
                row[arm]["final_programs"] = programs
            write_atomically(out / "results.json", json.dumps(results, indent=2).encode())
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    write_atomically(out / "results.json", json.dumps(results, indent=2).encode())
    table = _table(results, arms)
    (out / "table.md").write_text(table + "\n")
    print(table)
    return 0


def _table(results: dict, arms: list[str]) -> str:
    lines = [f"host: {describe_host(results['host'])}; {results['trials']} trials, seed {results['seed']}; finals: "
             f"top-3 programs per run re-measured together, {results['rounds']} rounds x {results['repeat']} costs",
             "", "| workload | arm | s/trial | runner s/trial | vs off | screened out | final µs | vs off |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for workload, row in results["workloads"].items():
        base = row.get("off")
        for arm in arms:
            r = row[arm]
            scr = r.get("screening") or {}
            speed = f"{r['s_per_trial'] / base['s_per_trial']:.2f}x" if base else ""
            final = (f"{r['final_us'] / base['final_us']:.3f}" if base and r.get("final_us") and base.get("final_us")
                     else "")
            lines.append(f"| {workload} | {arm} | {r['s_per_trial']:.3f} | {r['run_s_per_trial']:.3f} | {speed} | "
                         f"{scr.get('screened_out', '-')}/{scr.get('candidates', '-')} | "
                         f"{r.get('final_us') or float('nan'):.2f} | {final} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
