"""Every model kind trains on the measured fixture (real MetaSchedule records): the PaCM net's loss falls,
and the XGBoost / SegmentSum-MLP baselines rank their training records better than chance."""

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
def test_baselines_fit_their_training_records(ms_data, tmp_path, kind):
    path, platform = ms_data
    cfg = load_config(None, ["trainer.max_epochs=20"], model=kind, data=str(path), out=str(tmp_path / kind))
    assert train(cfg, progress=False)["train_records"] == 80
    fitted = evaluate(str(tmp_path / kind), path, split=None, part="all")
    chance = evaluate("random", path, split=None, part="all")
    assert fitted["pairwise"] > max(0.6, chance["pairwise"]), (fitted["pairwise"], chance["pairwise"])
    assert (tmp_path / kind / "model" / "config.json").exists()
    assert not list((tmp_path / kind / "model").glob("*.pkl"))


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
