"""Training runs continued, fine-tuned and evaluated as the docs say (docs/training.md): a resumed run is the run
it continues or is refused in one line before anything is written; fine-tuning's options are used or refused,
never recorded and dropped; a run's checkpoint is evaluated on its run's split."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from conftest import TINY, error_line
from costlab.cli import main


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("costlab: error:")]
    return line


def _train(trained, out, *extra) -> int:
    return main(["train", "--data", str(trained / "d.h5"), "--out", str(out), "--no-progress", *TINY, *extra])


def test_a_resumed_run_with_fewer_or_as_many_epochs_as_it_trained(trained, tmp_path, capsys):
    """Fewer epochs than done was Lightning's traceback after config.yaml was rewritten; as many trained no step
    and replaced the run's summary with one of nothing seen."""
    out = tmp_path / "run"
    assert _train(trained, out, "--epochs", "2") == 0
    config, summary = (out / "config.yaml").read_bytes(), (out / "summary.json").read_bytes()
    capsys.readouterr()
    assert _train(trained, out, "--epochs", "1", "--resume") == 2
    assert "has trained 2 epochs already; give --epochs 3 or more" in _error(capsys)
    assert (out / "config.yaml").read_bytes() == config
    assert _train(trained, out, "--epochs", "2", "--resume") == 0
    assert "nothing to do" in capsys.readouterr().err
    assert (out / "summary.json").read_bytes() == summary


def test_a_cosine_run_resumed_for_more_epochs_is_refused(trained, tmp_path, capsys):
    """The cosine schedule decays over max_epochs, and its state (the first run's length) comes back with the
    checkpoint: resumed for more epochs, the learning rate climbed back up past the first run's end."""
    out = tmp_path / "run"
    assert _train(trained, out, "--epochs", "1", "--set", "lr_schedule=cosine") == 0
    capsys.readouterr()
    assert _train(trained, out, "--epochs", "2", "--set", "lr_schedule=cosine", "--resume") == 2
    assert "lr_schedule cosine decays over the run's max_epochs" in _error(capsys)


def test_an_option_given_on_one_side_only_is_a_change_a_resume_refuses(trained, tmp_path, capsys):
    """An option the defaults do not list (a Lightning trainer option, ``data_options.hardware_jitter``) is in a
    run's config.yaml only where given: dropped or added on --resume it was not compared, and config.yaml was
    rewritten without it. It is compared at its default now; the run's own options resume."""
    out = tmp_path / "run"
    assert _train(trained, out, "--epochs", "1", "--set", "trainer.accumulate_grad_batches=2") == 0
    config = (out / "config.yaml").read_bytes()
    capsys.readouterr()
    assert _train(trained, out, "--epochs", "2", "--resume") == 2
    assert "trainer.accumulate_grad_batches 2 (now None)" in _error(capsys)
    assert (out / "config.yaml").read_bytes() == config
    assert _train(trained, out, "--epochs", "2", "--set", "trainer.accumulate_grad_batches=2", "--resume") == 0


def test_a_baseline_never_trains_beside_an_earlier_runs_checkpoints(trained, tmp_path, capsys):
    """A baseline (one step, no checkpoints) into a run dir holding an earlier net run's checkpoints left them
    beside its model, and a later --resume continued that run over the baseline's model: refused now, and
    --overwrite removes them."""
    out = tmp_path / "run"
    shutil.copytree(trained / "run" / "checkpoints", out / "checkpoints")
    shutil.copy(trained / "run" / "config.yaml", out / "config.yaml")
    base = ["train", "--data", str(trained / "d.h5"), "--out", str(out), "--model", "xgb", "--no-progress"]
    assert main(base) == 2
    assert "holds the checkpoints of an earlier run" in _error(capsys)
    assert main([*base, "--overwrite"]) == 0
    assert not list((out / "checkpoints").glob("*.ckpt"))
    assert yaml.safe_load((out / "config.yaml").read_text())["model"] == "xgb"
    capsys.readouterr()
    assert _train(trained, out, "--epochs", "2", "--resume") == 2
    _error(capsys)
    # a recipe's fine-tuning (one step, no checkpoints either) is refused there the same way
    tuned = tmp_path / "ft"
    shutil.copytree(trained / "run" / "checkpoints", tuned / "checkpoints")
    assert main(["finetune", "--from", str(trained / "run"), "--data", str(trained / "d.h5"), "--platform",
                 "llvm-x86_64-2c", "--out", str(tuned)]) == 2
    assert "holds the checkpoints of an earlier run" in _error(capsys)


