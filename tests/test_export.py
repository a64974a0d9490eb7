"""Models as artifacts and inside MetaSchedule: export, every refusal of a bad artifact before it scores,
inference without Lightning, and the cost model on live candidates of a tiny workload."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from conftest import FIXTURES, REPO
from costlab.cli import main
from costlab.common.errors import InputError
from costlab.costmodels.artifact import read_artifact
from costlab.costmodels.predictors import load

SMALL = FIXTURES / "ms_small.h5"
TINY = ["--set", "net.d_model=16", "--set", "net.attention_heads=2", "--set", "data_options.val_fraction=0"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A TLP model trained for two epochs on the measured MetaSchedule fixture, and its exported artifact."""
    base = tmp_path_factory.mktemp("export")
    data = base / "d.h5"
    shutil.copy(SMALL, data)
    assert main(["featurize", str(data), "--featurizer", "tlp", "--no-progress"]) == 0
    assert main(["train", "--data", str(data), "--out", str(base / "run"), "--epochs", "2", "--no-progress", *TINY]) == 0
    assert main(["export", str(base / "run"), "-o", str(base / "model")]) == 0
    return base


def _error(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("costlab: error:")]
    assert len(lines) == 1, lines
    return lines[0]


def test_export_records_what_the_model_is(run):
    config = json.loads((run / "model" / "config.json").read_text())
    assert config["kind"] == "tlp" and config["featurizer"]["name"] == "tlp"
    assert config["targets"]["llvm-x86_64-2c"]["kind"] == "llvm" and config["dialects"] == ["ms"]
    assert config["versions"]["costlab"] and config["versions"]["tvm"] and config["versions"]["torch"]
    assert config["data"]["records"]["llvm-x86_64-2c"] == 80 and "train_records" in config["training"]
    assert len(config["weights_sha256"]) == 64



def test_a_runs_report_is_recorded_only_for_the_weights_it_scored(run, tmp_path, capsys):
    # the run's own report: recorded, naming the weights it scored
    assert main(["evaluate", "--model", str(run / "run"), "--data", str(run / "d.h5"), "--split", "none",
                 "--report", str(run / "run" / "report")]) == 0
    assert main(["export", str(run / "run"), "-o", str(tmp_path / "a")]) == 0
    evaluation = json.loads((tmp_path / "a" / "config.json").read_text())["evaluation"]
    sha = json.loads((run / "run" / "model" / "config.json").read_text())["weights_sha256"]
    assert evaluation["weights_sha256"] == sha and evaluation["records"] == 80
    # the model copied into a folder named model beside another model's report, and beside a summary that is
    # not its training's: neither is recorded as the model's
    other = tmp_path / "x"
    shutil.copytree(run / "run" / "model", other / "model")
    (other / "summary.json").write_text("not JSON")
    assert main(["evaluate", "--model", "psa", "--data", str(run / "d.h5"), "--split", "none",
                 "--report", str(other / "report")]) == 0
    capsys.readouterr()
    assert main(["export", str(other / "model"), "-o", str(tmp_path / "b")]) == 0
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert "evaluation" not in config and "train_records" in config["training"]
    assert "scored another model" in capsys.readouterr().err
    changed = dict(evaluation, weights_sha256="0" * 64)
    (other / "report" / "metrics.json").write_text(json.dumps(changed))
    assert main(["export", str(other), "-o", str(tmp_path / "c")]) == 0
    assert "evaluation" not in json.loads((tmp_path / "c" / "config.json").read_text())

def test_archive_loads_in_place_and_scores_like_the_directory(run, tmp_path):
    assert main(["export", str(run / "run"), "-o", str(tmp_path / "m.tar"), "--archive"]) == 0
    a, b = load(str(run / "model")), load(str(tmp_path / "m.tar"))
    from costlab.datasets import open_dataset

    with open_dataset(run / "d.h5") as ds:
        feats = a.featurizer.featurize_records(ds, "llvm-x86_64-2c", np.arange(10))
    assert np.allclose(a.predict(feats), b.predict(feats))


def _copy_model(run, tmp_path):
    dst = tmp_path / "m"
    shutil.copytree(run / "model", dst)
    return dst


