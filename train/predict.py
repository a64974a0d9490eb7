"""Predictors: anything ``evaluate`` can score records with, loaded from a path or a name.

- a pretrained model directory (``config.json`` + ``model.safetensors``: TLP, PaCM, MTL nets, and the
  XGBoost / SegmentSum-MLP baselines) — read as JSON and tensors, never unpickled;
- a Lightning checkpoint (``.ckpt``, loaded with ``weights_only=True``);
- ``random`` and ``psa``: the two baselines that need no training.

Every predictor has ``featurizer`` (or None), ``platforms`` and ``predict(features) -> (N, heads)``, higher
= predicted faster.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from costlab.datasets.errors import UsageError
from costlab.costmodels.pretrained import load_pretrained, read_config
from costlab.featurizers import create, from_json
from costlab.train.data import to_tensors
from costlab.train.module import net_state_from_checkpoint
from costlab.train.nets import build_net, net_inputs


class NetPredictor:
    def __init__(self, net: torch.nn.Module, kind: str, featurizer: dict, platforms: list, meta: dict | None = None):
        self.net, self.kind = net.eval(), kind
        self.featurizer = from_json(featurizer)
        self.platforms = list(platforms)
        self.meta = meta or {}

    @torch.no_grad()
    def predict(self, feats: dict, batch_size: int = 1024) -> np.ndarray:
        n = len(next(iter(feats.values())))
        outs = []
        for a in range(0, n, batch_size):
            part = {k: v[a : a + batch_size] for k, v in feats.items()}
            out = self.net(*net_inputs(self.kind, to_tensors(part)))
            outs.append((out[:, None] if out.dim() == 1 else out).float().numpy())
        return np.concatenate(outs) if outs else np.zeros((0, len(self.platforms)))


class RandomPredictor:
    featurizer = None
    platforms: list = []
    kind = "random"

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def predict(self, n: int) -> np.ndarray:
        return self.rng.random((n, 1))


class PSAPredictor:
    """PSA alone: the static analyzer's score (1 / estimated time)."""

    kind = "psa"
    platforms: list = []

    def __init__(self):
        self.featurizer = create("psa")

    def predict(self, feats: dict) -> np.ndarray:
        score = np.asarray(feats["score"], np.float64)
        return np.where(np.isfinite(score), score, -1.0)[:, None]


def load_checkpoint(path) -> NetPredictor:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    hp = ckpt["hyper_parameters"]
    net = build_net(hp["kind"], hp["net_config"])
    net.load_state_dict(net_state_from_checkpoint(ckpt))
    return NetPredictor(net, hp["kind"], hp["featurizer"], hp["platforms"])


def load_predictor(model, seed: int = 0):
    if model == "random":
        return RandomPredictor(seed)
    if model == "psa":
        return PSAPredictor()
    path = Path(model)
    if not path.exists():
        raise UsageError(f"{model}: no such model (give a run's model/ directory, a .ckpt, 'psa' or 'random')")
    if path.is_dir() and (path / "model" / "config.json").exists():
        path = path / "model"  # a run directory
    if path.is_dir():
        config = read_config(path)
        if config["kind"] in ("xgb", "mlp"):
            from costlab.train.baselines import load_baseline

            return load_baseline(path, config)
        net, config = load_pretrained(path, build_net)
        return NetPredictor(net, config["kind"], config["featurizer"], config["platforms"], config)
    return load_checkpoint(path)
