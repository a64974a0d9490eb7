"""Predictors for evaluation: every model ``costmodels.predictors.load`` takes, plus Lightning checkpoints
(``.ckpt``, read with ``weights_only=True``) of a training run in progress."""

from __future__ import annotations

from pathlib import Path

import torch

from costlab.costmodels.nets import build_net
from costlab.costmodels.predictors import NetPredictor, load
from costlab.datasets.errors import InputError


def load_checkpoint(path) -> NetPredictor:
    from costlab.train.module import net_state_from_checkpoint

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        hp = ckpt["hyper_parameters"]
    except Exception as exc:  # a damaged or foreign file: torch reports it in many ways
        raise InputError(path, f"not a costlab training checkpoint ({type(exc).__name__}: "
                               f"{str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''})") from None
    net = build_net(hp["kind"], hp["net_config"])
    net.load_state_dict(net_state_from_checkpoint(ckpt))
    return NetPredictor(net, hp["kind"], hp["featurizer"], hp["platforms"])


def load_predictor(model, seed: int = 0):
    path = Path(str(model))
    if path.suffix == ".ckpt" and path.is_file():
        return load_checkpoint(path)
    return load(str(model), seed)