def _edit_config(path, **changes):
    """Change config.json and record its new config_sha256, so that the check each row is about is reached
    (an edit left unsealed is refused by the hash: tests/test_artifact_trust.py)."""
    from costlab.costmodels.artifact import seal_config

    c = json.loads((path / "config.json").read_text())
    for k, v in changes.items():
        if v is KeyError:
            c.pop(k)
        else:
            c[k] = v
    (path / "config.json").write_text(json.dumps(seal_config(c)))


BAD_MODELS = {
    "missing": (lambda m: shutil.rmtree(m), "no such model"),
    "no config": (lambda m: (m / "config.json").unlink(), "not a costlab model (no config.json)"),
    "truncated config": (lambda m: (m / "config.json").write_text((m / "config.json").read_text()[:50]),
                         "model config is not valid JSON"),
    "empty config": (lambda m: (m / "config.json").write_text(""), "model config is empty"),
    "config not an object": (lambda m: (m / "config.json").write_text("[1, 2]"), "must be a JSON object"),
    "format version not an integer": (lambda m: _edit_config(m, format_version="1"),
                                      "format_version must be an integer"),
    "newer format": (lambda m: _edit_config(m, format_version=99), "written by a newer costlab"),
    "unknown kind": (lambda m: _edit_config(m, kind="gbdt"), "unknown model kind 'gbdt'"),
    "unknown featurizer": (lambda m: _edit_config(m, featurizer={"name": "nope", "version": 1, "config": {}}),
                           "unknown featurizer 'nope'"),
    "featurizer version": (lambda m: _edit_config(m, featurizer=dict(
        json.loads((m / "config.json").read_text())["featurizer"], version=7)), "featurizer tlp version 7"),
    "net config does not fit": (lambda m: _edit_config(m, net=dict(
        json.loads((m / "config.json").read_text())["net"], d_model=32)), "the net config does not fit the weights"),
    "net config not valid": (lambda m: _edit_config(m, net={"bogus": 1}), "net config is not valid for a tlp net"),
    "no weights": (lambda m: (m / "model.safetensors").unlink(), "incomplete model"),
    "tampered weights": (lambda m: _tamper(m), "does not match the hash recorded"),
    "damaged weights": (lambda m: (_rehash(m, b"\x00" * 40)), "model.safetensors is damaged"),
    "non-finite weights": (lambda m: _nan_weights(m), "holds non-finite values"),
}


def _tamper(m):
    raw = bytearray((m / "model.safetensors").read_bytes())
    raw[-1] ^= 0xFF
    (m / "model.safetensors").write_bytes(bytes(raw))


def _rehash(m, blob: bytes):
    import hashlib

    (m / "model.safetensors").write_bytes(blob)
    _edit_config(m, weights_sha256=hashlib.sha256(blob).hexdigest())


def _nan_weights(m):
    from safetensors.torch import load_file, save

    state = load_file(str(m / "model.safetensors"))
    name = next(k for k, v in state.items() if v.dtype.is_floating_point)
    state[name] = torch.full_like(state[name], float("nan"))
    _rehash(m, save(state))


@pytest.mark.parametrize("case", sorted(BAD_MODELS))
def test_bad_model_is_refused_before_it_scores(run, tmp_path, capsys, case):
    damage, message = BAD_MODELS[case]
    m = _copy_model(run, tmp_path)
    damage(m)
    with pytest.raises(InputError, match=re.escape(message)):
        load(str(m))
    # the command line says it in one line, exit 2, whether evaluating or tuning
    assert main(["evaluate", "--model", str(m), "--data", str(run / "d.h5")]) == 2
    assert message in _error(capsys)
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--trials", "1", "--model", str(m),
                 "--work-dir", str(tmp_path / "w"), "--no-progress"]) == 2
    assert message in _error(capsys)
    assert not (tmp_path / "w" / "database_tuning_record.json").exists()  # refused before any tuning


def test_model_that_is_a_dataset_or_a_file(run, tmp_path, capsys):
    assert main(["evaluate", "--model", str(run / "d.h5"), "--data", str(run / "d.h5")]) == 2
    assert "not a costlab model" in _error(capsys)
    (tmp_path / "x.txt").write_text("hello")
    assert main(["evaluate", "--model", str(tmp_path / "x.txt"), "--data", str(run / "d.h5")]) == 2
    assert "not a costlab model" in _error(capsys)


