"""Adapting the shipped model to another machine's records (tests/fixtures/zen5_small: six tasks measured on
an AMD Zen 5, a CPU the model was not trained on; scripts/make_zen5_fixture.py regenerates it): the default
fine-tuning recipe never ranks held-out tasks worse than the model did zero-shot, where plain fine-tuning
does; the online update moves the model's scores of measured programs toward their measured order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from costlab.cli import main
from costlab.datasets import open_dataset

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


def test_default_recipe_is_never_worse_than_zero_shot_where_plain_finetuning_is(zen5, tmp_path):
    zero_shot = _held_out("x86-cpu", zen5)
    runs = {}
    for name in ("safe", "plain"):
        argv = ["finetune", "--from", "x86-cpu", "--data", str(zen5), "--platform", PLATFORM, "--split", SPLIT,
                "--out", str(tmp_path / name)]
        assert main(argv + ([] if name == "safe" else ["--recipe", name])) == 0  # safe is the default
        runs[name] = _held_out(tmp_path / name, zen5)
    assert all(runs["safe"][m] >= zero_shot[m] for m in zero_shot), (runs["safe"], zero_shot)
    # the check has teeth: plain fine-tuning on the same two tasks ranks the held-out ones worse
    assert any(runs["plain"][m] < zero_shot[m] for m in zero_shot), (runs["plain"], zero_shot)


def test_finetune_writes_a_model_of_the_target_platform(zen5, tmp_path):
    import json

    from costlab.costmodels.artifact import read_artifact
    from costlab.costmodels.shipped import shipped_path

    assert main(["finetune", "--from", "x86-cpu", "--data", str(zen5), "--platform", PLATFORM, "--split", SPLIT,
                 "--out", str(tmp_path / "ft")]) == 0
    shipped, tuned = read_artifact(shipped_path("x86-cpu")), read_artifact(tmp_path / "ft" / "model")
    assert tuned.config["platforms"] == [PLATFORM] and tuned.config["featurizer"] == shipped.config["featurizer"]
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert summary["recipe"]["name"] == "safe" and summary["tasks"] == 2 and summary["finetuned_from"] == "x86-cpu"


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
