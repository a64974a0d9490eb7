"""Importing real Ansor / TenSet logs: counts, failed records, platforms, program ids, labels, networks."""

from __future__ import annotations

import pickle
import shutil
import sys
import types

import numpy as np
import orjson
import pytest

from conftest import FIXTURES
from costlab.cli import main
from costlab.datasets import open_dataset, program_id
from costlab.datasets import ansor_log
from costlab.datasets.ansor_log import import_ansor
from costlab.common.errors import InputError
from costlab.datasets.ansor_networks import inert_load, load_network_info, network_name

ANSOR = FIXTURES / "ansor"
# Slices of real logs (see tests/fixtures/ansor/README.md): the first 128 lines of each.
BERT = ANSOR / "2080ti-bert-B1-head128.json"  # 2 tasks, 2 records with error_no 4
MLP = ANSOR / "platinum-8358-MLP1-B256-head128.json"  # 2 tasks, 8 records with error_no 6
BERT_KEY0 = '["4b5e216f8244b4e8f7b6543c4a9087e5", [1536, 128], [1536, 128]]'


def _lines(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _run(capsys, *argv):
    code = main(["dataset", *map(str, argv)])
    return code, capsys.readouterr().err


def test_import_two_platforms_counts_and_failures(tmp_path, capsys):
    out = tmp_path / "d.h5"
    code, err = _run(capsys, "import-ansor", BERT, MLP, "-o", out)
    assert code == 0, err
    assert "2080ti: 128 records added, 0 already present" in err
    assert "platinum-8358: 128 records added, 0 already present" in err
    with open_dataset(out) as ds:
        assert ds.record_platforms() == ["2080ti", "platinum-8358"]
        assert ds.platforms["platinum-8358"].target == {
            "kind": "llvm", "keys": ["cpu"], "mcpu": "icelake-server", "model": "platinum-8358"}
        assert ds.platforms["2080ti"].target["arch"] == "sm_75"
        assert len(ds.tasks) == 4
        assert {t.dialect for t in ds.tasks} == {"ansor"}
        t0 = ds.tasks[0]
        assert t0.workload_hash == t0.workload == BERT_KEY0
        assert t0.kernel_class == "ansor:4b5e216f" and t0.flops == 0.0
        assert t0.extra["hardware_params"]["2080ti"] == [-1, 16, 64, 49152, 2147483647, 1024, 8, 32]
        bert, mlp = ds.records("2080ti"), ds.records("platinum-8358")
        assert len(bert) == len(mlp) == 128
        # failed records are kept with their error_no as logged, and score 0
        assert sorted(bert.error[bert.error != 0].tolist()) == [4, 4]
        assert mlp.error[mlp.error != 0].tolist() == [6] * 8
        assert np.count_nonzero(~np.isfinite(mlp.latency())) == 8
        assert (mlp.scores()[mlp.error != 0] == 0).all()


def test_records_are_stored_as_logged(tmp_path):
    out = tmp_path / "d.h5"
    import_ansor([BERT], out, progress=False)
    lines = _lines(BERT)
    with open_dataset(out) as ds:
        table = ds.records("2080ti")
        schedules = table.schedules()
        values, offsets = table.costs()
        for i in (0, 91, 127):  # line 92 (index 91) is a failed build (error_no 4, cost 1e10)
            rec = lines[i]
            steps = rec["i"][1][1]
            assert schedules[i] == orjson.dumps(steps).decode()
            assert orjson.loads(schedules[i]) == steps
            key = rec["i"][0][0]
            assert ds.tasks[int(table.task[i])].workload_hash == key
            assert int(table.program_id[i]) == program_id("ansor", key, schedules[i])
            assert values[offsets[i]:offsets[i + 1]].tolist() == rec["r"][0]
            assert int(table.error[i]) == rec["r"][1]
            assert table.column("timestamp")[i] == rec["r"][3]


def test_labels_match_the_log(tmp_path):
    """score = best mean cost of the task / mean cost, failures 0, computed here from the raw lines."""
    out = tmp_path / "d.h5"
    import_ansor([MLP], out, progress=False)
    lines = _lines(MLP)
    mean = [np.mean(r["r"][0]) if r["r"][1] == 0 else np.inf for r in lines]
    keys = [r["i"][0][0] for r in lines]
    best = {k: min(m for m, kk in zip(mean, keys) if kk == k) for k in set(keys)}
    expected = np.array([best[k] / m if np.isfinite(m) else 0.0 for k, m in zip(keys, mean)])
    with open_dataset(out) as ds:
        got = ds.records("platinum-8358").scores()
    assert np.allclose(got, expected)
    assert (got == 1.0).sum() == 2  # one best program per task


def test_reimport_adds_nothing(tmp_path, capsys):
    out = tmp_path / "d.h5"
    assert _run(capsys, "import-ansor", BERT, "-o", out)[0] == 0
    code, err = _run(capsys, "import-ansor", BERT, MLP, "-o", out)
    assert code == 0
    assert "2080ti: 0 records added, 128 already present" in err
    assert "platinum-8358: 128 records added" in err
    code, err = _run(capsys, "import-ansor", ANSOR, "-o", out)  # the folder: both files again
    assert code == 0 and "2080ti: 0 records added, 128 already present" in err
    with open_dataset(out) as ds:
        assert len(ds.records("2080ti")) == len(ds.records("platinum-8358")) == 128
        assert len(ds.tasks) == 4


def test_platform_option_and_tenset_folder(tmp_path, capsys):
    out = tmp_path / "d.h5"
    assert _run(capsys, "import-ansor", BERT, "-o", out, "--platform", "my-gpu")[0] == 0
    # TenSet layout: measure_records/<platform>/<task>.json names the platform
    root = tmp_path / "tenset" / "measure_records"
    (root / "t4").mkdir(parents=True)
    (root / "k80").mkdir()
    shutil.copy(BERT, root / "t4" / "a.json")
    shutil.copy(MLP, root / "k80" / "b.json")
    assert _run(capsys, "import-ansor", root / "t4", "-o", out)[0] == 0
    with open_dataset(out) as ds:
        assert ds.record_platforms() == ["my-gpu", "t4"]
    code, err = _run(capsys, "import-ansor", root, "-o", out)  # the root: each file to its folder's platform
    assert code == 0 and "k80: 128 records added" in err and "t4: 0 records added, 128 already present" in err
    # any other folder is searched recursively, the platform coming from the records' target
    nested = tmp_path / "logs" / "x" / "y"
    nested.mkdir(parents=True)
    shutil.copy(MLP, nested / "c.json")
    (nested / "notes.txt").write_text("not a log")
    assert _run(capsys, "import-ansor", tmp_path / "logs", "-o", out)[0] == 0
    with open_dataset(out) as ds:
        assert ds.record_platforms() == ["k80", "my-gpu", "platinum-8358", "t4"]
        assert [len(ds.records(p)) for p in ds.record_platforms()] == [128, 128, 128, 128]


def test_several_targets_in_one_file_go_to_their_platforms(tmp_path):
    mixed = tmp_path / "mixed.json"
    mixed.write_bytes(BERT.read_bytes()[:30_000].rsplit(b"\n", 1)[0] + b"\n" + MLP.read_bytes())
    report = import_ansor(mixed, tmp_path / "d.h5", progress=False)
    assert report.added["platinum-8358"] == 128 and 0 < report.added["2080ti"] < 128
    assert report.bad == 0 and report.files == 1


def test_older_log_version(tmp_path):
    """v0.5 and older records carry only [workload_key, target] (or a few more fields) in i[0]."""
    log = tmp_path / "old.json"
    rows = []
    for rec in _lines(MLP)[:10]:
        rec["i"][0] = rec["i"][0][:2]
        rec["v"] = "v0.5"
        rows.append(orjson.dumps(rec))
    log.write_bytes(b"\n".join(rows) + b"\n")
    report = import_ansor(log, tmp_path / "d.h5", progress=False)
    assert report.added == {"platinum-8358": 10} and report.bad == 0
    with open_dataset(tmp_path / "d.h5") as ds:
        assert "hardware_params" not in ds.tasks[0].extra


def test_network_per_file(tmp_path, capsys):
    out = tmp_path / "d.h5"
    assert _run(capsys, "import-ansor", BERT, MLP, "-o", out, "--network-per-file")[0] == 0
    with open_dataset(out) as ds:
        assert sorted(ds.networks) == [BERT.stem, MLP.stem]
        assert ds.networks[BERT.stem] == [(0, 1.0), (1, 1.0)]
        assert ds.networks[MLP.stem] == [(2, 1.0), (3, 1.0)]


def test_network_info_json(tmp_path, capsys):
    out = tmp_path / "d.h5"
    extra_key = '["00112233445566778899aabbccddeeff", [1, 2]]'
    info = tmp_path / "networks.json"
    info.write_text(orjson.dumps({"bert": {BERT_KEY0: 12, extra_key: 1}}).decode())
    assert _run(capsys, "import-ansor", BERT, "-o", out, "--network-info", info)[0] == 0
    with open_dataset(out) as ds:
        # a task of the network without records is added too, so the network stays whole
        assert len(ds.tasks) == 3 and ds.tasks[2].workload_hash == extra_key
        assert ds.networks == {"bert": [(0, 12.0), (2, 1.0)]}


def test_a_network_info_key_spelled_otherwise_names_the_logged_task(tmp_path, capsys):
    """A network-info key of a logged workload written without the log's spaces (hand-made, or re-serialised by
    another tool) is that workload: its weight goes to the logged task, not to a second task of no records."""
    out = tmp_path / "d.h5"
    compact = orjson.dumps(orjson.loads(BERT_KEY0)).decode()
    assert compact != BERT_KEY0
    info = tmp_path / "networks.json"
    info.write_text(orjson.dumps({"bert": {compact: 12}}).decode())
    assert _run(capsys, "import-ansor", BERT, "-o", out, "--network-info", info)[0] == 0
    with open_dataset(out) as ds:
        assert len(ds.tasks) == 2 and ds.tasks[0].workload_hash == BERT_KEY0
        assert ds.networks == {"bert": [(0, 12.0)]}


# -- TenSet network_info pickles -----------------------------------------------------------------------

def _fake_tvm_modules(monkeypatch):
    """Module objects with the names TVM 0.8 pickled SearchTasks under, so that pickle writes the same
    globals a TenSet file holds (``tvm.runtime.object._new_object`` + ``tvm.auto_scheduler...SearchTask``)."""
    mods = {n: types.ModuleType(n) for n in ("tvm", "tvm.runtime", "tvm.runtime.object", "tvm.auto_scheduler",
                                             "tvm.auto_scheduler.search_task", "tvm.auto_scheduler.compute_dag")}
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)

    def _new_object(cls):
        return cls.__new__(cls)

    _new_object.__module__, _new_object.__qualname__ = "tvm.runtime.object", "_new_object"
    mods["tvm.runtime.object"]._new_object = _new_object

    def tvm_object(module, name):
        def __reduce__(self):  # what tvm.runtime.Object.__reduce__ does
            return (_new_object, (type(self),), self.state)

        cls = type(name, (), {"__reduce__": __reduce__, "__module__": module, "__qualname__": name,
                              "__init__": lambda self, state: setattr(self, "state", state)})
        setattr(mods[module], name, cls)
        return cls

    return tvm_object("tvm.auto_scheduler.search_task", "SearchTask"), tvm_object(
        "tvm.auto_scheduler.compute_dag", "ComputeDAG")