def _context(workload="GMM:1,16,16,16", target=None):
    """A tuning context of the workload with MetaSchedule's default design space, and its first candidates.
    Made by costlab's ``tune_context``: ``ms.TuneContext`` would parse every tensor intrinsic TVM ships first
    (20-30 s in each of the processes that call this), which a float task on a CPU never uses."""
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.metaschedule.tune_context import tune_context

    _, func = te_workload_task(workload)
    ctx = tune_context(workload_json_mod(func), target or {"kind": "llvm", "num-cores": 2}, "replay-trace",
                       rand_state=1)
    spaces = ctx.generate_design_space()
    ctx.pre_tuning(64, 16, spaces, ms.database.MemoryDatabase(), ms.cost_model.RandomModel())
    cands = ctx.generate_measure_candidates()
    return ctx, list(cands)


def test_cost_model_scores_live_candidates_like_dataset_records(run):
    """Positive scores in the order of the model's own scores, for candidates of a workload."""
    from costlab.export import load as load_cost_model

    ctx, cands = _context()
    model = load_cost_model(str(run / "model"))
    scores = model.predict(ctx, cands)
    raw = model.raw_scores(ctx, cands)
    assert scores.dtype == np.float64 and len(scores) == len(cands) and (scores > 0).all()
    assert np.array_equal(np.argsort(scores, kind="stable"), np.argsort(raw, kind="stable"))


def test_the_score_memo_of_all_tasks_together_is_bounded(run):
    """Scores are remembered per task while the model is unchanged (each task's memo bounded): a long run of a
    network's many tasks without adaptation grew them all together without a bound. Past ``MEMO_TOTAL`` they all
    start afresh, and the scores stay the model's."""
    from costlab.export import load as load_cost_model

    (c1, k1), (c2, k2) = _context(), _context("GMM:1,16,32,16")
    model = load_cost_model(str(run / "model"))
    model.MEMO_TOTAL = len(k1) // 2
    first = model.predict(c1, k1)
    assert sum(map(len, model._memo.values())) == len(k1)
    second = model.predict(c2, k2)
    assert sum(map(len, model._memo.values())) == len(k2)  # the first task's memo let go
    fresh = load_cost_model(str(run / "model"))
    assert np.array_equal(first, fresh.predict(c1, k1)) and np.array_equal(second, fresh.predict(c2, k2))


def test_inference_does_not_import_lightning(run):
    code = f"""
import sys
import costlab.export
from costlab.export import load
import tests_ctx  # test_export: it imports the command line, and with it costlab.train's torch-free modules
before = set(sys.modules)
model = load({str(run / "model")!r})
ctx, cands = tests_ctx.context()
assert len(model.predict(ctx, cands)) == len(cands)
bad = sorted(m for m in sys.modules if m == "lightning" or m.startswith(("lightning.", "pytorch_lightning"))
             or (m.startswith("costlab.train") and m not in before))
assert not bad, bad
import inspect  # load() told inspect the import machinery's files (MetaSchedule's registry import then fast)
assert inspect.modulesbyfile["<frozen importlib._bootstrap>"] == "importlib._bootstrap"
assert inspect.getmodule(sys.modules["importlib._bootstrap"]._find_and_load) is sys.modules["importlib._bootstrap"]
print("ok")
"""
    helper = "from test_export import _context as context\n"
    (run / "tests_ctx.py").write_text(helper)
    env_path = f"{run}:{REPO / 'tests'}"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_ansor_model_refuses_metaschedule_candidates(run, tmp_path):
    from costlab.export.cost_model import check_model_for_target

    m = _copy_model(run, tmp_path)
    _edit_config(m, dialects=["ansor"])
    pred = load(str(m))
    import tvm

    with pytest.raises(InputError, match="cannot score MetaSchedule candidates"):
        check_model_for_target(pred, tvm.target.Target({"kind": "llvm"}))


def test_exploit_and_transfer_check_their_model_as_tune_does(run, tmp_path):
    """`costlab exploit --model` and `costlab transfer --model` ranked MetaSchedule candidates with an Ansor-dialect
    model that `tune` refuses, and with another target kind's model without a word."""
    import tvm

    from costlab.export.exploit import ExploitOptions, screening_model
    from costlab.export.transfer.run import TransferOptions, ranking_model

    m = _copy_model(run, tmp_path)
    _edit_config(m, dialects=["ansor"])
    llvm = tvm.target.Target({"kind": "llvm"})
    with pytest.raises(InputError, match="cannot score MetaSchedule candidates"):
        screening_model(ExploitOptions(work_dir=str(tmp_path), model=str(m)), llvm)
    with pytest.raises(InputError, match="cannot score MetaSchedule candidates"):
        ranking_model(TransferOptions(work_dir=str(tmp_path), model=str(m)), llvm)
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    for rank in (lambda: screening_model(ExploitOptions(work_dir=str(tmp_path), model=str(run / "model")), cuda),
                 lambda: ranking_model(TransferOptions(work_dir=str(tmp_path), model=str(run / "model")), cuda)):
        with pytest.warns(UserWarning, match="trained for llvm targets, not cuda"):
            rank()


