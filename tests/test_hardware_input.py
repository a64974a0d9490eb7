"""One model over several CPUs: a net (TLP, PaCM) with a hardware input (``featurizers/hardware_vector.py``) trains on
the records of two CPU platforms, each row with its platform's vector and its own label, and scores records of
a CPU whose host was not in training. The vector comes from the dataset's platform (its host record or
``-mcpu``), never from the machine scoring: the same scores on a faked Zen 4 as here. A live tuning target's
vector is the machine tuning now."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch
import pytest

from conftest import FIXTURES, copy_platform

from costlab.cli import main
from costlab.common.host import FAKE_HOST_ENV
from costlab.datasets import open_dataset
from costlab.featurizers import hardware_vector as hw
from costlab.featurizers.psa.hardware import spec_for_platform

ZEN4 = FIXTURES / "hosts" / "zen4"
ZEN5, EMR = "llvm-znver5-2c", "llvm-emeraldrapids-2c"
# a Zen 4 host record as `costlab dataset measure` writes one: the CPU the held-out records were measured on
ZEN4_HOST = {"cpu_model": "AMD EPYC 9454P", "family": "25", "model": "17", "flags": ["avx512f", "fma"],
             "caches": {"L1d": "32K", "L2": "1024K", "L3": "32768K"}, "threads": 2, "mhz": 2750}
TINY = ["--set", "net.d_model=16", "--set", "net.attention_heads=2", "--set", "data_options.val_fraction=0"]


@pytest.fixture(scope="module")
def two_cpus(tmp_path_factory) -> Path:
    """The Zen 5 fixture database (192 records, no host record: znver5 from the -mcpu table) plus the same
    programs on an Emerald Rapids platform, their costs changed per program so that its ranking differs."""
    data = tmp_path_factory.mktemp("hw") / "two.h5"
    assert main(["dataset", "import-ms", str(FIXTURES / "zen5_small"), "-o", str(data)]) == 0
    rng = np.random.default_rng(0)
    copy_platform(data, ZEN5, EMR, {"kind": "llvm", "mcpu": "emeraldrapids", "num-cores": 2},
                  costs=lambda i, raw: raw * float(rng.uniform(0.7, 1.4)))
    return data


@pytest.fixture(scope="module")
def held_out(tmp_path_factory) -> Path:
    """The same programs as measured on a Zen 4 (host record), a CPU no model here trained on."""
    base = tmp_path_factory.mktemp("held")
    (base / "host.json").write_text(json.dumps(ZEN4_HOST))
    assert main(["dataset", "import-ms", str(FIXTURES / "zen5_small"), "-o", str(base / "zen4.h5"), "--platform",
                 "llvm-zen4-2c", "--host", str(base / "host.json")]) == 0
    return base / "zen4.h5"


@pytest.fixture(scope="module", params=["tlp", "pacm"])
def model(request, two_cpus, tmp_path_factory) -> Path:
    """A tiny net (TLP, PaCM) with a hardware input, trained two epochs on both CPUs' records (spec jitter on),
    exported."""
    base = tmp_path_factory.mktemp("hwmodel")
    assert main(["train", "--model", request.param, "--data", str(two_cpus), "--platform", ZEN5, "--out", str(base / "run"), "--epochs", "2",
                 "--no-progress", *TINY, "--set", f"net.hardware_dim={hw.DIM}",
                 "--set", f"data_options.row_platforms=[{ZEN5}, {EMR}]",
                 "--set", "data_options.hardware_jitter=0.3", "--set", "trainer.log_every_n_steps=1"]) == 0
    assert main(["export", str(base / "run"), "-o", str(base / "model")]) == 0
    return base / "model"


def test_rows_of_several_cpus_each_with_its_vector_and_lists_within_one_platform(two_cpus):
    from costlab.train.data import CostDataModule, DataConfig

    dm = CostDataModule(DataConfig(data=str(two_cpus), platforms=[ZEN5], row_platforms=[ZEN5, EMR], hardware=True,
                                   hardware_jitter=0.5, val_fraction=0.0, list_size=8))
    dm.setup()
    with open_dataset(two_cpus) as ds:
        n = ds.num_records(ZEN5)
        vectors = np.stack([hw.platform_vector(ds.platforms[p]) for p in (ZEN5, EMR)])
    assert len(dm.labels) == 2 * n and dm.labels.score.shape == (2 * n, 1)
    assert not np.array_equal(vectors[0], vectors[1])  # znver5's L1 of 48 KB, Emerald Rapids' L2 of 2 MB, ...
    jittered = np.zeros(hw.DIM, bool)
    jittered[list(hw.JITTERED)] = True
    for batch in dm.train_dataloader():
        rows, lists = batch["row"].numpy(), batch["list_id"].numpy()
        hardware = batch["hardware"].numpy()
        for j in np.unique(lists):
            sel = lists == j
            plat = dm.row_platform[rows[sel]]
            assert len(np.unique(plat)) == 1 and len(np.unique(dm.labels.task[rows[sel]])) == 1
            delta = hardware[sel] - vectors[plat[0]]
            assert np.allclose(delta, delta[0], atol=1e-6)  # one perturbation per list
            assert np.all(delta[:, ~jittered] == 0) and np.all(np.abs(delta[:, jittered]) <= 0.5 + 1e-6)
    # a batch is jittered alike whichever loader worker reads it, and after a resume: the draws come from its rows
    from costlab.train.data import BatchReader

    lists = next(iter(dm.train_dataloader().sampler))
    reader = BatchReader(dm, 0.5)
    first, again = reader[lists]["hardware"], BatchReader(dm, 0.5)[lists]["hardware"]
    assert torch.equal(first, again) and torch.equal(reader[lists]["hardware"], first)
    for batch in dm._loader(dm.train_rows, shuffle=False):  # not training: no perturbation
        assert np.array_equal(batch["hardware"].numpy(), vectors[dm.row_platform[batch["row"].numpy()]])
    # each row is labelled on its own platform: the Emerald Rapids rows' scores are its own, not Zen 5's
    with open_dataset(two_cpus) as ds:
        from costlab.datasets.records import scores

        t = ds.records(EMR)
        own = scores(t.task.astype(np.int64), t.latency())
    assert np.allclose(dm.labels.score[n:, 0], own, equal_nan=True)


def test_a_model_with_a_hardware_input_scores_a_host_not_in_training(model, held_out, two_cpus, monkeypatch):
    from costlab.costmodels.predictors import load
    from costlab.featurizers.cache import features_of
    from costlab.train.evaluate import evaluate

    pred = load(str(model))  # by path, no pickle
    assert pred.hardware_dim == hw.DIM and pred.config["hardware"] == hw.describe()
    assert pred.config["training"]["row_platforms"] == [ZEN5, EMR]
    here = evaluate(str(model), held_out, split=None)
    monkeypatch.setenv(FAKE_HOST_ENV, str(ZEN4))  # as if scored on another machine
    faked = evaluate(str(model), held_out, split=None)
    assert here["hardware_spec"] == faked["hardware_spec"] == "AMD EPYC 9454P (host record)"
    assert here["records"] == 192 and np.isfinite(here["_arrays"]["pred"]).all()
    assert np.array_equal(here["_arrays"]["pred"], faked["_arrays"]["pred"])
    # the vector is the held-out platform's (its host's 32 KB L1), and the scores follow it
    with open_dataset(held_out) as ds:
        plat = ds.platforms["llvm-zen4-2c"]
        feats = features_of(ds, pred.featurizer, "llvm-zen4-2c", np.arange(32))
        assert spec_for_platform(plat).l1_bytes == 32 * 1024
        pred.use_platform(plat)
        assert np.array_equal(pred.hardware, hw.platform_vector(plat))
        zen4 = pred.predict(feats)
    with open_dataset(two_cpus) as ds:
        pred.use_platform(ds.platforms[EMR])
    assert zen4.shape == (32, 1) and not np.allclose(pred.predict(feats), zen4)
    # a platform id, or None, is refused: None scored with this machine's vector in the platform's place
    for bad in (None, "llvm-zen4-2c"):
        with pytest.raises(ValueError, match=r"use_platform takes a dataset's Platform \(ds.platforms\[id\]\)"):
            pred.use_platform(bad)


def test_a_tuning_target_is_fed_the_vector_of_the_machine_tuning(model, monkeypatch):
    from costlab.costmodels.predictors import load

    pred = load(str(model))
    with pytest.raises(ValueError, match="use_platform.*use_target"):
        pred.predict({"kind": np.zeros((1, 4), np.int64), "numeric": np.zeros((1, 4, 1), np.float32),
                      "mask": np.ones((1, 4), bool)})
    monkeypatch.setenv(FAKE_HOST_ENV, str(ZEN4))
    pred.use_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    v = dict(zip(hw.FIELDS, pred.hardware.tolist()))
    # the faked Zen 4's caches and clock (relative to the generic CPU: 32 KB L1, 1 MB L2, 16 MB LLC, 2.5 GHz)
    assert (v["log2_l1"], v["log2_l2"], v["log2_llc"]) == (0.0, 0.0, 1.0)
    assert v["log2_clock"] == pytest.approx(np.log2(2.749998 / 2.5), abs=1e-5)
    assert v["log2_simd"] == 1.0 and v["log2_cores"] == -1.0  # AVX-512 code, the target's 2 cores


def test_a_hardware_vector_of_another_version_or_size_is_refused(model, two_cpus, tmp_path, capsys):
    from costlab.common.errors import InputError
    from costlab.costmodels.artifact import seal_config
    from costlab.costmodels.predictors import load

    old = tmp_path / "old"
    shutil.copytree(model, old)
    config = json.loads((old / "config.json").read_text())
    config["hardware"] = {"version": hw.VERSION + 1, "fields": ["l1"]}
    (old / "config.json").write_text(json.dumps(seal_config(config)))
    with pytest.raises(InputError, match="hardware input does not fit"):
        load(str(old))
    capsys.readouterr()
    assert main(["train", "--data", str(two_cpus), "--out", str(tmp_path / "r"), "--epochs", "1", "--no-progress",
                 *TINY, "--set", "net.hardware_dim=3"]) == 2
    assert f"net.hardware_dim must be 0 (no hardware input) or {hw.DIM}" in capsys.readouterr().err


def test_finetuning_to_the_held_out_cpu_feeds_its_vector(model, held_out, tmp_path):
    """The fine-tuning recipe trains on the target platform's records with that platform's vector, and the
    model keeps its hardware input."""
    from costlab.costmodels.predictors import load

    assert main(["finetune", "--from", str(model), "--data", str(held_out), "--platform", "llvm-zen4-2c",
                 "--out", str(tmp_path / "ft"), "--no-progress"]) == 0
    pred = load(str(tmp_path / "ft"))
    assert pred.hardware_dim == hw.DIM and pred.config["hardware"] == hw.describe()
    assert pred.platforms == ["llvm-zen4-2c"]


def test_a_within_task_split_keeps_a_programs_records_on_several_cpus_together(two_cpus, tmp_path):
    """Validation drawn by program: a program measured on both CPUs is in it on both or on neither (drawn by row,
    its Zen 5 record could train while its Emerald Rapids record validated the checkpoint choice)."""
    import shutil

    from costlab.train.data import CostDataModule, DataConfig

    data = tmp_path / "two.h5"
    shutil.copy(two_cpus, data)
    assert main(["dataset", "split", str(data), "--by", "within-task", "--test-fraction", "0.25", "--name", "w"]) == 0
    dm = CostDataModule(DataConfig(data=str(data), platforms=[ZEN5], row_platforms=[ZEN5, EMR], split="w",
                                   val_fraction=0.3))
    dm.setup()
    pid = dm.labels.program_id
    val, train = set(pid[dm.val_rows].tolist()), set(pid[dm.train_rows].tolist())
    assert val and train and not val & train
