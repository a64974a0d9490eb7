"""Adapting the shipped model to another machine's records (tests/fixtures/zen5_small: six tasks measured on
an AMD Zen 5, a CPU the model was not trained on; scripts/make_zen5_fixture.py regenerates it): a guarded
fine-tuning recipe never lowers a metric it reports on its own validation part; the online update moves the
model's scores of measured programs toward their measured order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from costlab.cli import main
from costlab.datasets import open_dataset
from costlab.featurizers.base import same_features
from costlab.featurizers.pacm import PaCM

FIXTURE = Path(__file__).parent / "fixtures" / "zen5_small"
PLATFORM = "llvm-znver5-2c"
SPLIT = "task60-s0"  # 4 of the 6 tasks held out: fine-tuning sees 2

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zen5(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("zen5") / "zen5.h5"
    assert main(["dataset", "import-ms", str(FIXTURE), "-o", str(data)]) == 0
    assert main(["dataset", "split", str(data), "--by", "task", "--test-fraction", "0.6", "--seed", "0"]) == 0
    with open_dataset(data) as ds:
        assert len(ds.split(SPLIT).test_tasks) == 4
    return data


def _held_out(model, data) -> dict:
    from costlab.train.evaluate import evaluate

    r = evaluate(str(model), data, split=SPLIT, part="test", platform=PLATFORM)
    return dict(top1=r["top1"], top5=r["top5"], pairwise=r["pairwise"])


def test_default_recipe_never_lowers_a_guarded_metric_on_its_validation_part(zen5, tmp_path):
    """What the guard promises on every machine: on the validation part it held out, the adapted model's
    pairwise accuracy, top-1 and top-5 are each at least the pretrained model's (how that carries to held-out
    tasks is a training outcome, measured by benchmarks/adapt.py, not asserted here)."""
    import json

    from costlab.costmodels.recipe import GUARDED

    for name in ("safe", "all-guarded"):
        argv = ["finetune", "--from", "x86-cpu", "--data", str(zen5), "--platform", PLATFORM, "--split", SPLIT,
                "--out", str(tmp_path / name), "--recipe", name]
        assert main(argv) == 0
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        before, after = summary["val_metrics_before"], summary["val_metrics_after"]
        assert summary["guarded"] == list(GUARDED) == ["pairwise", "top1", "top5"]
        assert all(after[m] >= before[m] for m in GUARDED), (name, before, after)
        assert summary["val_after"] == after["pairwise"] and summary["val_before"] == before["pairwise"]
        if summary["kept_pretrained"]:
            assert after == before


def test_guard_keeps_an_update_only_when_no_guarded_metric_gets_worse():
    """The guard's rule on known numbers: a step that raises pairwise accuracy but lowers top-1 below the
    pretrained net's is not kept (the update the Zen 4 run kept), one that lowers nothing and beats the best is."""
    from costlab.costmodels.recipe import guard_accepts

    before = dict(pairwise=0.748, top1=0.699, top5=0.9)
    best = dict(before)
    assert not guard_accepts(before, dict(pairwise=0.760, top1=0.690, top5=0.95), best)  # top-1 worse
    assert not guard_accepts(before, dict(pairwise=0.740, top1=0.714, top5=0.95), best)  # pairwise worse
    assert not guard_accepts(before, dict(pairwise=0.748, top1=0.714, top5=0.95), best)  # no pairwise gain
    assert guard_accepts(before, dict(pairwise=0.750, top1=0.699, top5=0.9), best)
    assert not guard_accepts(before, dict(pairwise=0.750, top1=0.699, top5=0.9), best, min_gain=0.01)
    better = dict(pairwise=0.770, top1=0.72, top5=0.95)
    assert not guard_accepts(before, dict(pairwise=0.765, top1=0.8, top5=1.0), better)  # below the best kept
    nan = float("nan")
    assert guard_accepts(dict(pairwise=0.5, top1=nan, top5=nan), dict(pairwise=0.6, top1=nan, top5=nan),
                         dict(pairwise=0.5, top1=nan, top5=nan))


