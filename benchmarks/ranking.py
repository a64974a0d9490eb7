"""Ranking quality of costlab's cost models against the baselines, side by side on the same split.

Sections (run one or several with --section):

  models  On a measured CPU dataset (DATA.h5 with a stored split): top-1, top-5 and pairwise accuracy of
          TLP, PaCM, MetaSchedule's XGBoost, the SegmentSum MLP (--models picks), PSA and random, all by the same
          `evaluate`, plus training records/s on this machine. Targets: TLP and PaCM top-1 >= XGBoost's
          + 0.03 and >= 0.90; top-5 >= 0.95.
  mtl     Two platforms measured on the same programs: with --keep of the target's labels, the multi-task
          model vs a single-platform model trained on the same labels (top-1 on held-out tasks).
  moa     Fine-tuning from platform A to B by the momentum rule on a small target sample vs training on
          that sample from scratch.
  public  TLP on public TenSet-format (Ansor) logs, one network held out at a time.
  pretrained  A pre-trained model (--model, default the shipped x86-cpu) zero-shot on MetaSchedule databases
          (--db: tune_tir's work dirs) and measured datasets (--eval-data) outside its corpus, beside PSA,
          random and an XGBoost trained on the corpus (--data).

    python benchmarks/ranking.py --section models --data ranking.h5 --split task30-s0 --split task30-s1 (...)
        --epochs 60 --set net.d_model=128 --set data_options.lists_per_batch=4
    python benchmarks/ranking.py --section mtl --section moa --data ranking.h5 --split task30-s0 (...)
        --target llvm-x86_64-2c --source llvm-x86_64-1c
    python benchmarks/ranking.py --section public --logs ../shared/data/ansor_logs/xeon8358
    python benchmarks/ranking.py --section pretrained --data corpus.h5 --db TUNE_TIR_WORK_DIR --eval-data net.h5

Several --split give one table per split and their mean; docs/training.md has the figures and commands.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from costlab.cli import main as costlab
from costlab.costmodels import kinds, metrics
from costlab.featurizers.cache import build_cache
from costlab.train.config import load_config
from costlab.train.evaluate import evaluate
from costlab.train.fit import train
from costlab.train.report import TAIL_KEYS


OVERRIDES: list = []


def _train(data, out, model, split, platforms, epochs, extra=(), **updates):
    """Train one model with the benchmark's overrides; ``updates`` set config keys (init_from, momentum)."""
    cfg = load_config(None, [f"trainer.max_epochs={epochs}", *OVERRIDES, *extra], model=model, data=str(data), split=split,
                      platforms=list(platforms), out=str(out))
    cfg.update(updates)
    return train(cfg, progress=False, overwrite=True)  # a benchmark run again trains its models afresh


def _row(name, result, train_summary=None):
    rps = (train_summary or {}).get("train_records_per_s")
    return dict(model=name, top1=result["top1"], top5=result["top5"], pairwise=result["pairwise"],
                ndcg=result["ndcg"], **{k: result[k] for k in TAIL_KEYS}, train_records_per_s=rps)


# the tail metrics' columns (TAIL_KEYS: within each task's best quarter / tenth, and the model's k picks)
TAIL_HEADS = {"pairwise_q25": "pairwise, best ¼", "top1_q25": "top-1, best ¼", "pairwise_q10": "pairwise, best ⅒",
              "top1_q10": "top-1, best ⅒", "pick1": "best of 1 pick", "pick8": "best of 8 picks",
              "pick32": "best of 32 picks"}


def _print_table(rows, title, baseline="xgb"):
    base = next((r for r in rows if r["model"] == baseline), None)
    print(f"\n## {title}\n")
    heads = ["model", "top-1", "top-5", "pairwise", "NDCG", *(TAIL_HEADS[k] for k in TAIL_KEYS), "top-1 − baseline",
             "train records/s"]
    print("| " + " | ".join(heads) + " |")
    print("|" + " --- |" * len(heads))
    for r in rows:
        diff = f"{r['top1'] - base['top1']:+.4f}" if base else "—"
        rps = f"{r['train_records_per_s']:.0f}" if r.get("train_records_per_s") else "—"
        tail = " | ".join(f"{r[k]:.4f}" if r.get(k) is not None else "—"
                          for k in TAIL_KEYS)
        print(f"| {r['model']} | {r['top1']:.4f} | {r['top5']:.4f} | {r['pairwise']:.4f} | {r['ndcg']:.4f} | {tail} "
              f"| {diff} | {rps} |")
    sys.stdout.flush()


def _mean_rows(runs: list[list[dict]]) -> list[dict]:
    """Rows of several splits averaged per model (same model order in every run)."""
    out = []
    for same in zip(*runs):
        row = dict(model=same[0]["model"], splits=len(same))
        for key in ("top1", "top5", "pairwise", "ndcg", *TAIL_KEYS, "train_records_per_s"):
            vals = [r[key] for r in same if r.get(key) is not None]
            row[key] = sum(vals) / len(vals) if vals else None
        out.append(row)
    return out


