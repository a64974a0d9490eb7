"""The learning curve: how a model's ranking of the programs tuning decides between grows with the number of
training tasks and the kind of record, so that the next decision about data is a measured one.

Kinds of record:

- ``random``: the corpus's random samples of the design space (``corpus/``, Intel Emerald Rapids, 64 per
  task), the data ``x86-cpu-v1`` learned from;
- ``trajectory``: the trajectory corpus (``corpus/trajectories/<platform>``: every record of 200-trial tuning
  runs, MetaSchedule's search and costlab's model-led one alternately) on this project's Zen 5;
- ``trajectory64``: the same tasks' trajectories with a third of their records kept (about 64 per task, as
  many as ``random``), which tells the kind of record apart from the number of records;
- ``both``: both CPUs' records in one dataset (``cpus.py``), every task of either as rows labelled on their own
  CPU, with the hardware input (``featurizers/hardware_vector.py``, spec jitter in training): the recipe of
  ``x86-cpu-v2``, the shipped model. N counts tasks of either CPU;
- ``trajectory-gain8``, ``both-gain8``: the same data trained with ``gain_scale=8``, LambdaRank's gains steep
  toward each task's best, so that pairs among its near-best programs weigh more in the loss.

For each kind and each size N (20, 40, 80, all), a PaCM model trains on N tasks (the first N of a seeded
permutation) and is scored zero-shot, with ``costlab evaluate``'s metrics, on held-out trajectories:

- ``a``, ``a1000``: MetaSchedule's own 200- and 1000-trial runs of the six tuning-benchmark workloads
  (``benchmarks/heldout_trajectories.py``; none of them in either corpus);
- ``traj-heldout``: the trajectory tasks whose name hashes to 0 mod 5, never trained on by any model here
  (random-corpus tasks with the same workload are left out of training too).

Every dataset's features use its own platform's spec, whatever machine runs this. Resumable: a trained size
is skipped, ``results.json`` is rewritten after each score.

    flock /tmp/costlab-cpu.lock .venv/bin/python benchmarks/learning_curve.py --out bench/curve [--epochs 60]

prints a markdown table per held-out set and draws ``curve.png`` (metric against N, a line per kind).
``--models x86-cpu-v1`` scores shipped models on the same sets (rows with tasks 0). Rows of earlier invocations
on the same CPU are kept, a row scored again replaced.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import zlib
from typing import NamedTuple
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import cpus  # noqa: E402
import heldout_trajectories  # noqa: E402

from costlab.cli import main as costlab  # noqa: E402
from costlab.common.files import write_atomically  # noqa: E402
from costlab.datasets import DatasetWriter, open_dataset  # noqa: E402
from costlab.datasets.splits import Split  # noqa: E402
from costlab.featurizers.hardware_vector import DIM  # noqa: E402

ZEN5 = cpus.ZEN5
PACKS = {"random": cpus.PLATFORMS[cpus.EMR], "trajectory": cpus.PLATFORMS[ZEN5]}


class Kind(NamedTuple):
    """A training set of the curve: its source dataset, the fraction of each task's records kept, training
    settings of its own, and the platform it is trained for (None: the source's one platform)."""
    source: str
    keep: float = 1.0
    settings: tuple = ()
    platform: str | None = None


BOTH = (f"data_options.row_platforms=[{ZEN5}, {cpus.EMR}]", f"net.hardware_dim={DIM}",
        "data_options.hardware_jitter=0.5")
GAIN8 = ("gain_scale=8",)  # LambdaRank's gains steep toward each task's best (docs/training.md)
KINDS = {"random": Kind("random"), "trajectory": Kind("trajectory"), "trajectory64": Kind("trajectory", 1 / 3),
         "both": Kind("cpus", 1.0, BOTH, ZEN5), "trajectory-gain8": Kind("trajectory", 1.0, GAIN8),
         "both-gain8": Kind("cpus", 1.0, BOTH + GAIN8, ZEN5)}
SIZES = (20, 40, 80, 0)  # 0: every task there is
KEYS = ("pairwise", "pairwise_q25", "pairwise_q10", "top1", "top1_q25", "pick1", "pick8", "pick32")
HELD_OUT_SPLIT = "curve-heldout"


def held_out(name: str) -> bool:
    """A trajectory task held out of every training set: by its name, so it stays held out as the corpus grows."""
    return zlib.crc32(name.encode()) % 5 == 0


def unpack(out: Path, source: str) -> Path:
    data = out / f"{source}.h5"
    if not data.exists():
        tmp = data.with_suffix(".h5.tmp")
        tmp.unlink(missing_ok=True)
        if costlab(["dataset", "unpack", str(PACKS[source]), "-o", str(tmp)]) != 0:
            raise SystemExit(f"error: unpacking {PACKS[source]} failed")
        tmp.replace(data)
    return data


def _store(data: Path, name: str, test_tasks) -> None:
    split = Split(name, "task", 0, 0.0, np.asarray(sorted(test_tasks), np.int64))
    with DatasetWriter(data) as w:
        split.write(w.h5.require_group("splits"), replace=True)


def training_tasks(data: Path, banned_hashes: set, seed: int) -> tuple[list[int], list[int], set]:
    """The measured tasks a model of this dataset may train on (a seeded permutation), the trajectory tasks held
    out, and the held-out tasks' workload hashes."""
    with open_dataset(data) as ds:
        measured = set().union(*(np.unique(ds.records(p).task).tolist() for p in ds.record_platforms()))
        tasks = [(t.index, t.name, t.workload_hash) for t in ds.tasks if t.index in measured]
    heldout = [i for i, name, _ in tasks if held_out(name)] if not banned_hashes else []
    hashes = {h for i, _, h in tasks if i in heldout}
    usable = [i for i, name, h in tasks if i not in heldout and h not in banned_hashes]
    return list(np.random.default_rng(seed).permutation(usable)), heldout, hashes


def train(data: Path, run: Path, tasks: list[int], all_tasks: int, keep: float, platform: str, args,
          extra: tuple) -> Path:
    config = run / "model" / "config.json"
    if config.exists():
        trained = json.loads(config.read_text()).get("training", {}).get("epochs")
        if trained is None or trained == args.epochs:  # the summary's epochs: the count Lightning completed
            return run
        shutil.rmtree(run)  # trained for another number of epochs than asked now: trained again (its seconds too)
    name = f"curve-{run.name}"
    _store(data, name, set(range(all_tasks)) - set(tasks))
    sets = ["net.d_model=128", "data_options.lists_per_batch=4", "data_options.val_fraction=0.1",
            f"seed={args.seed}"] + list(extra)
    if keep < 1:
        sets.append(f"data_options.keep_fraction={{{platform}: {keep:.4f}}}")
    argv = ["train", "--model", "pacm", "--data", str(data), "--split", name, "--platform", platform,
            "--out", str(run), "--epochs", str(args.epochs), "--no-progress"] + [a for s in sets for a in ("--set", s)]
    if run.exists():  # a training an earlier benchmark run left unfinished: trained afresh
        argv.append("--overwrite")
    if costlab(argv) != 0:
        raise SystemExit(f"error: training {run.name} failed")
    return run


def score(model: Path, data: Path, split: str | None) -> dict:
    from costlab.train.evaluate import evaluate

    r = evaluate(str(model), data, split=split, part="test" if split else "all")
    return {k: float(r[k]) for k in KEYS} | {"records": int(r["records"])}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = sorted({r["on"] for r in results["scores"]})
    metrics = ("pairwise_q25", "pairwise_q10", "top1")
    fig, axes = plt.subplots(len(metrics), len(sets), figsize=(4 * len(sets), 3 * len(metrics)), squeeze=False)
    for col, on in enumerate(sets):
        for row, key in enumerate(metrics):
            ax = axes[row][col]
            for kind in KINDS:
                pts = sorted((r["tasks"], r[key]) for r in results["scores"] if r["on"] == on and r["kind"] == kind)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=kind)
            others = sorted({r["kind"] for r in results["scores"] if r["kind"] not in KINDS})
            for r in results["scores"]:  # models scored beside the curve: a level line each, told apart by style
                if r["on"] == on and r["kind"] not in KINDS:
                    i = others.index(r["kind"])
                    ax.axhline(r[key], ls=("--", ":", "-.")[i % 3], lw=1.2, color=("grey", "black", "tab:brown")[i % 3],
                               label=r["kind"])
            ax.set_xscale("log", base=2)
            ax.set_title(f"{on}: {key}", fontsize=9)
            ax.set_xlabel("training tasks")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="training task counts, 0 = all")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--models", default="", help="models scored beside the curve on the same held-out sets (names "
                   "or paths, e.g. x86-cpu-v1)")
    args = p.parse_args(argv)
    from costlab.common.host import describe_host, host_difference, host_info, same_host

    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    old = json.loads(results_path.read_text()) if results_path.exists() else None
    if old is not None and not same_host(old.get("host") or {}, host_info()):  # before hours of unpacking, training
        # a CPU model's name ("AMD EPYC") is no host: rows of two machines would be one table under one host
        raise SystemExit(f"{results_path} holds rows of another host ({describe_host(old.get('host') or {})}; "
                         f"{host_difference(old.get('host') or {}, host_info())}): use another --out")
    kinds = args.kinds.split(",")
    data = {source: unpack(args.out, source) for source in PACKS}
    if any(KINDS[k].source == "cpus" for k in kinds):
        data["cpus"] = cpus.build(args.out)
    traj_order, traj_heldout, banned = training_tasks(data["trajectory"], set(), args.seed)
    _store(data["trajectory"], HELD_OUT_SPLIT, traj_heldout)
    orders = {"trajectory": traj_order} | {source: training_tasks(data[source], banned, args.seed)[0]
                                           for source in data if source != "trajectory"}
    held = {arm: heldout_trajectories.build(args.out, arm) for arm in ("a", "a1000")}
    sets = {"a": (held["a"], None), "a1000": (held["a1000"], None),
            "traj-heldout": (data["trajectory"], HELD_OUT_SPLIT)}
    results = dict(host=host_info(), at=time.strftime("%Y-%m-%d %H:%M:%S"), settings=vars(args) | {"out": str(args.out)},
                   heldout_tasks=len(traj_heldout), scores=[])
    if old is not None:  # an earlier invocation's rows (other kinds, sizes or models), of this host, are kept
        results["host"], results["scores"] = old["host"], old["scores"]

    def add(row: dict) -> None:
        row = row | {"seed": args.seed, "epochs": args.epochs}  # a row of other settings is another row
        same = ("kind", "tasks", "on", "seed", "epochs")  # a row of before they were recorded: replaced
        results["scores"] = [r for r in results["scores"]
                             if any(r.get(k, row[k]) != row[k] for k in same)] + [row]
        write_atomically(results_path, json.dumps(results, indent=1).encode())

    for model in filter(None, args.models.split(",")):
        for on, (path, split) in sets.items():
            add(dict(kind=model, tasks=0, on=on) | score(model, path, split))
    for kind in kinds:
        source, keep, extra, platform = KINDS[kind]
        with open_dataset(data[source]) as ds:
            platform, n_tasks = platform or ds.record_platforms()[0], len(ds.tasks)
        for size in (int(s) for s in args.sizes.split(",")):
            tasks = orders[source] if size == 0 else orders[source][:size]
            if size > len(orders[source]):
                print(f"{kind}: {size} tasks asked, {len(orders[source])} there; skipped", file=sys.stderr)
                continue
            t0 = time.perf_counter()
            run = train(data[source], args.out / f"{kind}-n{len(tasks)}-s{args.seed}", tasks, n_tasks, keep,
                        platform, args, extra)
            spent = run / "train_seconds.json"  # a model trained before is reused: its own training's seconds
            if spent.exists():
                seconds = json.loads(spent.read_text())["seconds"]
            else:
                seconds = round(time.perf_counter() - t0, 1)
                earlier = [r.get("seconds") for r in results["scores"] if r.get("kind") == kind
                           and r.get("tasks") == len(tasks) and r.get("seed", args.seed) == args.seed
                           and r.get("epochs", args.epochs) == args.epochs and r.get("seconds")]
                if seconds < 1 and earlier:  # reused, trained before this file was written: the row's figure
                    seconds = earlier[0]
                write_atomically(spent, json.dumps(dict(seconds=seconds)).encode())
            row = dict(kind=kind, tasks=len(tasks), seconds=seconds)
            for on, (path, split) in sets.items():
                add(row | {"on": on} | score(run / "model", path, split))
    # the table and the plot: this invocation's seed and epochs (results.json keeps the rows of others)
    mine = {"seed": args.seed, "epochs": args.epochs}
    shown = dict(results, scores=[r for r in results["scores"] if all(r.get(k, v) == v for k, v in mine.items())])
    plot(shown, args.out / "curve.png")
    print(f"host: {describe_host(results['host'])}; held-out trajectory tasks: {len(traj_heldout)}")
    for on in ("a", "a1000", "traj-heldout"):
        print(f"\n{on}\n\n| kind | tasks | " + " | ".join(KEYS) + " |\n" + "|---" * (2 + len(KEYS)) + "|")
        for r in (r for r in shown["scores"] if r["on"] == on):
            print(f"| {r['kind']} | {r['tasks']} | " + " | ".join(f"{r[k]:.3f}" for k in KEYS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