def test_guarded_recipe_at_a_ruinous_learning_rate_keeps_the_pretrained_weights_or_loses_nothing(zen5, tmp_path):
    """A recipe whose steps wreck the net (lr 5): whatever the arithmetic of the CPU, the guard either keeps
    the pretrained weights bit for bit or keeps a step that lowers no guarded metric on its validation part."""
    import json

    from safetensors.numpy import load_file

    from costlab.costmodels.recipes import Recipe
    from costlab.costmodels.shipped import shipped_path
    from costlab.train.finetune import finetune

    ruin = Recipe("ruin", train="all", lr=5.0, warmup=0, steps=40, l2sp=0.0, eval_every=5)
    finetune("x86-cpu", zen5, PLATFORM, tmp_path / "ruin", spec=ruin, split=SPLIT)
    summary = json.loads((tmp_path / "ruin" / "summary.json").read_text())
    before, after = summary["val_metrics_before"], summary["val_metrics_after"]
    assert all(after[m] >= before[m] for m in before)
    if summary["kept_pretrained"]:
        shipped = load_file(str(shipped_path("x86-cpu") / "model.safetensors"))
        tuned = load_file(str(tmp_path / "ruin" / "model" / "model.safetensors"))
        assert shipped.keys() == tuned.keys() and all(np.array_equal(shipped[k], tuned[k]) for k in shipped)


def test_finetune_writes_a_model_of_the_target_platform(zen5, tmp_path):
    import json

    from costlab.costmodels.artifact import read_artifact
    from costlab.costmodels.shipped import aliases, shipped_path

    assert main(["finetune", "--from", "x86-cpu", "--data", str(zen5), "--platform", PLATFORM, "--split", SPLIT,
                 "--out", str(tmp_path / "ft")]) == 0
    shipped, tuned = read_artifact(shipped_path("x86-cpu")), read_artifact(tmp_path / "ft" / "model")
    assert tuned.config["platforms"] == [PLATFORM]
    # the shipped model's features, at the revision computed now (the one the fine-tuning learned)
    assert same_features(tuned.config["featurizer"]) == same_features(shipped.config["featurizer"])
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    # weights that learned this costlab's features say so; kept pretrained ones learned the shipped model's
    assert tuned.config["featurizer"]["revision"] == (shipped.config["featurizer"]["revision"]
                                                      if summary["kept_pretrained"] else PaCM.revision)
    assert summary["recipe"]["name"] == "safe" and summary["tasks"] == 2 and summary["finetuned_from"] == aliases()["x86-cpu"]


def test_recipe_options_that_belong_to_lightning_are_refused(zen5, tmp_path, capsys):
    assert main(["finetune", "--from", "x86-cpu", "--data", str(zen5), "--platform", PLATFORM, "--recipe", "safe",
                 "--epochs", "3", "--out", str(tmp_path / "ft")]) == 2
    assert "--momentum, --epochs and --set belong to --recipe lightning" in capsys.readouterr().err


def test_online_update_moves_scores_toward_the_measured_order(zen5):
    """The adapter of a tuning run that has measured the six tasks (the last batch: one task's 32 programs)
    ranks that batch better after its update than before, and reports both; its guard held out a part of
    every task that the update never trained on, and that part is ranked better too."""
    from costlab.costmodels.adapt import OnlineAdapter
    from costlab.featurizers.cache import features_of
    from costlab.train.predict import load_predictor

    pred = load_predictor("x86-cpu")
    adapter = OnlineAdapter(pred, "finetune", seed=0)
    with open_dataset(zen5) as ds:
        if pred.hardware_dim:  # a model with a hardware input scores the records' own platform
            pred.use_platform(ds.platforms[PLATFORM])
        table = ds.records(PLATFORM)
        for task in np.unique(table.task):
            rows = np.flatnonzero(table.task == task)
            feats = features_of(ds, pred.featurizer, PLATFORM, rows)
            latency = table.latency()[rows]
            adapter.add(int(task), feats, latency)
    assert adapter.update((feats, latency))
    row = adapter.rounds[-1]
    assert row["after"] > row["before"] and row["batch"] == len(rows) and row["trained"]
    assert row["val_after"] > row["val_before"] and not row["kept_pretrained"]
    assert adapter.batch_pairwise(feats, latency) == pytest.approx(row["after"], abs=1e-4)  # reported to 4 places
    # the batch's every tail metric, before and after, the best quarter's pairwise among them
    tail = {"pairwise_q25", "top1_q25", "pairwise_q10", "top1_q10", "pick1", "pick8", "pick32"}
    assert set(row["before_tail"]) == set(row["after_tail"]) == tail
    assert row["after_tail"]["pairwise_q25"] == row["after_q25"] and 0 < row["after_tail"]["pick8"] <= 1


