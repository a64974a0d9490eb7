"""The baselines: MetaSchedule's XGBoost model and its SegmentSum MLP, on TVM's per-store features (the
``stmt`` output of the PaCM featurizer), trained and scoring through MetaSchedule's own code.

Each is a model kind (the registry: ``kinds.py``) that owns how it fits the per-store features of a training
set (``fit``: MetaSchedule's ``XGBModel._train`` with its pack-sum objective and early stopping;
``SegmentSumMLPTrainer.train_full``) and how a stored one scores (``scorer``, ``predictor``). Both are stored like
every costlab model (``artifact.py``): the booster as the bytes of XGBoost's JSON model in one uint8 tensor, the
MLP as its state dict.

One concept at two layers: this module is what a baseline is (loadable without Lightning);
``train/baselines.py`` (``costlab.train.baselines``) feeds a dataset split's records to ``fit`` and writes the
artifact. Importing it imports neither torch nor TVM: the kinds' registry (and with it the command line) loads it.
"""

from __future__ import annotations

import numpy as np

from costlab.common.errors import InputError, UsageError
from costlab.costmodels.kinds import ModelKind, register
from costlab.featurizers import from_json
from costlab.featurizers.pacm import STMT_FEATURES

FEATURE = "stmt"
BOOSTER = "xgboost_json"


class BaselineKind(ModelKind):
    """A baseline: fitted by MetaSchedule's own training on per-store features, scored by its own code."""

    featurizer, learned = "pacm", False

    def fit(self, xs: list, task: np.ndarray, cost: np.ndarray, epochs: int) -> dict:
        """The tensors of a baseline fitted to programs' per-store feature arrays ``xs``, their tasks and costs
        (seconds; a failed program 1e10); ``epochs``: the trainer's, where the baseline has one."""
        raise NotImplementedError

    def scorer(self, tensors: dict, path):
        """The scoring function of a stored baseline: per-store feature arrays in, one score per program out."""
        raise NotImplementedError

    def predictor(self, art=None, seed: int = 0) -> "BaselinePredictor":
        config = art.config
        return BaselinePredictor(self.name, config["featurizer"], config["platforms"],
                                 self.scorer(art.tensors, art.path), config)


@register
class XGBKind(BaselineKind):
    """MetaSchedule's XGBoost model (its default cost model)."""

    name, title, reference = "xgb", "XGBoost", True

    def fit(self, xs: list, task: np.ndarray, cost: np.ndarray, epochs: int) -> dict:
        model = xgb_model()
        best = np.zeros(task.max() + 1 if len(task) else 0, np.float32) + np.inf
        np.minimum.at(best, task, cost)
        model._train(xs, best[task] / cost)
        return booster_tensors(model.booster)

    def scorer(self, tensors: dict, path):
        import xgboost as xgb  # here: the registry lists the kinds without importing XGBoost

        if BOOSTER not in tensors:
            raise InputError(path, f"an xgb model needs the tensor {BOOSTER!r} in its weights")
        model = xgb_model()
        model.booster = xgb.Booster()
        try:
            model.booster.load_model(bytearray(tensors[BOOSTER].numpy().tobytes()))
        except xgb.core.XGBoostError as exc:
            raise InputError(path, f"the XGBoost booster is damaged ({str(exc).splitlines()[0][:160]})") from None
        if model.booster.num_features() != STMT_FEATURES:  # scoring would fail on the first batch, or read garbage
            raise InputError(path, f"the XGBoost booster reads {model.booster.num_features()} features, not the "
                                   f"{STMT_FEATURES} per-store features an xgb model is fed")
        return model._predict


@register
class MLPKind(BaselineKind):
    """MetaSchedule's SegmentSum MLP."""

    name, title = "mlp", "MLP"
    scores_per_call = True  # MetaSchedule's SegmentDataLoader divides features by the maxima of each call's batch

    def fit(self, xs: list, task: np.ndarray, cost: np.ndarray, epochs: int) -> dict:
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import FeatureGroup  # TVM: not for listing the kinds

        n_tasks = len(np.unique(task))
        if n_tasks < 2:
            raise UsageError("the SegmentSum MLP baseline holds out whole tasks to pick its epoch: it needs "
                             f"at least 2 training tasks, found {n_tasks}")
        # MetaSchedule's trainer validates on floor(20% of tasks): keep at least one task for it
        trainer = mlp_trainer(epochs, max(0.2, 1.0 / n_tasks))
        for t in np.unique(task):
            idx = np.flatnonzero(task == t)
            trainer.state.data[str(t)] = FeatureGroup(str(t), [xs[i] for i in idx], cost[idx])
        with steplr_accepting_verbose():
            trainer.train_full()
        return trainer.state.model.state_dict()

    def scorer(self, tensors: dict, path):
        from costlab.costmodels.artifact import load_state  # lazy: pulls torch; listing the kinds (the parser) must not

        trainer = mlp_trainer(1)
        load_state(trainer.state.model, tensors, path)
        return trainer.predict_incremental


class BaselinePredictor:
    """MetaSchedule's XGBoost model or SegmentSum MLP, on per-store features."""

    def __init__(self, kind: str, featurizer: dict, platforms: list, scorer, config: dict):
        self.kind, self.platforms, self.config = kind, list(platforms), config
        self.featurizer = from_json(featurizer)
        self._scorer = scorer

    def predict(self, features: dict) -> np.ndarray:
        return score_stores(self._scorer, features)[:, None]


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

    state = State(SegmentSumMLPConfig(input_dim=STMT_FEATURES), PerStoreFeature(extract_workload=False))
    return SegmentSumMLPTrainer(TrainerConfig(num_epoch_full=max(epochs, 10), test_split=test_split), state)


def booster_tensors(booster) -> dict:
    import torch  # here, not at the top: the kinds' registry imports this module, and listing kinds needs no torch

    return {BOOSTER: torch.frombuffer(bytearray(booster.save_raw("json")), dtype=torch.uint8)}


def score_stores(scorer, feats: dict) -> np.ndarray:
    """(N,) scores of programs given their per-store features; a program without any gets -1e9."""
    stmts = feats[FEATURE]
    valid = np.asarray(feats.get("valid", np.ones(len(stmts), bool)), bool)
    ok = np.flatnonzero(valid & np.array([len(x) > 0 for x in stmts], bool))
    out = np.full(len(stmts), -1e9)
    if ok.size:
        out[ok] = scorer([np.asarray(stmts[i], np.float32) for i in ok])
    return out


class steplr_accepting_verbose:
    """MetaSchedule's SegmentSum MLP trainer passes ``verbose=`` to ``StepLR``, an argument this torch no
    longer takes; for the duration of its training, StepLR accepts and ignores it. A context manager:
    ``with steplr_accepting_verbose(): trainer.train_full()`` (a trainer from ``mlp_trainer``)."""

    def __enter__(self):
        import torch  # here, not at the top: listing the kinds imports this module, and needs no torch

        self._orig = base = torch.optim.lr_scheduler.StepLR

        class _StepLR(base):
            def __init__(self, *args, verbose=None, **kwargs):
                super().__init__(*args, **kwargs)

        torch.optim.lr_scheduler.StepLR = _StepLR

    def __exit__(self, *exc):
        import torch

        torch.optim.lr_scheduler.StepLR = self._orig