def test_a_split_replaced_under_its_name_is_not_resumed_on(trained, tmp_path, capsys):
    """--resume compared the split's name: a split made again under it (other tasks held out) trained the rest
    of the run on tasks the first part held out, and evaluate then called them held out."""
    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    split = ["dataset", "split", str(data), "--by", "task", "--test-fraction", "0.3", "--name", "sp"]
    assert main([*split, "--seed", "0"]) == 0
    out = tmp_path / "run"
    argv = ["train", "--data", str(data), "--out", str(out), "--split", "sp", "--no-progress", *TINY]
    assert main([*argv, "--epochs", "1"]) == 0
    assert main([*split, "--seed", "3", "--replace"]) == 0
    capsys.readouterr()
    assert main([*argv, "--epochs", "2", "--resume"]) == 2
    assert "split 'sp' of" in _error(capsys)


def test_fine_tuning_uses_or_refuses_what_it_is_given(trained, tmp_path, capsys):
    """--set momentum / momentum_every were replaced by --momentum's defaults (plain fine-tuning, where MoA was
    asked for); net options were recorded in config.yaml and never used (the model keeps its own net)."""
    base = ["finetune", "--from", str(trained / "run"), "--data", str(trained / "d.h5"), "--platform",
            "llvm-x86_64-2c", "--recipe", "lightning", "--epochs", "1"]
    out = tmp_path / "ft"
    assert main([*base, "--out", str(out), "--set", "momentum=0.9", "--set", "momentum_every=3"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["momentum"] == 0.9 and config["momentum_every"] == 3
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "ft2"), "--set", "net.d_model=64"]) == 2
    assert "fine-tuning keeps the pretrained model's net, so net.d_model=64 (the model's: 16)" in _error(capsys)


def test_a_runs_checkpoint_is_evaluated_on_its_runs_split(trained, tmp_path, capsys):
    """The checkpoint's config named no split: ``--split auto`` scored every record, training ones included, with
    a note that the model recorded no training split; the run's model scored the test part."""
    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    assert main(["dataset", "split", str(data), "--by", "task", "--test-fraction", "0.3", "--name", "sp"]) == 0
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--out", str(out), "--split", "sp", "--epochs", "1",
                 "--no-progress", *TINY]) == 0
    scored = {}
    for model in (out, out / "checkpoints" / "last.ckpt"):
        capsys.readouterr()
        assert main(["evaluate", "--model", str(model), "--data", str(data), "--json"]) == 0
        scored[model.name] = json.loads(capsys.readouterr().out)
    assert scored["run"]["split"] == scored["last.ckpt"]["split"] == "sp"
    assert scored["run"]["records"] == scored["last.ckpt"]["records"] and scored["run"]["part"] == "test"


def test_the_report_leaves_out_a_baseline_that_reads_none_of_the_records(tmp_path, capsys):
    """PSA reads MetaSchedule traces: on Ansor records every one is unreadable and its score a constant, which the
    report showed and plotted as a PSA baseline far below random."""
    from conftest import FIXTURES

    data = tmp_path / "a.h5"
    assert main(["dataset", "import-ansor", str(FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"),
                 "-o", str(data)]) == 0
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--out", str(out), "--epochs", "1", "--no-progress", *TINY]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--report", str(tmp_path / "rep")]) == 0
    assert "no PSA curve in the report (its featurizer reads none of the" in capsys.readouterr().err
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "| PSA |" not in report and "| random |" in report.lower()


