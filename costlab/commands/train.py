"""``costlab train``, ``costlab finetune`` and ``costlab evaluate``."""

from __future__ import annotations

import sys
from pathlib import Path

from costlab.commands.options import directory, fraction, positive_int
from costlab.common.errors import UsageError
from costlab.costmodels import kinds
from costlab.costmodels.recipe import RECIPES


def _common(q) -> None:
    q.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config option, e.g. trainer.max_epochs=5 or net.d_model=128 (repeatable)")
    q.add_argument("--epochs", type=positive_int("--epochs"), metavar="N",
                   help="train for N passes over the training records (N >= 1; default 50, or the config's "
                   "trainer.max_epochs); the same as --set trainer.max_epochs=N")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(sub) -> None:
    q = sub.add_parser("train", help="train a cost model (TLP, PaCM, MTL, or the XGBoost / MLP baselines)",
                       description="Train a cost model on a dataset with PyTorch Lightning, from a YAML config "
                       "and/or options. The run directory gets checkpoints, CSV/TensorBoard logs, the best model "
                       "(config.json + model.safetensors) and summary.json. Re-run with --resume to continue.")
    q.add_argument("--config", type=Path, metavar="CONFIG.yaml", help="training config (see train/config.py)")
    q.add_argument("--model", choices=kinds.names(), help="model kind (default tlp)")
    q.add_argument("--data", type=Path, metavar="DATA.h5")
    q.add_argument("--split", help="a split stored in the dataset (costlab dataset split)")
    q.add_argument("--platform", action="append", dest="platforms", metavar="ID",
                   help="label platform; repeat for mtl (the first is the target)")
    q.add_argument("--out", type=directory("--out"), metavar="RUN_DIR")
    q.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoints/last.ckpt")
    _common(q)
    q.set_defaults(func=_train)

    q = sub.add_parser("finetune", help="fine-tune a trained model to a platform (a new machine's few records)",
                       description="Start from a trained model (run dir, model dir or archive, .ckpt, or a shipped "
                       "model's name as `costlab models` lists them) and adapt it to a platform's records by a "
                       "recipe that is safe with few of them (default 'safe': low learning rate with warm-up, a "
                       "penalty toward the pretrained weights, early stopping on a part of each task's programs it "
                       "never trains on, the pretrained weights kept unless the update ranks that part better; "
                       "docs/training.md compares the recipes). --recipe lightning trains for --epochs with the "
                       "Lightning trainer as `costlab train` does, with --momentum by the Siamese momentum rule (MoA).")
    q.add_argument("--from", dest="source", required=True, type=Path, metavar="CKPT_OR_MODEL")
    q.add_argument("--recipe", choices=[*RECIPES, "lightning"],
                   help="default: safe; lightning when --momentum, --epochs or --set is given")
    q.add_argument("--seed", type=int, default=0, help="seed of the recipe's validation cut and batches")
    q.add_argument("--data", required=True, type=Path, metavar="DATA.h5")
    q.add_argument("--platform", required=True, metavar="ID")
    q.add_argument("--split", help="a split stored in the dataset")
    q.add_argument("--momentum", nargs="?", const=0.99, type=fraction("--momentum"), metavar="M",
                   help="momentum transfer with EMA factor M (default 0.99)")
    q.add_argument("--every", type=positive_int("--every"), default=2, help="epochs per momentum round (default 2)")
    q.add_argument("--out", type=directory("--out"), required=True, metavar="RUN_DIR")
    _common(q)
    q.set_defaults(func=_finetune)

    q = sub.add_parser("evaluate", help="evaluate a model or baseline on a dataset split",
                       description="TenSet's weighted top-k per held-out network (k = 1, 5), per-task top-k, "
                       "pairwise accuracy and NDCG; a markdown report with plots.")
    q.add_argument("--model", required=True, metavar="CKPT_OR_ARTIFACT",
                   help="a run dir, model dir or archive, or .ckpt; a shipped model's name (costlab models); "
                   "or 'psa' or 'random'")
    q.add_argument("--data", required=True, type=Path, metavar="DATA.h5")
    q.add_argument("--split", default="auto", help="split name; 'auto' = the model's training split; 'none' = all")
    q.add_argument("--part", default="test", choices=["test", "train", "all"])
    q.add_argument("--platform", metavar="ID")
    q.add_argument("--report", type=directory("--report"), metavar="DIR", help="write report.md, metrics.json and plots here")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=_evaluate)


def _run(cfg, args) -> int:
    from costlab.train.fit import train

    from costlab.common import jsontext

    summary = train(cfg, progress=not args.no_progress, resume=getattr(args, "resume", False))
    print(jsontext.dumps(summary, indent=2), file=sys.stderr)
    return 0


def _overrides(args) -> list:
    return list(args.overrides) + ([f"trainer.max_epochs={args.epochs}"] if args.epochs is not None else [])


def _train(args) -> int:
    from costlab.train.config import load_config

    cfg = load_config(args.config, _overrides(args), model=args.model, data=args.data and str(args.data),
                      split=args.split, platforms=args.platforms, out=args.out and str(args.out))
    return _run(cfg, args)


def _finetune(args) -> int:
    from costlab.train.config import load_config
    from costlab.train.fit import source_meta

    lightning = args.momentum is not None or args.epochs is not None or args.overrides
    if (args.recipe or ("lightning" if lightning else "safe")) != "lightning":
        if lightning:
            raise UsageError("--momentum, --epochs and --set belong to --recipe lightning")
        from costlab.common import jsontext
        from costlab.train.finetune import finetune

        summary = finetune(args.source, args.data, args.platform, args.out, args.recipe or "safe", split=args.split,
                           seed=args.seed)
        print(jsontext.dumps(summary, indent=2), file=sys.stderr)
        return 0

    kind = source_meta(args.source)["kind"]
    cfg = load_config(None, _overrides(args), model="tlp" if kind == "mtl" else kind, data=str(args.data),
                      split=args.split, platforms=[args.platform], out=str(args.out))
    cfg.update(init_from=str(args.source), momentum=args.momentum, momentum_every=args.every)
    return _run(cfg, args)


def _evaluate(args) -> int:
    from costlab.common import jsontext
    from costlab.train.evaluate import evaluate
    from costlab.train.report import write_report

    split = None if args.split == "none" else args.split
    result = evaluate(args.model, args.data, split=split, part=args.part, platform=args.platform,
                      baselines=bool(args.report))
    if args.report:
        print(f"report: {write_report(result, args.report)}", file=sys.stderr)
    plain = {k: v for k, v in result.items() if not k.startswith("_")}
    if args.json:
        print(jsontext.dumps(plain))
    else:
        print(f"{plain['model']} on {plain['platform']} ({plain['records']} records, split {plain['split']}): "
              f"top1 {plain['top1']:.4f}  top5 {plain['top5']:.4f}  pairwise {plain['pairwise']:.4f}  "
              f"ndcg {plain['ndcg']:.4f}")
        for n, v in sorted(plain["networks"].items()):
            print(f"  {n}: top1 {v['top1']:.4f}  top5 {v['top5']:.4f}")
    return 0
