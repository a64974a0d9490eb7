"""pack / unpack: a dataset as compressed JSON files and back, identical, growing by new shards only."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import FIXTURES
from costlab.cli import main
from costlab.datasets import DatasetWriter, RecordBatch, open_dataset

SMALL = FIXTURES / "ms_small.h5"


def _same(a, b) -> None:
    with open_dataset(a) as x, open_dataset(b) as y:
        assert x.tasks == y.tasks and x.networks == y.networks and x.platforms == y.platforms
        assert x.split_names() == y.split_names()
        for name in x.split_names():
            assert x.split(name).digest == y.split(name).digest and x.split(name).meta == y.split(name).meta
        assert x.record_platforms() == y.record_platforms()
        for pid in x.record_platforms():
            rx, ry = x.records(pid), y.records(pid)
            for col in ("task", "program_id", "error", "timestamp"):
                assert np.array_equal(rx.column(col), ry.column(col)), col
            assert all(np.array_equal(u, v) for u, v in zip(rx.costs(), ry.costs()))
            assert rx.schedules() == ry.schedules()


def test_pack_unpack_is_identical(tmp_path):
    data = tmp_path / "d.h5"
    shutil.copy(SMALL, data)
    assert main(["dataset", "split", str(data)]) == 0
    assert main(["dataset", "pack", str(data), "-o", str(tmp_path / "p")]) == 0
    assert main(["dataset", "unpack", str(tmp_path / "p"), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")


def test_packing_again_adds_only_a_shard_of_the_new_records(tmp_path, monkeypatch):
    monkeypatch.setattr("costlab.datasets.pack.SHARD_ROWS", 32)
    data = tmp_path / "d.h5"
    shutil.copy(SMALL, data)
    out = tmp_path / "p"
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    with open_dataset(data) as ds:
        pid = ds.record_platforms()[0]
        n = ds.num_records(pid)
    before = {p.name: p.read_bytes() for p in (out / "records" / pid).iterdir()}
    assert sorted(before)[0] == f"{0:09d}-{32:09d}.jsonl.gz"
    with DatasetWriter(data) as w:  # three more measured records
        b = RecordBatch()
        for i in range(3):
            b.append(0, f'[["x{i}"], []]', [1e-3 * (i + 1)], 0, 1.0, 10_000 + i)
        w.add_records(pid, b)
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    after = {p.name: p.read_bytes() for p in (out / "records" / pid).iterdir()}
    assert set(after) - set(before) == {f"{n:09d}-{n + 3:09d}.jsonl.gz"}
    assert all(after[k] == v for k, v in before.items())  # shards already there are never rewritten
    assert main(["dataset", "unpack", str(out), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")


def test_unpack_refuses_bad_input(tmp_path, capsys):
    assert main(["dataset", "unpack", str(tmp_path), "-o", str(tmp_path / "x.h5")]) == 2
    assert "not a packed costlab dataset" in capsys.readouterr().err
    assert main(["dataset", "pack", str(SMALL), "-o", str(tmp_path / "p")]) == 0
    assert main(["dataset", "unpack", str(tmp_path / "p"), "-o", str(SMALL)]) == 2
    assert "exists already" in capsys.readouterr().err
    shard = next((tmp_path / "p" / "records").rglob("*.jsonl.gz"))
    shard.write_bytes(b"not gzip")
    assert main(["dataset", "unpack", str(tmp_path / "p"), "-o", str(tmp_path / "y.h5")]) == 2
    assert "damaged packed file" in capsys.readouterr().err
    assert not (tmp_path / "y.h5").exists()