def _featurize(data, platforms, featurizers):
    for platform in platforms:
        for f in featurizers:
            t0 = time.perf_counter()
            stats = build_cache(data, f, platform, progress=False)
            print(f"featurize {f} on {platform}: {stats['computed']} records in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)


def _over_splits(section, args, work: Path, title: str, baseline: str | None = "xgb") -> dict:
    """Run one section on every --split, print each split's table and, for several, their mean."""
    runs = {}
    for split in args.split:
        rows = section(args, work / str(split), split)
        _print_table(rows, f"{title}, split {split} (test part)", baseline=baseline or rows[0]["model"])
        runs[str(split)] = rows
    if len(runs) > 1:
        mean = _mean_rows(list(runs.values()))
        _print_table(mean, f"{title}, mean over {len(runs)} splits", baseline=baseline or mean[0]["model"])
        runs["mean"] = mean
    return runs


def _models(args, work: Path, split) -> list:
    platform = args.platform
    rows, results = [], {}
    for model in args.models.split(","):
        # a variant: KIND:KEY=VALUE+KEY=VALUE, e.g. pacm:net.program_features=0 (its row keeps the whole name)
        kind, _, sets = model.partition(":")
        run = work / model.replace(":", "_").replace("=", "-").replace("+", "_")
        s = _train(args.data, run, kind, split, [platform], args.epochs, extra=[x for x in sets.split("+") if x])
        results[model] = evaluate(str(run), args.data, split=split, platform=platform)
        rows.append(_row(model, results[model], s))
    for name in kinds.untrained():
        results[name] = evaluate(name, args.data, split=split, platform=platform)
        rows.append(_row(name, results[name]))
    for model in args.fuse_psa:
        rows.append(_row(f"{model}+psa", _fused(results[model], results["psa"])))
    return rows


def _fused(learned: dict, psa: dict) -> dict:
    """The metrics of the mean of a learned model's and PSA's within-task ranks of the same records."""
    a, b = learned["_arrays"], psa["_arrays"]
    if not np.array_equal(a["task"], b["task"]) or not np.array_equal(a["latency"], b["latency"]):
        raise AssertionError("the model and PSA scored different records")
    pred = metrics.task_ranks(a["task"], a["pred"]) + metrics.task_ranks(a["task"], b["pred"])
    return metrics.summary(a["task"], pred, a["latency"], a["score"], networks=a["networks"])


def section_models(args, work: Path) -> dict:
    _featurize(args.data, [args.platform], ("tlp", "pacm", "psa"))
    return _over_splits(_models, args, work, f"Ranking on {args.data} ({args.platform})")


def _mtl(args, work: Path, split) -> list:
    keep = [f"data_options.keep_fraction={{{args.target}: {args.keep}}}"]
    single = _train(args.data, work / "single", "tlp", split, [args.target], args.epochs, keep)
    multi = _train(args.data, work / "mtl", "mtl", split, [args.target, args.source], args.epochs, keep)
    return [_row(f"tlp, {args.keep:.0%} of {args.target}",
                 evaluate(str(work / "single"), args.data, split=split, platform=args.target), single),
            _row(f"mtl, {args.keep:.0%} of {args.target} + {args.source}",
                 evaluate(str(work / "mtl"), args.data, split=split, platform=args.target), multi)]


def section_mtl(args, work: Path) -> dict:
    _featurize(args.data, [args.target, args.source], ("tlp",))
    return _over_splits(_mtl, args, work, f"MTL: target {args.target} with {args.keep:.0%} of its labels", None)


def _moa(args, work: Path, split) -> list:
    _train(args.data, work / "source", "tlp", split, [args.source], args.epochs)
    keep = [f"data_options.keep_fraction={{{args.target}: {args.keep}}}"]
    scratch = _train(args.data, work / "scratch", "tlp", split, [args.target], args.epochs, keep)
    source = str(work / "source")
    moa = _train(args.data, work / "moa", "tlp", split, [args.target], args.epochs, keep,
                 init_from=source, momentum=0.99, momentum_every=2)
    finetune = _train(args.data, work / "finetune", "tlp", split, [args.target], args.epochs, keep, init_from=source)

    def ev(run):
        return evaluate(str(work / run), args.data, split=split, platform=args.target)

    return [_row(f"scratch on {args.keep:.0%} of {args.target}", ev("scratch"), scratch),
            _row(f"MoA from {args.source}", ev("moa"), moa),
            _row(f"plain fine-tuning from {args.source}", ev("finetune"), finetune),
            _row(f"{args.source} model as is", ev("source"))]


def section_moa(args, work: Path) -> dict:
    _featurize(args.data, [args.target, args.source], ("tlp",))
    return _over_splits(_moa, args, work, f"MoA: {args.source} -> {args.target} with {args.keep:.0%} of the target's labels", None)


def section_public(args, work: Path) -> list:
    rows = []
    for logs in args.logs:
        logs = Path(logs)
        data = work / f"{logs.name}.h5"
        if costlab(["dataset", "import-ansor", str(logs), "-o", str(data), "--network-per-file"]) != 0:
            raise SystemExit(f"import of {logs} failed")
        from costlab.datasets import open_dataset

        with open_dataset(data) as ds:
            nets, platform = sorted(ds.networks), ds.record_platforms()[0]
        build_cache(data, "tlp", platform, progress=False)
        for net in nets:
            costlab(["dataset", "split", str(data), "--held-out", net, "--name", f"hold-{net}"])
            out = work / f"{logs.name}-{net}"
            s = _train(data, out, "tlp", f"hold-{net}", [platform], args.epochs)
            for name, model in (("tlp", str(out)), ("random", "random")):
                r = evaluate(model, data, split=f"hold-{net}", platform=platform)
                rows.append(_row(f"{name}: {logs.name}, held out {net}", r, s if name == "tlp" else None))
    _print_table(rows, "TLP on public Ansor/TenSet logs, one network held out at a time", baseline="none")
    return rows


def section_pretrained(args, work: Path) -> list:
    """A pre-trained model (--model, default the shipped x86-cpu) zero-shot on programs its corpus does not
    hold: MetaSchedule databases (--db: work dirs that tune_tir or costlab tune left, their programs found
    by MetaSchedule's own search) and datasets (--eval-data: e.g. the tasks of a network outside the
    corpus, measured), beside PSA, random and an XGBoost trained on the whole corpus (--data)."""
    _featurize(args.data, [args.platform], ("pacm",))
    xgb = work / "xgb-corpus"
    _train(args.data, xgb, "xgb", None, [args.platform], args.epochs)
    sets = []
    for i, db in enumerate(args.db):
        h5 = work / f"db{i}.h5"
        if not h5.exists() and costlab(["dataset", "import-ms", str(db), "-o", str(h5)]) != 0:
            raise SystemExit(f"import of {db} failed")
        sets.append((str(db), h5))
    sets += [(str(d), Path(d)) for d in args.eval_data]
    rows = []
    for name, data in sets:
        for label, model in ((args.model, args.model), ("xgb (corpus)", str(xgb)), ("psa", "psa"),
                             ("random", "random")):
            rows.append(_row(f"{label} on {name}", evaluate(model, data, split=None)))
    _print_table(rows, f"{args.model} zero-shot, beside PSA, random and XGBoost trained on {args.data}",
                 baseline="none")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--section", action="append", choices=["models", "mtl", "moa", "public", "pretrained"],
                   required=True)
    p.add_argument("--data", type=Path)
    p.add_argument("--split", action="append", default=[],
                   help="stored split (repeatable: each section runs on every split and prints their mean)")
    p.add_argument("--platform", help="platform of the models section (default: the first)")
    p.add_argument("--target"), p.add_argument("--source")
    p.add_argument("--keep", type=float, default=0.1, help="fraction of target labels kept (mtl, moa)")
    p.add_argument("--logs", nargs="*", default=[])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--models", default="tlp,pacm,xgb,mlp",
                   help="the trained models of the models section, comma-separated (PSA and random always); "
                        "KIND:KEY=VALUE+KEY=VALUE is a variant with its own overrides, e.g. pacm:net.program_features=0")
    p.add_argument("--fuse-psa", default="", type=lambda v: [m for m in v.split(",") if m],
                   help="models of the models section also scored fused with PSA (the mean of their "
                        "within-task ranks), e.g. pacm")
    p.add_argument("--model", default="x86-cpu", help="the pre-trained model of the pretrained section")
    p.add_argument("--db", action="append", default=[], metavar="WORK_DIR",
                   help="a MetaSchedule database to score zero-shot (pretrained; repeatable)")
    p.add_argument("--eval-data", action="append", default=[], metavar="DATA.h5",
                   help="a measured dataset to score zero-shot (pretrained; repeatable)")
    p.add_argument("--work", type=Path, help="keep runs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, help="also write all rows here, with the host and the command line")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="training config override for every model trained, e.g. net.d_model=128")
    args = p.parse_args(argv)
    OVERRIDES[:] = args.set
    trained_here = [s for s in args.section if s in ("models", "mtl", "moa")]
    if trained_here and not args.split:
        # without a split these sections train on every record and score the same records: training figures
        # printed as the test part's
        p.error(f"--section {', '.join(trained_here)} trains and scores models on a split: give --split (a split "
                "stored in --data: costlab dataset split)")
    args.split = args.split or [None]
    if args.data and not args.platform:
        from costlab.datasets import open_dataset

        with open_dataset(args.data) as ds:
            args.platform = ds.record_platforms()[0]
    work = args.work or Path(tempfile.mkdtemp(prefix="costlab-ranking-"))
    work.mkdir(parents=True, exist_ok=True)
    out = {}
    try:
        for section in args.section:
            (work / section).mkdir(parents=True, exist_ok=True)
            out[section] = globals()[f"section_{section}"](args, work / section)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:  # the rows, with the host that trained and timed them (records/s is this machine's)
        from costlab.common.host import host_info

        out = dict(host=host_info(), argv=list(argv if argv is not None else sys.argv[1:]), sections=out)
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