def test_network_info_tenset_pickles(tmp_path, monkeypatch, capsys):
    SearchTask, ComputeDAG = _fake_tvm_modules(monkeypatch)
    keys = sorted({r["i"][0][0] for r in _lines(BERT)})
    tasks = [SearchTask({"compute_dag": ComputeDAG({"handle": '{"root": 1}'}), "workload_key": k,
                         "target": "cuda -model=2080ti", "hardware_params": None, "desc": f"vm_mod_fused_nn_dense_{i}"})
             for i, k in enumerate(keys)]
    folder = tmp_path / "network_info"
    folder.mkdir()
    (folder / "((bert_base,[(1,128)]),cuda).task.pkl").write_bytes(pickle.dumps((tasks, [6, 12]), protocol=4))
    (folder / "((bert_base,[(1,128)]),cuda).relay.pkl").write_bytes(b"not read")
    for name in list(sys.modules):
        if name.startswith("tvm"):
            monkeypatch.delitem(sys.modules, name)  # loading must not need (or import) any tvm module
    info = load_network_info(folder)
    assert list(info) == ["bert_base-1x128"]
    assert [(w, d) for _, w, d in info["bert_base-1x128"]] == [(6.0, "vm_mod_fused_nn_dense_0"),
                                                               (12.0, "vm_mod_fused_nn_dense_1")]
    assert not any(n.startswith("tvm") for n in sys.modules)
    out = tmp_path / "d.h5"
    assert _run(capsys, "import-ansor", BERT, "-o", out, "--network-info", folder)[0] == 0
    with open_dataset(out) as ds:
        assert ds.networks == {"bert_base-1x128": [(0, 6.0), (1, 12.0)]}
        by_key = {t.workload_hash: t for t in ds.tasks}
        assert by_key[keys[0]].name == "vm_mod_fused_nn_dense_0"
        assert by_key[keys[0]].kernel_class == "fused_nn_dense_0"


