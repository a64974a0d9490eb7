"""extract: te_workload benchmarks, a small transformers model and a PyTorch function, into real datasets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from costlab.common.errors import InputError
from costlab.datasets import open_dataset
from costlab.datasets.extract import extract
from costlab.datasets.ms_database import import_ms

TUNE_DB = Path(__file__).parent / "fixtures" / "ms_tune_db"


def test_te_workloads_are_one_task_networks(tmp_path):
    out = tmp_path / "d.h5"
    text = extract(out, workloads=["GMM:1,16,16,16", "dep:1,8,8,4,3,1,1", "C2D:1,6,6,4,4,3,1,1"])
    assert "extracted 3 network(s)" in text
    with open_dataset(out) as ds:
        assert sorted(ds.networks) == ["C2D:1,6,6,4,4,3,1,1", "DEP:1,8,8,4,3,1,1", "GMM:1,16,16,16"]
        assert all(len(v) == 1 and v[0][1] == 1.0 for v in ds.networks.values())
        by_name = {t.name: t for t in ds.tasks}
        assert by_name["GMM:1,16,16,16"].kernel_class == "mac.s3r1"
        assert by_name["GMM:1,16,16,16"].flops == 2 * 16 ** 3
        assert by_name["DEP:1,8,8,4,3,1,1"].kernel_class == "mac.s4r2"
        assert all(t.dialect == "ms" and t.workload_hash.isdigit() for t in ds.tasks)
        assert ds.record_platforms() == [] and ds.platforms == {}  # no platform until measured
    # idempotent: the same networks again add no task
    extract(out, workloads=["GMM:1,16,16,16"])
    with open_dataset(out) as ds:
        assert len(ds.tasks) == 3


def test_extracted_task_is_the_task_of_a_tuning_database(tmp_path):
    """tune_tir's database (scripts/make_ms_database.py tuned conv2d_nhwc(1,6,6,4,4,3,1,1)) lines up with
    the same workload extracted by name: one task, not two."""
    out = tmp_path / "d.h5"
    extract(out, workloads=["C2D:1,6,6,4,4,3,1,1"])
    import_ms([TUNE_DB], out, progress=False)
    with open_dataset(out) as ds:
        assert len(ds.tasks) == 2  # the conv2d (shared) and the tuned matmul
        conv = ds.tasks[0]
        assert conv.name == "C2D:1,6,6,4,4,3,1,1"
        table = ds.records(ds.record_platforms()[0])
        assert (table.task == conv.index).sum() > 0
        wl = [json.loads(x) for x in (TUNE_DB / "database_workload.json").read_text().splitlines()]
        assert [conv.workload_hash, conv.workload] in wl


def test_bad_names_fail_clearly_and_others_continue(tmp_path):
    out = tmp_path / "d.h5"
    text = extract(out, workloads=["NOPE", "GMM:1,8,8,8", "GMM:1,x"])
    assert "workload NOPE: FAILED" in text and "unknown te_workload 'NOPE'" in text
    assert "workload GMM:1,x: FAILED" in text
    with open_dataset(out) as ds:
        assert list(ds.networks) == ["GMM:1,8,8,8"]
    with pytest.raises(InputError, match="nothing extracted"):
        extract(tmp_path / "e.h5", workloads=["NOPE"])
    assert not (tmp_path / "e.h5").exists()



def test_a_dataset_that_cannot_take_the_tasks_is_refused_before_extracting(tmp_path, capsys):
    from costlab.cli import main

    bad = tmp_path / "notes.h5"
    bad.write_text("not a dataset\n")
    assert main(["dataset", "extract", str(bad), "--workload", "GMM:1,8,8,8"]) != 0
    err = capsys.readouterr().err
    assert "extracting" not in err and "not a costlab dataset" in err, err
    assert bad.read_text() == "not a dataset\n"
    assert main(["dataset", "extract", str(tmp_path / "no" / "d.h5"), "--workload", "GMM:1,8,8,8"]) != 0
    err = capsys.readouterr().err
    assert "extracting" not in err and "does not exist" in err, err


def test_a_failing_network_is_said_once(tmp_path, capsys):
    from costlab.cli import main

    assert main(["dataset", "extract", str(tmp_path / "d.h5"), "--workload", "NOPE"]) != 0
    err = capsys.readouterr().err
    assert err.count("unknown te_workload 'NOPE'") == 1, err
    assert "nothing extracted: 1 of 1 failed" in err and not (tmp_path / "d.h5").exists()

def _tiny_mlp():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 16))
    return model, (torch.randn(2, 16),)


@pytest.mark.slow
def test_torch_function_and_transformers_model(tmp_path, monkeypatch):
    mod = type(sys)("costlab_test_models")
    mod.tiny_mlp = _tiny_mlp
    monkeypatch.setitem(sys.modules, "costlab_test_models", mod)
    out = tmp_path / "d.h5"
    text = extract(out, hf=["bert", "no_such_arch"], torch_fns=["costlab_test_models:tiny_mlp"], seq_len=16)
    assert "hf no_such_arch: FAILED" in text and "unknown model type" in text
    with open_dataset(out) as ds:
        assert set(ds.networks) == {"bert-b1-s16", "costlab_test_models:tiny_mlp"}
        mlp = ds.networks["costlab_test_models:tiny_mlp"]
        # three Linear layers of two shapes -> dense tasks; weights count the occurrences
        classes = {ds.tasks[t].kernel_class for t, _ in mlp}
        assert "mac.s2r1" in classes
        assert sum(w for _, w in mlp) >= 3
        bert = ds.networks["bert-b1-s16"]
        assert len(bert) >= 5
        assert any(w > 1 for _, w in bert), "two identical layers should give weights > 1"
        bert_classes = {ds.tasks[t].kernel_class for t, _ in bert}
        assert bert_classes & {"mac.s2r1", "mac.s3r1", "mac.s4r1"}, bert_classes
        assert all(ds.tasks[t].name and ds.tasks[t].flops >= 0 for t, _ in bert)


def test_committed_fixture_matches_its_script(tmp_path):
    """tests/fixtures/ms_small.h5 is what scripts/make_fixture.sh makes: the same four extracted tasks
    (same hashes and workloads), 20 records each whose program ids are those of their schedules."""
    import numpy as np

    from costlab.datasets import program_id

    script = (Path(__file__).parents[1] / "scripts" / "make_fixture.sh").read_text()
    specs = [w for w in script.split() if w.startswith(("GMM:", "C2D:", "DEP:"))]
    assert len(specs) == 4
    out = tmp_path / "d.h5"
    extract(out, workloads=specs)
    with open_dataset(out) as fresh, open_dataset(TUNE_DB.parent / "ms_small.h5") as fx:
        assert [(t.workload_hash, t.workload, t.name) for t in fresh.tasks] == \
               [(t.workload_hash, t.workload, t.name) for t in fx.tasks]
        (pid,) = fx.record_platforms()
        assert fx.platforms[pid].target["num-cores"] == 2
        table = fx.records(pid)
        assert np.bincount(table.task).tolist() == [20, 20, 20, 20]
        ids = [program_id("ms", fx.tasks[t].workload_hash, s) for t, s in zip(table.task, table.schedules())]
        assert table.program_id.tolist() == ids


def test_a_size_short_name_the_model_type_lacks_is_said_not_dropped():
    """ResNet has no image_size in its config: ``image=128`` was dropped, the network built at 64 x 64 and named
    ``resnet-image128``. The image is the input's size; a short name that sets nothing is refused."""
    from costlab.datasets import hf_models

    _model, inputs, _is_text = hf_models.build("resnet:image=96", 1, 16)
    assert tuple(inputs[0].shape) == (1, 3, 96, 96)
    with pytest.raises(ValueError, match="heads= sets none of ResNetConfig's sizes"):
        hf_models.build("resnet:heads=4", 1, 16)


