"""One ``--model`` policy for the tuning commands: ``tune``, ``exploit`` and ``transfer`` resolve a model the
same way (``export.cost_model.tuning_predictor``), so a model one of them takes the others take, and a
model one refuses the others refuse with the same words. A training run's directory is a model; its
Lightning checkpoint (``.ckpt``) is not (``evaluate`` and ``finetune`` take checkpoints, tuning takes exported
models); a path that does not exist is no model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import error_line
from costlab.cli import main
from costlab.common.errors import InputError

FIXTURE = Path(__file__).parent / "fixtures" / "ms_tune_db"  # a tuned 16x16x16 matmul and a small conv2d
TARGET = "llvm -num-cores=2"


def _tune_step(model):
    import tvm

    from costlab.metaschedule.targets import runnable_target
    from costlab.export.tune import TuneOptions, _cost_model

    opts = TuneOptions(work_dir=".", workloads=["GMM:1,8,8,8"], model=str(model), adapt="none")
    opts.check()
    return _cost_model(opts, tvm.target.Target(runnable_target(TARGET)), 2).predictor


def _exploit_step(model):
    from costlab.export.exploit import ExploitOptions, screening_model

    return screening_model(ExploitOptions(work_dir=".", model=str(model)))[0]


def _transfer_step(model):
    from costlab.export.transfer.run import TransferOptions, ranking_model

    return ranking_model(TransferOptions(work_dir=".", model=str(model)))[0]


def _outcome(step, model) -> str:
    """What a command's model resolution makes of ``model``: the kind of the predictor, or the error's words."""
    try:
        return f"accepted {step(model).kind}"
    except InputError as exc:
        return f"refused: {exc}"


def _models(trained, tmp_path) -> dict:
    run = trained / "run"
    return dict(run=run, checkpoint=run / "checkpoints" / "last.ckpt", missing=tmp_path / "no_such_model")


@pytest.mark.parametrize("case, expected", [("run", "accepted"), ("checkpoint", "refused"), ("missing", "refused")])
def test_tune_exploit_and_transfer_resolve_a_model_alike(trained, tmp_path, case, expected):
    model = _models(trained, tmp_path)[case]
    outcomes = {name: _outcome(step, model)
                for name, step in (("tune", _tune_step), ("exploit", _exploit_step), ("transfer", _transfer_step))}
    assert len(set(outcomes.values())) == 1, outcomes
    assert outcomes["tune"].startswith(expected), outcomes
    if case == "checkpoint":
        assert "a training checkpoint, not a model" in outcomes["tune"]


@pytest.mark.slow
def test_the_three_commands_refuse_a_checkpoint_alike_before_measuring(trained, tmp_path, capsys):
    ckpt = _models(trained, tmp_path)["checkpoint"]
    work = tmp_path / "exploit"
    shutil.copytree(FIXTURE, work)
    records = (work / "database_tuning_record.json").read_bytes()
    argv = {
        "tune": ["tune", "--workload", "GMM:1,8,8,8", "--trials", "1", "--work-dir", str(tmp_path / "tune")],
        "exploit": ["exploit", "--work-dir", str(work), "--trials", "1"],
        "transfer": ["transfer", "--from", str(FIXTURE), "--workload", "GMM:1,16,16,16", "--work-dir",
                     str(tmp_path / "transfer")],
    }
    errors = {}
    for name, args in argv.items():
        assert main([*args, "--model", str(ckpt), "--target", TARGET, "--no-progress"]) == 2, name
        errors[name] = error_line(capsys)
    assert len(set(errors.values())) == 1 and "a training checkpoint, not a model" in errors["tune"], errors
    assert (work / "database_tuning_record.json").read_bytes() == records  # nothing measured
    assert not (tmp_path / "tune" / "database_tuning_record.json").exists()
    assert not (tmp_path / "transfer" / "database_tuning_record.json").exists() or not (
        tmp_path / "transfer" / "database_tuning_record.json").read_text().strip()
