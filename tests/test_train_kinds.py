"""Every model kind trains on the measured fixture (real MetaSchedule records): the PaCM net's loss falls,
and the XGBoost / SegmentSum-MLP baselines are the models MetaSchedule's own training makes."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from conftest import FIXTURES

from costlab.datasets import open_dataset
from costlab.featurizers.cache import build_cache
from costlab.train.config import load_config
from costlab.train.data import CostDataModule, DataConfig
from costlab.train.evaluate import evaluate
from costlab.train.fit import load_weights, train
from costlab.train.module import CostModelModule
from costlab.costmodels.nets import net_config_for


@pytest.fixture(scope="module")
def ms_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("kinds") / "ms.h5"
    shutil.copy(FIXTURES / "ms_small.h5", path)
    with open_dataset(path) as ds:
        platform = ds.record_platforms()[0]
    build_cache(path, "pacm", platform, progress=False)
    return path, platform


def _mean_loss(module, dm) -> float:
    module.eval()
    with torch.no_grad():
        return float(np.mean([float(module._loss(module(b), b)) for b in dm.train_dataloader()]))


def test_pacm_loss_falls(ms_data, tmp_path):
    path, platform = ms_data
    dm = CostDataModule(DataConfig(data=str(path), featurizer="pacm", platforms=[platform], val_fraction=0.0))
    dm.setup()
    torch.manual_seed(0)
    module = CostModelModule("pacm", net_config_for("pacm", dm.featurizer, 1, d_model=32),
                             dm.featurizer.to_json(), [platform])
    before = _mean_loss(module, dm)
    cfg = load_config(None, ["trainer.max_epochs=30", "data_options.val_fraction=0", "net.d_model=32",
                             "data_options.lists_per_batch=1"], model="pacm", data=str(path), out=str(tmp_path / "r"))
    assert train(cfg, progress=False)["train_records"] == 80
    load_weights(module, tmp_path / "r" / "model")
    after = _mean_loss(module, dm)
    assert after < 0.8 * before, (before, after)


@pytest.mark.parametrize("kind", ["xgb", "mlp"])
def test_baselines_fit_as_metaschedules_own_training(ms_data, tmp_path, kind):
    """A baseline trained by costlab is the model MetaSchedule's own training makes of the same records (the same
    seed, fed here straight from the dataset): it scores every training program as that model does. Not a
    training outcome (which another CPU's rounding could move), but what costlab feeds MetaSchedule's code."""
    from costlab.costmodels.predictors import load

    path, platform = ms_data
    cfg = load_config(None, ["trainer.max_epochs=20", "seed=3"], model=kind, data=str(path), out=str(tmp_path / kind))
    assert train(cfg, progress=False)["train_records"] == 80
    xs, reference = _metaschedule_fit(kind, path, platform, seed=3, epochs=20)
    scores = load(tmp_path / kind / "model").predict({"stmt": xs})[:, 0]
    expected = np.asarray(reference(xs), np.float64)
    assert np.ptp(expected) > 0  # a model that scores every program alike would match a broken feed too
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-7)
    assert (tmp_path / kind / "model" / "config.json").exists()
    assert not list((tmp_path / kind / "model").glob("*.pkl"))


def _metaschedule_fit(kind: str, path, platform: str, seed: int, epochs: int):
    """The baseline fitted by MetaSchedule's own trainer, fed straight from the dataset: every record's per-store
    features (the PaCM cache), grouped by task, with its mean measured seconds. MetaSchedule's calls, not costlab's
    ``fit``: a costlab training that fed it other records, costs or groups fails to match it."""
    import random

    from tvm.s_tir.meta_schedule.cost_model import XGBModel
    from tvm.s_tir.meta_schedule.cost_model.mlp_model import (FeatureGroup, SegmentSumMLPConfig,
                                                               SegmentSumMLPTrainer, State, TrainerConfig)
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    from costlab.costmodels.baselines import steplr_accepting_verbose
    from costlab.featurizers import create as create_featurizer
    from costlab.featurizers.cache import features_of

    with open_dataset(path) as ds:
        table = ds.records(platform)
        assert (table.error == 0).all()  # every program of the fixture ran: no failure to place at 1e10
        task = table.task.astype(np.int64)
        flat, offsets = table.costs()
        cost = np.array([flat[a:b].mean() for a, b in zip(offsets[:-1], offsets[1:])], np.float32)
        xs = [np.asarray(x, np.float32)
              for x in features_of(ds, create_featurizer("pacm"), platform, np.arange(len(task)))["stmt"]]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if kind == "xgb":
        model = XGBModel(extractor="per-store-feature", num_warmup_samples=0, verbose_eval=0, num_tuning_cores=2,
                         adaptive_training=False)
        best = np.array([cost[task == t].min() for t in range(task.max() + 1)], np.float32)
        model._train(xs, best[task] / cost)
        return xs, model._predict
    n_tasks = len(np.unique(task))
    trainer = SegmentSumMLPTrainer(TrainerConfig(num_epoch_full=epochs, test_split=max(0.2, 1 / n_tasks)),
                                   State(SegmentSumMLPConfig(input_dim=xs[0].shape[1]),
                                         PerStoreFeature(extract_workload=False)))
    for t in np.unique(task):
        trainer.state.data[str(t)] = FeatureGroup(str(t), [xs[i] for i in np.flatnonzero(task == t)],
                                                  cost[task == t])
    with steplr_accepting_verbose():
        trainer.train_full()
    return xs, trainer.predict_incremental


def test_a_baseline_does_not_learn_from_a_task_whose_every_program_failed(ms_data, tmp_path):
    """MetaSchedule's labels are best / cost within a task: in a task none of whose programs ran, every failure
    would be its task's best (label 1). Such a task has nothing to rank, and is left out of the training."""
    from costlab.datasets import DatasetWriter, RecordBatch
    from costlab.metaschedule.results import ERROR_MS_FAILED

    path, platform = ms_data
    data = tmp_path / "failed.h5"
    shutil.copy(path, data)
    with open_dataset(data) as ds:
        src = ds.tasks[0]
        t = ds.records(platform)
        rows = np.flatnonzero(t.task == 0)[:4]
        schedules = t.schedules(rows)
    b = RecordBatch()
    with DatasetWriter(data) as w:
        failed = w.add_task("all-failed", src.dialect, src.workload, name="all-failed")
        for i, sched in enumerate(schedules):
            b.append(failed, sched, [1e10], ERROR_MS_FAILED, 0.0, 10**6 + i)
        w.add_records(platform, b)
    cfg = load_config(None, ["trainer.max_epochs=2"], model="xgb", data=str(data), out=str(tmp_path / "x"))
    assert train(cfg, progress=False)["train_records"] == 80  # not the 4 failures of the new task


def test_a_baseline_keeps_the_fraction_of_labels_it_is_given_and_refuses_rows_of_other_platforms(ms_data, tmp_path):
    """``data_options.keep_fraction`` takes labels away from the XGBoost baseline as from the nets it is compared
    with (it trained on all of them); ``row_platforms``, which it cannot take, is refused, not ignored."""
    from costlab.common.errors import UsageError

    path, platform = ms_data
    cfg = load_config(None, ["trainer.max_epochs=2", f"data_options.keep_fraction={{{platform}: 0.5}}"], model="xgb",
                      data=str(path), out=str(tmp_path / "half"))
    kept = train(cfg, progress=False)["train_records"]
    assert 0 < kept < 80
    cfg = load_config(None, [f"data_options.row_platforms=[{platform}]"], model="xgb", data=str(path),
                      out=str(tmp_path / "rows"))
    with pytest.raises(UsageError, match="data_options row_platforms: the xgb baseline"):
        train(cfg, progress=False)


def test_the_mlp_baseline_is_evaluated_one_task_per_call_as_a_tuning_run_scores_it(ms_data, tmp_path):
    """MetaSchedule's SegmentSum MLP scales features by the maxima of each call's batch, so a program's score depends
    on the other programs of the call: ``evaluate`` asks it one task at a time, as a tuning run does, and its figure
    is the one of scoring every task alone, whatever other tasks the split holds."""
    from costlab.costmodels import metrics
    from costlab.costmodels.tensors import take_rows
    from costlab.featurizers.cache import features_of
    from costlab.train.predict import load_predictor

    path, platform = ms_data
    cfg = load_config(None, ["trainer.max_epochs=5"], model="mlp", data=str(path), out=str(tmp_path / "mlp"))
    train(cfg, progress=False)
    pred = load_predictor(str(tmp_path / "mlp"))
    with open_dataset(path) as ds:
        table = ds.records(platform)
        task, latency = table.task.astype(np.int64), table.latency()
        feats = features_of(ds, pred.featurizer, platform, np.arange(len(task)))
    alone = np.zeros(len(task))
    for t in np.unique(task):
        idx = np.flatnonzero(task == t)
        alone[idx] = pred.predict(take_rows(feats, idx))[:, 0]
    assert not np.allclose(pred.predict(feats)[:, 0], alone)  # the call's other tasks change the scores
    result = evaluate(str(tmp_path / "mlp"), path, split=None, part="all")
    assert result["pairwise"] == pytest.approx(metrics.pairwise_accuracy(task, alone, latency))


@pytest.mark.parametrize("kind", ["xgb", "mlp"])
def test_evaluate_scores_a_large_part_a_few_whole_tasks_at_a_time_with_the_same_figures(ms_data, tmp_path,
                                                                                         monkeypatch, kind):
    """Evaluation reads and scores the features of about ``EVAL_ROWS`` records at a time, whole tasks each (all
    of a TenSet-size test part at once took gigabytes): the figures are those of one call, for a model that
    scores each call on its own (the MLP, one task per call) as for one that does not."""
    import costlab.train.evaluate as evaluation

    path, _ = ms_data
    cfg = load_config(None, ["trainer.max_epochs=10"], model=kind, data=str(path), out=str(tmp_path / kind))
    train(cfg, progress=False)
    whole = evaluate(str(tmp_path / kind), path, split=None, part="all")
    calls = []
    real = evaluation.features_of
    monkeypatch.setattr(evaluation, "features_of",
                        lambda ds, f, p, rows: calls.append(len(rows)) or real(ds, f, p, rows))
    monkeypatch.setattr(evaluation, "EVAL_ROWS", 30)  # 4 tasks of 20 records: two calls of two whole tasks each
    parts = evaluate(str(tmp_path / kind), path, split=None, part="all")
    assert calls == [40, 40]
    figures = {k: v for k, v in whole.items() if isinstance(v, float)}
    assert {"pairwise", "top1"} <= set(figures) and figures == {k: v for k, v in parts.items() if isinstance(v, float)}
