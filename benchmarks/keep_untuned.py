"""What measuring each task's untuned program in a network's second measurement costs, and what it finds
(``export/finals.remeasure(untuned=True)``, ``costlab tune --keep-untuned``): on a finished ``costlab tune
--network`` work dir, the second measurement of its contenders without and with the untuned programs beside
them, in turn, ``--rounds`` times (each way first in every other round). Per way: the median seconds; per task:
the untuned program's time against the fastest contender's of the same measurement, and whether the task would
keep its untuned schedule (the contenders' output is not checked here: ``costlab tune`` did that). Everything
runs under /tmp/costlab-cpu.lock; the host (and the GPU, for a cuda target) is recorded with the results.

    .venv/bin/python benchmarks/networks.py run --out /tmp/nk --networks bert --arms a --trials 64 --seeds 0
    .venv/bin/python benchmarks/keep_untuned.py --work /tmp/nk/runs/bert/s0/a --json benchmarks/results/F.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import networks  # noqa: E402  this folder's: the benchmark networks (nets.py) and their tasks

from costlab.common.cpu_lock import cpu_lock  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", required=True, help="a finished costlab tune --network work dir")
    p.add_argument("--network", default="bert", choices=list(networks.NETWORKS))
    p.add_argument("--target", default="host")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    work = Path(args.work)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    if not (work / "database_tuning_record.json").is_file():
        raise SystemExit(f"{work} holds no tuning database (database_tuning_record.json)")
    summary = work / "costlab_tune.json"
    ran = (json.loads(summary.read_text()).get("options") or {}).get("network") if summary.is_file() else None
    if ran != networks.NETWORKS[args.network]:  # another network's programs: none of these tasks' contenders
        raise SystemExit(f"{work} is a tuning run of {ran or 'no network its costlab_tune.json names'}, not "
                         f"--network {args.network} ({networks.NETWORKS[args.network]}): give its network")
    from costlab.export.finals import remeasure
    from costlab.export.tasks import measuring_target
    from costlab.export.workdir import MeasuringStack
    from costlab.metaschedule.targets import is_gpu, measuring_host
    from costlab.metaschedule.traces import plain_json

    target = measuring_target(args.target)
    tjson = plain_json(target.export())
    seconds: dict = {"without": [], "with": []}
    contenders: dict = {}
    with cpu_lock():
        database = networks.run_database(work)
        tasks, _ = networks._network(args.network, target)
        stack = MeasuringStack()
        builder, runner = stack.start(target, workers=2)
        try:
            for r in range(args.rounds):
                for way in (("without", "with") if r % 2 == 0 else ("with", "without")):
                    t0 = time.time()
                    orders, stats = remeasure(database, [t.mod for t in tasks], builder, runner, target,
                                              cold=not is_gpu(tjson), untuned=way == "with")
                    seconds[way].append(round(time.time() - t0, 2))
                    print(f"round {r} {way}: {seconds[way][-1]} s, {stats['measured']} contenders", flush=True)
                    contenders[way] = stats["measured"]
                    if way == "with":
                        last = (orders, stats["untuned_s"])
        finally:
            stack.close()
    orders, untuned_s = last
    rows = []
    for t, order, base in zip(tasks, orders, untuned_s):
        best = order[0][1] if order else None
        rows.append(dict(name=t.name, weight=t.weight, tuned_us=_us(best), untuned_us=_us(base),
                         untuned_faster=bool(best is not None and base is not None and base < best)))
    median = {k: statistics.median(v) for k, v in seconds.items()}
    out = dict(work=str(work.resolve()), network=args.network, target=tjson, rounds=args.rounds,
               seconds=seconds, median_s=median, contenders=contenders,
               # no ratio where no task had two contenders: without the untuned programs, nothing is measured
               ratio=round(median["with"] / median["without"], 3) if contenders["without"] else None,
               tasks=rows, untuned_faster=sum(r["untuned_faster"] for r in rows),
               host=measuring_host(tjson), at=time.strftime("%Y-%m-%d %H:%M:%S"))
    for r in rows:
        print(f"  {r['name'][:48]:48} tuned {r['tuned_us']} us, untuned {r['untuned_us']} us"
              + (" (untuned faster)" if r["untuned_faster"] else ""))
    print(f"second measurement: {out['median_s']['without']} s without the untuned programs, "
          f"{out['median_s']['with']} s with them (ratio {out['ratio']}); untuned faster on "
          f"{out['untuned_faster']} of {len(rows)} tasks")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def _us(secs):
    return None if secs is None else round(secs * 1e6, 3) if math.isfinite(secs) else "failed"


if __name__ == "__main__":
    sys.exit(main())
