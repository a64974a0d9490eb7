"""``costlab train``, ``costlab finetune`` and ``costlab evaluate``."""

from __future__ import annotations

import sys
from pathlib import Path

from costlab.commands.options import directory, fraction, int_in, positive_int
from costlab.common import jsontext
from costlab.common.errors import UsageError
from costlab.costmodels import kinds
from costlab.costmodels.recipes import DEFAULT, FIT_LISTS, RECIPES, TRAINER, recipe
from costlab.datasets import open_dataset
from costlab.train.config import load_config
from costlab.train.report import write_report
from costlab.train.run_dir import check_fresh_start, old_checkpoints


def _common(q, set_help: str = "override any config option, e.g. trainer.max_epochs=5 or net.d_model=128 "
                                "(repeatable)") -> None:
    q.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    q.add_argument("--epochs", type=positive_int("--epochs"), metavar="N",
                   help="train for N passes over the training records (N >= 1; default 50, or the config's "
                   "trainer.max_epochs); the same as --set trainer.max_epochs=N")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(sub) -> None:
    titles = lambda names: [kinds.create(k).title for k in names]  # noqa: E731
    q = sub.add_parser("train", help=f"train a cost model ({', '.join(titles(kinds.learned()))}, or the "
                       f"{' / '.join(titles(kinds.baselines()))} baselines)",
                       description="Train a cost model on a dataset with PyTorch Lightning, from a YAML config "
                       "and/or options. The run directory gets checkpoints, CSV/TensorBoard logs, the best model "
                       "(config.json + model.safetensors) and summary.json. Re-run with --resume to continue.")
    q.add_argument("--config", type=Path, metavar="CONFIG.yaml", help="training config (see train/config.py)")
    q.add_argument("--model", choices=kinds.trainable(), help="model kind (default tlp)")
    q.add_argument("--data", type=Path, metavar="DATA.h5")
    q.add_argument("--split", help="a split stored in the dataset (costlab dataset split)")
    q.add_argument("--platform", action="append", dest="platforms", metavar="ID",
                   help="label platform; repeat for mtl (the first is the target)")
    q.add_argument("--out", type=directory("--out"), metavar="RUN_DIR")
    q.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoints/last.ckpt")
    q.add_argument("--overwrite", action="store_true",
                   help="train afresh into a RUN_DIR that holds a model already, replacing it")
    _common(q)
    q.set_defaults(func=_train)

    q = sub.add_parser("finetune", help="fine-tune a trained model to a platform (a new machine's few records)",
                       description="Start from a trained model (run dir, model dir or archive, .ckpt, or a shipped "
                       "model's name as `costlab models` lists them) and adapt it to a platform's records by a "
                       "recipe that is safe with few of them (default 'safe': the scoring layers only, a low learning "
                       "rate with warm-up, early stopping on tasks it never trains on, and an update kept only if it "
                       "ranks them better and lowers none of pairwise accuracy, top-1 and top-5 there; "
                       "docs/training.md compares the recipes). --recipe lightning trains for --epochs with the "
                       "Lightning trainer as `costlab train` does, with --momentum by the Siamese momentum rule (MoA).")
    q.add_argument("--from", dest="source", required=True, type=Path, metavar="CKPT_OR_MODEL")
    q.add_argument("--recipe", choices=list(RECIPES),
                   help=f"default: {DEFAULT}; {TRAINER} when --momentum, --epochs or --set is given")
    q.add_argument("--seed", type=int_in("--seed", 0, 2**31 - 2), default=0,
                   help="seed of the recipe's validation cut and batches")
    q.add_argument("--data", required=True, type=Path, metavar="DATA.h5")
    q.add_argument("--platform", required=True, metavar="ID")
    q.add_argument("--split", help="a split stored in the dataset")
    q.add_argument("--momentum", nargs="?", const=0.99, type=fraction("--momentum"), metavar="M",
                   help="momentum transfer with EMA factor M (default 0.99)")
    q.add_argument("--every", type=positive_int("--every"),
                   help="epochs per momentum round (default 2; with --momentum)")
    q.add_argument("--out", type=directory("--out"), required=True, metavar="RUN_DIR")
    q.add_argument("--overwrite", action="store_true", help="replace the model an existing RUN_DIR holds")
    _common(q, "override a training option of --recipe lightning, e.g. trainer.max_epochs=5 or "
               "data_options.list_size=16 (repeatable; the net is the pretrained model's: net.* options are refused)")
    q.set_defaults(func=_finetune)

    q = sub.add_parser("evaluate", help="evaluate a model or baseline on a dataset split",
                       description="TenSet's weighted top-k per held-out network (k = 1, 5), per-task top-k, "
                       "pairwise accuracy and NDCG; a markdown report with plots.")
    q.add_argument("--model", required=True, metavar="CKPT_OR_ARTIFACT",
                   help="a run dir, model dir or archive, or .ckpt; a shipped model's name (costlab models); "
                   "or " + " or ".join(f"'{k}'" for k in kinds.untrained()))
    q.add_argument("--data", required=True, type=Path, metavar="DATA.h5")
    q.add_argument("--split", default="auto", help="split name; 'auto' = the model's training split; 'none' = all")
    q.add_argument("--part", default="test", choices=["test", "train", "all"])
    q.add_argument("--platform", metavar="ID")
    q.add_argument("--head", metavar="PLATFORM", help="the head of a model of several heads that scores --platform's "
                   "records (default: the platform's own; a platform none of its heads is for needs one)")
    q.add_argument("--report", type=directory("--report"), metavar="DIR", help="write report.md, metrics.json and plots here")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=_evaluate)


