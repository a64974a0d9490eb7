"""costlab's TVM worker processes (``metaschedule/pools.worker_pool``: TVM's worker loop without PyTorch, each
worker in a session of its own) beside TVM's own (``PopenPoolExecutor``, whose workers import PyTorch with TVM).

Two parts, each way in turn, ``--rounds`` times, each way first in every other round:

- **pool start** (in this process): a pool of ``--workers`` workers made and given one trivial task per worker;
  the seconds until every answer is in, and per worker its CPU seconds and resident memory then
  (``/proc/<pid>``);
- **first batch** (fresh ``costlab tune`` processes of MetaSchedule's default search, one batch of ``--trials``):
  the seconds from the command's start to its first measured batch (``first_batch_s`` of the run's summary), the
  baseline being the same command with TVM's pool class in place of costlab's.

Medians per way and the ratios costlab / TVM. Everything runs under /tmp/costlab-cpu.lock; the host is recorded
with the results.

    .venv/bin/python benchmarks/workers.py --json benchmarks/results/workers-zen5.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from costlab.common.cpu_lock import cpu_lock
from costlab.common.host import describe_host, host_info
from costlab.metaschedule import pools

WAYS = ("costlab", "tvm")
# the baseline of a tuning run: TVM's pool class wherever costlab makes a pool
TVM_POOLS = """
import sys
from costlab.metaschedule import pools
from tvm.support.popen_pool import PopenPoolExecutor
pools._pool_class = lambda: PopenPoolExecutor
from costlab.cli import main
sys.exit(main(sys.argv[1:]))
"""
COMMAND = {"costlab": ["-m", "costlab"], "tvm": ["-c", TVM_POOLS]}


def _proc_figures(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) and resident MB of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS:")) / 1024
    return cpu, rss


def pool_start(way: str, workers: int) -> dict:
    from tvm.support.popen_pool import PopenPoolExecutor

    make = pools.worker_pool if way == "costlab" else PopenPoolExecutor
    began = time.perf_counter()
    pool = make(max_workers=workers, timeout=120)
    try:
        # submitted at once, while no worker has started: each task gets a thread of its own, and so a worker
        futures = [pool.submit(os.getpid) for _ in range(workers)]  # (a builtin: any worker can unpickle it)
        pids = {f.result() for f in futures}
        seconds = time.perf_counter() - began
        figures = [_proc_figures(p) for p in pids]
    finally:
        pools.shutdown_pool(pool)
    return dict(start_s=round(seconds, 3), workers_started=len(pids),
                worker_cpu_s=round(float(np.mean([c for c, _ in figures])), 3),
                worker_rss_mb=round(float(np.mean([r for _, r in figures])), 1))


def first_batch(way: str, args, work: Path) -> dict:
    if work.exists():
        shutil.rmtree(work)
    cmd = [sys.executable, *COMMAND[way], "tune", "--workload", args.workload, "--trials", str(args.trials),
           "--seed", "0", "--target", args.target, "--work-dir", str(work), "--no-progress", "--no-library",
           "--no-check"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"workers.py: {way}: {(res.stderr or res.stdout).strip().splitlines()[-1]}")
    summary = json.loads((work / "costlab_tune.json").read_text())
    return dict(first_batch_s=summary["first_batch_s"], wall_s=summary["wall_s"])


def _median(rows: list[dict]) -> dict:
    return {k: round(float(np.median([r[k] for r in rows])), 3) for k in rows[0]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="workers of a pool (default 2: a builder's here)")
    p.add_argument("--workload", default="GMM:1,128,128,128")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--target", default="host", help="default: this host's CPU, by its concrete -mcpu name")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.rounds < 1 or args.trials < 1 or args.workers < 1:
        raise SystemExit("workers.py: --rounds, --trials and --workers must be at least 1")
    starts: dict = {w: [] for w in WAYS}
    batches: dict = {w: [] for w in WAYS}
    with tempfile.TemporaryDirectory() as tmp, cpu_lock():
        for i in range(args.rounds):
            for way in sorted(WAYS, reverse=bool(i % 2)):
                starts[way].append(pool_start(way, args.workers))
                batches[way].append(first_batch(way, args, Path(tmp) / way))
                s, b = starts[way][-1], batches[way][-1]
                print(f"[{time.strftime('%H:%M:%S')}] round {i} {way:7}: pool start {s['start_s']:.2f} s, worker "
                      f"{s['worker_cpu_s']:.2f} CPU s {s['worker_rss_mb']:.0f} MB; first batch "
                      f"{b['first_batch_s']:.2f} s", flush=True)
    start_med = {w: _median(r) for w, r in starts.items()}
    batch_med = {w: _median(r) for w, r in batches.items()}
    ratio = {k: round(start_med["costlab"][k] / start_med["tvm"][k], 3)
             for k in ("start_s", "worker_cpu_s", "worker_rss_mb")}
    ratio["first_batch_s"] = round(batch_med["costlab"]["first_batch_s"] / batch_med["tvm"]["first_batch_s"], 3)
    out = dict(pool_start=start_med, first_batch=batch_med, ratio=ratio, runs=dict(pool_start=starts,
               first_batch=batches), workers=args.workers, workload=args.workload, trials=args.trials,
               target=args.target, rounds=args.rounds, host=host_info(), at=time.strftime("%Y-%m-%d %H:%M:%S"))
    print(f"{describe_host(out['host'])}\nmedian of {args.rounds} rounds   costlab      TVM   costlab/TVM")
    for name, part, key in (("pool start (s)", start_med, "start_s"), ("worker CPU (s)", start_med, "worker_cpu_s"),
                            ("worker memory (MB)", start_med, "worker_rss_mb"),
                            ("first batch (s)", batch_med, "first_batch_s")):
        print(f"{name:24}{part['costlab'][key]:9.2f}{part['tvm'][key]:9.2f}   {ratio[key]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
