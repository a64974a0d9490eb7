"""Models of one head per platform (``mtl``) and runs started from them: a head is trained on its own platform's
labels or refused, and scores only its own platform unless asked."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import TINY, copy_platform, error_line
from costlab.cli import main
from costlab.datasets import open_dataset

PLATFORM = "llvm-x86_64-2c"  # ms_small.h5's: 4 tasks of 20 records


@pytest.fixture(scope="module")
def platforms(trained, tmp_path_factory):
    """``trained``'s dataset with two more platforms of the same programs: ``other`` (every record, costs scaled
    by task) and ``few`` (the first task's records only), and an mtl model of the first two, trained one epoch."""
    base = tmp_path_factory.mktemp("heads")
    data = base / "d.h5"
    shutil.copy(trained / "d.h5", data)
    with open_dataset(data) as ds:
        task = ds.records(PLATFORM).task
    copy_platform(data, PLATFORM, "other", {"kind": "llvm", "num-cores": 1}, costs=lambda i, raw: raw * (1.5 + task[i]))
    copy_platform(data, PLATFORM, "few", {"kind": "llvm", "num-cores": 4}, rows=np.flatnonzero(task == 0))
    assert main(["train", "--model", "mtl", "--data", str(data), "--platform", PLATFORM, "--platform", "other",
                 "--out", str(base / "mtl"), "--epochs", "1", "--no-progress", *TINY]) == 0
    return base


def _train(data, out, *args) -> list:
    return ["train", "--data", str(data), "--out", str(out), "--epochs", "1", "--no-progress", *TINY, *args]


def test_a_head_of_too_few_labels_is_refused_and_records_no_head_learns_from_are_counted(platforms, tmp_path,
                                                                                         capsys):
    """With ``mtl_rows: base`` an mtl model learns from the rows' platform's records, labelled on every platform
    that measured the same program: a head of a platform that measured none of them was written untrained, and
    another platform's records of programs the rows' platform never measured were dropped without a word."""
    data = platforms / "d.h5"
    capsys.readouterr()
    # rows: 'few''s 20 records (task 0), labelled on PLATFORM too; PLATFORM's 60 records of tasks 1-3 train no head
    args = ["--model", "mtl", "--set", "data_options.base_platform=few", "--set", "data_options.mtl_rows=base",
            "--platform", "few"]
    assert main(_train(data, tmp_path / "a", *args, "--platform", PLATFORM)) == 0
    assert "costlab: note: 60 of the 80 records of 'llvm-x86_64-2c' train no head" in capsys.readouterr().err
    # a platform of task 1's programs alone: none of them among the rows' (task 0's), so its head has no label
    assert main(_train(_apart(data, tmp_path), tmp_path / "b", *args, "--platform", "apart")) == 2
    assert "the head of platform 'apart' has 0 labelled training record(s)" in error_line(capsys)
    assert not (tmp_path / "b" / "model").exists()
    assert main(_train(data, tmp_path / "c", "--model", "mtl", "--platform", PLATFORM, "--platform", PLATFORM)) == 2
    assert "each platform once (one head each)" in error_line(capsys)


def _apart(data, tmp_path):
    """``data`` with one more platform, 'apart', of task 1's programs alone."""
    shutil.copy(data, tmp_path / "apart.h5")
    with open_dataset(data) as ds:
        task_1 = np.flatnonzero(ds.records(PLATFORM).task == 1)
    copy_platform(tmp_path / "apart.h5", PLATFORM, "apart", {"kind": "llvm", "num-cores": 8}, rows=task_1)
    return tmp_path / "apart.h5"


def test_an_mtl_model_learns_from_every_program_any_of_its_platforms_measured(platforms, tmp_path, capsys):
    """By default (``mtl_rows: union``) the rows are every program of any platform, once each: the first platform's
    records, then the others' of programs it has none of, each labelled on every platform that measured it; where
    the first platform's records alone were the rows, a head of a platform that measured other programs had no
    label, and the other platforms' records of programs outside the first's trained nothing."""
    data = _apart(platforms / "d.h5", tmp_path)
    capsys.readouterr()
    assert main(_train(data, tmp_path / "u", "--model", "mtl", "--platform", "few", "--platform", "apart",
                       "--platform", PLATFORM)) == 0
    assert "train no head" not in capsys.readouterr().err
    summary = json.loads((tmp_path / "u" / "summary.json").read_text())
    # few: task 0 (20), apart: task 1 (20), PLATFORM: tasks 2-3 (40) not yet rows; no program twice
    assert summary["row_platforms"] == ["few", "apart", PLATFORM]
    assert summary["train_records"] + summary["val_records"] + summary["test_records"] == 80
    config = (tmp_path / "u" / "config.yaml").read_text()
    assert "mtl_rows: union" in config  # recorded, so that a resumed run keeps its rows
    # a platform of no program the rows lack adds no rows, and is neither featurized nor loaded for them
    assert json.loads((platforms / "mtl" / "summary.json").read_text())["row_platforms"] == [PLATFORM]


def test_rows_of_several_heads_given_to_a_one_head_run_do_not_stop_its_resume(platforms, tmp_path):
    """``mtl_rows`` means nothing to a one-head model: given to its resume (a config shared by every run), it was
    compared with the 'base' rows of a run recorded before the option, and the resume refused."""
    out = tmp_path / "tlp"
    assert main(_train(platforms / "d.h5", out, "--platform", PLATFORM)) == 0
    assert main([*_train(platforms / "d.h5", out, "--platform", PLATFORM, "--set", "data_options.mtl_rows=union"),
                 "--resume", "--epochs", "2"]) == 0


def test_a_multi_head_run_recorded_before_its_rows_were_an_option_resumes_on_its_first_platforms_records(
        platforms, tmp_path, capsys):
    """A run whose config.yaml has no ``mtl_rows`` was trained, by an older costlab, on the first platform's
    records alone: resumed, it continues on those rows, not on every platform's programs."""
    data, out = platforms / "d.h5", tmp_path / "old"
    args = ["--model", "mtl", "--platform", "few", "--platform", PLATFORM]
    assert main(_train(data, out, *args, "--set", "data_options.mtl_rows=base")) == 0
    config = out / "config.yaml"
    config.write_text(config.read_text().replace("  mtl_rows: base\n", ""))
    assert "mtl_rows" not in config.read_text()
    capsys.readouterr()
    assert main([*_train(data, out, *args), "--resume", "--epochs", "2"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["row_platforms"] == ["few"] and summary["epochs"] == 2
    assert summary["train_records"] + summary["val_records"] + summary["test_records"] == 20


def test_evaluating_a_platform_no_head_is_for_needs_a_head(platforms, capsys):
    """An mtl model of heads [PLATFORM, other] asked for 'few' scored it with its first head, without a word."""
    args = ["evaluate", "--model", str(platforms / "mtl"), "--data", str(platforms / "d.h5"), "--platform", "few",
            "--split", "none", "--json"]
    assert main(args) == 2
    assert "has none for platform 'few'; give --head PLATFORM" in error_line(capsys)
    assert main([*args, "--head", "other"]) == 0
    assert json.loads(capsys.readouterr().out)["head"] == 1


def test_a_run_started_from_a_model_keeps_its_heads_platforms(platforms, trained, tmp_path, capsys):
    """``train --set init_from`` keeps the source's net and its heads: the platforms in another order trained each
    head on the other's labels; a platform past its heads was never trained; a one-head model starting an mtl run
    left the second platform's labels unused. Each is refused before featurizing."""
    data, mtl = platforms / "d.h5", platforms / "mtl"
    cases = [(["--model", "mtl", "--platform", "other", "--platform", PLATFORM], mtl, "its heads are trained as"),
             (["--model", "mtl", "--platform", PLATFORM, "--platform", "other", "--platform", "few"], mtl,
              "its heads are trained as"),
             (["--model", "mtl", "--platform", PLATFORM, "--platform", "other"], trained / "run",
              "a one-head model starts no model of several heads: train the mtl model afresh"),
             (["--platform", "other"], mtl, "starts a one-head run through its first head")]
    for args, source, words in cases:
        out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        assert main(_train(data, out, *args, "--set", f"init_from={source}")) == 2
        assert words in error_line(capsys), args
        assert not (out / "model").exists()
    assert main(_train(data, tmp_path / "same", "--model", "mtl", "--platform", PLATFORM, "--platform", "other",
                       "--set", f"init_from={mtl}")) == 0


@pytest.mark.parametrize("args, words", [
    (["--set", "momentum=0.99"], "the Siamese momentum rule fine-tunes a trained model; give init_from"),
    (["--model", "mtl", "--platform", PLATFORM, "--platform", "other", "--set", "net.hardware_dim=8"],
     "its training feeds every head the first platform's hardware vector")])
def test_options_a_run_could_not_learn_from_are_refused(platforms, tmp_path, capsys, args, words):
    """Momentum without a model to fine-tune restarted every round from a copy of the random weights (training went
    nowhere); an mtl model's hardware input fed every head the rows' platform's vector in training and each
    platform's own when scoring."""
    assert main(_train(platforms / "d.h5", tmp_path / "r", *args)) == 2
    assert words in error_line(capsys)


def test_fine_tuning_a_model_of_several_heads_to_a_platform_of_none_is_refused_before_featurizing(
        platforms, capsys, monkeypatch, tmp_path):
    """The fitted recipes refused it only after computing the features of every training record (minutes of PaCM on
    a corpus)."""
    import costlab.train.finetune as finetune

    def featurized(*args, **kwargs):
        raise AssertionError("featurized before the refusal")

    monkeypatch.setattr(finetune, "features_of", featurized)
    assert main(["finetune", "--from", str(platforms / "mtl"), "--data", str(platforms / "d.h5"), "--platform", "few",
                 "--out", str(tmp_path / "ft")]) == 2
    assert "a model of several heads (llvm-x86_64-2c, other) has none for 'few'" in error_line(capsys)


def test_a_resume_after_a_head_gained_labels_of_its_rows_is_refused(platforms, tmp_path, capsys):
    """Records a head's platform gained of programs that are rows already change that head's labels, not the rows:
    the resume's digest of the parts' records did not see it, and the rest of the run trained on other labels."""
    data, out = tmp_path / "d.h5", tmp_path / "run"
    shutil.copy(platforms / "d.h5", data)
    args = _train(data, out, "--model", "mtl", "--platform", PLATFORM, "--platform", "few",
                  "--set", "data_options.val_fraction=0.3")
    assert main(args) == 0
    with open_dataset(data) as ds:
        task = ds.records(PLATFORM).task
    copy_platform(data, PLATFORM, "few", {"kind": "llvm", "num-cores": 4}, rows=np.flatnonzero(task == 1))
    capsys.readouterr()
    assert main([*args[:args.index("--epochs")], "--epochs", "2", *args[args.index("--epochs") + 2:],
                 "--resume"]) == 2
    assert "trained and validated on changed since" in error_line(capsys)
