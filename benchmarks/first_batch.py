"""Seconds to a tuning run's first measured batch: costlab's runner, whose worker starts in the background
(``metaschedule/runners.StartingRunner``), against the same runner waiting for its worker as MetaSchedule's
``LocalRunner`` does in its constructor.

Each run is a fresh ``costlab tune`` process (arm c of ``benchmarks/tuning.py``: the model-led search with the
given model, adapted online; seed fixed; one batch of ``--trials``), the two ways in turn, ``--rounds`` times, each
way first in every other round. The baseline is the same command with ``StartingRunner.start`` waiting for the
worker before it returns. Per way: the median seconds from the command's start to its first batch's results
(``first_batch_s`` of the run's summary) and of the first round's search (``search_s``: the background start
shares the machine's cores with it), and the ratio. Everything runs under /tmp/costlab-cpu.lock; the host is
recorded with the results.

    .venv/bin/python benchmarks/first_batch.py --model x86-cpu-v2 --json benchmarks/results/first-batch-zen5.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from costlab.common.cpu_lock import cpu_lock
from costlab.common.host import describe_host, host_info

# the baseline: costlab's runner, started as LocalRunner starts (the constructor waits for the worker)
WAITING = """
import sys
from costlab.metaschedule import runners
cls = runners._runner_class()._cls
started = cls.start
def start(self, device):
    started(self, device)
    self.ready()
cls.start = start
from costlab.cli import main
sys.exit(main(sys.argv[1:]))
"""
WAYS = {"background": ["-m", "costlab"], "waiting": ["-c", WAITING]}


def _run(way: str, args, work: Path) -> dict:
    if work.exists():
        shutil.rmtree(work)
    cmd = [sys.executable, *WAYS[way], "tune", "--workload", args.workload, "--model", args.model,
           "--strategy", "model-led", "--adapt", "momentum", "--trials", str(args.trials), "--seed", str(args.seed),
           "--target", args.target, "--work-dir", str(work), "--no-progress", "--no-library", "--no-check"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"first_batch.py: {way}: {(res.stderr or res.stdout).strip().splitlines()[-1]}")
    summary = json.loads((work / "costlab_tune.json").read_text())
    first = json.loads((work / "progress.jsonl").read_text().splitlines()[0])
    return dict(first_batch_s=summary["first_batch_s"], search_s=first["search_s"], wall_s=summary["wall_s"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a model of the target's platform (e.g. x86-cpu-v2)")
    p.add_argument("--workload", default="GMM:1,128,128,128")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--target", default="host", help="default: this host's CPU, by its concrete -mcpu name")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.rounds < 1 or args.trials < 1:
        raise SystemExit("first_batch.py: --rounds and --trials must be at least 1")
    runs: dict = {w: [] for w in WAYS}
    with tempfile.TemporaryDirectory() as tmp, cpu_lock():
        for i in range(args.rounds):
            for way in sorted(WAYS, reverse=bool(i % 2)):
                runs[way].append(_run(way, args, Path(tmp) / way))
                r = runs[way][-1]
                print(f"[{time.strftime('%H:%M:%S')}] round {i} {way:10}: first batch {r['first_batch_s']:.2f} s, "
                      f"search {r['search_s']:.2f} s, wall {r['wall_s']:.1f} s", flush=True)
    med = {w: {k: round(float(np.median([r[k] for r in rows])), 3) for k in rows[0]} for w, rows in runs.items()}
    out = dict(median=med, ratio=round(med["background"]["first_batch_s"] / med["waiting"]["first_batch_s"], 3),
               runs=runs, workload=args.workload, model=args.model, trials=args.trials, target=args.target,
               rounds=args.rounds, host=host_info(), at=time.strftime("%Y-%m-%d %H:%M:%S"))
    print(f"{describe_host(out['host'])}\nfirst batch, median of {args.rounds}: background start "
          f"{med['background']['first_batch_s']:.2f} s (search {med['background']['search_s']:.2f} s), waiting "
          f"{med['waiting']['first_batch_s']:.2f} s (search {med['waiting']['search_s']:.2f} s), "
          f"ratio {out['ratio']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
