"""Seconds of a GPU task's reference in the output check (``export/check.py``): the unscheduled module built
for this machine's CPU by LLVM's name of it (``reference_cpu_target``, what the check builds) against the same
module built for generic x86-64 (what it built before). Generic code converts float16 in software, and the
reference of a float16 task is most of its check's seconds.

Each workload's module is built both ways once and run on the same random inputs ``--rounds`` times, the two
ways alternating; the outputs must agree. Per workload: the median seconds of each way, and the ratio. Runs under
/tmp/costlab-cpu.lock; the host is recorded with the results.

    .venv/bin/python benchmarks/check_reference.py --json benchmarks/results/check-reference-zen4.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from costlab.common.cpu_lock import cpu_lock
from costlab.common.files import write_atomically
from costlab.common.host import describe_host, host_info

WORKLOADS = ["GMM:1,1024,1024,1024,float16,float16", "C2D:1,28,28,128,128,3,1,1,1,1,float16,float16",
             "GMM:1,1024,1024,1024", "C2D:1,56,56,64,64,3,1,1"]


def _time(lib, inputs) -> tuple[float, np.ndarray]:
    import tvm

    args = [tvm.runtime.tensor(x.copy()) for x in inputs]
    t0 = time.perf_counter()
    lib["main"](*args)
    return time.perf_counter() - t0, args[-1].numpy()


def _workload(spec: str, rounds: int) -> dict:
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import TensorInfo

    from costlab.datasets.extract import te_workload_task
    from costlab.export.check import close, reference_cpu_target
    from costlab.metaschedule.workloads import workload_json_mod

    mod = workload_json_mod(te_workload_task(spec)[1])
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, [int(x) for x in i.shape]).astype(str(i.dtype))
              for i in TensorInfo.from_prim_func(mod["main"])]
    ways = {"host": reference_cpu_target(), "generic": {"kind": "llvm"}}
    libs = {name: tvm.compile(mod, target=tvm.target.Target(t)) for name, t in ways.items()}
    secs = {name: [] for name in ways}
    outputs = {}
    for r in range(rounds):
        for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
            s, outputs[name] = _time(libs[name], inputs)
            secs[name].append(s)
    if not close(outputs["generic"], outputs["host"]):
        raise SystemExit(f"{spec}: the two builds' outputs differ")
    med = {name: statistics.median(v) for name, v in secs.items()}
    row = dict(workload=spec, host_target=ways["host"], **{f"{n}_s": round(v, 4) for n, v in med.items()},
               ratio=round(med["host"] / med["generic"], 3))
    print(f"{spec}: host CPU {med['host']:.3f} s, generic {med['generic']:.3f} s, ratio {row['ratio']}", flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=WORKLOADS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    host = host_info()
    print(describe_host(host), flush=True)
    with cpu_lock():
        rows = [_workload(w, args.rounds) for w in args.workloads]
    out = dict(host=host, rounds=args.rounds, workloads=rows)
    if args.json:
        write_atomically(args.json, json.dumps(out, indent=1).encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
