"""Refusals in one line, before anything is written or replaced: option ranges of exploit, transfer and tune
that used to reach a traceback or be taken silently, fine-tuning into a directory that holds a model,
evaluating the training part of a dataset without a split; and the note when a model is evaluated on another
machine than it trained on."""

from __future__ import annotations

import shutil

import pytest

from conftest import FIXTURES, TINY
from costlab.cli import main

SMALL = FIXTURES / "ms_small.h5"
MS_DB = FIXTURES / "ms_tune_db"
PLATFORM = "llvm-x86_64-2c"


def _one_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("costlab: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv, words", [
    (["exploit", "--seed", "-1"], "--seed must be an integer from 0 to 2,147,483,646"),
    (["exploit", "--repeat", "1"], "--repeat must be an integer from 2 to 100 (a t-test needs two measurements)"),
    (["exploit", "--repeat", "0"], "--repeat must be an integer from 2 to 100 (a t-test needs two measurements)"),
    (["transfer", "--from", str(MS_DB), "--workload", "GMM:1,8,8,8", "--seed", "-1"],
     "--seed must be an integer from 0 to 2,147,483,646"),
    (["exploit", "--builder-timeout", "nan"], "--builder-timeout must be a positive number of seconds, not nan"),
    (["transfer", "--from", str(MS_DB), "--workload", "GMM:1,8,8,8", "--task", "nomatch*"],
     "--task picks tasks of a --network"),
    (["transfer", "--from", str(MS_DB), "--workload", "FOO:1"], "--workload FOO:1: unknown te_workload 'FOO'"),
    (["tune", "--workload", "GMM:1,0,8,8"], "--workload GMM:1,0,8,8: "),
    (["transfer", "--from", str(MS_DB), "--workload", "GMM:1,8,8,8", "--builder-timeout", "0"],
     "--builder-timeout must be a positive number of seconds, not 0.0"),
    (["tune", "--workload", "GMM:1,8,8,8", "--first-rounds", "8,,16"], "--first-rounds takes comma-separated"),
    (["tune", "--workload", "GMM:1,8,8,8", "--first-rounds", ","], "--first-rounds takes comma-separated"),
    (["tune", "--workload", "GMM:1,8,8,8", "--first-rounds", "99999999999999999999"], "from 1 to 1,000,000"),
    (["tune", "--workload", "GMM:1,8,8,8", "--strict"], "--strict applies to a --model, and none is given"),
    (["tune", "--workload", "GMM:1,8,8,8", "--head", "llvm-x86_64-2c"], "--head applies to a --model"),
    (["tune", "--workload", "GMM:1,8,8,8", "--model", "x86-cpuu"], "x86-cpuu: no such model"),
])
def test_option_out_of_range_is_one_line_and_writes_nothing(tmp_path, capsys, argv, words):
    work = tmp_path / "w"
    assert main([*argv, "--work-dir", str(work)]) == 2
    line = _one_error(capsys.readouterr().err)
    assert words in line, line
    assert not work.exists()


@pytest.mark.parametrize("command", ["exploit", "transfer"])
def test_builder_timeout_reaches_exploitation_and_transfer(tmp_path, monkeypatch, command):
    """``exploit`` and ``transfer`` had no ``--builder-timeout``: their builds were killed after 30 s whatever a
    tuning run of the same work dir had been given. The option reaches the options their builders start from."""
    import importlib

    from costlab.common.errors import UsageError

    module = importlib.import_module(f"costlab.commands.{command}")
    seen = []

    def record(opts, should_stop=None):
        seen.append(opts.builder_timeout)
        raise UsageError("recorded")  # the command's work itself is not what this test is about

    monkeypatch.setattr(module, command, record)
    extra = ["--from", str(MS_DB), "--workload", "GMM:1,8,8,8"] if command == "transfer" else []
    assert main([command, *extra, "--work-dir", str(tmp_path / "w"), "--builder-timeout", "90"]) == 2
    assert seen == [90.0]


def test_first_rounds_counts_are_parsed():
    from costlab.commands.tune import _counts

    assert _counts("8,16,32") == (8, 16, 32) and _counts(" 4 , 8") == (4, 8)


