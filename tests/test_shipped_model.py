"""The shipped x86-cpu models (costmodels/models/x86-cpu-v1 and -v2, the alias x86-cpu naming one of them, made by
scripts/train_x86_model.sh from corpus/ and corpus/trajectories/):
listed by `costlab models` with the corpus it trained on, loaded by name without Lightning, scoring live
candidates, and ranking measured programs it never saw (another machine, the generic x86-64 target) above
chance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO

from costlab.cli import main
from costlab.costmodels.shipped import versioned_names

pytest.importorskip("tvm")
# the CPU models (the GPU model, cuda-sm90: tests/test_gpu_tensorcore.py)
X86_MODELS = [name for name in versioned_names() if name.startswith("x86-cpu")]


def test_listed_with_the_corpus_it_trained_on(capsys):
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert "x86-cpu" in rows and "x86-cpu-v1" in rows, "costmodels/models/ is not in this checkout"
    model = rows["x86-cpu-v1"]  # one CPU's random samples (x86-cpu-v2's two CPUs: test_a_model_of_two_cpus_...)
    corpus = json.loads((REPO / "corpus" / "info.json").read_text())
    pid = model["corpus"]["platform"]
    assert model["kind"] == "pacm" and model["platforms"] == [pid]
    # the corpus grows by appending measured tasks: the model was trained on it as it stood then (a prefix
    # of its records; scripts/train_x86_model.sh retrains on the whole)
    assert 0 < model["corpus"]["records"] <= corpus["records"][pid]
    assert 0 < model["corpus"]["tasks"] <= corpus["records_per_task"][pid]["tasks"]
    assert pid in corpus["platforms"] and model["corpus"]["host"]
    assert "-mcpu=" in json.dumps(model["targets"][pid]) or '"mcpu"' in json.dumps(model["targets"][pid])


@pytest.mark.parametrize("name", ["x86-cpu", *X86_MODELS])
def test_loads_by_name_without_lightning_and_scores_candidates(name):
    """The alias and every versioned model (x86-cpu-v2 with the hardware input: the vector of the machine tuning
    now) load by name and score a live tuning context's candidates."""
    code = """
import sys
from pathlib import Path
import numpy as np
from costlab.export import load
from test_export import _context  # it imports the command line, and with it costlab.train's torch-free modules
before = set(sys.modules)
model = load(sys.argv[1])
ctx, cands = _context()
scores = model.predict(ctx, cands)
assert len(scores) == len(cands) and np.isfinite(scores).all() and (scores > 0).all(), scores
assert len(set(np.round(scores, 9).tolist())) > 1, "every candidate scored alike"
bad = sorted(m for m in sys.modules if m == "lightning" or m.startswith(("lightning.", "pytorch_lightning"))
             or (m.startswith("costlab.train") and m not in before))
assert not bad, bad
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "tests"), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


@pytest.mark.parametrize("name", X86_MODELS)
def test_ranks_programs_it_never_saw_above_chance(name):
    """The committed fixture (four workloads, 20 programs each, measured on another machine with the
    generic target): the model's first pick beats the expected first pick of random picks and its pairwise
    accuracy is above one half. (Top-1 is the figure: the fixture's kernels are 8-60 KFLOP, below the
    corpus's smallest tasks, and the weighted top-5 is set by the two slowest of the four; the model
    trained on 162 tasks has top-1 0.68 / top-5 0.73 there against random's expected 0.44 / 0.74.)"""
    from costlab.train.evaluate import evaluate
    from costlab.train.report import topk_curves

    result = evaluate(name, FIXTURES / "ms_small.h5", split=None, baselines=True)
    curves = topk_curves(result, ks=(1, 5))
    assert result["pairwise"] > 0.5, result["pairwise"]
    assert curves["model"][0] > curves["random"][0] + 0.1, curves


def test_versioned_names_and_the_alias_load_the_same_weights(capsys):
    """x86-cpu is an alias of a versioned model (costmodels/models/aliases.json); both names load, with the
    same weights, and `costlab models` says which the alias stands for."""
    from costlab.costmodels.predictors import weights_sha256
    from costlab.costmodels.shipped import aliases, shipped_path, versioned_names

    version = aliases()["x86-cpu"]
    assert version in versioned_names() and version.startswith("x86-cpu-v")
    assert shipped_path("x86-cpu") == shipped_path(version)
    assert weights_sha256("x86-cpu") == weights_sha256(version) is not None
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["x86-cpu"]["alias_of"] == version and rows[version]["alias_of"] is None
    assert main(["models"]) == 0
    assert f"x86-cpu is {version} now" in capsys.readouterr().out


def test_a_folder_named_like_the_alias_is_recorded_as_itself(tmp_path, monkeypatch):
    """A model folder named ``x86-cpu`` in the working directory is what ``--model x86-cpu`` loads (a path comes
    first): its provenance is that folder, never the shipped version the alias stands for."""
    import shutil

    from costlab.costmodels.predictors import pinned_name, resolve
    from costlab.costmodels.shipped import aliases, shipped_path

    version = aliases()["x86-cpu"]
    assert pinned_name("x86-cpu") == version  # the shipped model, as the alias means it
    monkeypatch.chdir(tmp_path)
    shutil.copytree(shipped_path("x86-cpu-v1"), tmp_path / "x86-cpu")
    assert resolve("x86-cpu") == Path("x86-cpu") and pinned_name("x86-cpu") == "x86-cpu"


@pytest.mark.parametrize("holds", ["nothing", "a tuning run's files"])
def test_a_folder_named_like_a_shipped_model_that_holds_no_model_hides_nothing(tmp_path, monkeypatch, holds):
    """``costlab tune --model x86-cpu --work-dir x86-cpu``: the work dir is made before the model loads, and a
    folder that is no model never stands for the shipped model of its name."""
    from costlab.costmodels.predictors import load, pinned_name, resolve
    from costlab.costmodels.shipped import aliases, shipped_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x86-cpu").mkdir()
    if holds != "nothing":
        (tmp_path / "x86-cpu" / "database_tuning_record.json").write_text("")
    assert resolve("x86-cpu") == shipped_path("x86-cpu")
    assert pinned_name("x86-cpu") == aliases()["x86-cpu"]
    assert load("x86-cpu").kind == json.loads((shipped_path("x86-cpu") / "config.json").read_text())["kind"]


def test_a_model_of_two_cpus_lists_what_each_gave():
    """x86-cpu-v2 learned from two CPUs' records (scripts/train_x86_model.sh, DATA=both): `costlab models` counts
    both, and each platform's part is no more than its pack holds."""
    from costlab.costmodels.listing import shipped_models, trained_on

    row = {r["name"]: r for r in shipped_models()}["x86-cpu-v2"]
    parts = row["corpus"]["platforms"]
    assert len(parts) == 2 and row["corpus"]["records"] == sum(p["records"] for p in parts)
    for part in parts:
        info = json.loads((REPO / part["files"] / "info.json").read_text())
        assert 0 < part["records"] <= info["records"][part["platform"]] and part["host"]
        assert 0 < part["tasks"] <= info["records_per_task"][part["platform"]]["tasks"]
    assert trained_on(row) == f"{row['corpus']['tasks']} tasks / {row['corpus']['records']:,} records"
