"""A kernel's time inside the network against the times tuning measures it by: per costlab and stock arm of a
network benchmark run (benchmarks/networks.py), each big task's chosen program (matmuls, softmax) timed

  in network   inside the arm's final build, per call (the Relax VM's instrument hook around each call; a
               few microseconds of hook per call), median of 7 calls of the whole network after 2 warm-up calls
  warm         alone, as the search measures it (repeated runs, caches warm), median
  cold         alone, the CPU caches flushed of its weights and output before each run (export/finals, cold)

so that what predicts the network's time can be read off; and, per arm, every function the network calls with its
microseconds inside (``calls_us``). Written to OUT/in_network-NET-sSEED.json.

    .venv/bin/python benchmarks/in_network.py --out bench/networks-1000 --network llama --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import networks  # noqa: E402

from costlab.common.cpu_lock import cpu_lock  # noqa: E402
from costlab.common.host import describe_host, host_info  # noqa: E402
from costlab.metaschedule.databases import json_database  # noqa: E402

BIG = ("matmul", "softmax")  # the tasks compared: most of the networks' time


def in_network(exe, args, dev, calls: int = 7) -> dict:
    """Median microseconds per function over ``calls`` calls of ``main`` (after two warm-up calls)."""
    from tvm import relax

    vm = relax.VirtualMachine(exe, dev)
    acc, start = {}, {}

    def hook(func, name, before, ret, *a):
        if before:
            start[name] = time.perf_counter()
        else:
            acc[name] = acc.get(name, 0.0) + (time.perf_counter() - start.pop(name)) * 1e6
        return 0

    vm.set_instrument(hook)
    per: dict = {}
    for i in range(calls + 2):
        acc.clear()
        vm["main"](*args)
        if i >= 2:
            for k, v in acc.items():
                per.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in per.items()}


def alone(cands, target, flush: bool) -> list[float]:
    """Microseconds of each candidate alone, warm or cold (two interleaved rounds, median)."""
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import build_and_run, close_runner, cold_runs, make_runner

    opts = types.SimpleNamespace(number=3, repeat=3, min_repeat_ms=50, rpc_key=None, runner_timeout=30)
    runner = make_runner(opts, target)
    try:
        if flush:
            with cold_runs(runner):
                out = build_and_run(make_builder(), runner, target, cands, rounds=2)
        else:
            out = build_and_run(make_builder(), runner, target, cands, rounds=2)
    finally:
        close_runner(runner)
    return [float(np.median(costs)) * 1e6 for costs, _err, _msg in out]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the network benchmark's --out")
    p.add_argument("--network", default="llama")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="host")
    a = p.parse_args()
    import tvm

    from costlab.export.network import build
    from costlab.export.tasks import measuring_target
    from costlab.metaschedule.targets import target_cores

    runs = Path(a.out).resolve() / "runs" / a.network / f"s{a.seed}"
    tgt = measuring_target(a.target)
    os.environ["TVM_NUM_THREADS"] = str(target_cores(tgt))
    dev = tvm.cpu(0)
    rows, calls = [], {}
    with cpu_lock():
        tasks, (mod, inputs, _ref) = networks._network(a.network, tgt)
        args = [tvm.runtime.tensor(np.asarray(x.detach().numpy() if hasattr(x, "detach") else x), dev) for x in inputs]
        cands = []
        for arm in networks.ARMS:
            if not (runs / arm / "done.json").exists():
                continue
            db = json_database(work_dir=str(networks._result_dir(runs / arm) or runs / arm))
            inside = in_network(build(mod, tgt, db)[0], args, dev)
            calls[arm] = inside
            for t in tasks:
                recs = db.get_top_k(db.commit_workload(t.mod), 1) if any(s in t.name for s in BIG) else []
                if recs:
                    cands.append(recs[0].as_measure_candidate())
                    rows.append(dict(arm=arm, task=t.name, weight=t.weight,
                                     in_network_us=inside.get(t.name, float("nan")) / t.weight))
        for flush, key in ((False, "warm_us"), (True, "cold_us")):
            for row, us in zip(rows, alone(cands, tgt, flush)):
                row[key] = us
    out = Path(a.out) / f"in_network-{a.network}-s{a.seed}.json"
    out.write_text(json.dumps(dict(host=describe_host(host_info()), rows=rows, calls_us=calls), indent=1))
    print(f"{'arm':8s} {'task':32s} {'in network':>10s} {'warm':>8s} {'cold':>8s}  (us per call)")
    for r in rows:
        print(f"{r['arm']:8s} {r['task'][:32]:32s} {r['in_network_us']:10.1f} {r['warm_us']:8.1f} {r['cold_us']:8.1f}")
    for arm, inside in calls.items():  # every call of the network, the small tasks and the VM's own included
        print(f"{arm:8s} all calls inside the network: {sum(inside.values()):.0f} us")
    for key in ("warm_us", "cold_us"):
        agree, pairs = order_agreement(rows, key)
        print(f"{key[:-3]}: orders the arms' programs of a task as the network does in {agree} of {pairs} pairs")
    return 0


def order_agreement(rows: list[dict], key: str) -> tuple[int, int]:
    """Pairs of one task's programs (two arms') that ``key`` orders as their time in the network does."""
    agree = pairs = 0
    for i, r in enumerate(rows):
        for q in rows[i + 1:]:
            if q["task"] == r["task"]:
                pairs += 1
                agree += (r[key] < q[key]) == (r["in_network_us"] < q["in_network_us"])
    return agree, pairs


if __name__ == "__main__":
    raise SystemExit(main())