def _adapter_and_six_records(zen5) -> tuple:
    """The shipped model's online adapter, and six records of the fixture's first task: their features and
    latencies."""
    from costlab.costmodels.adapt import OnlineAdapter
    from costlab.featurizers.cache import features_of
    from costlab.train.predict import load_predictor

    pred = load_predictor("x86-cpu")
    adapter = OnlineAdapter(pred, "finetune", seed=0)
    with open_dataset(zen5) as ds:
        if pred.hardware_dim:
            pred.use_platform(ds.platforms[PLATFORM])
        table = ds.records(PLATFORM)
        rows = np.flatnonzero(table.task == table.task[0])[:6]
        return adapter, features_of(ds, pred.featurizer, PLATFORM, rows), table.latency()[rows]


def test_a_record_held_out_for_validation_is_never_trained_on(zen5):
    """A task whose held-out records are too few to validate yet (one here) trains on the others only: that
    record validates a later update, which must not have trained on it."""
    adapter, feats, latency = _adapter_and_six_records(zen5)
    adapter.add("t", feats, latency)
    adapter._val["t"] = [np.array([True, False, False, False, False, False])]
    train, val = adapter._lists()
    assert [len(score) for _, score in train] == [5] and val == []
    adapter._val["t"] = [np.array([True, True, False, False, False, False])]
    train, val = adapter._lists()
    assert [len(score) for _, score in train] == [4] and [len(score) for _, score in val] == [2]


def test_a_record_the_featurizer_cannot_read_is_in_no_list(zen5):
    """A measured candidate the featurizer could not read trained with empty features online: it is in neither the
    training nor the validation lists now (each scored within itself, as every cut list is)."""
    adapter, feats, _ = _adapter_and_six_records(zen5)
    latency = np.array([1.0, 2.0, 4.0, 4.0, 8.0, 8.0]) * 1e-3
    feats["valid"] = np.array([False, True, True, True, True, True])  # the fastest one unread
    adapter.add("t", feats, latency)
    adapter._val["t"] = [np.array([False, False, False, False, True, True])]
    train, val = adapter._lists()
    assert [score.tolist() for _, score in train] == [[1.0, 0.5, 0.5]]  # records 1-3, without record 0
    assert [score.tolist() for _, score in val] == [[1.0, 1.0]]
    assert sum(len(score) for _, score in train + val) == 5


def test_shipped_model_by_name_in_evaluate_and_export(zen5, tmp_path, capsys):
    """A shipped model's name is taken wherever a model is: finetune (above), evaluate, export, and tune's
    cost model (what `costlab tune --model x86-cpu` loads)."""
    assert main(["evaluate", "--model", "x86-cpu", "--data", str(zen5), "--split", SPLIT, "--json"]) == 0
    assert '"top1"' in capsys.readouterr().out
    assert main(["export", "x86-cpu", "-o", str(tmp_path / "m")]) == 0
    from costlab.costmodels.artifact import read_artifact

    assert read_artifact(tmp_path / "m").kind == "pacm"
    from costlab.export import CostlabCostModel

    assert CostlabCostModel("x86-cpu").predictor.kind == "pacm"


