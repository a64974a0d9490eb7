"""Leave one CPU out: models trained on one CPU's records, scored zero-shot on another CPU's, with and without
the hardware input (``featurizers/hardware_vector.py``).

The CPUs are those the project has records of: Emerald Rapids (``corpus/``: random samples, 162 tasks) and
AMD Zen 5 (``corpus/trajectories/llvm-znver5-2c``: tuning trajectories, 44 tasks), put in one dataset (the
trajectories exported as a MetaSchedule database and imported with their host record) and featurized once with
one TLP vocabulary. For each held-out CPU, TLP models learn from the other CPU's records: ``tlp`` (no hardware
input) and ``tlp-hw`` (hardware input, spec jitter in training); each is scored on the held-out CPU's records
with its own spec, and ``tlp-hw`` again with that spec's L1 and L2 halved (``perturbed``: a changed cache size
should not throw the ranking). Metrics per task (unweighted mean over tasks): top-1, pairwise and the tail
metrics of ``costmodels/metrics.py``. Two CPUs leave one in training: the hardware input can only help by what
the jitter taught it; with a third CPU's records, add its platform to ``PLATFORMS``.

    flock /tmp/costlab-cpu.lock .venv/bin/python benchmarks/loco.py --out build/loco --epochs 8

writes ``results.json`` (with the host and the commands' settings) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpus import PLATFORMS, build  # noqa: E402
from costlab.common.files import write_atomically  # noqa: E402

KEYS = ("top1", "pairwise", "pairwise_q25", "pairwise_q10", "top1_q25", "pick1", "pick8")
ARMS = {"tlp": [], "tlp-hw": ["net.hardware_dim={dim}", "data_options.hardware_jitter={jitter}"]}


def train(data: Path, out: Path, arm: str, platform: str, epochs: int, jitter: float, d_model: int,
          seed: int = 0) -> Path:
    from costlab.cli import main
    from costlab.featurizers.hardware_vector import DIM

    # the settings in the run's name: a model trained under others is not reused for these
    run = out / f"{arm}-on-{platform}-e{epochs}-d{d_model}-j{jitter:g}-s{seed}"
    if (run / "model" / "config.json").exists():
        return run
    sets = [f"net.d_model={d_model}", "net.attention_heads=4", "data_options.lists_per_batch=8",
            "data_options.val_fraction=0.1"] + [s.format(dim=DIM, jitter=jitter) for s in ARMS[arm]]
    argv = ["train", "--data", str(data), "--platform", platform, "--out", str(run), "--epochs", str(epochs),
            "--set", f"seed={seed}", "--no-progress"] + [a for s in sets for a in ("--set", s)]
    if run.exists():  # a training an earlier benchmark run left unfinished: trained afresh
        argv.append("--overwrite")
    if main(argv) != 0:
        raise SystemExit(f"error: training {arm} on {platform} failed")
    return run


def score(model: Path, data: Path, platform: str, perturb: bool = False) -> dict:
    """Per-task metrics of a model on a platform's records, the hardware vector from the platform's spec
    (``perturb``: with its L1 and L2 halved)."""
    from costlab.costmodels import metrics
    from costlab.costmodels.predictors import load
    from costlab.datasets import open_dataset
    from costlab.datasets.records import scores
    from costlab.featurizers.cache import features_of
    from costlab.featurizers.hardware_vector import hardware_vector
    from costlab.featurizers.psa.hardware import spec_for

    pred = load(str(model))
    with open_dataset(data) as ds:
        table = ds.records(platform)
        rows = np.arange(len(table))
        task, latency = table.task.astype(np.int64), table.latency()
        pred.use_platform(ds.platforms[platform])
        spec = spec_for(ds.platforms[platform])
        if perturb:
            spec = spec.updated({"l1_bytes": spec.l1_bytes // 2, "l2_bytes": spec.l2_bytes // 2})
            pred.hardware = hardware_vector(spec)
        out = pred.predict(features_of(ds, pred.featurizer, platform, rows))[:, 0]
    s = metrics.summary(task, out, latency, scores(task, latency))
    return {k: float(s[k]) for k in KEYS} | {"records": int(len(rows)), "tasks": int(len(np.unique(task))),
                                               "spec": spec.name}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--jitter", type=float, default=0.5, help="hardware_jitter of tlp-hw (log2 units)")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from costlab.common.host import describe_host, host_info

    args.out.mkdir(parents=True, exist_ok=True)
    data = build(args.out, featurizer="tlp")  # one TLP vocabulary over both CPUs
    results = dict(host=host_info(), at=time.strftime("%Y-%m-%d %H:%M:%S"), data=str(data), scores=[],
                   settings=vars(args) | {"out": str(args.out)})
    for held in PLATFORMS:
        for trained in [q for q in PLATFORMS if q != held]:
            for arm in ARMS:
                t0 = time.perf_counter()
                run = train(data, args.out, arm, trained, args.epochs, args.jitter, args.d_model, args.seed)
                row = dict(held_out=held, trained_on=trained, model=arm, seconds=round(time.perf_counter() - t0, 1))
                results["scores"].append(row | {"on": "held-out CPU"} | score(run / "model", data, held))
                if arm == "tlp-hw":
                    results["scores"].append(row | {"on": "held-out CPU, L1/L2 halved"}
                                             | score(run / "model", data, held, perturb=True))
                results["scores"].append(row | {"on": "training CPU (seen)"} | score(run / "model", data, trained))
                write_atomically(args.out / "results.json", json.dumps(results, indent=1).encode())
    print(f"host: {describe_host(results['host'])}")
    print("| held out | trained on | model | scored on | tasks | " + " | ".join(KEYS) + " |")
    print("|---" * (5 + len(KEYS)) + "|")
    for r in results["scores"]:
        print(f"| {r['held_out']} | {r['trained_on']} | {r['model']} | {r['on']} | {r['tasks']} | "
              + " | ".join(f"{r[k]:.3f}" for k in KEYS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
