"""How well models rank the programs tuning decides between: tail metrics on held-out tuning trajectories.

The held-out data are the archived runs of the tuning benchmark (``benchmarks/results/tuning-zen5-verify``:
MetaSchedule's default search on the six benchmark workloads, none of them in the corpus or the trajectory
corpus), one dataset per run length: ``a`` (200 trials) and ``a1000`` (1000 trials), seed 0, every measured
record (failed ones kept). Each model is scored with ``costlab evaluate``'s metrics: pairwise accuracy and
top-1 over all of a task's programs, within its best quarter and best tenth, and the top-k of its 1 / 8 / 32
picks. The features of a dataset are its own platform's (``llvm-znver5-2c``: znver5 by its ``-mcpu``), whatever
machine runs this.

    .venv/bin/python benchmarks/heldout_trajectories.py --out bench/heldout --models x86-cpu-v1,psa,random

prints a markdown table (and writes ``results.json`` beside the datasets) with the host, each model's weights
hash, and the commands that rebuild the datasets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "benchmarks" / "results" / "tuning-zen5-verify" / "runs"
KEYS = ("top1", "pairwise", "pairwise_q25", "pairwise_q10", "top1_q25", "top1_q10", "pick1", "pick8", "pick32")


def build(out: Path, arm: str, seed: int = 0) -> Path:
    """The held-out dataset of one run length: every workload's run of ``arm`` and ``seed`` imported (each as a
    network of its own name, so per-workload figures can be read too). Rebuilt only when missing."""
    from costlab.cli import main

    data = out / f"heldout-{arm}-s{seed}.h5"
    if data.exists():
        return data
    from costlab.export.workdir import WorkDir
    from costlab.metaschedule.databases import database_file

    works = sorted(p for p in (RUNS / arm).glob(f"*/s{seed}") if database_file(p, WorkDir.RECORDS) is not None)
    if not works:
        raise SystemExit(f"error: no archived run of arm {arm} seed {seed} under {RUNS}")
    tmp = data.with_suffix(".h5.tmp")
    tmp.unlink(missing_ok=True)
    for work in works:
        if main(["dataset", "import-ms", str(work), "-o", str(tmp), "--network", work.parent.name]) != 0:
            raise SystemExit(f"error: importing {work} failed")
    tmp.replace(data)
    return data


def score(model: str, data: Path) -> dict:
    from costlab.train.evaluate import evaluate

    r = evaluate(model, data, split=None)
    return {k: float(r[k]) for k in KEYS} | {"records": int(r["records"]), "spec": r.get("hardware_spec")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--models", default="x86-cpu-v1,psa,random", help="comma-separated model names or paths")
    p.add_argument("--arms", default="a,a1000", help="run lengths of the tuning benchmark to hold out")
    args = p.parse_args(argv)
    from costlab.common.files import write_atomically
    from costlab.common.host import describe_host, host_info
    from costlab.costmodels.predictors import weights_sha256

    args.out.mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    results = dict(host=host_info(), at=time.strftime("%Y-%m-%d %H:%M:%S"),
                   models={m: weights_sha256(m) for m in models}, data={}, scores={})
    for arm in [a for a in args.arms.split(",") if a]:
        data = build(args.out, arm)
        results["data"][arm] = dict(path=str(data), runs=str(RUNS / arm), seed=0)
        for m in models:
            results["scores"][f"{arm}/{m}"] = score(m, data)
    write_atomically(args.out / "results.json", json.dumps(results, indent=1).encode())
    print(f"host: {describe_host(results['host'])}")
    print("| held out | model | records | top-1 | pairwise | pairwise ¼ | pairwise ⅒ | top-1 ¼ | top-1 ⅒ | pick 1 | "
          "pick 8 | pick 32 |")
    print("|---" * 12 + "|")
    for key, s in results["scores"].items():
        arm, m = key.split("/", 1)
        print(f"| {arm} | {m} | {s['records']} | " + " | ".join(f"{s[k]:.3f}" for k in KEYS) + " |")
    for m, h in results["models"].items():
        if h:
            print(f"{m}: weights sha256 {h[:16]}…")
    return 0


if __name__ == "__main__":
    sys.exit(main())