def test_the_adapt_benchmarks_baselines_come_from_the_kinds_registry(zen5):
    """benchmarks/adapt.py fits every baseline kind the registry lists on the pool's tasks and scores the
    held-out ones; the SegmentSum MLP, which validates on a held-out task, sits out a pool of one task."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import adapt

    from costlab.costmodels import kinds
    from costlab.featurizers.base import create
    from costlab.featurizers.cache import features_of

    with open_dataset(zen5) as ds:
        table = ds.records(PLATFORM)
        rows = np.arange(len(table))
        feats = features_of(ds, create(kinds.create("mlp").featurizer), PLATFORM, rows)
        task, latency = table.task.astype(np.int64), table.latency()
    t_ids = np.unique(task)
    train, test = np.flatnonzero(np.isin(task, t_ids[:3])), np.flatnonzero(np.isin(task, t_ids[3:]))
    assert kinds.baselines() == ("xgb", "mlp")
    for kind in kinds.baselines():
        s = adapt._baseline(kind, feats, task, latency, train, test, seed=0)
        assert s.shape[0] == len(test) and np.all(np.isfinite(s))
    one_task = np.flatnonzero(task == t_ids[0])
    assert adapt._baseline("mlp", feats, task, latency, one_task, test, seed=0) is None
    assert adapt._baseline("xgb", feats, task, latency, one_task, test, seed=0) is not None


def test_the_adapt_benchmark_continues_only_its_own_cells(zen5, tmp_path):
    """A results.json of another model (its weights' hash), another held-out count or other records is not
    continued: its cells would be averaged with this run's."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import adapt

    from costlab.costmodels.predictors import weights_sha256

    out = tmp_path / "adapt"
    out.mkdir()
    cell = {"s0/k1": {"zero-shot": {"top1": 0.5}}}
    argv = ["--data", str(zen5), "--out", str(out), "--k", "1", "--splits", "1", "--held-out", "2"]
    for stored, message in ((dict(model_sha256="0" * 64), "another model_sha256"),
                            (dict(model_sha256=weights_sha256("x86-cpu"), held_out=7), "another held_out"),
                            (dict(model_sha256=weights_sha256("x86-cpu"), held_out=2, data_records_sha256="0"),
                             "holds cells of other records"),
                            (dict(host="Intel Xeon Platinum 8358 (family 6 model 106), 2 threads"),
                             "holds cells of another host")):
        (out / "results.json").write_text(json.dumps(dict(stored, cells=cell)))
        with pytest.raises(SystemExit, match=message):
            adapt.main(argv)
        assert json.loads((out / "results.json").read_text())["cells"] == cell  # left as it was


def test_a_recipe_added_when_the_adapt_benchmark_continues_is_computed_for_the_cells_done(zen5, tmp_path,
                                                                                            monkeypatch):
    """A cell counted as done once it existed, whatever recipes it held: a recipe added on a continued run was
    recorded in the settings and never computed. The cells done get just the added recipe, the rest kept."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import adapt

    asked = []

    def cell(pred0, feats, psa_scores, task, latency, held, train_tasks, recipes, seed):
        asked.append(list(recipes))
        figures = dict(top1=0.5, top5=0.9, pairwise=0.7)
        return {"zero-shot": figures, **{r: figures for r in recipes}}

    monkeypatch.setattr(adapt, "run_cell", cell)
    out = tmp_path / "adapt"
    argv = ["--data", str(zen5), "--out", str(out), "--k", "1", "--splits", "1", "--held-out", "2"]
    adapt.main([*argv, "--recipes", "safe"])
    adapt.main([*argv, "--recipes", "safe,last"])
    assert asked == [["safe"], ["last"]]
    (got,) = json.loads((out / "results.json").read_text())["cells"].values()
    assert set(got) >= {"zero-shot", "safe", "last", "seconds"}


def test_a_guarded_recipe_with_nothing_to_hold_out_keeps_the_pretrained_weights(tmp_path):
    """Four programs of one task: the safe recipe's cut holds nothing out, and it trained its 300 steps unguarded,
    the over-fit the recipe exists to prevent. It keeps the pretrained weights and says why."""
    import json
    import shutil

    from conftest import FIXTURES, copy_platform

    data = tmp_path / "tiny.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    with open_dataset(data) as ds:
        (platform,) = ds.record_platforms()
        task = ds.records(platform).task
        target = dict(ds.platforms[platform].target)
    copy_platform(data, platform, "tiny", target, rows=np.flatnonzero(task == 0)[:4])
    assert main(["finetune", "--from", "x86-cpu", "--data", str(data), "--platform", "tiny", "--out",
                 str(tmp_path / "ft"), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert summary["val_records"] == 0 and summary["steps"] == 0 and summary["kept_pretrained"], summary
    assert "no validation part" in summary["note"]