def test_target_kind_not_trained_for_warns_or_is_refused(run):
    import tvm

    from costlab.export.cost_model import check_model_for_target

    pred = load(str(run / "model"))
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_model_for_target(pred, cuda)
    assert any("trained for llvm targets, not cuda" in str(w.message) for w in caught)
    with pytest.raises(InputError, match="refused with --strict"):
        check_model_for_target(pred, cuda, strict=True)
    check_model_for_target(pred, tvm.target.Target({"kind": "llvm", "mcpu": "znver4"}))  # the kind it knows


def test_head_that_does_not_exist(run):
    from costlab.common.errors import UsageError
    from costlab.export import CostlabCostModel

    with pytest.raises(UsageError, match="no head for platform 'a100'"):
        CostlabCostModel(str(run / "model"), head="a100")


def test_online_adaptation_trains_and_keeps_the_featurizer(run):
    """update() with measured candidates: the momentum rule changes the online net and moves the momentum
    copy by EMA; the featurizer's config (vocabulary, sequence length) is the pre-trained one, untouched."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from costlab.export import CostlabCostModel

    # no validation cut: the guard would keep the pretrained net after 5 steps; the rule itself is tested
    model = CostlabCostModel(str(run / "model"), adapt="momentum",
                             adapt_options=dict(steps=5, every=1, val_fraction=0.0))
    before_feat = json.dumps(model.predictor.featurizer.config, sort_keys=True)
    before = {k: v.clone() for k, v in model.predictor.net.state_dict().items()}
    ctx, cands = _context()
    rng = np.random.default_rng(0)
    results = [RunnerResult([float(x)], None) for x in rng.uniform(1e-6, 1e-4, len(cands) - 1)]
    results.append(RunnerResult(None, "runner error"))  # kept as a failure
    model.update(ctx, cands, results)
    after = model.predictor.net.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert model.adapter.stats["trained"] == 1 and model.adapter.stats["records"] == len(cands)
    momentum = model.adapter.wrapper.momentum_net.state_dict()
    k = next(k for k, v in before.items() if v.dtype.is_floating_point and not torch.equal(v, after[k]))
    m = model.adapter.wrapper.m
    expected = m * before[k] + (1 - m) * after[k]
    assert torch.allclose(momentum[k], expected, atol=1e-6)
    assert json.dumps(model.predictor.featurizer.config, sort_keys=True) == before_feat


def test_a_saved_adapted_model_records_the_features_it_learned(run, tmp_path):
    """A cost model saved before its adapter trained records the revision of features its model learned (an
    older one here) and the figures measured of its weights; once the adapter has trained it on this costlab's
    features, it records this costlab's, and those figures as the weights' before the adaptation."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from costlab.costmodels.artifact import seal_config
    from costlab.export import CostlabCostModel
    from costlab.featurizers.tlp import TLPFeaturizer

    old = tmp_path / "old"
    shutil.copytree(run / "model", old)
    config = json.loads((old / "config.json").read_text())
    config["featurizer"]["revision"] = 0
    config["held_out"] = {"mean": {"tlp": {"top1": 0.5}}}  # figures measured of these weights
    (old / "config.json").write_text(json.dumps(seal_config(config)))
    model = CostlabCostModel(str(old), adapt="momentum", adapt_options=dict(steps=2, every=1, val_fraction=0.0))
    model.save(str(tmp_path / "before"))
    assert read_artifact(tmp_path / "before").config["featurizer"]["revision"] == 0
    assert read_artifact(tmp_path / "before").config["held_out"] == config["held_out"]
    ctx, cands = _context()
    model.update(ctx, cands, [RunnerResult([float(x)], None) for x in np.linspace(1e-5, 1e-4, len(cands))])
    assert model.adapter.stats["trained"] == 1
    model.save(str(tmp_path / "after"))
    after = read_artifact(tmp_path / "after").config
    assert after["featurizer"]["revision"] == TLPFeaturizer.revision == 1
    # the figures were the weights' before the adaptation: kept as such, not as the adapted weights'
    assert "held_out" not in after and after["adapted"]["figures_before"]["held_out"] == config["held_out"]
    # saved again from a load of its own: the record of its adaptation stays (it was dropped), and under a new
    # adapter it is the earlier one
    CostlabCostModel(str(tmp_path / "after")).save(str(tmp_path / "again"))
    assert read_artifact(tmp_path / "again").config["adapted"] == after["adapted"]
    CostlabCostModel(str(tmp_path / "after"), adapt="momentum").save(str(tmp_path / "readapted"))
    assert read_artifact(tmp_path / "readapted").config["adapted"]["earlier"] == after["adapted"]


