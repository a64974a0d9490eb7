"""Predictors for evaluation: every model ``costmodels.predictors.load`` takes, plus Lightning checkpoints
(``.ckpt``, read with ``weights_only=True``) of a training run in progress."""

from __future__ import annotations

from pathlib import Path

import torch

from costlab.common.errors import InputError
from costlab.costmodels.artifact import check_finite, load_state
from costlab.costmodels.nets import build_net, check_featurizer_fits
from costlab.costmodels.predictors import NetPredictor, load
from costlab.featurizers import from_json, hardware_vector


def read_checkpoint(path) -> dict:
    """What a costlab training checkpoint holds: ``kind``, ``net_config``, ``featurizer``, ``platforms`` and
    the net's weights (``state``), every check done: a missing, damaged or foreign file, a checkpoint
    without costlab's hyper-parameters, and weights holding NaN or inf are each an InputError naming it."""
    from costlab.train.module import net_state_from_checkpoint  # lazy: pulls Lightning; evaluating an artifact must not

    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such checkpoint")
    if path.is_dir():
        raise InputError(path, "is a directory, not a training checkpoint (.ckpt)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a damaged or foreign file: torch reports it in many ways, all unhelpful here
        reason = "truncated or damaged" if isinstance(exc, (RuntimeError, EOFError)) else "not a torch checkpoint"
        raise InputError(path, f"not a readable training checkpoint ({reason}: {type(exc).__name__})") from None
    hp = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    keys = ("kind", "net_config", "featurizer", "platforms")
    if not isinstance(hp, dict) or not all(k in hp for k in keys) or not isinstance(ckpt.get("state_dict"), dict):
        raise InputError(path, "not a costlab training checkpoint (no costlab hyper-parameters or weights)")
    try:  # features of another costlab version, or a hand-edited featurizer: refused before any net is built
        from_json(hp["featurizer"])
    except ValueError as exc:
        raise InputError(path, str(exc)) from None
    state = check_finite(net_state_from_checkpoint(ckpt), path, "checkpoint")
    epoch = ckpt.get("epoch")
    # epochs: how many the run had finished when it was saved (Lightning's ``epoch`` is the last one's index);
    # split_digest: the split its training part came from (None: a checkpoint of an older costlab); parts_digest:
    # the records its training and validation parts held (CostDataModule.parts_digest)
    # counted: the checkpoint holds the training counts of its epochs (records, seconds); an older costlab's has none
    callbacks = ckpt.get("callbacks")
    counted = isinstance(callbacks, dict) and "_Throughput" in callbacks
    return dict(path=path, state=state, epochs=epoch + 1 if isinstance(epoch, int) else None,
                split_digest=hp.get("split_digest"), parts_digest=hp.get("parts_digest"), counted=counted,
                **{k: hp[k] for k in keys})


def checkpoint_net(ckpt: dict) -> torch.nn.Module:
    """The net a ``read_checkpoint`` result describes, with its weights; a net config that does not build or
    does not fit the weights is an InputError naming the checkpoint."""
    try:
        net = build_net(ckpt["kind"], ckpt["net_config"])
    except (TypeError, ValueError, AssertionError) as exc:  # torch asserts on some sizes
        raise InputError(ckpt["path"], f"net config is not valid for a {ckpt['kind']} net ({exc})") from None
    unfit = check_featurizer_fits(ckpt["kind"], ckpt["net_config"], ckpt["featurizer"])
    if unfit:
        raise InputError(ckpt["path"], f"its featurizer does not fit its net: {unfit}")
    return load_state(net, ckpt["state"], ckpt["path"])


def load_checkpoint(path) -> NetPredictor:
    """The checkpoint's net as a predictor, with the model config an artifact of it records (kind, net,
    featurizer, platforms, the hardware input's description): a model saved from it (``costlab finetune
    --from X.ckpt``) loads like one ``costlab train`` wrote."""
    ckpt = read_checkpoint(path)
    net = checkpoint_net(ckpt)
    config = dict(kind=ckpt["kind"], net=ckpt["net_config"], featurizer=ckpt["featurizer"],
                  platforms=ckpt["platforms"])
    if getattr(getattr(net, "config", None), "hardware_dim", 0):
        config["hardware"] = hardware_vector.describe()
    config.update(_run_training(Path(path)))
    return NetPredictor(net, ckpt["kind"], ckpt["featurizer"], ckpt["platforms"], config=config)


def _run_training(path: Path) -> dict:
    """What a model of the checkpoint's run would record of its training (``split``, ``split_digest``,
    ``dataset``, and the splits of the training before it as ``lineage``), so that ``evaluate --split auto`` scores
    the test part of the run's split and warns of records it trained on, as for the run's model; {} for a
    checkpoint outside a run directory."""
    from costlab.train.evaluate import checkpoint_lineage  # lazy: evaluate imports this module

    lineage = checkpoint_lineage(path)
    if not lineage:
        return {}
    own = lineage[-1]
    out = dict(split=own.get("split"), split_digest=own.get("split_digest"), dataset=own.get("dataset"),
               training={"checkpoint": str(path)})
    if len(lineage) > 1:
        out["lineage"] = lineage[:-1]
    return out


def load_predictor(model, seed: int = 0):
    path = Path(str(model))
    if path.suffix == ".ckpt":
        return load_checkpoint(path)
    return load(str(model), seed)
