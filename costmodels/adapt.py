"""Online adaptation of a learned net to the measurements of a tuning run (MoA-Pruner), in plain torch.

A tuning run measures a few dozen programs per round; after each round the net learns from all the run's
records so far, grouped per task into ranking lists (LambdaRank, as in training). Two modes:

- ``finetune``: the net itself trains on the run's records after every round;
- ``momentum``: the Siamese momentum rule (``momentum.MomentumTransfer``): every ``every``-th round the
  online net restarts from the momentum copy, trains on the run's records, and the momentum copy moves
  towards it by EMA (m = 0.99). The pre-trained knowledge decays slowly instead of being overwritten by a
  few dozen records.

Nothing about the features changes online: the featurizer's config (vocabulary, sequence length, any
normalisation) is the pre-trained model's and is never refitted on the run's records, so the pre-trained
net keeps seeing inputs on the scale it learned (Pruner's online update re-normalised features on the
run's data). The loop is a few hundred gradient steps at most, where a Lightning Trainer would cost more
to set up than to run, and a tuning run must not import the training machinery.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from costlab.costmodels.losses import group_lists, lambdarank_loss
from costlab.costmodels.momentum import MomentumTransfer
from costlab.costmodels.nets import net_inputs
from costlab.costmodels.tensors import to_tensors

MODES = ("none", "finetune", "momentum")


def concat_features(parts: list[dict]) -> dict:
    """Feature dicts of several batches as one (arrays concatenated, ragged lists joined)."""
    out = {}
    for key in parts[0]:
        values = [p[key] for p in parts]
        out[key] = sum((list(v) for v in values), []) if isinstance(values[0], list) else np.concatenate(values)
    return out


class OnlineAdapter:
    """Collects a run's measured candidates per task and adapts a ``NetPredictor``'s net to them."""

    def __init__(self, predictor, mode: str = "momentum", momentum: float = 0.99, every: int = 1, steps: int = 30,
                 lr: float = 3e-4, list_size: int = 32, head: int = 0, seed: int = 0):
        if mode not in MODES[1:]:
            raise ValueError(f"adaptation mode must be one of {', '.join(MODES[1:])}, not {mode!r}")
        self.predictor, self.mode, self.head = predictor, mode, head
        self.steps, self.lr, self.list_size = int(steps), float(lr), int(list_size)
        self.rng = np.random.default_rng(seed)
        self.wrapper = MomentumTransfer(predictor.net, momentum, every) if mode == "momentum" else None
        self._feats: dict = {}  # task key -> list of feature dicts
        self._lat: dict = {}  # task key -> list of latency arrays
        self.stats = dict(updates=0, trained=0, records=0, seconds=0.0)

    def add(self, task_key, features: dict, latency) -> None:
        """Measured candidates of one task: their features and mean latencies (``inf`` = failed)."""
        latency = np.asarray(latency, np.float64)
        if not len(latency):
            return
        self._feats.setdefault(task_key, []).append(features)
        self._lat.setdefault(task_key, []).append(latency)
        self.stats["records"] += len(latency)

    def _lists(self):
        """Per task with at least two records, one of which ran: (features, scores = best / latency, 0 failed)."""
        out = []
        for key, parts in self._feats.items():
            lat = np.concatenate(self._lat[key])
            if len(lat) < 2 or not np.isfinite(lat).any():
                continue
            score = np.where(np.isfinite(lat), np.nanmin(np.where(np.isfinite(lat), lat, np.nan)) / lat, 0.0)
            out.append((concat_features(parts), score))
        return out

    def update(self) -> bool:
        """One round's update; returns whether the net trained."""
        self.stats["updates"] += 1
        lists = self._lists()
        if not lists:
            return False
        t0 = time.perf_counter()
        if self.wrapper is None:
            self._train(self.predictor.net, lists)
            trained = True
        else:
            trained = self.wrapper.update(lambda net: self._train(net, lists))
        self.predictor.net.eval()
        self.stats["trained"] += int(trained)
        self.stats["seconds"] += time.perf_counter() - t0
        return trained

    def _train(self, net: torch.nn.Module, lists) -> None:
        device = next(net.parameters()).device
        net.train()
        opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=self.lr)
        kind = self.predictor.kind
        for _ in range(self.steps):
            feats, labels, groups = [], [], []
            for g, (f, score) in enumerate(lists):
                take = self.rng.permutation(len(score))[: self.list_size]
                feats.append({k: ([v[i] for i in take] if isinstance(v, list) else v[take]) for k, v in f.items()})
                labels.append(score[take])
                groups.append(np.full(len(take), g))
            batch = {k: v.to(device) for k, v in to_tensors(concat_features(feats)).items()}
            out = net(*net_inputs(kind, batch))
            pred = out if out.dim() == 1 else out[:, self.head]
            label = torch.as_tensor(np.concatenate(labels), dtype=pred.dtype, device=device)
            group = torch.as_tensor(np.concatenate(groups), device=device)
            p, y, m = group_lists(pred, label, group)
            loss = lambdarank_loss(p, y, m)
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