def test_the_cost_model_refuses_a_metaschedule_cost_model_and_a_bad_batch_size(run):
    """A MetaSchedule cost model given as the model (it has a ``predict`` of other arguments) and a batch size
    that is not a positive integer are one clear error when the model is made, not a traceback at its first
    prediction (inside a tuning run, from TVM's callback)."""
    from tvm.s_tir.meta_schedule.cost_model import RandomModel

    from costlab.common.errors import UsageError
    from costlab.export import CostlabCostModel

    with pytest.raises(UsageError, match="RandomModel is a MetaSchedule cost model already"):
        CostlabCostModel(RandomModel())
    for bad in (0, -1, "x", 2.5, True):
        with pytest.raises(UsageError, match=f"batch_size must be a positive integer, not {bad!r}"):
            CostlabCostModel(str(run / "model"), batch_size=bad)


def test_the_cost_models_batch_size_bounds_each_forward_pass(run):
    """``batch_size`` bounds the programs the net scores at once (memory per pass); the scores are the same."""
    from costlab.export import CostlabCostModel

    ctx, cands = _context()
    whole = CostlabCostModel(str(run / "model")).raw_scores(ctx, cands)
    model = CostlabCostModel(str(run / "model"), batch_size=4)
    sizes, forward = [], model.predictor.net.forward
    model.predictor.net.forward = lambda *a, **k: sizes.append(len(a[0] if not isinstance(a[0], dict) else
                                                                   next(iter(a[0].values())))) or forward(*a, **k)
    assert np.allclose(model.raw_scores(ctx, cands), whole)
    assert len(cands) > 4 and sizes and max(sizes) <= 4 and sum(sizes) == len(cands)