def test_inert_unpickler_runs_nothing(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    data = pickle.dumps((Evil(), [1]))
    value = inert_load(data)
    assert not marker.exists()
    assert repr(value[0]) == "<inert posix.system>" and value[0].args == (f"touch {marker}",)
    bad = tmp_path / "x.task.pkl"
    bad.write_bytes(pickle.dumps(([Evil()], [1])))
    with pytest.raises(Exception, match="no workload_key"):
        load_network_info(bad)
    assert not marker.exists()


def test_tenset_network_names():
    assert network_name("((resnet_50,[(1,3,224,224)]),llvm)") == ("resnet_50-1x3x224x224", "llvm")
    assert network_name("((bert_base,[(1,128), (1, 128)]),cuda)") == ("bert_base-1x128-1x128", "cuda")
    assert network_name("my-net") == ("my-net", "")


# -- the full public logs ------------------------------------------------------------------------------

def test_real_logs(shared_data, tmp_path, capsys):
    logs = shared_data / "ansor_logs"
    out = tmp_path / "d.h5"
    code, err = _run(capsys, "import-ansor", logs, "-o", out, "--network-per-file")
    assert code == 0, err
    assert "read 13724 lines from 6 file(s)" in err
    with open_dataset(out) as ds:
        assert len(ds.records("2080ti")) == 4700 and len(ds.records("platinum-8358")) == 9024
        assert int((ds.records("2080ti").error != 0).sum()) == 338
        assert int((ds.records("platinum-8358").error != 0).sum()) == 734
        assert len(ds.tasks) == 78
        assert {n: len(t) for n, t in ds.networks.items()} == {
            "bert-B1-float32": 10, "mobilenet_v2-B1-float32": 33, "resnet_50-B1-float32": 24,
            "MHA2-B64-float32": 3, "MLP1-B256-float32": 3, "MLP2-B64-float32": 5}
    code, err = _run(capsys, "import-ansor", logs, "-o", out)
    assert code == 0 and "0 records added, 4700 already present" in err


def test_repeated_lines_in_one_import_are_duplicates(tmp_path, monkeypatch):
    """A log that measured the same programs again (33 copies of 128 lines: more than one progress step of
    4096 lines, and several chunks): each program is stored once, the repeats count as already present."""
    monkeypatch.setattr(ansor_log, "CHUNK_RECORDS", 1000)
    log = tmp_path / "rep.json"
    log.write_bytes(MLP.read_bytes() * 33)
    report = import_ansor(log, tmp_path / "d.h5", progress=True)
    assert report.lines == 33 * 128 and report.bad == 0
    assert report.added == {"platinum-8358": 128} and report.duplicates == {"platinum-8358": 32 * 128}


def test_two_network_info_pickles_of_one_name_and_other_tasks_are_refused(tmp_path, monkeypatch):
    """Two machines' network_info folders side by side hold files of the same name: read recursively, the second
    replaced the first's tasks and weights without a word. Other tasks under one name are refused naming both
    files; identical copies are one network."""
    SearchTask, ComputeDAG = _fake_tvm_modules(monkeypatch)
    keys = sorted({r["i"][0][0] for r in _lines(BERT)})

    def tasks(i):
        return [SearchTask({"compute_dag": ComputeDAG({"handle": '{"root": 1}'}), "workload_key": keys[i],
                            "target": "cuda", "hardware_params": None, "desc": f"dense_{i}"})]

    name = "((bert_base,[(1,128)]),cuda).task.pkl"
    for sub, i, weight in (("a", 0, 3), ("b", 1, 5)):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / name).write_bytes(pickle.dumps((tasks(i), [weight]), protocol=4))
    with pytest.raises(InputError, match="also given by"):
        load_network_info(tmp_path)
    (tmp_path / "b" / name).write_bytes((tmp_path / "a" / name).read_bytes())
    (network,) = load_network_info(tmp_path).values()
    assert [w for _, w, _ in network] == [3.0]