def test_finetune_does_not_replace_a_model_unless_told(trained, tmp_path, capsys):
    out = tmp_path / "ft"
    shutil.copytree(trained / "run", out)
    before = (out / "model" / "model.safetensors").read_bytes()
    args = ["finetune", "--from", str(trained / "run"), "--data", str(trained / "d.h5"), "--platform", PLATFORM,
            "--out", str(out)]
    assert main(args) == 2
    line = _one_error(capsys.readouterr().err)
    assert "holds a model already" in line and "--overwrite" in line
    assert (out / "model" / "model.safetensors").read_bytes() == before
    assert main([*args, "--overwrite"]) == 0  # told to: it is replaced
    assert (out / "summary.json").is_file()


def test_train_does_not_replace_a_model_unless_told(trained, tmp_path, capsys):
    """`costlab train --out RUN` into a run that holds a model: refused in one line naming --resume and
    --overwrite, the model as it was; --overwrite trains afresh into it."""
    from conftest import TINY

    out = tmp_path / "run"
    shutil.copytree(trained / "run", out)
    before = (out / "model" / "model.safetensors").read_bytes()
    args = ["train", "--data", str(trained / "d.h5"), "--out", str(out), "--epochs", "1", "--no-progress", *TINY]
    assert main(args) == 2
    line = _one_error(capsys.readouterr().err)
    assert "holds a model already" in line and "--resume" in line and "--overwrite" in line, line
    assert (out / "model" / "model.safetensors").read_bytes() == before
    assert main([*args, "--overwrite"]) == 0


def test_evaluate_train_part_needs_a_split(trained, capsys):
    for extra in ([], ["--split", "none"]):
        assert main(["evaluate", "--model", str(trained / "run"), "--data", str(trained / "d.h5"),
                     "--part", "train", *extra]) == 2
        line = _one_error(capsys.readouterr().err)
        assert "--part train needs a split" in line, line
    assert main(["evaluate", "--model", str(trained / "run"), "--data", str(trained / "d.h5"), "--part", "all"]) == 0


def test_evaluate_on_another_cpu_gives_a_note(trained, tmp_path, capsys):
    data = tmp_path / "other.h5"
    shutil.copy(trained / "d.h5", data)
    assert main(["dataset", "rename-platform", str(data), PLATFORM, "llvm-znver4-2c", "--target",
                 "llvm -mcpu=znver4 -num-cores=2"]) == 0
    assert main(["featurize", str(data), "--featurizer", "tlp", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(trained / "run"), "--data", str(data)]) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "another machine" in ln]
    assert len(notes) == 1 and notes[0].startswith("costlab: note:") and "znver4" in notes[0], notes
    assert main(["evaluate", "--model", str(trained / "run"), "--data", str(trained / "d.h5")]) == 0
    assert "another machine" not in capsys.readouterr().err  # the platform it trained on: nothing to say


