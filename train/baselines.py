"""Baselines trained and evaluated on the same splits as costlab's nets: MetaSchedule's own XGBoost model
and its SegmentSum MLP (``tvm.s_tir.meta_schedule.cost_model``), both on TVM's per-store features.

The per-store features are the ``stmt`` output of the PaCM featurizer (``PerStoreFeature`` on the replayed,
lowered program), so all models see the same programs. Training goes through MetaSchedule's own code
(``XGBModel._train`` with its pack-sum objective and early stopping; ``SegmentSumMLPTrainer.train_full``),
fed with the dataset's records grouped by task instead of a tuning run's measurements. Saved without
pickle: the booster as XGBoost JSON, the MLP as safetensors, beside ``config.json``.

One concept at two layers: this module is the baselines' training side; ``costmodels/baselines.py``
(``costlab.costmodels.baselines``) builds the same MetaSchedule models and scores with a stored one at inference.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from costlab.common import jsontext
from costlab.common.errors import UsageError
from costlab.costmodels import kinds
from costlab.costmodels.artifact import save_artifact
from costlab.costmodels.baselines import FEATURE, booster_tensors, mlp_trainer, xgb_model
from costlab.datasets import open_dataset
from costlab.featurizers.cache import features_of
from costlab.train.run_dir import run_dir


def _training_data(cfg: dict):
    from costlab.train.data import CostDataModule, DataConfig

    dm = CostDataModule(DataConfig(data=str(cfg["data"]), featurizer=kinds.create(cfg["model"]).featurizer,
                                   platforms=list(cfg["platforms"]),
                                   split=cfg["split"], seed=int(cfg["seed"]), val_fraction=0.0))
    dm.setup()
    rows = dm.train_rows
    with open_dataset(cfg["data"]) as ds:
        feats = features_of(ds, dm.featurizer, dm.base, rows)
    valid = np.asarray(feats.get("valid", np.ones(len(rows), bool)), bool)
    xs = [np.asarray(x, np.float32) for x, ok in zip(feats[FEATURE], valid) if ok and len(x)]
    keep = np.array([ok and len(x) > 0 for x, ok in zip(feats[FEATURE], valid)], bool)
    task = dm.labels.task[rows][keep]
    lat = dm.labels.latency[rows, 0][keep]
    cost = np.where(np.isfinite(lat), lat, 1e10).astype(np.float32)
    return dm, xs, task, cost


def train_baseline(cfg: dict) -> dict:
    import time

    kind = cfg["model"]
    out = run_dir(cfg["out"]) / "model"
    out.mkdir(parents=True, exist_ok=True)
    random.seed(int(cfg["seed"]))
    np.random.seed(int(cfg["seed"]))
    torch.manual_seed(int(cfg["seed"]))
    dm, xs, task, cost = _training_data(cfg)
    t0 = time.perf_counter()
    if kind == "xgb":
        model = xgb_model()
        best = np.zeros(task.max() + 1 if len(task) else 0, np.float32) + np.inf
        np.minimum.at(best, task, cost)
        model._train(xs, best[task] / cost)
        tensors = booster_tensors(model.booster)
    elif kind == "mlp":
        n_tasks = len(np.unique(task))
        if n_tasks < 2:
            raise UsageError("the SegmentSum MLP baseline holds out whole tasks to pick its epoch: it needs "
                             f"at least 2 training tasks, found {n_tasks}")
        # MetaSchedule's trainer validates on floor(20% of tasks): keep at least one task for it
        trainer = mlp_trainer(int(cfg["trainer"].get("max_epochs", 50)), max(0.2, 1.0 / n_tasks))
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import FeatureGroup

        for t in np.unique(task):
            idx = np.flatnonzero(task == t)
            trainer.state.data[str(t)] = FeatureGroup(str(t), [xs[i] for i in idx], cost[idx])
        with steplr_accepting_verbose():
            trainer.train_full()
        tensors = trainer.state.model.state_dict()
    else:
        raise ValueError(f"unknown baseline {kind!r}")
    summary = dict(model=kind, platforms=dm.config.platforms, train_records=len(xs),
                   wall_seconds=time.perf_counter() - t0,
                   train_records_per_s=len(xs) / max(time.perf_counter() - t0, 1e-9))
    save_artifact(out, tensors, dict(kind=kind, net={}, featurizer=dm.featurizer.to_json(),
                                     platforms=dm.config.platforms, training=summary, split=cfg["split"],
                                     split_digest=dm.split and dm.split.digest, dataset=str(cfg["data"]),
                                     dialects=dm.dialects, targets=dm.targets))
    (Path(cfg["out"]) / "summary.json").write_text(jsontext.dumps(summary, indent=2))
    return summary


class _StepLR(torch.optim.lr_scheduler.StepLR):
    def __init__(self, *args, verbose=None, **kwargs):
        super().__init__(*args, **kwargs)


class steplr_accepting_verbose:
    """MetaSchedule's SegmentSum MLP trainer passes ``verbose=`` to ``StepLR``, an argument this torch no
    longer takes; for the duration of its training, StepLR accepts and ignores it. A context manager:
    ``with steplr_accepting_verbose(): trainer.train_full()`` (a trainer from ``costmodels.baselines.mlp_trainer``)."""

    def __enter__(self):
        self._orig = torch.optim.lr_scheduler.StepLR
        torch.optim.lr_scheduler.StepLR = _StepLR

    def __exit__(self, *exc):
        torch.optim.lr_scheduler.StepLR = self._orig