def _run(cfg, args) -> int:
    from costlab.train.fit import train  # lazy: pulls torch and Lightning; the parser must not

    summary = train(cfg, progress=not args.no_progress, resume=getattr(args, "resume", False),
                    overwrite=args.overwrite)
    print(jsontext.dumps(summary, indent=2), file=sys.stderr)
    return 0


def _overrides(args) -> list:
    return list(args.overrides) + ([f"trainer.max_epochs={args.epochs}"] if args.epochs is not None else [])


def _train(args) -> int:
    cfg = load_config(args.config, _overrides(args), model=args.model, data=args.data and str(args.data),
                      split=args.split, platforms=args.platforms, out=args.out and str(args.out))
    out = Path(cfg["out"])
    if args.resume and args.overwrite:
        raise UsageError("--resume continues the run in --out, --overwrite trains afresh into it: give one of them")
    if not args.resume:
        _refuse_existing_model(out, args.overwrite, "or --resume to continue its training, ")
    elif not (out / "checkpoints" / "last.ckpt").exists():
        # nothing to resume from: training afresh would replace the model without --overwrite
        _refuse_existing_model(out, False, "", why="and no checkpoints/last.ckpt to resume from")
    return _run(cfg, args)


def _refuse_existing_model(out: Path, overwrite: bool, other: str = "", why: str = "") -> None:
    """A training or fine-tuning run never replaces a model it was not told to: ``--out`` holding one (a run
    dir's ``model/``, or a model dir or archive itself) is refused unless ``--overwrite`` (``other``: what else
    the user may do, and ``why``: what else is wrong, named in the message)."""
    from costlab.costmodels.artifact import is_artifact  # lazy: pulls torch; the parser must not

    if is_artifact(out):  # a run would be made inside the model, which --overwrite would leave as it is
        raise UsageError(f"--out {out}: is a model, not a run directory; give a run directory (a run writes its "
                         f"model to RUN_DIR/model{', such as ' + str(out.parent) if out.name == 'model' else ''})")
    held = out / "model"
    if is_artifact(held) and not overwrite:
        raise UsageError(f"--out {out}: holds a model already ({held}){' ' + why if why else ''}; give another "
                         f"--out, {other}or --overwrite to replace it")


def _finetune(args) -> int:
    from costlab.train.fit import source_meta  # lazy: pulls torch and Lightning; the parser must not

    _refuse_existing_model(Path(args.out), args.overwrite)
    if args.every is not None and args.momentum is None:
        raise UsageError("--every is the epochs per momentum round: it takes --momentum")
    trainer_options = args.momentum is not None or args.epochs is not None or args.overrides
    r = recipe(args.recipe or (TRAINER if trainer_options else DEFAULT), runner=None)
    if r.runner == FIT_LISTS:
        if trainer_options:
            raise UsageError(f"--momentum, --epochs and --set belong to --recipe {TRAINER}")
        from costlab.train.finetune import finetune  # lazy: pulls torch; the parser must not

        # an earlier Lightning run's checkpoints beside the adapted model: a later --resume would replace it
        check_fresh_start(Path(args.out), args.overwrite, resumable=False, resume=False)
        summary = finetune(args.source, args.data, args.platform, args.out, r.name, split=args.split, seed=args.seed)
        for old in old_checkpoints(Path(args.out)):  # --overwrite (checked above)
            old.unlink(missing_ok=True)
        print(jsontext.dumps(summary, indent=2), file=sys.stderr)
        return 0

    # a model of one head per platform is fine-tuned to one platform as the net it has (mtl: a tlp net)
    meta = source_meta(args.source)
    kind, heads = meta["kind"], meta["platforms"]
    if len(heads) > 1 and args.platform not in heads:
        raise UsageError(f"{args.source}: a model of several heads ({', '.join(heads)}) has none for "
                         f"{args.platform!r}; fine-tune a single-platform model, or give one of its platforms")
    if len(heads) > 1 and heads[0] != args.platform:  # it trains and scores with the first head
        raise UsageError(f"{args.source}: --recipe {TRAINER} fine-tunes a model of several heads through its first "
                         f"({heads[0]!r}), not {args.platform!r}'s own; fine-tune it with --recipe "
                         f"{kinds.spoken([n for n, x in RECIPES.items() if x.runner == FIT_LISTS])} (without "
                         "--momentum, --epochs or --set), which start from that platform's head")
    model = kinds.find(kind)
    # --momentum and --every as named options: --set momentum=M / momentum_every=N apply as in `costlab train`
    # (and are checked there), never replaced by the defaults of the options not given
    cfg = load_config(None, _overrides(args), model=model.net if model and model.multi_head else kind,
                      data=str(args.data), split=args.split, platforms=[args.platform], out=str(args.out),
                      seed=args.seed, momentum=args.momentum, momentum_every=args.every or 2)
    cfg["init_from"] = str(args.source)  # --from is the model fine-tuned, whatever --set says
    return _run(cfg, args)