def test_resume_refuses_other_options_before_touching_the_run(trained, tmp_path, capsys):
    """--resume with another model kind or net option (given or forgotten) would not load the checkpoint's
    weights: refused naming what differs, the run's config.yaml and model as they were; --resume with
    --overwrite is refused, and so is --resume into a run that holds a model but no last.ckpt (it would train
    afresh and replace the model)."""
    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    out = tmp_path / "run"
    shutil.copytree(trained / "run", out)
    kept = {p: (out / p).read_bytes() for p in ("config.yaml", "model/model.safetensors")}
    base = ["train", "--data", str(data), "--out", str(out), "--epochs", "2", "--no-progress", "--resume"]
    for extra, words in (([*TINY, "--set", "net.d_model=32"], "net.d_model 16 (now 32)"),
                         (["--set", "data_options.val_fraction=0"], "net.d_model 16 (now 256)"),
                         (["--model", "pacm", *TINY], "model 'tlp' (now 'pacm')"),
                         ([*TINY, "--overwrite"], "give one of them")):
        assert main([*base, *extra]) == 2
        line = _one_error(capsys.readouterr().err)
        assert words in line, line
        assert all((out / p).read_bytes() == b for p, b in kept.items())
    shutil.rmtree(out / "checkpoints")
    assert main([*base, *TINY]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "holds a model already" in line and "no checkpoints/last.ckpt" in line, line
    assert all((out / p).read_bytes() == b for p, b in kept.items())


def _run_copy(trained, tmp_path):
    """A copy of the trained fixture's dataset and run, and the bytes of the run's files a refusal must keep."""
    data, out = tmp_path / "d.h5", tmp_path / "run"
    shutil.copy(trained / "d.h5", data)
    shutil.copytree(trained / "run", out)
    kept = {p: (out / p).read_bytes() for p in ("config.yaml", "model/model.safetensors", "model/config.json")}
    return data, out, kept


def test_resume_refuses_another_split_seed_or_learning_rate(trained, tmp_path, capsys):
    """--resume continues a run with the options it trained with: another split would train the rest of it on
    the records the first part held out (and its model would name a split it never kept to), another lr or loss
    would not be the run config.yaml records. Refused naming what differs, nothing touched; more epochs are
    what --resume is for, and the run's own config.yaml gives every option back."""
    data, out, kept = _run_copy(trained, tmp_path)
    assert main(["dataset", "split", str(data), "--by", "task", "--seed", "0"]) == 0
    base = ["train", "--data", str(data), "--out", str(out), "--no-progress", "--resume", *TINY]
    capsys.readouterr()
    for extra, words in ((["--split", "task-s0"], "split None (now 'task-s0')"),
                         (["--set", "lr=0.05", "--set", "loss=mse"], "loss 'lambdarank' (now 'mse'); lr 0.0007 "
                                                                      "(now 0.05)"),
                         (["--set", "seed=3"], "seed 0 (now 3)")):
        assert main([*base, "--epochs", "2", *extra]) == 2
        line = _one_error(capsys.readouterr().err)
        assert words in line and f"--config {out / 'config.yaml'} --out {out} --resume" in line, line
        assert all((out / p).read_bytes() == b for p, b in kept.items())
    assert main(["train", "--config", str(out / "config.yaml"), "--out", str(out), "--resume", "--epochs", "2",
                 "--no-progress"]) == 0
    assert (out / "model" / "model.safetensors").read_bytes() != kept["model/model.safetensors"]


def test_a_refused_run_leaves_the_runs_config_and_model(trained, tmp_path, capsys):
    """Refusals that come once the data is read: a trainer option Lightning refuses (a name it does not know, an
    accelerator whose package is missing) left config.yaml rewritten with the refused options; --resume of a
    baseline kind replaced the net's model with a freshly fitted baseline; an --out that is a model itself, with
    --overwrite, made a run inside the model and left the model as it was."""
    data, out, kept = _run_copy(trained, tmp_path)
    base = ["train", "--data", str(data), "--no-progress", "--epochs", "1", *TINY]
    for extra, words in ((["--out", str(out), "--overwrite", "--set", "trainer.max_epoch=3"], "trainer options:"),
                         (["--out", str(out), "--overwrite", "--set", "trainer.accelerator=tpu"], "trainer options:"),
                         (["--out", str(out), "--resume", "--model", "xgb"], "--resume: a xgb model trains in one"),
                         (["--out", str(out / "model"), "--overwrite"], "is a model, not a run directory"),
                         (["--out", str(out), "--overwrite", "--set", "seed=4294967296"], "seed must be an integer "
                                                                                           "from 0 to 2^32 - 1")):
        assert main([*base, *extra]) == 2
        line = _one_error(capsys.readouterr().err)
        assert words in line, line
        assert all((out / p).read_bytes() == b for p, b in kept.items())
    assert sorted(p.name for p in (out / "model").iterdir()) == ["config.json", "model.safetensors"]


def test_a_run_that_trains_no_step_writes_no_model(trained, tmp_path, capsys):
    """Trainer options that train no step (no batch, no step allowed) would save the untrained net as a model. They
    were refused after the fit, when config.yaml was replaced and an --overwrite had deleted the earlier run's
    checkpoints: an earlier run given as --out is left as it was."""
    import shutil

    for option in ("trainer.limit_train_batches=0", "trainer.max_steps=0"):
        out = tmp_path / option
        shutil.copytree(trained / "run", out)
        before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        assert main(["train", "--data", str(trained / "d.h5"), "--out", str(out), "--epochs", "1", "--no-progress",
                     *TINY, "--set", option, "--overwrite"]) == 2
        line = _one_error(capsys.readouterr().err)
        assert "no training step would run" in line, line
        assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # a fraction of the batches that rounds to none: Lightning's refusal was a traceback raised in the fit
    out = tmp_path / "fraction"
    shutil.copytree(trained / "run", out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(["train", "--data", str(trained / "d.h5"), "--out", str(out), "--epochs", "1", "--no-progress",
                 *TINY, "--set", "trainer.limit_train_batches=0.01", "--overwrite"]) == 2
    assert "trainer.limit_train_batches=0.01 takes no batch of the" in _one_error(capsys.readouterr().err)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_finetuning_a_baseline_is_refused_with_every_recipe(tmp_path, trained, capsys):
    """An XGBoost model has no net: the default recipe refused it, the Lightning one (--momentum, --epochs)
    trained a fresh XGBoost on the data and called it the fine-tuned model."""
    assert main(["train", "--model", "xgb", "--data", str(trained / "d.h5"), "--out", str(tmp_path / "x"),
                 "--epochs", "2", "--no-progress"]) == 0
    for extra in ([], ["--momentum", "0.99"], ["--recipe", "lightning", "--epochs", "1"]):
        out = tmp_path / f"ft{len(extra)}"
        assert main(["finetune", "--from", str(tmp_path / "x"), "--data", str(trained / "d.h5"), "--platform",
                     PLATFORM, "--out", str(out), *extra]) == 2
        line = _one_error(capsys.readouterr().err)
        assert "a xgb model has no net to fine-tune" in line, line
        assert not (out / "model").exists()


def test_a_tilde_after_an_options_equals_sign_is_the_users_home(tmp_path, monkeypatch):
    """The shell leaves `--output=~/packs` as written (its `~` does not start a word): costlab makes it the home
    folder, as the shell would have, for a path option and a positional alike, rather than a folder named `~`."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    shutil.copy(SMALL, tmp_path / "small.h5")
    assert main(["dataset", "pack", "~/small.h5", "--output=~/packs"]) == 0
    assert (tmp_path / "packs").is_dir() and any((tmp_path / "packs").iterdir())
    assert not (tmp_path / "~").exists()


def test_the_library_folder_from_the_environment_expands_a_tilde(tmp_path, monkeypatch):
    from costlab.export.library.store import default_root

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("COSTLAB_LIBRARY", "~/lib")
    assert default_root() == tmp_path / "lib"


def test_a_tilde_in_a_training_configs_paths_is_the_users_home(tmp_path, monkeypatch):
    """`--set init_from=~/m` and `data: ~/d.h5` in a config reach no shell that would expand them."""
    from costlab.train.config import load_config

    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = load_config(None, ["init_from=~/models/m", "split=~x"], data="~/d.h5", out="~/runs/r")
    assert (cfg["data"], cfg["out"], cfg["init_from"]) == (f"{tmp_path}/d.h5", f"{tmp_path}/runs/r",
                                                           f"{tmp_path}/models/m")
    assert cfg["split"] == "~x"  # a name, not a path


def test_one_workload_written_two_ways_is_one_task():
    """GMM:1,1,1,1 and the same with its default dtypes spelt out were two tasks of one database workload: each
    got the budget, and the summary counted its records twice."""
    from costlab.export.tasks import workload_tasks
    from costlab.export.tune import TuneOptions

    tasks, _ = workload_tasks(TuneOptions("w", workloads=["GMM:1,1,1,1", "GMM:1,1,1,1,float32,float32"]), None)
    assert [t.name for t in tasks] == ["GMM:1,1,1,1"]


def test_training_on_records_that_all_failed_is_refused_and_evaluating_them_says_why(trained, tmp_path, capsys):
    """Every label 0 gives LambdaRank no pair: the run wrote a net only weight decay had moved, as a model, without a
    word; evaluate printed NaN figures with no reason."""
    from conftest import copy_platform

    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    copy_platform(data, PLATFORM, "broken", {"kind": "llvm", "num-cores": 3}, costs=lambda i, raw: [1e10] * len(raw))
    assert main(["train", "--data", str(data), "--platform", "broken", "--out", str(tmp_path / "run"),
                 "--epochs", "1", "--no-progress", *TINY]) == 2
    assert "nothing to learn" in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "run" / "model").exists()
    assert main(["evaluate", "--model", "psa", "--data", str(data), "--platform", "broken", "--split", "none"]) == 0
    assert "has two records one of which ran" in capsys.readouterr().err
