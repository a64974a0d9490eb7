"""The baselines at inference: MetaSchedule's XGBoost model and its SegmentSum MLP, on TVM's per-store
features (the ``stmt`` output of the PaCM featurizer), scoring through MetaSchedule's own code.

Both are stored like every costlab model (``artifact.py``): the booster as the bytes of XGBoost's JSON model
in one uint8 tensor, the MLP as its state dict.

One concept at two layers: this module is the baselines' inference side (what a stored baseline scores with,
loadable without Lightning); ``train/baselines.py`` (``costlab.train.baselines``) trains them, on top of it.
"""

from __future__ import annotations

import numpy as np

from costlab.costmodels.kinds import ModelKind, register

FEATURE = "stmt"
BOOSTER = "xgboost_json"


@register
class XGBKind(ModelKind):
    """MetaSchedule's XGBoost model (the model kinds' registry: ``kinds.py``)."""

    name, featurizer, learned = "xgb", "pacm", False


@register
class MLPKind(ModelKind):
    """MetaSchedule's SegmentSum MLP."""

    name, featurizer, learned = "mlp", "pacm", False


def xgb_model():
    """MetaSchedule's ``XGBModel`` as the baseline trains and scores it (pack-sum over store statements)."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    return XGBModel(extractor="per-store-feature", num_warmup_samples=0, verbose_eval=0, num_tuning_cores=2,
                    adaptive_training=False)


def mlp_trainer(epochs: int, test_split: float = 0.2):
    """MetaSchedule's SegmentSum MLP trainer, sized for the per-store features."""
    from tvm.s_tir.meta_schedule.cost_model.mlp_model import (SegmentSumMLPConfig, SegmentSumMLPTrainer, State,
                                                               TrainerConfig)
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    from costlab.featurizers.pacm import STMT_FEATURES

    state = State(SegmentSumMLPConfig(input_dim=STMT_FEATURES), PerStoreFeature(extract_workload=False))
    return SegmentSumMLPTrainer(TrainerConfig(num_epoch_full=max(epochs, 10), test_split=test_split), state)


def booster_tensors(booster) -> dict:
    import torch  # here, not at the top: the kinds' registry imports this module, and listing kinds needs no torch

    return {BOOSTER: torch.frombuffer(bytearray(booster.save_raw("json")), dtype=torch.uint8)}


def baseline_scorer(kind: str, tensors: dict, path):
    """The scoring function of a stored baseline: per-store feature arrays in, one score per program out."""
    from costlab.common.errors import InputError

    if kind == "xgb":
        import xgboost as xgb

        if BOOSTER not in tensors:
            raise InputError(path, f"an xgb model needs the tensor {BOOSTER!r} in its weights")
        model = xgb_model()
        model.booster = xgb.Booster()
        try:
            model.booster.load_model(bytearray(tensors[BOOSTER].numpy().tobytes()))
        except xgb.core.XGBoostError as exc:
            raise InputError(path, f"the XGBoost booster is damaged ({str(exc).splitlines()[0][:160]})") from None
        return model._predict
    from costlab.costmodels.artifact import load_state

    trainer = mlp_trainer(1)
    load_state(trainer.state.model, tensors, path)
    return trainer.predict_incremental


def score_stores(scorer, feats: dict) -> np.ndarray:
    """(N,) scores of programs given their per-store features; a program without any gets -1e9."""
    stmts = feats[FEATURE]
    valid = np.asarray(feats.get("valid", np.ones(len(stmts), bool)), bool)
    ok = np.flatnonzero(valid & np.array([len(x) > 0 for x in stmts], bool))
    out = np.full(len(stmts), -1e9)
    if ok.size:
        out[ok] = scorer([np.asarray(stmts[i], np.float32) for i in ok])
    return out