def test_a_resumed_run_trains_what_an_uninterrupted_one_does(trained, tmp_path):
    """Lightning makes the training loader's iterator before it sets the sampler's epoch, and a resumed run's
    first epoch kept it: it trained on epoch 0's lists again, and the resumed model differed from the
    uninterrupted one of the same seed. The weights are now the same."""
    from safetensors.numpy import load_file

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    lists = ["--set", "data_options.lists_per_batch=1"]  # several batches an epoch
    assert _train(trained, straight, "--epochs", "3", *lists) == 0
    assert _train(trained, resumed, "--epochs", "1", *lists) == 0
    assert _train(trained, resumed, "--epochs", "3", "--resume", *lists) == 0
    a, b = load_file(straight / "model" / "model.safetensors"), load_file(resumed / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_a_run_trained_on_relative_paths_resumes_from_another_folder(trained, tmp_path, monkeypatch):
    """config.yaml records the dataset and the run dir as absolute paths: given back from another folder
    (``--config RUN_DIR/config.yaml --out RUN_DIR --resume``) it trains on the same dataset, where a relative
    ``data`` named no file there, or another dataset of the same name."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shutil.copy(trained / "d.h5", tmp_path / "a" / "d.h5")
    monkeypatch.chdir(tmp_path / "a")
    assert main(["train", "--data", "d.h5", "--out", "run", "--no-progress", "--epochs", "1", *TINY]) == 0
    config = yaml.safe_load((tmp_path / "a" / "run" / "config.yaml").read_text())
    assert config["data"] == str(tmp_path / "a" / "d.h5") and config["out"] == str(tmp_path / "a" / "run")
    monkeypatch.chdir(tmp_path / "b")
    assert main(["train", "--config", "../a/run/config.yaml", "--out", "../a/run", "--resume", "--epochs", "2",
                 "--no-progress"]) == 0
    assert json.loads((tmp_path / "a" / "run" / "summary.json").read_text())["epochs"] == 2
    assert not (tmp_path / "b" / "d.h5").exists()


def test_a_fine_tune_moved_with_its_source_resumes_given_the_sources_new_place(trained, tmp_path, monkeypatch):
    """config.yaml records ``init_from`` as an absolute path; the folder holding the dataset, the source model and
    the fine-tune moved, the recorded path names nothing: the source's new place is taken (its net and featurizer
    are still compared with the checkpoint's), where it was refused as a changed option and only --overwrite went
    on, losing the trained epochs."""
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(trained / "d.h5", proj / "d.h5")
    shutil.copytree(trained / "run", proj / "src")
    monkeypatch.chdir(proj)
    assert main(["finetune", "--from", "src", "--data", "d.h5", "--platform", "llvm-x86_64-2c", "--recipe",
                 "lightning", "--epochs", "1", "--set", "data_options.val_fraction=0", "--out", "ft",
                 "--no-progress"]) == 0
    proj.rename(tmp_path / "moved")
    monkeypatch.chdir(tmp_path / "moved")
    assert main(["train", "--config", "ft/config.yaml", "--out", "ft", "--data", "d.h5", "--set", "init_from=src",
                 "--resume", "--epochs", "2", "--no-progress"]) == 0
    assert json.loads((tmp_path / "moved" / "ft" / "summary.json").read_text())["epochs"] == 2


def test_a_source_of_another_net_is_refused_before_featurizing(trained, tmp_path, capsys):
    """``train --set init_from=<a TLP model> --model pacm``: the TLP weights cannot start a PaCM net. It was refused
    only after the dataset was featurized for PaCM (minutes on a corpus), as net options "(the defaults)" that do
    not build the net; it is refused first, naming the source's kind. A baseline has no net to start from."""
    import h5py

    shutil.copy(trained / "d.h5", tmp_path / "d.h5")
    with h5py.File(tmp_path / "d.h5", "r") as f:
        before = sorted(f["features"]) if "features" in f else []
    assert main(["train", "--model", "pacm", "--data", str(tmp_path / "d.h5"), "--out", str(tmp_path / "ft"),
                 "--set", f"init_from={trained / 'run'}", "--epochs", "1", "--no-progress"]) == 2
    assert "a tlp model cannot start a pacm net; give --model tlp" in error_line(capsys)
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert (sorted(f["features"]) if "features" in f else []) == before
    assert main(["train", "--model", "xgb", "--data", str(tmp_path / "d.h5"), "--out", str(tmp_path / "xgb")]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(tmp_path / "d.h5"), "--out", str(tmp_path / "ft2"),
                 "--set", f"init_from={tmp_path / 'xgb'}", "--epochs", "1", "--no-progress"]) == 2
    assert "a xgb model has no net to start from" in error_line(capsys)