def test_the_reference_output_leaves_the_inputs_as_they_were():
    """A model that changes its input in place (``x.mul_(2)``): its reference output was computed on the very
    tensors the tuned build then ran on, and a right network differed from PyTorch's output."""
    import torch

    from costlab.datasets.extract import reference_output

    class InPlace(torch.nn.Module):
        def forward(self, x):
            x.mul_(2)
            return x + 1

    x = torch.ones(2, 3)
    out = reference_output(InPlace(), (x,))
    assert torch.equal(x, torch.ones(2, 3)) and (out == 3).all()


def test_batch_and_seq_len_are_refused_for_a_function_network(tmp_path):
    """--batch and --seq-len size a transformers model; a MODULE:FUNCTION network is tuned at its function's
    example inputs, so they were ignored (and recorded as if they had sized it)."""
    from costlab.common.errors import UsageError
    from costlab.export.tune import TuneOptions

    with pytest.raises(UsageError, match="MODULE:FUNCTION network is tuned at the example inputs"):
        TuneOptions(str(tmp_path / "w"), network="mymodels:make", batch=8).check()
    TuneOptions(str(tmp_path / "w"), network="mymodels:make").check()
    TuneOptions(str(tmp_path / "w"), network="bert:layers=2", batch=8).check()


def test_a_transformers_model_with_an_option_that_is_no_key_value_says_so():
    """``--network bert:foo`` read as MODULE:FUNCTION said it could not import a module 'bert'."""
    from costlab.datasets.extract import torch_fn_model

    with pytest.raises(ValueError, match="bert is a transformers model: its options are KEY=VALUE"):
        torch_fn_model("bert:foo")
    with pytest.raises(ValueError, match="cannot import 'no_such_module_here'"):
        torch_fn_model("no_such_module_here:f")
