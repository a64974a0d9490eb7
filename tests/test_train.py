"""Training with Lightning on real measured records: the loss falls for each model kind, MTL heads only
learn from their own platform's labels, and a checkpoint reloads to the same predictions."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import FIXTURES, TINY

from costlab.cli import main
from costlab.datasets import DatasetWriter, RecordBatch, open_dataset
from costlab.featurizers.base import same_features
from costlab.featurizers.cache import build_cache
from costlab.featurizers.pacm import PaCM
from costlab.train.config import load_config
from costlab.train.data import CostDataModule, DataConfig
from costlab.train.fit import train
from costlab.train.predict import load_checkpoint, load_predictor

PLATFORM = "platinum-8358"
SMALL_NET = ["net.d_model=32", "net.attention_heads=4"]


@pytest.fixture(scope="module")
def ansor_data(tmp_path_factory):
    """The real Platinum-8358 log slice (2 tasks, 128 records) with TLP features cached."""
    path = tmp_path_factory.mktemp("train") / "x.h5"
    assert main(["dataset", "import-ansor", str(FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"),
                 "-o", str(path)]) == 0
    build_cache(path, "tlp", PLATFORM, progress=False)
    return path


def _mean_loss(module, dm) -> float:
    module.eval()
    with torch.no_grad():
        losses = [float(module._loss(module(b), b)) for b in dm.train_dataloader()]
    return float(np.mean(losses))


def test_tlp_loss_falls_and_checkpoint_reloads(ansor_data, tmp_path):
    cfg = load_config(None, SMALL_NET + ["trainer.max_epochs=1", "data_options.val_fraction=0"],
                      data=str(ansor_data), out=str(tmp_path / "r0"))
    train(cfg, progress=False)  # a one-epoch run to get the initial loss of a fresh net on the same data
    dm = CostDataModule(DataConfig(data=str(ansor_data), platforms=[PLATFORM], val_fraction=0.0, seed=0))
    dm.setup()
    from costlab.train.module import CostModelModule
    from costlab.costmodels.nets import net_config_for

    torch.manual_seed(0)
    fresh = CostModelModule("tlp", net_config_for("tlp", dm.featurizer, 1, d_model=32, attention_heads=4),
                            dm.featurizer.to_json(), [PLATFORM])
    before = _mean_loss(fresh, dm)
    cfg = load_config(None, SMALL_NET + ["trainer.max_epochs=30", "data_options.val_fraction=0",
                                        "data_options.lists_per_batch=1"],
                      data=str(ansor_data), out=str(tmp_path / "run"))
    summary = train(cfg, progress=False)
    assert summary["train_records"] == 128 and summary["train_records_per_s"] > 0
    pred = load_predictor(str(tmp_path / "run"))
    from costlab.train.fit import load_weights

    load_weights(fresh, tmp_path / "run" / "model")
    after = _mean_loss(fresh, dm)
    assert after < 0.8 * before, (before, after)
    # the saved model, the last checkpoint and the module predict the same values
    rows = np.arange(20)
    feats = dm.read_features(rows)
    a = pred.predict(feats)
    b = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt").predict(feats)
    assert np.allclose(a, b, atol=1e-5)
    with open_dataset(ansor_data) as ds:  # features computed afresh equal the cached ones
        fresh_feats = pred.featurizer.featurize_records(ds, PLATFORM, rows)
    assert np.allclose(pred.predict(fresh_feats), a, atol=1e-5)


def _second_platform(path, dst, fraction):
    """A copy of the dataset with a second platform holding the same programs (costs scaled per task)."""
    import shutil

    from conftest import copy_platform

    shutil.copy(path, dst)
    with open_dataset(dst) as ds:
        task = ds.records(PLATFORM).task
    keep = np.random.default_rng(0).random(len(task)) < fraction
    return copy_platform(dst, PLATFORM, "other", {"kind": "llvm", "num-cores": 1},
                         costs=lambda i, raw: raw * (1.5 + task[i]), rows=np.flatnonzero(keep))


def test_validation_tasks_have_something_to_rank(ansor_data, tmp_path):
    """Single-program tasks (injective kernels) are never the validation tasks that pick the best checkpoint."""
    import shutil

    dst = tmp_path / "singles.h5"
    shutil.copy(ansor_data, dst)
    with open_dataset(dst) as ds:
        sched = ds.records(PLATFORM).schedules(np.arange(1))[0]
    b = RecordBatch()
    with DatasetWriter(dst) as w:
        for i in range(6):
            t = w.add_task(f"single-{i}", "ansor", f'["single-{i}"]', name=f"single-{i}")
            b.append(t, sched, [1e-3], 0, 0.0, 1000 + i)
        w.add_records(PLATFORM, b)
    dm = CostDataModule(DataConfig(data=str(dst), platforms=[PLATFORM], val_fraction=0.5, seed=0))
    dm.setup()
    val_tasks, counts = np.unique(dm.labels.task[dm.val_rows], return_counts=True)
    assert len(val_tasks) == 1 and counts[0] >= 2, (val_tasks, counts)
    assert len(np.unique(dm.labels.task[dm.train_rows])) == 7  # the other rankable task and the 6 singles


def test_mtl_heads_learn_only_from_their_platform(ansor_data, tmp_path):
    dst = tmp_path / "two.h5"
    n_other = _second_platform(ansor_data, dst, 0.5)
    dm = CostDataModule(DataConfig(data=str(dst), platforms=[PLATFORM, "other"], val_fraction=0.0))
    dm.setup()
    assert np.isfinite(dm.labels.score[:, 1]).sum() == n_other < len(dm.labels)
    # records line up by program id: the other platform's scores are its own, per task
    from costlab.train.module import CostModelModule
    from costlab.costmodels.nets import net_config_for

    module = CostModelModule("mtl", net_config_for("mtl", dm.featurizer, 2, d_model=32, attention_heads=4),
                             dm.featurizer.to_json(), [PLATFORM, "other"])
    batch = next(iter(dm.train_dataloader()))
    batch["score"][:, 1] = float("nan")  # no label on the second platform in this batch
    module.zero_grad()
    module._loss(module(batch), batch).backward()
    last = module.net.decoder[-1]
    assert last.weight.grad[1].abs().sum() == 0 and last.bias.grad[1] == 0
    assert last.weight.grad[0].abs().sum() > 0
    batch["score"][:] = float("nan")  # no head has two labelled records (scarce labels, small lists): a zero loss
    loss = module._loss(module(batch), batch)  # that still backpropagates, not a constant that stops the run
    loss.backward()
    assert float(loss) == 0
    cfg = load_config(None, SMALL_NET + ["trainer.max_epochs=2", "data_options.val_fraction=0"], model="mtl",
                      data=str(dst), platforms=[PLATFORM, "other"], out=str(tmp_path / "mtl"))
    assert train(cfg, progress=False)["platforms"] == [PLATFORM, "other"]
    assert load_predictor(str(tmp_path / "mtl")).predict(dm.read_features(np.arange(4))).shape == (4, 2)


def test_train_cli_and_evaluate_json(ansor_data, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: tlp\ndata: {ansor_data}\nnet: {{d_model: 32, attention_heads: 4}}\n"
                   "trainer: {max_epochs: 1}\ndata_options: {val_fraction: 0.0}\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "run"), "--data", str(ansor_data), "--split", "none",
                 "--json", "--report", str(tmp_path / "rep")]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert {"top1", "top5", "pairwise", "ndcg"} <= set(out) and 0 < out["top1"] <= 1
    assert (tmp_path / "rep" / "report.md").exists() and (tmp_path / "rep" / "topk_curve.png").exists()
    assert main(["train", "--config", str(cfg), "--set", "nosuch=1"]) == 2
    assert "unknown config key 'nosuch'" in capsys.readouterr().err
    assert main(["train", "--config", str(cfg), "--set", "lr_schedule=linear"]) == 2
    assert "lr_schedule must be one of constant, cosine" in capsys.readouterr().err
    # a cosine schedule has lowered the learning rate by the end of a 2-epoch run
    assert main(["train", "--config", str(cfg), "--set", "lr_schedule=cosine", "--epochs", "2",
                 "--out", str(tmp_path / "cos"), "--no-progress"]) == 0
    ckpt = torch.load(tmp_path / "cos" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["optimizer_states"][0]["param_groups"][0]["lr"] < 0.9 * 7e-4


def test_train_featurizes_what_it_needs(tmp_path, capsys):
    """A dataset without a feature cache trains all the same: the records are featurized first and the
    cache is kept in the dataset, so that the next run reads it instead of featurizing again."""
    data = tmp_path / "raw.h5"
    assert main(["dataset", "import-ansor", str(FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"),
                 "-o", str(data)]) == 0
    argv = ["train", "--model", "tlp", "--data", str(data), "--epochs", "1", "--no-progress",
            "--set", "data_options.val_fraction=0.0", *[a for kv in SMALL_NET for a in ("--set", kv)]]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "r1")]) == 0
    assert "featurizing the records of 'platinum-8358' with tlp" in capsys.readouterr().err
    with open_dataset(data) as ds:
        assert f"features/tlp@{load_predictor(str(tmp_path / 'r1')).featurizer.version}/{PLATFORM}" in ds.h5
    assert main([*argv, "--out", str(tmp_path / "r2")]) == 0
    assert "featurizing" not in capsys.readouterr().err  # the second run reads the cache


def test_report_plots_the_model_beside_psa_and_random(tmp_path, capsys):
    """evaluate --report scores the same records with PSA and random draws: the report's table has a row
    for each, and the curves are computed from their own scores (PSA's top-k is not random's)."""
    from costlab.train.evaluate import evaluate
    from costlab.train.report import topk_curves

    data = FIXTURES / "ms_small.h5"
    assert main(["evaluate", "--model", "random", "--data", str(data), "--split", "none",
                 "--report", str(tmp_path / "rep")]) == 0
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "| PSA |" in report and "| random |" in report and "| model |" in report
    curves = topk_curves(evaluate("psa", data, split=None, baselines=True))
    assert set(curves) == {"model", "PSA", "random"} and len(curves["random"]) == 20
    assert curves["model"] == curves["PSA"] != curves["random"]  # the model here is PSA itself
    assert all(0 < v <= 1 for v in curves["random"]) and curves["random"][-1] >= curves["random"][0]


def test_finetune_with_momentum(ansor_data, tmp_path):
    cfg = load_config(None, SMALL_NET + ["trainer.max_epochs=1", "data_options.val_fraction=0"],
                      data=str(ansor_data), out=str(tmp_path / "src"))
    train(cfg, progress=False)
    assert main(["finetune", "--from", str(tmp_path / "src"), "--data", str(ansor_data), "--platform", PLATFORM,
                 "--momentum", "--every", "1", "--epochs", "2", "--set", "data_options.val_fraction=0",
                 "--out", str(tmp_path / "ft"), "--no-progress"]) == 0
    pred = load_predictor(str(tmp_path / "ft"))
    assert pred.featurizer.config == load_predictor(str(tmp_path / "src")).featurizer.config
    # --seed reaches the Lightning trainer's config too; --every belongs to --momentum
    import yaml

    assert main(["finetune", "--from", str(tmp_path / "src"), "--data", str(ansor_data), "--platform", PLATFORM,
                 "--momentum", "--every", "1", "--epochs", "1", "--seed", "3", "--set", "data_options.val_fraction=0",
                 "--out", str(tmp_path / "ft3"), "--no-progress"]) == 0
    assert yaml.safe_load((tmp_path / "ft3" / "config.yaml").read_text())["seed"] == 3
    assert main(["finetune", "--from", str(tmp_path / "src"), "--data", str(ansor_data), "--platform", PLATFORM,
                 "--every", "1", "--out", str(tmp_path / "ft4"), "--no-progress"]) == 2


def test_a_validation_part_with_nothing_to_rank_trains_without_one(trained, tmp_path):
    """A within-task split draws validation by program: on few records, a small fraction draws programs no two
    of one task, which rank nothing (no validation top-1 is logged, or it is NaN, and the best checkpoint
    watches a value never set, or stays the first epoch's). Such a part is none: its rows train."""
    import json
    import shutil

    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    assert main(["dataset", "split", str(data), "--by", "within-task", "--name", "w"]) == 0
    # seed 0 draws for validation: one program; four, each of another task; seven, four of them of one task
    for fraction, few in ((0.01, True), (0.05, True), (0.1, False)):
        out = tmp_path / f"run{fraction}"
        assert main(["train", "--data", str(data), "--split", "w", "--out", str(out), "--epochs", "1",
                     "--no-progress", *TINY[:4], "--set", f"data_options.val_fraction={fraction}"]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert (summary["val_records"] == 0) == few and summary["train_records"] + summary["val_records"] == 64
        assert (summary["best_val_top1"] is None) == few  # a number wherever there is a validation part


def test_validation_ranks_only_a_group_of_two_programs_of_one_platform_one_of_which_ran(trained):
    """What makes a validation part worth having (``CostDataModule._rankable``): two labelled programs of one
    task on one platform (a ranking group), one of which ran; two that both failed, or two of one task on two
    platforms (``row_platforms``), rank nothing and would leave the validation top-1 NaN."""
    dm = CostDataModule(DataConfig(data=str(trained / "d.h5"), platforms=["llvm-x86_64-2c"], val_fraction=0.0))
    dm.setup()
    ran = np.flatnonzero(np.isfinite(dm.labels.latency[:, 0]))
    a, b = ran[dm.groups[ran] == dm.groups[ran[0]]][:2]
    two = np.isin(np.arange(len(dm.labels)), [a, b])
    assert dm._rankable(two) and not dm._rankable(two & (np.arange(len(dm.labels)) == a))
    dm.groups = dm.groups.copy()
    dm.groups[b] = dm.groups.max() + 1  # the same task measured on another platform: its own ranking group
    assert not dm._rankable(two)
    dm.groups[b] = dm.groups[a]
    dm.labels.latency[[a, b], 0], dm.labels.score[[a, b], 0] = np.inf, 0.0  # both failed: labelled, nothing ran
    assert not dm._rankable(two)


def _within_task_labels(trained, tmp_path, val_fraction: float) -> tuple:
    """``trained``'s dataset split within tasks, its data module set up, and its tasks, latencies and training rows
    that ran, after checking that in every task the fastest training program scores 1."""
    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    assert main(["dataset", "split", str(data), "--by", "within-task", "--name", "w"]) == 0
    dm = CostDataModule(DataConfig(data=str(data), platforms=["llvm-x86_64-2c"], split="w",
                                   val_fraction=val_fraction))
    dm.setup()
    task, score, lat = dm.labels.task, dm.labels.score[:, 0], dm.labels.latency[:, 0]
    rows = dm.train_rows[np.isfinite(lat[dm.train_rows])]
    for t in np.unique(task[rows]):
        assert score[rows][task[rows] == t].max() == 1.0
    return dm, task, lat, rows


def test_a_within_task_splits_held_out_programs_never_set_the_training_labels(trained, tmp_path):
    """A training label is ``best / latency`` over its task's training programs: in every task the fastest
    training program scores 1, whether or not a faster one was held out for the test."""
    dm, task, lat, rows = _within_task_labels(trained, tmp_path, 0.0)
    assert len(np.unique(task[rows])) >= 3
    test_rows = dm.test_rows
    faster_held_out = [t for t in np.unique(task[rows])
                       if lat[test_rows][task[test_rows] == t].min(initial=np.inf) < lat[rows][task[rows] == t].min()]
    assert faster_held_out, "the fixture's split holds out some task's fastest program (what this test is about)"


def test_a_within_task_splits_validation_programs_never_set_the_training_labels(trained, tmp_path):
    """The validation programs of a within-task split are drawn among the training part's: their latencies set the
    training labels' best (a validation program the fastest of its task left every training label below 1), so the
    part that picks the checkpoint was not apart from what trained. Both parts are labelled each over its own."""
    dm, task, lat, rows = _within_task_labels(trained, tmp_path, 0.4)
    val = dm.val_rows[np.isfinite(lat[dm.val_rows])]
    assert len(val) and not np.isin(dm.labels.program_id[val], dm.labels.program_id[rows]).any()
    faster_in_validation = [t for t in np.unique(task[rows])
                            if lat[val][task[val] == t].min(initial=np.inf) < lat[rows][task[rows] == t].min()]
    assert faster_in_validation, "the draw puts some task's fastest training-part program in validation"


def test_a_ranking_list_cut_into_training_and_validation_scores_each_part_within_itself():
    """A fine-tune's (and online adaptation's) lists were scored whole, then cut: the training records' labels were
    relative to a validation record's latency."""
    from costlab.costmodels.recipe import split_lists

    feats = {"x": np.arange(8, dtype=np.float32)[:, None]}
    score = np.array([1.0, 0.5, 0.25, 0.2, 0.1, 0.9, 0.3, 0.4])
    for seed in range(6):
        train, val = split_lists([(feats, score)], 0.4, np.random.default_rng(seed))
        for _, part in train + val:
            assert part.max() == 1.0


def test_finetune_from_a_checkpoint_writes_a_model_that_loads(trained, tmp_path):
    """``--from RUN/checkpoints/last.ckpt`` (a training run in progress): the fine-tuned model records what
    the checkpoint's net is (kind, net, featurizer), and loads and scores like the checkpoint it came from."""
    import shutil

    from costlab.costmodels.artifact import read_artifact

    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    ckpt = trained / "run" / "checkpoints" / "last.ckpt"
    assert main(["finetune", "--from", str(ckpt), "--data", str(data), "--platform", "llvm-x86_64-2c",
                 "--out", str(tmp_path / "ft"), "--no-progress"]) == 0
    tuned, source = read_artifact(tmp_path / "ft" / "model"), read_artifact(trained / "run" / "model")
    for key in ("kind", "net", "featurizer"):
        assert tuned.config[key] == source.config[key]
    assert load_predictor(str(tmp_path / "ft")).kind == source.kind
    # the checkpoint's run trained on every record of its dataset: the fine-tuned model keeps that, by both
    # recipes, and evaluate says so
    for extra in ([], ["--recipe", "lightning", "--epochs", "1", *TINY]):
        out = tmp_path / f"ft{len(extra)}"
        assert main(["finetune", "--from", str(ckpt), "--data", str(data), "--platform", "llvm-x86_64-2c",
                     "--out", str(out), "--no-progress", "--overwrite", *extra]) == 0
        (step,) = read_artifact(out / "model").config["lineage"]
        assert step["dataset_tasks"]["count"] == 4  # the dataset's tasks, by which a copy of it is known
        assert {k: v for k, v in step.items() if k != "dataset_tasks"} == dict(split=None, split_digest=None,
                                                                                dataset=str(trained / "d.h5"))


def test_finetune_from_a_shipped_model_by_name(tmp_path, capsys):
    """``--from NAME`` takes a shipped model by the name ``costlab models`` lists, as evaluate and export do. The
    dataset has no cache of the model's featurizer: the run featurizes into its own folder, removed at the end."""
    import shutil

    from costlab.costmodels.artifact import read_artifact
    from costlab.costmodels.shipped import shipped_path

    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    assert main(["finetune", "--from", "x86-cpu", "--data", str(data), "--platform", "llvm-x86_64-2c",
                 "--epochs", "1", "--set", "data_options.val_fraction=0", "--out", str(tmp_path / "ft"),
                 "--no-progress"]) == 0
    assert "(the model's pacm@" in capsys.readouterr().err and not (tmp_path / "ft" / "features").exists()
    shipped, tuned = read_artifact(shipped_path("x86-cpu")), read_artifact(tmp_path / "ft" / "model")
    assert tuned.kind == shipped.kind == "pacm" and tuned.config["net"] == shipped.config["net"]
    assert same_features(tuned.config["featurizer"]) == same_features(shipped.config["featurizer"])
    assert tuned.config["featurizer"]["revision"] == PaCM.revision  # trained (Lightning) on this costlab's features
    assert tuned.config["platforms"] == ["llvm-x86_64-2c"]
    assert set(tuned.tensors) == set(shipped.tensors)
    assert any(not torch.equal(tuned.tensors[k], shipped.tensors[k]) for k in shipped.tensors)  # it trained


@pytest.mark.parametrize("model", ["trained", "psa", "random"])
def test_no_records_are_scored_as_none(trained, model):
    """Zero records (an empty test part, a model whose featurizer has no cache in the dataset) are no features
    of the featurizer's own keys, and every kind of model scores them as an empty (0, heads) array."""
    from costlab.featurizers.cache import features_of

    pred = load_predictor(str(trained / "run") if model == "trained" else model)
    with open_dataset(trained / "d.h5") as ds:
        platform = ds.record_platforms()[0]
        if hasattr(pred, "use_platform"):
            pred.use_platform(ds.platforms[platform])
        features = features_of(ds, pred.featurizer, platform, np.zeros(0, np.int64))
    assert features and all(len(v) == 0 for v in features.values())
    assert pred.predict(features).shape == (0, 1)


@pytest.mark.parametrize("name", ["tlp", "pacm", "mtl"])
def test_the_example_configs_are_valid_and_one_trains(trained, tmp_path, name):
    """configs/*.yaml, the examples the docs point at: each is a valid training config; the TLP one trains
    as written, given a dataset, a split and a run dir on the command line."""
    config = Path(__file__).parent.parent / "configs" / f"{name}.yaml"
    assert load_config(config)["model"] == name
    if name != "tlp":
        return
    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    assert main(["dataset", "split", str(data), "--by", "task"]) == 0
    assert main(["train", "--config", str(config), "--data", str(data), "--out", str(tmp_path / "run"),
                 "--epochs", "1", "--no-progress", *TINY[:4]]) == 0
    assert (tmp_path / "run" / "model" / "config.json").exists()


def test_evaluating_a_fine_tuned_model_says_which_test_records_its_pretraining_saw(trained, tmp_path, capsys):
    """A model trained on split a, fine-tuned on split b of the same dataset, keeps a's name and digest
    (``lineage``, through both fine-tuning paths): evaluated on b's test part, which a trained on in part, it
    says how many of those records its pretraining saw; a model trained once on a says how many its own training
    saw."""
    import json

    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    for name, seed in (("a", "0"), ("b", "1")):
        assert main(["dataset", "split", str(data), "--by", "task", "--seed", seed, "--name", name]) == 0
    assert main(["train", "--data", str(data), "--split", "a", "--out", str(tmp_path / "m"), "--epochs", "1",
                 "--no-progress", *TINY]) == 0
    for how, extra in (("lists", []), ("lightning", ["--epochs", "1", *TINY])):
        out = tmp_path / f"ft-{how}"
        assert main(["finetune", "--from", str(tmp_path / "m"), "--data", str(data), "--platform", "llvm-x86_64-2c",
                     "--split", "b", "--out", str(out), "--no-progress", *extra]) == 0
        config = json.loads((out / "model" / "config.json").read_text())
        assert [step["split"] for step in config["lineage"]] == ["a"] and config["split"] == "b"
        capsys.readouterr()
        assert main(["evaluate", "--model", str(out), "--data", str(data), "--split", "b", "--json"]) == 0
        out_, err = capsys.readouterr()
        result = json.loads(out_)
        with open_dataset(data) as ds:
            table = ds.records("llvm-x86_64-2c")
            test_b = ds.split("b").is_test(table.task)
            seen = int(np.count_nonzero(test_b & ~ds.split("a").is_test(table.task)))
        assert seen > 0 and f"{seen} of the {int(test_b.sum())} evaluated records are among those the model was " \
            "pretrained on before fine-tuning (the training part of split 'a')" in err
        assert len(result["pretrained_on"]) == 1
    capsys.readouterr()
    # the model trained once, on a: no pretraining to speak of, but its own training part holds some of b's test
    assert main(["evaluate", "--model", str(tmp_path / "m"), "--data", str(data), "--split", "b", "--json"]) == 0
    out_, err = capsys.readouterr()
    assert "pretrained" not in err and json.loads(out_)["trained_on"] == [
        f"{seen} of the {int(test_b.sum())} evaluated records are among those the model trained on (the training "
        "part of split 'a'): its scores of them are not held-out scores"]
    assert main(["evaluate", "--model", str(tmp_path / "m"), "--data", str(data), "--split", "a"]) == 0
    assert "training part" not in capsys.readouterr().err  # its own split: held out
    copied = tmp_path / "copy" / "c.h5"  # a copy under another name: the same tasks, the same records trained on
    copied.parent.mkdir()
    shutil.copy(data, copied)
    assert main(["evaluate", "--model", str(tmp_path / "m"), "--data", str(copied), "--split", "b", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["trained_on"][0].startswith(f"{seen} of the {int(test_b.sum())}")
    # fine-tuned again on b: its lineage holds a and b, each once; a copy of the dataset elsewhere holds the same
    # tasks (its splits hold out the same records): what the pretraining saw is said there too
    again = tmp_path / "ft-again"
    assert main(["finetune", "--from", str(tmp_path / "ft-lists"), "--data", str(data), "--platform",
                 "llvm-x86_64-2c", "--split", "b", "--out", str(again), "--no-progress"]) == 0
    assert [step["split"] for step in json.loads((again / "model" / "config.json").read_text())["lineage"]] == \
        ["a", "b"]
    other = tmp_path / "other.h5"
    shutil.copy(data, other)
    capsys.readouterr()
    assert main(["evaluate", "--model", str(again), "--data", str(other), "--split", "b", "--json"]) == 0
    assert f"{seen} of the {int(test_b.sum())} evaluated records are among those the model was pretrained on" \
        in capsys.readouterr().err
    with DatasetWriter(other) as w:  # another dataset: other tasks under the same indices
        w.tasks[0] = dataclasses.replace(w.tasks[0], workload_hash="another")
    assert main(["evaluate", "--model", str(again), "--data", str(other), "--split", "b", "--json"]) == 0
    assert "pretrained" not in capsys.readouterr().err


def _last_epoch(run: Path) -> int:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["epoch"]


def test_last_checkpoint_is_the_latest_epoch_and_a_fresh_run_deletes_the_old_ones(trained, tmp_path, capsys):
    """last.ckpt, what --resume continues from, is the latest epoch's whether or not validation improved (a
    ModelCheckpoint's save_last alone kept the best epoch's). A run started afresh into a directory of an earlier
    run's checkpoints is refused, and with --overwrite deletes them first (never a last-v1.ckpt beside theirs,
    which --resume would not read); --resume then continues the new run."""
    import json

    from conftest import error_line

    out = tmp_path / "run"
    args = ["train", "--data", str(trained / "d.h5"), "--out", str(out), "--no-progress", *TINY[:4]]  # with validation
    assert main([*args, "--epochs", "3"]) == 0
    assert _last_epoch(out) == 2
    shutil.rmtree(out / "model")  # as a run interrupted before its end leaves it: checkpoints, no model
    capsys.readouterr()
    assert main([*args, "--epochs", "1"]) == 2
    line = error_line(capsys)
    assert "holds the checkpoints of an earlier run" in line and "--resume" in line and "--overwrite" in line, line
    assert main([*args, "--epochs", "1", "--overwrite"]) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["best-epoch=0.ckpt", "last.ckpt"]
    assert _last_epoch(out) == 0
    one = json.loads((out / "summary.json").read_text())
    assert main([*args, "--epochs", "2", "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert _last_epoch(out) == 1 and summary["epochs"] == 2
    # the resumed run counts the epoch before it too: two epochs' records, and more seconds than the first
    assert summary["records_seen"] == 2 * one["records_seen"] > 0
    assert summary["wall_seconds"] > one["wall_seconds"]


def test_interrupted_training_ends_as_costlab_commands_do(trained, tmp_path):
    """Ctrl-C during training: Lightning catches it and would exit 1; costlab's own contract holds instead (exit
    130, one line saying what is kept), and the last finished epoch's checkpoint is there to --resume from."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "costlab", "train", "--data", str(trained / "d.h5"), "--out",
                             str(out), "--epochs", "100000", "--no-progress", *TINY],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            # a job started in the background (CI) inherits SIGINT ignored; a terminal's Ctrl-C is not
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not (out / "checkpoints" / "last.ckpt").exists():  # training has begun: an epoch is done
            assert proc.poll() is None and time.time() < deadline, "the training run never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "costlab: interrupted; data written before is kept" in err and "Traceback" not in err, err
    assert _last_epoch(out) >= 0 and not (out / "model").exists()



def test_an_interrupt_python_swallowed_still_stops_training(trained, tmp_path, monkeypatch):
    """A Ctrl-C that arrives while a ``__del__`` runs raises its KeyboardInterrupt there, and Python swallows it
    ("Exception ignored in ..."): a run of many epochs went on as if nothing had come (once under CI, a test's
    SIGINT left training running for good). The signal is noted as it arrives and raised again at the next batch."""
    import signal

    from costlab.train.config import load_config
    from costlab.train.fit import train
    from costlab.train.module import CostModelModule

    class Swallowed:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # its KeyboardInterrupt is raised here, in __del__: ignored

    epochs = []

    def training_step(self, batch, batch_idx, real=CostModelModule.training_step):
        if self.current_epoch == 1 and not epochs:
            epochs.append(self.current_epoch)
            Swallowed()  # made and dropped at once
        return real(self, batch, batch_idx)

    monkeypatch.setattr(CostModelModule, "training_step", training_step)
    cfg = load_config(None, ["trainer.max_epochs=300", "net.d_model=16", "net.attention_heads=2",
                             "data_options.val_fraction=0"], model="tlp", data=str(trained / "d.h5"),
                      out=str(tmp_path / "run"))
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job's is ignored
    try:
        with pytest.raises(KeyboardInterrupt):
            train(cfg, progress=False)
        assert epochs == [1] and _last_epoch(tmp_path / "run") < 5
        # one swallowed after the last batch (here as the fit ends) interrupts the run all the same: no model
        monkeypatch.setattr(CostModelModule, "on_fit_end", lambda self: Swallowed(), raising=False)
        cfg = dict(cfg, out=str(tmp_path / "run2"), trainer=dict(cfg["trainer"], max_epochs=2))
        with pytest.raises(KeyboardInterrupt):
            train(cfg, progress=False)
        assert not (tmp_path / "run2" / "model").exists()
    finally:
        signal.signal(signal.SIGINT, before)


def test_training_runs_from_a_thread_other_than_the_main_one(trained, tmp_path):
    """Signal handlers can only be set in the main thread: training started from another (a notebook's or a job
    runner's worker) trains without noting signals, as Lightning does there, instead of failing at its start."""
    import threading

    from costlab.train.config import load_config
    from costlab.train.fit import train

    cfg = load_config(None, ["trainer.max_epochs=1", "net.d_model=16", "net.attention_heads=2",
                             "data_options.val_fraction=0"], model="tlp", data=str(trained / "d.h5"),
                      out=str(tmp_path / "run"))
    result = {}

    def run():
        try:
            result["summary"] = train(cfg, progress=False)
        except BaseException as exc:  # noqa: BLE001  reported below
            result["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(300)
    assert "error" not in result, result.get("error")
    assert result["summary"]["train_records"] == 80

def test_validation_is_drawn_among_tasks_where_a_program_ran(trained, tmp_path):
    """A task whose programs all failed has 2+ labelled records (a failure scores 0) but nothing for the validation
    top-1 to rank: drawn for validation, it emptied the part (its rows trained) though other tasks could rank."""
    import shutil

    import h5py

    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    with h5py.File(data, "a") as f:
        g = f["records"]["llvm-x86_64-2c"]
        g["error"][np.flatnonzero(g["task"][:] == 3)] = 1  # every program of task 3 failed
    for seed in range(6):
        dm = CostDataModule(DataConfig(data=str(data), seed=seed))
        dm.setup()
        tasks = set(dm.labels.task[dm.val_rows].tolist())
        assert tasks and 3 not in tasks, (seed, tasks)


def test_records_the_featurizer_cannot_read_train_no_model(ansor_data, tmp_path, capsys):
    """PaCM replays MetaSchedule traces and reads none of an Ansor log's records: a net fitted on their empty
    features was written as a model, and XGBoost on them ended in numpy's traceback."""
    for kind, words in (("pacm", "the pacm featurizer could read none of the 128 training records"),
                        ("xgb", "no training record of 'platinum-8358' to fit the xgb baseline on")):
        out = tmp_path / kind
        assert main(["train", "--model", kind, "--data", str(ansor_data), "--out", str(out), "--epochs", "1",
                     "--no-progress", "--set", "data_options.val_fraction=0"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and words in err, err
        assert not (out / "model").exists()


def test_a_model_trained_on_every_record_says_so_when_scored_on_a_split(trained, tmp_path, capsys):
    """A model trained without a split saw every record of its dataset: scored on a split's test part, or
    fine-tuned and then scored, it said nothing, and its figures read as held-out ones."""
    import json

    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    assert main(["dataset", "split", str(data), "--by", "task", "--seed", "0", "--name", "a"]) == 0
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "all"), "--epochs", "1", "--no-progress",
                 *TINY]) == 0
    assert main(["finetune", "--from", str(tmp_path / "all"), "--data", str(data), "--platform", "llvm-x86_64-2c",
                 "--split", "a", "--out", str(tmp_path / "ft"), "--no-progress"]) == 0
    capsys.readouterr()
    for model, key in (("all", "trained_on"), ("ft", "pretrained_on")):
        assert main(["evaluate", "--model", str(tmp_path / model), "--data", str(data), "--split", "a", "--json"]) == 0
        out, err = capsys.readouterr()
        (note,) = json.loads(out)[key]
        assert note.startswith("20 of the 20 evaluated records are among those the model ") and \
            f"(every record of {data}: it trained without a split)" in note and note in err, (note, err)


def test_lightning_finetuning_of_a_multi_head_model_starts_from_the_platforms_head(ansor_data, tmp_path, capsys):
    """An MTL model's Lightning fine-tuning trains and scores with the first head: to another of its platforms
    it silently started from the first platform's head and dropped that platform's own. Refused, naming the
    recipes that start from that head; a platform of none of its heads is refused as the default recipe does;
    to its first platform it runs."""
    dst = tmp_path / "two.h5"
    _second_platform(ansor_data, dst, 0.5)
    mtl = tmp_path / "mtl"
    assert main(["train", "--model", "mtl", "--data", str(dst), "--platform", PLATFORM, "--platform", "other",
                 "--out", str(mtl), "--epochs", "1", "--no-progress", *sum((["--set", s] for s in SMALL_NET), []),
                 "--set", "data_options.val_fraction=0"]) == 0
    base = ["finetune", "--from", str(mtl), "--data", str(dst), "--recipe", "lightning", "--epochs", "1",
            "--no-progress", "--set", "data_options.val_fraction=0"]
    capsys.readouterr()
    for platform, words in (("other", "fine-tunes a model of several heads through its first"),
                            ("nosuch", "has none for 'nosuch'")):
        out = tmp_path / f"ft-{platform}"
        assert main([*base, "--platform", platform, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and words in err, err
        assert not (out / "model").exists()
    assert main([*base, "--platform", PLATFORM, "--out", str(tmp_path / "ft-first")]) == 0


def test_a_second_training_into_the_same_run_dir_is_refused_while_the_first_runs(trained, tmp_path, capsys):
    """Two trainings into one run dir mixed their options, checkpoints and model, both exiting 0 (and a --resume
    then continued one run's checkpoint with the other's options): the run dir is locked for the whole run."""
    from conftest import error_line

    from costlab.common.locks import take_lock
    from costlab.train.run_dir import LOCK

    out = tmp_path / "run"
    out.mkdir()
    args = ["train", "--data", str(trained / "d.h5"), "--out", str(out), "--epochs", "1", "--no-progress", *TINY]
    with take_lock(out / LOCK, wait=False, holder="train"):  # a training running into it
        assert main(args) == 2
        assert error_line(capsys) == (f"costlab: error: {out}: another costlab train is training into this run dir; "
                                      "wait for it to end, or give another --out")
        assert not (out / "checkpoints").exists()
    assert main(args) == 0  # free once it has ended


def test_training_reads_the_features_of_the_file_it_was_set_up_from(trained, tmp_path):
    """A `costlab featurize` with another config replaces the dataset's feature cache (a new file renamed over
    it): a training set up before it read its labels and featurizer from the old file and its features from the
    new one, where its cache is gone (a traceback). It reads them from the file it was set up from."""
    from costlab.train.data import CostDataModule, DataConfig

    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    dm = CostDataModule(DataConfig(data=str(data), featurizer="tlp", val_fraction=0.0))
    dm.setup()
    try:
        assert main(["featurize", str(data), "--featurizer", "tlp", "--config", '{"num_slots": 12}',
                     "--no-progress"]) == 0
        batch = next(iter(dm.train_dataloader()))
        assert batch["numeric"].shape[-1] == dm.featurizer.config["num_slots"] == 16
    finally:
        dm.teardown()


def test_resuming_a_checkpoint_without_the_counts_of_its_epochs_says_the_figures_are_unknown(trained, tmp_path):
    """A checkpoint of an older costlab keeps no counts of the epochs before it: a run resumed from one would report
    the resumed part's records and seconds as the whole run's. They are null instead (unknown)."""
    import json

    out = tmp_path / "run"
    args = ["train", "--data", str(trained / "d.h5"), "--out", str(out), "--no-progress", *TINY]
    assert main([*args, "--epochs", "1"]) == 0
    last = out / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    assert "_Throughput" in ckpt["callbacks"]
    del ckpt["callbacks"]["_Throughput"]  # as an older costlab saved it
    torch.save(ckpt, last)
    assert main([*args, "--epochs", "2", "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs"] == 2
    assert summary["records_seen"] is summary["train_records_per_s"] is summary["wall_seconds"] is None


def test_a_model_records_its_dataset_by_an_absolute_path(trained, tmp_path, monkeypatch):
    """A model recorded its dataset as typed ("d.h5"): `export` run from another folder then described whatever
    dataset of that name it found there, or none. The path is absolute."""
    import json

    monkeypatch.chdir(trained)
    assert main(["train", "--data", "d.h5", "--out", str(tmp_path / "run"), "--epochs", "1", "--no-progress",
                 *TINY]) == 0
    config = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert config["dataset"] == str(trained / "d.h5")


def test_a_grown_copy_of_the_dataset_counts_only_the_tasks_the_model_saw(trained, tmp_path, capsys):
    """A copy with tasks added since is the model's dataset by its first tasks: its added tasks' records were
    counted as trained on, and the warning named the evaluated file as the one the model trained on."""
    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "m"), "--epochs", "1", "--no-progress",
                 *TINY]) == 0
    grown = tmp_path / "grown.h5"
    shutil.copy(data, grown)
    assert main(["dataset", "import-ms", str(FIXTURES / "ms_tune_db"), "-o", str(grown), "--platform",
                 "llvm-x86_64-2c"]) == 0
    assert main(["dataset", "split", str(grown), "--test-fraction", "0.5", "--name", "t50"]) == 0
    with open_dataset(grown) as ds:
        task = ds.records("llvm-x86_64-2c").task
        test = ds.split("t50").is_test(task)
        seen, added = int(np.count_nonzero(test & (task < 4))), int(np.count_nonzero(test & (task >= 4)))
    assert seen and added, "the split holds out tasks the model saw and tasks added since (what this is about)"
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "m"), "--data", str(grown), "--split", "t50", "--json"]) == 0
    (note,) = json.loads(capsys.readouterr()[0])["trained_on"]
    assert note.startswith(f"{seen} of the {seen + added} evaluated records") and str(data) in note


def _with_an_unreadable_record(tmp_path) -> Path:
    """The Ansor MLP fixture as a dataset (128 records), and one record more whose step list is cut off."""
    from costlab.datasets.ansor_log import import_ansor

    data = tmp_path / "d.h5"
    import_ansor([FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"], data, progress=False)
    with DatasetWriter(data) as w:
        batch = RecordBatch()
        batch.append(0, '[["SP", 2, 0', [1e-3], 0, 0.0, 12345)  # a cut-off step list
        w.add_records("platinum-8358", batch)
    return data


def test_records_the_featurizer_cannot_read_are_left_out_of_training(tmp_path, capsys):
    """A record whose schedule the featurizer cannot read trained with empty features (teaching the net a score for
    no program at all, while a tuning run scores such a candidate last without the net). It is left out of training
    and of fine-tuning, said with its count; its latency still sets its task's best."""
    data = _with_an_unreadable_record(tmp_path)
    args = ["--data", str(data), "--platform", "platinum-8358", "--no-progress", *TINY]
    assert main(["train", *args, "--out", str(tmp_path / "run"), "--epochs", "1",
                 "--set", "data_options.val_fraction=0"]) == 0
    assert "1 of the 129 training records have no tlp features" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["train_records"] == 128
    assert main(["finetune", "--from", str(tmp_path / "run" / "model"), "--data", str(data), "--platform",
                 "platinum-8358", "--out", str(tmp_path / "ft")]) == 0
    assert "they are left out of fine-tuning" in capsys.readouterr().err
    assert json.loads((tmp_path / "ft" / "summary.json").read_text())["records"] == 128


def test_a_run_that_trained_on_unreadable_records_resumes_without_them(tmp_path, capsys, monkeypatch):
    """A run an earlier costlab trained on records its featurizer cannot read recorded them among its training
    records: its resume was refused as if the dataset had changed. It goes on without them, and says so."""
    import costlab.train.fit as fit

    data = _with_an_unreadable_record(tmp_path)
    argv = ["train", "--data", str(data), "--platform", "platinum-8358", "--no-progress", *TINY,
            "--out", str(tmp_path / "run"), "--set", "data_options.val_fraction=0"]
    with monkeypatch.context() as m:
        m.setattr(fit, "_check_readable", lambda data, dm: None)  # as the earlier costlab trained
        assert main([*argv, "--epochs", "1"]) == 0
    capsys.readouterr()
    assert main([*argv, "--epochs", "2", "--resume"]) == 0
    assert "it goes on without them" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["epochs"] == 2