def test_a_resume_whose_step_budget_is_spent_says_so_and_may_raise_it(trained, tmp_path, capsys):
    """A run stopped by trainer.max_steps, resumed for more epochs, trained no step, exited 0 and rewrote its
    summary one epoch short; raising max_steps on the resume was refused as another option. The spent budget is
    said and the run left as it was, its config.yaml too (it recorded the 4 epochs that never ran); a larger
    max_steps trains on."""
    out = tmp_path / "run"
    assert _train(trained, out, "--epochs", "3", "--set", "trainer.max_steps=2") == 0
    summary, config = (out / "summary.json").read_bytes(), (out / "config.yaml").read_bytes()
    capsys.readouterr()
    assert _train(trained, out, "--epochs", "4", "--set", "trainer.max_steps=2", "--resume") == 0
    err = capsys.readouterr().err
    assert "trained no step more" in err and "goes on without them" not in err  # (nothing unreadable here)
    assert (out / "summary.json").read_bytes() == summary and (out / "config.yaml").read_bytes() == config
    assert _train(trained, out, "--epochs", "4", "--set", "trainer.max_steps=4", "--resume") == 0
    after = json.loads((out / "summary.json").read_text())
    assert after["records_seen"] > json.loads(summary)["records_seen"]


@pytest.mark.parametrize("args, says", [
    (["--set", "trainer.max_time=5"], "trainer.max_time must be a duration as text 'DD:HH:MM:SS'"),
    (["--set", "trainer.max_time=1:00:00:00"], "trainer.max_time must be a duration as text 'DD:HH:MM:SS'"),
    (["--model", "mlp", "--set", "trainer.max_steps=1"], "the mlp baseline trains for trainer.max_epochs epochs"),
    (["--model", "xgb", "--set", "trainer.max_time=00:00:00:01"], "takes no trainer.max_time"),
])
def test_time_and_step_limits_a_run_cannot_take_are_one_line(trained, tmp_path, capsys, args, says):
    """A number for max_time (YAML reads 1:00:00:00 as base 60) reached Lightning's Timer: a traceback; a baseline,
    which trains by its own loop, dropped max_steps, max_time and limit_train_batches without a word."""
    assert _train(trained, tmp_path / "run", "--epochs", "2", *args) == 2
    assert says in _error(capsys)
    assert not (tmp_path / "run" / "model").exists()


def test_a_resume_after_the_dataset_gained_records_is_refused(trained, tmp_path, capsys):
    """Only the split was compared on --resume: records added since drew the validation part again among other
    tasks, so the rest of the run trained on what validated its first part and picked its best checkpoint by
    scores of other validation sets."""
    from conftest import copy_platform
    from costlab.datasets import open_dataset

    data, out = tmp_path / "d.h5", tmp_path / "run"
    shutil.copy(trained / "d.h5", data)
    with open_dataset(data) as ds:
        task = ds.records("llvm-x86_64-2c").task
    target = {"kind": "llvm", "num-cores": 3}
    copy_platform(data, "llvm-x86_64-2c", "grown", target, rows=[i for i in range(len(task)) if task[i] < 2])
    args = ["train", "--data", str(data), "--out", str(out), "--platform", "grown", "--no-progress", *TINY,
            "--set", "data_options.val_fraction=0.5"]
    assert main([*args, "--epochs", "1"]) == 0
    copy_platform(data, "llvm-x86_64-2c", "grown", target, rows=[i for i in range(len(task)) if task[i] >= 2])
    capsys.readouterr()
    assert main([*args, "--epochs", "2", "--resume"]) == 2
    assert "trained and validated on changed since" in _error(capsys)


def test_a_baseline_takes_lightnings_own_default_of_all_batches(trained, tmp_path):
    """``limit_train_batches: 1.0`` (all batches, Lightning's default) spelt out in a config shared with net runs was
    refused for a baseline as a limit it cannot take."""
    assert _train(trained, tmp_path / "run", "--model", "xgb", "--epochs", "1",
                  "--set", "trainer.limit_train_batches=1.0") == 0
