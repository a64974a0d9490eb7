"""Baselines trained and evaluated on the same splits as costlab's nets: MetaSchedule's own XGBoost model
and its SegmentSum MLP (``tvm.s_tir.meta_schedule.cost_model``), both on TVM's per-store features.

The per-store features are the ``stmt`` output of the PaCM featurizer (``PerStoreFeature`` on the replayed,
lowered program), so all models see the same programs. Each baseline kind fits them by MetaSchedule's own
code (its ``fit`` in ``costmodels/baselines.py``: ``XGBModel._train`` with its pack-sum objective and early
stopping; ``SegmentSumMLPTrainer.train_full``), fed here with the dataset's records grouped by task instead
of a tuning run's measurements. Saved without pickle: the booster as XGBoost JSON, the MLP as safetensors,
beside ``config.json``.

One concept at two layers: this module is the baselines' training run (data in, artifact out);
``costmodels/baselines.py`` (``costlab.costmodels.baselines``) is what each baseline is: how it fits, and how a
stored one scores at inference.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from costlab.common import jsontext
from costlab.common.errors import UsageError
from costlab.common.files import write_atomically
from costlab.costmodels import kinds
from costlab.costmodels.artifact import save_artifact
from costlab.costmodels.baselines import FEATURE
from costlab.datasets import open_dataset
from costlab.featurizers.cache import features_of
from costlab.train.data import CostDataModule, DataConfig
from costlab.train.run_dir import run_dir


BASELINE_DATA_OPTIONS = ("keep_fraction", "base_platform")  # what of ``data_options`` a baseline's data takes
# options that change which records a net trains on; a baseline that ignored them would train on other data
_NET_ONLY = ("row_platforms",)


def _training_data(cfg: dict):
    """The baseline's training records (those with a label on the target platform: ``keep_fraction`` drops some;
    not those of a task whose every program failed) as per-store feature arrays, their tasks and costs (failed
    records at MetaSchedule's 1e10)."""
    options = dict(cfg.get("data_options") or {})
    other = sorted(k for k, v in options.items() if k not in BASELINE_DATA_OPTIONS and k in _NET_ONLY and v)
    if other:
        raise UsageError(f"data_options {', '.join(other)}: the {cfg['model']} baseline trains on one platform's "
                         f"records as MetaSchedule's model does (it takes {', '.join(BASELINE_DATA_OPTIONS)})")
    dm = CostDataModule(DataConfig(data=str(cfg["data"]), featurizer=kinds.create(cfg["model"]).featurizer,
                                   platforms=list(cfg["platforms"]), split=cfg["split"], seed=int(cfg["seed"]),
                                   val_fraction=0.0, features_in_memory_mb=0.0,  # read once below, not twice
                                   **{k: options[k] for k in BASELINE_DATA_OPTIONS if k in options}))
    dm.setup()
    rows = dm.train_rows
    rows = rows[~np.isnan(dm.labels.latency[rows, 0])]  # no label on the target (kept out, or not measured there)
    with open_dataset(cfg["data"]) as ds:
        feats = features_of(ds, dm.featurizer, dm.base, rows)
    valid = np.asarray(feats.get("valid", np.ones(len(rows), bool)), bool)
    xs = [np.asarray(x, np.float32) for x, ok in zip(feats[FEATURE], valid) if ok and len(x)]
    keep = np.array([ok and len(x) > 0 for x, ok in zip(feats[FEATURE], valid)], bool)
    task = dm.labels.task[rows][keep]
    lat = dm.labels.latency[rows, 0][keep]
    # a task none of whose programs ran has nothing to rank: MetaSchedule's labels (best / cost within the
    # task) would score its failures 1, as the fastest, where every costlab model scores a failure 0
    ranked = np.isin(task, task[np.isfinite(lat)])
    xs, task, lat = [x for x, ok in zip(xs, ranked) if ok], task[ranked], lat[ranked]
    cost = np.where(np.isfinite(lat), lat, 1e10).astype(np.float32)
    if not xs:
        unread = int(np.count_nonzero(~keep))
        raise UsageError(f"{cfg['data']}: no training record of {dm.base!r} to fit the {cfg['model']} baseline on: "
                         f"of its {len(rows)} labelled training records, {unread} have no {dm.featurizer.name} "
                         f"features (the featurizer could not read them) and the rest are of tasks none of whose "
                         "programs ran")
    return dm, xs, task, cost


def train_baseline(cfg: dict) -> dict:
    import time

    kind = cfg["model"]
    # the baselines train by their own loops for max_epochs: Lightning's other limits were dropped without a word
    # (an mlp given trainer.max_time=00:00:00:01 or max_steps=1 trained its 50 epochs)
    def unset(key, value) -> bool:  # Lightning's own defaults: no limit (an int 1 of batches is one batch, not all)
        return value is None or (key == "max_steps" and value == -1) or (
            key == "limit_train_batches" and isinstance(value, float) and value == 1.0)

    ignored = [k for k in ("max_steps", "max_time", "limit_train_batches") if not unset(k, cfg["trainer"].get(k))]
    if ignored:
        raise UsageError(f"the {kind} baseline trains for trainer.max_epochs epochs by its own loop and takes no "
                         + ", ".join(f"trainer.{k}" for k in ignored) + "; leave it out (or use --epochs)")
    out = run_dir(cfg["out"]) / "model"  # made when the model is saved: a failed run leaves no empty one
    random.seed(int(cfg["seed"]))
    np.random.seed(int(cfg["seed"]))
    torch.manual_seed(int(cfg["seed"]))
    dm, xs, task, cost = _training_data(cfg)
    t0 = time.perf_counter()
    tensors = kinds.create(kind).fit(xs, task, cost, epochs=int(cfg["trainer"].get("max_epochs", 50)))
    summary = dict(model=kind, platforms=dm.config.platforms, train_records=len(xs),
                   wall_seconds=time.perf_counter() - t0,
                   train_records_per_s=len(xs) / max(time.perf_counter() - t0, 1e-9))
    save_artifact(out, tensors, dict(kind=kind, net={}, featurizer=dm.featurizer.to_json(),
                                     platforms=dm.config.platforms, training=summary, split=cfg["split"],
                                     split_digest=dm.split and dm.split.digest, dataset=os.path.abspath(cfg["data"]),
                                     dataset_tasks=dm.dataset_tasks, dialects=dm.dialects, targets=dm.targets))
    write_atomically(Path(cfg["out"]) / "summary.json", jsontext.dumps(summary, indent=2).encode())
    return summary