def _model_config(model) -> dict:
    """The config a model records (its training split, platforms and targets), read without loading its
    weights; {} for a kind that needs no weights (psa, random) and anything whose config does not read (evaluate
    then says why)."""
    from costlab.costmodels.predictors import resolve  # lazy: pulls torch; the parser must not

    if str(model) in kinds.untrained():
        return {}
    try:
        path = resolve(model)
        if path.suffix == ".ckpt":
            from costlab.train.predict import load_checkpoint  # lazy: pulls torch; the parser must not

            return dict(load_checkpoint(path).config or {})
        from costlab.costmodels.artifact import read_config  # lazy: pulls torch; the parser must not

        return read_config(path, trust_unhashed=True)
    except Exception:  # noqa: BLE001  evaluate loads it again and reports what is wrong in one line
        return {}


def _train_part_split(data, split, config: dict) -> None:
    """``--part train`` scores the records a split trains on: a dataset without that split has none to
    pick, and is refused (scoring every record would pass test records off as training ones)."""
    with open_dataset(data) as ds:
        names = ds.split_names()
    chosen = config.get("split") if split == "auto" else split
    if chosen is None or (split == "auto" and chosen not in names):
        why = ("--split none scores all records" if split is None else
               f"{data} has no split {chosen!r} (the model's training split)" if chosen else
               "the model records no training split")
        raise UsageError(f"--part train needs a split to take the training part of, and {why}; give --split NAME "
                         f"(the dataset's: {', '.join(names) or 'none; costlab dataset split makes one'}) or --part all")


def _platform_note(config: dict, data, platform: str) -> str | None:
    """A note when the evaluated platform is another CPU or GPU (``mcpu`` / ``arch``) of the same target kind
    than every platform the model trained on: its scores are a transfer to another machine."""
    targets = {p: t for p, t in (config.get("targets") or {}).items() if isinstance(t, dict)}
    if not targets or platform in targets:
        return None
    with open_dataset(data) as ds:
        here = ds.platforms[platform].target if platform in ds.platforms else {}
    kind = here.get("kind")
    machine = lambda t: t.get("mcpu") or t.get("arch")  # noqa: E731
    same_kind = {p: machine(t) for p, t in targets.items() if t.get("kind") == kind}
    if not kind or not same_kind or machine(here) in same_kind.values():
        return None  # another target kind is warned about by evaluate; the same machine needs no note
    trained = ", ".join(f"{p} ({m or 'generic'})" for p, m in sorted(same_kind.items()))
    return (f"costlab: note: the model was trained on {trained}; platform {platform!r} of {data} is another machine "
            f"({machine(here) or 'generic'}): its scores rank programs for a machine the model has not seen")


def _evaluate(args) -> int:
    from costlab.train.evaluate import evaluate  # lazy: pulls torch; the parser must not

    split = None if args.split == "none" else args.split
    config = _model_config(args.model)
    if args.part == "train":
        _train_part_split(args.data, split, config)
    result = evaluate(args.model, args.data, split=split, part=args.part, platform=args.platform, head=args.head,
                      baselines=bool(args.report))
    note = _platform_note(config, args.data, result["platform"])
    if note:
        print(note, file=sys.stderr)
    if args.report:
        print(f"report: {write_report(result, args.report)}", file=sys.stderr)
    plain = {k: v for k, v in result.items() if not k.startswith("_")}
    if args.json:
        print(jsontext.dumps(plain))
    else:
        print(f"{plain['model']} on {plain['platform']} ({plain['records']} records, split {plain['split']}, "
              f"{plain['part']} part): top1 {plain['top1']:.4f}  top5 {plain['top5']:.4f} (mean over "
              f"{plain['topk_over']})  pairwise {plain['pairwise']:.4f}  ndcg {plain['ndcg']:.4f}")
        print(f"  best quarter: pairwise {plain['pairwise_q25']:.4f}  top1 {plain['top1_q25']:.4f};  best tenth: "
              f"pairwise {plain['pairwise_q10']:.4f}  top1 {plain['top1_q10']:.4f};  model's picks: top-1 "
              f"{plain['pick1']:.4f}  top-8 {plain['pick8']:.4f}  top-32 {plain['pick32']:.4f}")
        if plain.get("hardware_spec"):
            print(f"  features computed with the hardware spec of {plain['hardware_spec']}")
        for n, v in sorted(plain["networks"].items()):
            print(f"  {n}: top1 {v['top1']:.4f}  top5 {v['top5']:.4f}")
    return 0
