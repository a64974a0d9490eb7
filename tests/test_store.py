"""The HDF5 dataset format: writing as a transaction, dedupe by program id, lazy reads, derived labels."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from costlab.cli import main
from costlab.common.errors import DatasetFormatError, InputError
from costlab.datasets import DatasetWriter, RecordBatch, open_dataset, program_id, schema


def _batch(task: int, n: int, start: int = 0, fail_every: int = 0) -> RecordBatch:
    b = RecordBatch()
    for i in range(start, start + n):
        sched = f'[["SP",2,0,256,[{i},4],1]]'
        failed = fail_every and i % fail_every == 0
        b.append(task, sched, [] if failed else [1e-3 * (i + 1), 1.2e-3 * (i + 1)], 4 if failed else 0,
                 1700000000.0 + i, program_id("ansor", f"wk{task}", sched))
    return b


def _write(path, n_tasks=3, n=10):
    with DatasetWriter(path) as w:
        w.add_platform("cpu-a", {"kind": "llvm", "num-cores": 2})
        for t in range(n_tasks):
            idx = w.add_task(f"wk{t}", "ansor", f'["wk{t}", [1, 2]]', name=f"t{t}", kernel_class="dense",
                             flops=1e6 * (t + 1))
            w.add_records("cpu-a", _batch(idx, n, fail_every=5))
        w.set_network("net", [(0, 2), (1, 1)][:n_tasks])


def test_roundtrip_and_labels(tmp_path):
    path = tmp_path / "d.h5"
    _write(path)
    with open_dataset(path) as ds:
        assert [t.name for t in ds.tasks] == ["t0", "t1", "t2"]
        assert ds.tasks[2].flops == 3e6
        assert ds.networks == {"net": [(0, 2.0), (1, 1.0)]}
        assert ds.platforms["cpu-a"].target == {"kind": "llvm", "num-cores": 2}
        table = ds.records("cpu-a")
        assert len(table) == 30
        tr = ds.task_records("cpu-a", 1)
        # record i has mean cost 1.1e-3 * (i + 1); i = 0 and 5 failed; the best is i = 1
        assert tr.error.tolist() == [4, 0, 0, 0, 0, 4, 0, 0, 0, 0]
        assert tr.score[0] == 0 and tr.score[5] == 0
        assert tr.score[1] == pytest.approx(1.0)
        assert tr.score[3] == pytest.approx(2 / 4)
        assert tr.schedules[2] == '[["SP",2,0,256,[2,4],1]]'
        values, offsets = table.costs([10, 11])
        assert offsets.tolist() == [0, 0, 2] and values.tolist() == pytest.approx([2e-3, 2.4e-3])
        # labels of the whole table equal the per-task ones
        assert np.allclose(table.scores()[10:20], tr.score)


def test_rerun_adds_nothing_and_new_records_append(tmp_path):
    path = tmp_path / "d.h5"
    _write(path)
    with DatasetWriter(path) as w:
        assert w.add_records("cpu-a", _batch(0, 10)) == (0, 10)
        assert w.add_records("cpu-a", _batch(0, 4, start=8)) == (2, 2)  # 8, 9 known; 10, 11 new
        assert w.add_task("wk0", "ansor", "ignored") == 0  # same workload -> same task
    with open_dataset(path) as ds:
        assert len(ds.records("cpu-a")) == 32
        assert len(ds.tasks) == 3


def test_records_of_another_target_are_refused_by_a_platform(tmp_path):
    """A platform is one setup: records compiled for another CPU, core count or kind (a second measure or import
    with another target into the same --platform) are refused, the file as it was; a platform made without a
    target gets the first one given; flags that leave the code as it is do not count."""
    path = tmp_path / "d.h5"
    _write(path)
    before = path.read_bytes()
    with pytest.raises(InputError, match="platform 'cpu-a' holds records of target .*'num-cores': '2'.*"
                                         "'num-cores': '4'.*another --platform"):
        with DatasetWriter(path) as w:
            w.add_platform("cpu-a", {"kind": "llvm", "num-cores": 4})
    assert path.read_bytes() == before
    with DatasetWriter(path) as w:
        w.add_platform("cpu-a", {"kind": "llvm", "num-cores": 2, "keys": ["cpu"], "tag": ""})  # the same setup
        w.add_platform("bare", {})
        w.add_platform("bare", {"kind": "llvm", "mcpu": "znver5"})
    with open_dataset(path) as ds:
        assert ds.platforms["bare"].target == {"kind": "llvm", "mcpu": "znver5"}
        assert ds.platforms["cpu-a"].target == {"kind": "llvm", "num-cores": 2}


def test_failed_transaction_leaves_file_intact(tmp_path):
    path = tmp_path / "d.h5"
    _write(path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with DatasetWriter(path) as w:
            w.add_records("cpu-a", _batch(0, 100, start=50))
            w._flush("cpu-a")
            raise RuntimeError("crash in the middle of a write")
    assert path.read_bytes() == before
    assert not list(tmp_path.glob(".d.h5.tmp-*"))
    with open_dataset(path) as ds:
        assert len(ds.records("cpu-a")) == 30


def test_interrupt_leaves_file_intact(tmp_path):
    path = tmp_path / "d.h5"
    _write(path)
    with pytest.raises(KeyboardInterrupt):
        with DatasetWriter(path) as w:
            w.add_records("cpu-a", _batch(0, 10, start=100))
            raise KeyboardInterrupt
    with open_dataset(path) as ds:
        assert len(ds.records("cpu-a")) == 30


def test_readable_with_plain_h5py(tmp_path):
    path = tmp_path / "d.h5"
    _write(path)
    with h5py.File(path, "r") as f:
        assert int(f.attrs["costlab_format"]) == schema.FORMAT_VERSION
        g = f["records/cpu-a"]
        assert g["task"].compression == "gzip" and g["task"].chunks is not None
        assert g["schedule/offsets"].shape == (31,)


def test_not_a_dataset_errors(tmp_path):
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = 1
    with pytest.raises(DatasetFormatError, match="plain.h5: not a costlab dataset"):
        open_dataset(plain)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(DatasetFormatError, match="not an HDF5 file"):
        open_dataset(text)
    with pytest.raises(InputError, match="missing.h5: no such file"):
        open_dataset(tmp_path / "missing.h5")
    newer = tmp_path / "newer.h5"
    _write(newer)
    with h5py.File(newer, "a") as f:
        f.attrs["costlab_format"] = schema.FORMAT_VERSION + 1
    with pytest.raises(DatasetFormatError, match="newer costlab"):
        open_dataset(newer)
    with pytest.raises(DatasetFormatError, match="newer costlab"):
        with DatasetWriter(newer):
            pass


def _drop(name):
    return lambda f: f.__delitem__(name)


DAMAGE = {  # a damaged dataset, and what the one error about it says is missing or wrong
    "network weights": (_drop("networks/weight"), "the network table has no column weight"),
    "network names": (_drop("networks/names"), "the network table has no column names"),
    "network of no name": (lambda f: f["networks/network"].__setitem__(0, 5),
                           "the network table has weights of network 5, and names 1 networks"),
    "network of a task not there": (lambda f: f["networks/task"].__setitem__(0, 7),
                                    "weighs task 7, and the dataset has 3 tasks"),
    "record errors": (_drop("records/cpu-a/error"), "the records of platform 'cpu-a' have no column 'error'"),
    "record schedules": (_drop("records/cpu-a/schedule"), "the records of platform 'cpu-a' have no column 'schedule'"),
    "cost offsets": (_drop("records/cpu-a/costs/offsets"), "have in 'costs' no column 'offsets'"),
    "short column": (lambda f: f["records/cpu-a/timestamp"].resize((29,)),
                     "columns of different lengths (task 30, program_id 30, error 30, timestamp 29)"),
    "short offsets": (lambda f: f["records/cpu-a/schedule/offsets"].resize((30,)),
                      "have 30 rows but 30 offsets of 'schedule'"),
    "text ids": (lambda f: (f["records/cpu-a"].__delitem__("program_id"),
                            f["records/cpu-a"].create_dataset("program_id", data=["x"] * 30)),
                 "column 'program_id' is not a column of numbers of the right kind"),
    "text not UTF-8": (lambda f: f["tasks/name"].__setitem__(0, b"ab\xffcd"),
                       "column /tasks/name holds text that is not UTF-8"),
    "records of no platform": (_drop("platforms/cpu-a"), "the records of platform 'cpu-a' are not in the platform "
                                                          "table"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_dataset_is_one_error_naming_what_is_missing(tmp_path, capsys, case):
    """A dataset missing a table's column, or with columns of unequal lengths, is refused when it is opened to read
    or to write (from HDF5's metadata: no record column is read) with one error naming the file and what is wrong,
    never a KeyError later; the file stays as it was."""
    damage, message = DAMAGE[case]
    path = tmp_path / "d.h5"
    _write(path)
    with h5py.File(path, "a") as f:
        damage(f)
    before = path.read_bytes()
    with pytest.raises(DatasetFormatError, match=f"d.h5: damaged dataset: .*{re.escape(message)}"):
        open_dataset(path)
    with pytest.raises(DatasetFormatError, match=re.escape(message)):
        with DatasetWriter(path) as w:
            w.add_platform("cpu-b", {"kind": "llvm", "num-cores": 4})
    assert path.read_bytes() == before
    assert main(["dataset", "info", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(f"costlab: error: {path}: damaged")


def test_records_of_a_task_the_dataset_lacks_are_a_clear_error_when_read(tmp_path):
    """A task index past the task table (read with the records, never at open) is a DatasetFormatError naming the
    platform and the task, not an IndexError."""
    path = tmp_path / "d.h5"
    _write(path)
    with h5py.File(path, "a") as f:
        f["records/cpu-a/task"][29] = 7
    with open_dataset(path) as ds, pytest.raises(DatasetFormatError, match="platform 'cpu-a' belong to task 7, and "
                                                                          "the dataset has 3 tasks"):
        list(ds.iter_tasks("cpu-a"))


def test_unknown_platform_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "d.h5"
    _write(path)
    with open_dataset(path) as ds, pytest.raises(InputError, match="no records for platform 'gpu'.*cpu-a"):
        ds.records("gpu")
    assert main(["dataset", "export-ms", str(path), "--platform", "gpu", "-o", str(tmp_path / "o")]) == 2
    assert "no records for platform 'gpu'" in capsys.readouterr().err


def test_concurrent_writers_queue_and_both_commits_survive(tmp_path):
    import threading

    path = tmp_path / "d.h5"
    _write(path)
    entered = threading.Event()

    def second():
        with DatasetWriter(path) as w:
            entered.set()
            w.add_records("cpu-a", _batch(1, 5, start=300))

    with DatasetWriter(path) as w:
        w.add_records("cpu-a", _batch(0, 5, start=200))
        t = threading.Thread(target=second)
        t.start()
        assert not entered.wait(0.5)  # the second writer waits for the first to commit
    t.join(10)
    assert entered.is_set()
    with open_dataset(path) as ds:
        assert len(ds.records("cpu-a")) == 40  # 30 + 5 + 5: neither commit overwrote the other


def test_many_small_transactions_keep_the_file_compact(tmp_path, monkeypatch):
    import os

    from costlab.datasets import store

    monkeypatch.setattr(store, "REPACK_WASTE", 64 << 10)
    path = tmp_path / "d.h5"
    _write(path, n_tasks=1, n=10)
    for k in range(40):  # one transaction per small batch, as measurement commits
        with DatasetWriter(path) as w:
            w.add_records("cpu-a", _batch(0, 20, start=1000 + 20 * k))
    with open_dataset(path) as ds:
        assert len(ds.records("cpu-a")) == 10 + 800
        assert ds.task_records("cpu-a", 0).schedules[-1] == '[["SP",2,0,256,[1799,4],1]]'
        live = []
        ds.h5.visititems(lambda _, o: live.append(o.id.get_storage_size()) if hasattr(o, "dtype") else None)
    assert os.path.getsize(path) < sum(live) + (64 << 10) + (256 << 10)


def test_record_latency_agrees_with_mean_latency():
    import math

    import numpy as np

    from costlab.datasets.records import mean_latency, record_latency
    from costlab.metaschedule.results import ERROR_NONE

    class FloatImm:  # as TVM gives run_secs
        def __init__(self, value):
            self.value = value

    assert record_latency([1e-3, 3e-3]) == record_latency([FloatImm(1e-3), FloatImm(3e-3)]) == 2e-3
    for failed in (None, [], [1e10], [1e10, 1e-3], [0.0], [-1e-3], [math.nan], [math.inf]):
        assert record_latency(failed) == math.inf, failed
    # [1e10, 1e-3]: MetaSchedule's failure value averaged with a real run is a failure both ways
    costs = [[1e-3, 3e-3], [], [1e10], [0.0], [1e10, 1e-3], [math.nan], [-1e-3]]
    offsets = np.cumsum([0] + [len(c) for c in costs])
    values = np.array([x for c in costs for x in c])
    lat = mean_latency(values, offsets, np.full(len(costs), ERROR_NONE))
    assert list(lat) == [record_latency(c) for c in costs]


@pytest.mark.parametrize("task, error, message", [
    (3, 0, "record of task 3, not one of the dataset's 3 tasks"),
    (-1, 0, "record of task -1, not one of the dataset's 3 tasks"),
    (0, 1 << 15, "error code 32768 is outside the stored range"),
])
def test_records_of_no_task_or_an_unstorable_error_are_refused_before_anything_is_written(tmp_path, task, error,
                                                                                          message):
    """A record of a task index the dataset does not have made the whole file unreadable once committed (every
    read refused it as damaged), and an error code past int16 was numpy's OverflowError: each is refused at
    ``add_records``, naming the platform, and the dataset is left as it was."""
    path = tmp_path / "d.h5"
    _write(path)
    before = path.read_bytes()
    b = RecordBatch()
    b.append(task, '[["x"]]', [1e-5], error, 0.0, program_id("ansor", "wk0", '[["x"]]'))
    with pytest.raises(ValueError, match=re.escape(f"platform 'cpu-a': {message}")):
        with DatasetWriter(path) as w:
            w.add_records("cpu-a", b)
    assert path.read_bytes() == before
    with open_dataset(path) as ds:
        assert len(ds.records("cpu-a")) == 30


def test_ragged_rows_read_in_any_order_are_those_of_the_whole_column(tmp_path, monkeypatch):
    """``read_ragged`` reads the offsets of the rows asked for only (the whole column's, read for every chunk of
    records, made featurizing a large dataset quadratic): any rows, in any order, repeated, at either end, give
    what slicing the whole column gives."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 5, 200)
    flat = np.arange(int(lengths.sum()), dtype=np.int32)
    with h5py.File(tmp_path / "r.h5", "w") as f:
        g = schema.create_ragged(f, "x", np.int32, chunk=16)
        schema.append_ragged(g, flat, lengths)
        values, offsets = schema.read_ragged(g)
        whole = [values[offsets[i]:offsets[i + 1]] for i in range(200)]
        read = []
        real = h5py.Dataset.__getitem__

        def counted(self, key):  # what is read of the offsets
            value = real(self, key)
            if self.name.endswith("offsets"):
                read.append(len(np.atleast_1d(value)))
            return value

        monkeypatch.setattr(h5py.Dataset, "__getitem__", counted)
        for rows in ([0], [199], [5, 6, 7], [150, 3, 3, 199, 0], list(range(190, 200)), rng.integers(0, 200, 30)):
            got, off = schema.read_ragged(g, rows)
            for k, r in enumerate(rows):
                np.testing.assert_array_equal(got[off[k]:off[k + 1]], whole[r])
        got, off = schema.read_ragged(g, [])
        assert len(got) == 0 and off.tolist() == [0]
        read.clear()
        schema.read_ragged(g, list(range(100, 110)))
        assert read == [11]  # the offsets of ten rows, not the column's 201