def test_the_cost_model_saves_over_a_model_never_over_other_files(run, tmp_path):
    """``save`` replaces a costlab model directory, never a folder of another tool's files (a config.json); the
    refusal reaches a Python caller as costlab's own error (through TVM's FFI it was a RuntimeError), and so does
    saving a kind without weights."""
    from costlab.common.errors import UsageError
    from costlab.export import CostlabCostModel

    model = CostlabCostModel(str(run / "model"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")
    (other / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists and is not a costlab model directory"):
        model.save(str(other))
    with pytest.raises(UsageError, match="only learned nets are saved by the cost model; psa has no weights"):
        CostlabCostModel("psa").save(str(tmp_path / "psa"))
    assert (other / "config.json").read_text() == "{}"
    model.save(str(tmp_path / "saved"))
    model.save(str(tmp_path / "saved"))  # a model directory: replaced
    assert read_artifact(tmp_path / "saved").config["kind"] == "tlp"


def test_saved_cost_model_loads_back(run, tmp_path):
    from costlab.export import CostlabCostModel

    model = CostlabCostModel(str(run / "model"))
    model.save(str(tmp_path / "saved"))
    again = CostlabCostModel(str(tmp_path / "saved"))
    ctx, cands = _context()
    assert np.allclose(model.raw_scores(ctx, cands), again.raw_scores(ctx, cands))
    assert read_artifact(tmp_path / "saved").config["kind"] == "tlp"


def test_cost_model_load_adapts_and_scores_the_model_it_loaded(run, tmp_path):
    """``load()`` (MetaSchedule's CostModel verb) swaps the model: its online adapter then trains the loaded net,
    the one that scores, and scores remembered of the model before are gone."""
    from costlab.export import CostlabCostModel

    model = CostlabCostModel(str(run / "model"), adapt="momentum")
    model.save(str(tmp_path / "saved"))
    ctx, cands = _context()
    model.raw_scores(ctx, cands)
    before = model.predictor
    model.load(str(tmp_path / "saved"))
    assert model.predictor is not before and model.adapter.predictor is model.predictor
    with torch.no_grad():
        for p in model.predictor.net.parameters():
            p.mul_(-1.0)  # the loaded net scores otherwise: a score remembered of the model before would show
    again = CostlabCostModel(str(tmp_path / "saved"))
    with torch.no_grad():
        for p in again.predictor.net.parameters():
            p.mul_(-1.0)
    assert np.allclose(model.raw_scores(ctx, cands), again.raw_scores(ctx, cands))


@pytest.mark.parametrize("case, message", [
    ("empty", "-o must name the model directory"),
    ("below a file", "file is not a directory"),
    ("below a file, deeper", "file is not a directory"),
    ("in /proc", "cannot be written"),
    ("over a model", "holds a model already; give --force"),
    ("over a folder of other files", "holds other files, not a model"),
    ("over a file", "exists and is not a directory"),
    ("archive onto a directory", "is a directory; --archive writes one file"),
    ("forced over another tool's model", "holds other files, not a model"),
    ("forced over another tool's model of the same file names", "holds other files, not a model"),
    ("forced archive over a file", "is not a costlab model archive"),
])
def test_export_output_is_checked_before_anything_is_written(run, tmp_path, capsys, case, message):
    (tmp_path / "file").write_text("x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    for name, files in (("hf", ("config.json", "model.safetensors", "tokenizer.json")),
                        ("hf2", ("config.json", "model.safetensors"))):
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_text('{"model_type": "bert"}')
    model = tmp_path / "model"
    assert main(["export", str(run / "model"), "-o", str(model)]) == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    out, extra = {"empty": ("", []), "below a file": (tmp_path / "file" / "m", []),
                  "below a file, deeper": (tmp_path / "file" / "no" / "m", []), "in /proc": ("/proc/costlab-m", []),
                  "over a model": (model, []), "over a folder of other files": (tmp_path / "other", []),
                  "over a file": (tmp_path / "file", []),
                  "archive onto a directory": (tmp_path / "other", ["--archive"]),
                  "forced over another tool's model": (tmp_path / "hf", ["--force"]),
                  "forced over another tool's model of the same file names": (tmp_path / "hf2", ["--force"]),
                  "forced archive over a file": (tmp_path / "file", ["--archive", "--force"])}[case]
    capsys.readouterr()
    assert main(["export", str(run / "model"), "-o", str(out), *extra]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("costlab: error:")]
    assert len(err) == 1 and message in err[0], err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written


def test_export_makes_the_missing_folders_on_its_way(run, tmp_path):
    """`costlab export RUN -o models/tlp` in a fresh checkout (no models/ yet), as a directory or an archive."""
    assert main(["export", str(run / "model"), "-o", str(tmp_path / "models" / "tlp")]) == 0
    assert read_artifact(tmp_path / "models" / "tlp").config["kind"] == "tlp"
    assert main(["export", str(run / "model"), "-o", str(tmp_path / "a" / "b" / "m.tar"), "--archive"]) == 0
    assert read_artifact(tmp_path / "a" / "b" / "m.tar").config["kind"] == "tlp"


def test_export_over_a_model_with_force(run, tmp_path):
    assert main(["export", str(run / "model"), "-o", str(tmp_path / "m")]) == 0
    assert main(["export", str(run / "model"), "-o", str(tmp_path / "m"), "--force"]) == 0
    assert (tmp_path / "m" / "config.json").exists()
    assert main(["export", str(run / "model"), "-o", str(tmp_path / "m.tar"), "--archive"]) == 0
    assert main(["export", str(run / "model"), "-o", str(tmp_path / "m.tar"), "--archive", "--force"]) == 0
    assert read_artifact(tmp_path / "m.tar").config["kind"] == "tlp"
    (tmp_path / "m" / ".config.json.tmp-x1y2").write_text("{")  # what a killed write leaves: still the model's
    assert main(["export", str(run / "model"), "-o", str(tmp_path / "m"), "--force"]) == 0


def _two_platforms(dst):
    """The measured fixture with a second platform holding the same programs at other costs (another machine)."""
    from conftest import copy_platform
    from costlab.datasets import open_dataset

    shutil.copy(SMALL, dst)
    with open_dataset(dst) as ds:
        (platform,) = ds.record_platforms()
    rng = np.random.default_rng(0)
    copy_platform(dst, platform, "other", {"kind": "llvm", "mcpu": "znver4", "num-cores": 1},
                  costs=lambda i, raw: raw * rng.uniform(0.5, 2.0))
    return platform


def test_a_tuning_runs_head_ranks_its_transfer_library_start_and_exploitation_too(tmp_path):
    """tune --head P scored the search with P's head but the programs measured before and after it (transfer,
    library start, exploitation) with the first platform's."""
    from costlab.export.exploit import ExploitOptions, screening_model
    from costlab.export.transfer.run import TransferOptions, ranking_model

    data = tmp_path / "two.h5"
    first = _two_platforms(data)
    run_dir = tmp_path / "mtl"
    assert main(["train", "--model", "mtl", "--data", str(data), "--platform", first, "--platform", "other", "--out",
                 str(run_dir), "--epochs", "1", "--no-progress", *TINY]) == 0
    model = str(run_dir / "model")
    assert screening_model(ExploitOptions(str(tmp_path / "w"), model=model, head="other"))[1] == 1
    assert ranking_model(TransferOptions(str(tmp_path / "w"), sources=["x"], model=model, head="other"))[1] == 1
    assert ranking_model(TransferOptions(str(tmp_path / "w"), sources=["x"], model=model))[1] == 0


def test_a_model_scaled_per_call_scores_each_population_whole(tmp_path):
    """The MLP baseline scales features by each call's batch: remembered scores of earlier calls (other batches)
    mixed with new ones ranked the population out of order. Such a kind is scored whole in every call."""
    from costlab.export import CostlabCostModel

    data = tmp_path / "d.h5"
    shutil.copy(SMALL, data)
    assert main(["train", "--model", "mlp", "--data", str(data), "--out", str(tmp_path / "mlp"), "--no-progress",
                 "--set", "data_options.val_fraction=0"]) == 0
    ctx, cands = _context("C2D:1,8,8,8,16,3,1,1")
    for _ in range(3):
        cands += list(ctx.generate_measure_candidates() or [])
    model = CostlabCostModel(str(tmp_path / "mlp" / "model"))
    for part in np.array_split(np.arange(len(cands)), 4):  # generations, each scoring new candidates
        model.raw_scores(ctx, [cands[i] for i in part])
    mixed = model.raw_scores(ctx, cands)
    whole = CostlabCostModel(str(tmp_path / "mlp" / "model"), memo=False).raw_scores(ctx, cands)
    assert np.allclose(mixed, whole)


def test_measuring_gives_metaschedules_tune_tir_costlabs_builder_and_runner(tmp_path):
    """``costlab.export.measuring(target)``: for MetaSchedule's own ``tune_tir``, a builder that keeps its workers
    without the tensor-intrinsic import and a runner whose kernels run on the target's ``num-cores`` threads
    (MetaSchedule's default runs them on half the logical cores); the programs measure, and the worker pools are
    shut down when the block ends."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    import costlab.export
    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.metaschedule.runners import runner_threads

    mod = workload_json_mod(te_workload_task("GMM:1,8,8,8")[1])
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    with costlab.export.measuring(target) as (builder, runner):
        assert runner.pool.submit(runner_threads).result() == 1
        db = ms.tune_tir(mod, target, str(tmp_path / "work"), max_trials_global=2, num_trials_per_iter=2,
                         cost_model=costlab.export.load("psa"), builder=builder, runner=runner)
        records = db.get_all_tuning_records()
        assert len(records) == 2 and all(r.run_secs and float(r.run_secs[0]) > 0 for r in records)
    assert runner.pool._shutdown and not builder._pool
    # a second block in the same process (a notebook cell run again): the name is still the function, not the module
    # its first use imported
    with costlab.export.measuring(target) as (builder, runner):
        assert runner.pool.submit(runner_threads).result() == 1


def test_measuring_stays_the_function_whatever_submodules_were_imported_before():
    """``costlab.export.measuring`` is the function even in a process that imported every module of the package
    first (a submodule of that name would have replaced the package's attribute with itself: "'module' object
    is not callable")."""
    code = ("import importlib, pkgutil, costlab.export as e\n"
            "for m in pkgutil.walk_packages(e.__path__, 'costlab.export.'):\n"
            "    importlib.import_module(m.name)\n"
            "assert callable(e.measuring) and callable(e.load), (e.measuring, e.load)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
