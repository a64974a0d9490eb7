"""Seconds to check a network's tuned programs (``export/check.py``): its tasks checked all at once in a pool
of workers that each start once (``check_tasks``, as ``costlab tune`` checks them) against each task checked in
a worker of its own (``check_task`` per task, as ``costlab tune`` checked them before). A worker's start (TVM
imported; on a GPU, its context made) is most of a small task's check, and a network has many small tasks.

The database is a ``costlab tune --network`` run of ``--trials`` made once into WORK (checks off: this benchmark
does them); then both ways check its tasks in turn, ``--rounds`` times, each way first in every other round.
Both ways must give every task the same answer. Per way: the median seconds, and the ratio. Everything runs
under /tmp/costlab-cpu.lock; the host (and the GPU, for a cuda target) is recorded with the results.

    .venv/bin/python benchmarks/checks.py --work /tmp/checks --json benchmarks/results/checks-zen5.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import networks  # this folder's: the benchmark networks (nets.py) and their tasks
from costlab.common.children import run_or_stop
from costlab.common.cpu_lock import cpu_lock
from costlab.common.host import describe_host


def _tune(args, work: Path) -> None:
    if (work / "costlab_tune.json").exists():  # made before: by this benchmark's network, budget and target only
        ran = json.loads((work / "costlab_tune.json").read_text()).get("options") or {}
        asked = dict(network=networks.NETWORKS[args.network], trials=args.trials, target=args.target)
        differ = [f"{k} {ran.get(k)!r} (not {v!r})" for k, v in asked.items() if ran.get(k) != v]
        if differ:
            raise SystemExit(f"{work} holds a tuning run of {', '.join(differ)}: give those, or another --work")
        return
    cmd = [*networks.COSTLAB, "tune", "--network", networks.NETWORKS[args.network], "--target", args.target,
           "--trials", str(args.trials), "--work-dir", str(work), "--no-check", "--no-progress"]
    print(f"[{time.strftime('%H:%M:%S')}] tuning: {' '.join(cmd[3:])}", flush=True)
    if run_or_stop(cmd, env=networks._env(), cwd=work.parent):  # a SIGTERM ends the tuning run first
        raise SystemExit(f"the tuning run failed; see {work}")


def _answers(answers: list) -> list:
    return [(a["status"], a["checked"]) for a in answers]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", required=True, help="the tuning run's work dir (made when it holds none)")
    p.add_argument("--network", default="bert", choices=list(networks.NETWORKS))
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--target", default="host")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.trials < 1:
        raise SystemExit("--rounds and --trials must be at least 1")
    from costlab.export.check import check_task, check_tasks
    from costlab.export.tasks import measuring_target
    from costlab.metaschedule.targets import measuring_host
    from costlab.metaschedule.traces import plain_json

    work = Path(args.work).resolve()
    if work.exists() and not work.is_dir():
        raise SystemExit(f"--work {work} is a file, not a tuning run's work dir")
    work.mkdir(parents=True, exist_ok=True)
    target = measuring_target(args.target)
    with cpu_lock():
        _tune(args, work)
        db = networks.run_database(work)
        tasks, _ = networks._network(args.network, target)
        measured = [t for t in tasks if db.has_workload(t.mod)]
        ways = {"one worker a task": lambda: [check_task(db, t.mod, target) for t in measured],
                "all at once": lambda: check_tasks(db, [(t.mod, None, None) for t in measured], target)}
        seconds: dict = {k: [] for k in ways}
        answers: dict = {}
        for r in range(args.rounds):
            for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                t0 = time.perf_counter()
                got = ways[name]()
                seconds[name].append(round(time.perf_counter() - t0, 3))
                answers.setdefault(name, _answers(got))
                print(f"[{time.strftime('%H:%M:%S')}] round {r} {name}: {seconds[name][-1]:.2f} s", flush=True)
    if answers["one worker a task"] != answers["all at once"]:
        raise SystemExit("the two ways gave different answers: " + json.dumps(answers, default=str)[:2000])
    med = {k: statistics.median(v) for k, v in seconds.items()}
    ratio = round(med["all at once"] / med["one worker a task"], 3)
    host = measuring_host(plain_json(target.export()))
    print(describe_host(host))
    print(f"checking {len(measured)} tasks of {args.network}, median of {args.rounds}: all at once "
          f"{med['all at once']:.2f} s, one worker a task {med['one worker a task']:.2f} s, ratio {ratio}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(median_s=med, ratio=ratio, seconds=seconds, tasks=len(measured),
                                                   statuses=[s for s, _ in answers["all at once"]],
                                                   network=args.network, trials=args.trials, target=args.target,
                                                   host=host, at=time.strftime("%Y-%m-%d %H:%M:%S")), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
