"""Baselines trained and evaluated on the same splits as costlab's nets: MetaSchedule's own XGBoost model
and its SegmentSum MLP (``tvm.s_tir.meta_schedule.cost_model``), both on TVM's per-store features.

The per-store features are the ``stmt`` output of the PaCM featurizer (``PerStoreFeature`` on the replayed,
lowered program), so all models see the same programs. Training goes through MetaSchedule's own code
(``XGBModel._train`` with its pack-sum objective and early stopping; ``SegmentSumMLPTrainer.train_full``),
fed with the dataset's records grouped by task instead of a tuning run's measurements. Saved without
pickle: the booster as XGBoost JSON, the MLP as safetensors, beside ``config.json``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch

from costlab.costmodels.pretrained import CONFIG, FORMAT, FORMAT_VERSION
from costlab.datasets import UsageError, open_dataset
from costlab.featurizers import from_json
from costlab.featurizers.cache import features_of

FEATURE = "stmt"


def _training_data(cfg: dict):
    from costlab.train.data import CostDataModule, DataConfig

    dm = CostDataModule(DataConfig(data=str(cfg["data"]), featurizer="pacm", platforms=list(cfg["platforms"]),
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


def _save_config(out: Path, kind: str, featurizer: dict, platforms: list, **meta) -> None:
    config = dict(format=FORMAT, format_version=FORMAT_VERSION, kind=kind, net={}, featurizer=featurizer,
                  platforms=list(platforms), **meta)
    (out / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True, default=str))


def train_baseline(cfg: dict) -> dict:
    import time

    kind = cfg["model"]
    out = Path(cfg["out"]) / "model"
    out.mkdir(parents=True, exist_ok=True)
    random.seed(int(cfg["seed"]))
    np.random.seed(int(cfg["seed"]))
    torch.manual_seed(int(cfg["seed"]))
    dm, xs, task, cost = _training_data(cfg)
    t0 = time.perf_counter()
    if kind == "xgb":
        model = _xgb()
        best = np.zeros(task.max() + 1 if len(task) else 0, np.float32) + np.inf
        np.minimum.at(best, task, cost)
        model._train(xs, best[task] / cost)
        model.booster.save_model(str(out / "xgboost.json"))
    elif kind == "mlp":
        n_tasks = len(np.unique(task))
        if n_tasks < 2:
            raise UsageError("the SegmentSum MLP baseline holds out whole tasks to pick its epoch: it needs "
                             f"at least 2 training tasks, found {n_tasks}")
        # MetaSchedule's trainer validates on floor(20% of tasks): keep at least one task for it
        trainer = _mlp_trainer(int(cfg["trainer"].get("max_epochs", 50)), max(0.2, 1.0 / n_tasks))
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import FeatureGroup

        for t in np.unique(task):
            idx = np.flatnonzero(task == t)
            trainer.state.data[str(t)] = FeatureGroup(str(t), [xs[i] for i in idx], cost[idx])
        with _steplr_accepting_verbose():
            trainer.train_full()
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in trainer.state.model.state_dict().items()},
                  str(out / "model.safetensors"))
    else:
        raise ValueError(f"unknown baseline {kind!r}")
    summary = dict(model=kind, platforms=dm.config.platforms, train_records=len(xs),
                   wall_seconds=time.perf_counter() - t0,
                   train_records_per_s=len(xs) / max(time.perf_counter() - t0, 1e-9))
    _save_config(out, kind, dm.featurizer.to_json(), dm.config.platforms, training=summary, split=cfg["split"],
                 split_digest=dm.split and dm.split.digest, dataset=str(cfg["data"]))
    (Path(cfg["out"]) / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


class _StepLR(torch.optim.lr_scheduler.StepLR):
    def __init__(self, *args, verbose=None, **kwargs):
        super().__init__(*args, **kwargs)


class _steplr_accepting_verbose:
    """MetaSchedule's SegmentSum MLP trainer passes ``verbose=`` to ``StepLR``, an argument this torch no
    longer takes; for the duration of its training, StepLR accepts and ignores it."""

    def __enter__(self):
        self._orig = torch.optim.lr_scheduler.StepLR
        torch.optim.lr_scheduler.StepLR = _StepLR

    def __exit__(self, *exc):
        torch.optim.lr_scheduler.StepLR = self._orig


def _xgb():
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    return XGBModel(extractor="per-store-feature", num_warmup_samples=0, verbose_eval=0, num_tuning_cores=2,
                    adaptive_training=False)


def _mlp_trainer(epochs: int, test_split: float = 0.2):
    from tvm.s_tir.meta_schedule.cost_model.mlp_model import (SegmentSumMLPConfig, SegmentSumMLPTrainer, State,
                                                               TrainerConfig)
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    from costlab.featurizers.pacm import STMT_FEATURES

    state = State(SegmentSumMLPConfig(input_dim=STMT_FEATURES), PerStoreFeature(extract_workload=False))
    return SegmentSumMLPTrainer(TrainerConfig(num_epoch_full=max(epochs, 10), test_split=test_split), state)


class BaselinePredictor:
    def __init__(self, kind: str, featurizer: dict, platforms: list, predict_fn, meta: dict):
        self.kind, self.platforms, self.meta = kind, list(platforms), meta
        self.featurizer = from_json(featurizer)
        self._predict = predict_fn

    def predict(self, feats: dict) -> np.ndarray:
        stmts = feats[FEATURE]
        valid = np.asarray(feats.get("valid", np.ones(len(stmts), bool)), bool)
        ok = np.flatnonzero(valid & np.array([len(x) > 0 for x in stmts], bool))
        out = np.full(len(stmts), -1e9)
        if ok.size:
            out[ok] = self._predict([np.asarray(stmts[i], np.float32) for i in ok])
        return out[:, None]


def load_baseline(path: Path, config: dict) -> BaselinePredictor:
    kind = config["kind"]
    if kind == "xgb":
        import xgboost as xgb

        model = _xgb()
        model.booster = xgb.Booster()
        model.booster.load_model(str(path / "xgboost.json"))
        fn = model._predict
    else:
        from safetensors.torch import load_file

        trainer = _mlp_trainer(1)
        trainer.state.model.load_state_dict(load_file(str(path / "model.safetensors")))
        fn = trainer.predict_incremental
    return BaselinePredictor(kind, config["featurizer"], config["platforms"], fn, config)


