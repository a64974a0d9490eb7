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



# -- one folder, one dataset ------------------------------------------------------------------------------

def _subset(dst, rows) -> None:
    """A dataset of SMALL's tasks and platform holding the records at ``rows`` only."""
    with open_dataset(SMALL) as src, DatasetWriter(dst) as w:
        for t in src.tasks:
            w.add_task(t.workload_hash, t.dialect, t.workload, t.name, t.kernel_class, t.flops, t.extra)
        for pid in src.record_platforms():
            p = src.platforms[pid]
            w.add_platform(pid, p.target, p.spec, p.host)
            table, b = src.records(pid), RecordBatch()
            values, offsets = table.costs(rows)
            for i, (r, s) in enumerate(zip(rows, table.schedules(rows))):
                b.append(int(table.task[r]), s, values[offsets[i]:offsets[i + 1]].tolist(), int(table.error[r]),
                         float(table.column("timestamp")[r]), int(table.program_id[r]))
            w.add_records(pid, b)


def _record_set(path) -> set:
    with open_dataset(path) as ds:
        out = set()
        for pid in ds.record_platforms():
            t = ds.records(pid)
            out |= {(pid, int(p), s) for p, s in zip(t.program_id, t.schedules())}
        return out


def _files(folder) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _drop_digests(folder) -> None:
    """The meta file as costlab wrote it before it recorded each platform's record count and digest."""
    import gzip

    import orjson

    meta = orjson.loads(gzip.decompress((folder / "dataset.json.gz").read_bytes()))
    del meta["records"]
    (folder / "dataset.json.gz").write_bytes(gzip.compress(orjson.dumps(meta)))


@pytest.mark.parametrize("written_by", ["this costlab", "an earlier costlab"])
def test_packing_into_another_datasets_pack_is_refused(tmp_path, capsys, written_by):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    _subset(b, np.arange(8))  # same tasks and platform, other records
    _subset(a, np.arange(8, 20))
    folder = tmp_path / "p"
    assert main(["dataset", "pack", str(b), "-o", str(folder)]) == 0
    if written_by == "an earlier costlab":
        _drop_digests(folder)
    before = _files(folder)
    capsys.readouterr()
    assert main(["dataset", "pack", str(a), "-o", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{folder}: holds the pack of another dataset" in err
    assert _files(folder) == before  # nothing written
    assert main(["dataset", "unpack", str(folder), "-o", str(tmp_path / "b2.h5")]) == 0
    assert _record_set(tmp_path / "b2.h5") == _record_set(b)
    # a's own folder: packed, grown, packed again, unpacked: exactly a's records
    own = tmp_path / "own"
    assert main(["dataset", "pack", str(a), "-o", str(own)]) == 0
    if written_by == "an earlier costlab":
        _drop_digests(own)
    _subset(a, np.arange(8, 30))
    assert main(["dataset", "pack", str(a), "-o", str(own)]) == 0
    assert "22 records (10 new)" in capsys.readouterr().err
    assert main(["dataset", "unpack", str(own), "-o", str(tmp_path / "a2.h5")]) == 0
    assert _record_set(tmp_path / "a2.h5") == _record_set(a) and len(_record_set(a)) == 22


def test_packing_a_dataset_of_other_tasks_or_platforms_is_refused(tmp_path, capsys):
    bert = FIXTURES / "ansor" / "2080ti-bert-B1-head128.json"
    other = tmp_path / "other.h5"
    assert main(["dataset", "import-ansor", str(bert), "-o", str(other)]) == 0
    folder = tmp_path / "p"
    assert main(["dataset", "pack", str(other), "-o", str(folder)]) == 0
    before = _files(folder)
    capsys.readouterr()
    assert main(["dataset", "pack", str(SMALL), "-o", str(folder)]) == 2
    assert "tasks are not the first tasks of" in capsys.readouterr().err
    assert _files(folder) == before
    (folder / "dataset.json.gz").unlink()  # a packing interrupted before its meta file: the shards still tell
    assert main(["dataset", "pack", str(SMALL), "-o", str(folder)]) == 2
    assert "records of platform '2080ti', of which" in capsys.readouterr().err


# -- a platform renamed since it was packed ----------------------------------------------------------------

OLD_ID = "llvm-x86_64-2c"  # SMALL's platform


def _grow(data, pid, n) -> None:
    """``n`` more records of task 0 on ``pid``."""
    with DatasetWriter(data) as w:
        b = RecordBatch()
        for i in range(n):
            b.append(0, f'[["y{i}"], []]', [2e-3 * (i + 1)], 0, 2.0, 20_000 + i)
        w.add_records(pid, b)


def _packed_then_renamed(tmp_path, monkeypatch, written_by):
    """The measured fixture packed in shards of 32 rows (by a costlab that wrote no digests, or this one), then
    its platform renamed ``cpu-1t`` in the dataset: ``(dataset, pack folder, the packed shards' bytes)``."""
    monkeypatch.setattr("costlab.datasets.pack.SHARD_ROWS", 32)
    data, out = tmp_path / "d.h5", tmp_path / "p"
    shutil.copy(SMALL, data)
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    if written_by == "an earlier costlab":
        _drop_digests(out)
    shards = {p.name: p.read_bytes() for p in (out / "records" / OLD_ID).iterdir()}
    assert main(["dataset", "rename-platform", str(data), OLD_ID, "cpu-1t"]) == 0
    return data, out, shards


@pytest.mark.parametrize("written_by", ["this costlab", "an earlier costlab"])
@pytest.mark.parametrize("grown", [False, True])
def test_a_renamed_platform_is_packed_under_its_new_id(tmp_path, capsys, monkeypatch, written_by, grown):
    """`dataset rename-platform` (the docs' advice for mislabelled timings) left a pack, such as the committed
    corpus, that could not be brought up to date: "holds the pack of another dataset". The renamed platform is
    recognised by its packed records, its shards move to the new id's folder unchanged, and unpack gives the
    renamed dataset."""
    data, out, shards = _packed_then_renamed(tmp_path, monkeypatch, written_by)
    if grown:
        _grow(data, "cpu-1t", 3)
    capsys.readouterr()
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"packed before as platform {OLD_ID!r} (renamed)" in err and f"({3 if grown else 0} new)" in err
    assert not (out / "records" / OLD_ID).exists()
    moved = {p.name: p.read_bytes() for p in (out / "records" / "cpu-1t").iterdir()}
    assert all(moved[k] == v for k, v in shards.items()) and len(moved) == len(shards) + grown
    assert main(["dataset", "unpack", str(out), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0  # and packed again: nothing new
    assert "(0 new)" in capsys.readouterr().err


def test_a_renamed_platforms_interrupted_packing_continues(tmp_path, capsys):
    """A packing that moved the renamed platform's shards and stopped before its meta file: packed again, it
    finishes."""
    data, out = tmp_path / "d.h5", tmp_path / "p"
    shutil.copy(SMALL, data)
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    assert main(["dataset", "rename-platform", str(data), OLD_ID, "cpu-1t"]) == 0
    (out / "records" / OLD_ID).rename(out / "records" / "cpu-1t")
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    assert main(["dataset", "unpack", str(out), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")


def test_other_timings_of_the_same_programs_are_not_a_rename(tmp_path, capsys):
    """Another platform measured with --same-programs-as has the packed platform's tasks and program ids in the
    same order (the pack's digest), but other timings: never packed as the renamed platform; nothing written."""
    data, out, other = tmp_path / "d.h5", tmp_path / "p", tmp_path / "o.h5"
    shutil.copy(SMALL, data)
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    with open_dataset(SMALL) as src, DatasetWriter(other) as w:
        for t in src.tasks:
            w.add_task(t.workload_hash, t.dialect, t.workload, t.name, t.kernel_class, t.flops, t.extra)
        p, table, b = src.platforms[OLD_ID], src.records(OLD_ID), RecordBatch()
        w.add_platform("other-box", p.target, p.spec, p.host)
        values, offsets = table.costs()
        for i, s in enumerate(table.schedules()):
            b.append(int(table.task[i]), s, (values[offsets[i]:offsets[i + 1]] * 2).tolist(), int(table.error[i]),
                     float(table.column("timestamp")[i]) + 1, int(table.program_id[i]))
        w.add_records("other-box", b)
    before = _files(out)
    capsys.readouterr()
    assert main(["dataset", "pack", str(other), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"platform {OLD_ID!r}, which {other} does not have, nor a platform holding the records packed" in err
    assert _files(out) == before


def _made_again(data, pid, like, same_programs) -> None:
    """A new platform ``pid`` of ``like``'s target: ``like``'s programs in the same order with other timings (as
    `measure --platform PID --same-programs-as LIKE` gives), or 5 other programs."""
    with open_dataset(data) as ds:
        p, table = ds.platforms[like], ds.records(like)
        values, offsets = table.costs()
        rows = [(int(table.task[i]), s, (values[offsets[i]:offsets[i + 1]] / 2).tolist(), int(table.error[i]),
                 float(table.column("timestamp")[i]) + 5, int(table.program_id[i]))
                for i, s in enumerate(table.schedules())]
    if not same_programs:
        rows = [(0, f'[["z{i}"], []]', [1e-3 * (i + 1)], 0, 3.0, 30_000 + i) for i in range(5)]
    with DatasetWriter(data) as w:
        w.add_platform(pid, p.target, p.spec, p.host)
        b = RecordBatch()
        for r in rows:
            b.append(*r)
        w.add_records(pid, b)


@pytest.mark.parametrize("written_by", ["this costlab", "an earlier costlab"])
@pytest.mark.parametrize("same_programs", [False, True])
def test_a_platform_renamed_and_made_again_is_packed_as_both(tmp_path, capsys, monkeypatch, written_by,
                                                             same_programs):
    """Renamed A to B, then a new A (the platform measured again under its right name): packing again was refused
    as another dataset's pack, or, where the new A measured the same programs (--same-programs-as B), kept the
    packed records as the new A's, whose timings were lost. The packed records move to B unchanged and the new A
    is packed from its first row."""
    data, out, shards = _packed_then_renamed(tmp_path, monkeypatch, written_by)
    _made_again(data, OLD_ID, "cpu-1t", same_programs)
    capsys.readouterr()
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"cpu-1t: 80 records (0 new), packed before as platform {OLD_ID!r} (renamed)" in err
    assert f"{OLD_ID}: {80 if same_programs else 5} records ({80 if same_programs else 5} new), a new platform" in err
    moved = {p.name: p.read_bytes() for p in (out / "records" / "cpu-1t").iterdir()}
    assert moved == shards
    assert main(["dataset", "unpack", str(out), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0  # and packed again: nothing new
    assert capsys.readouterr().err.count("(0 new)") == 2


@pytest.mark.parametrize("copy", [False, True])
def test_a_platform_of_the_same_programs_beside_a_packed_one_is_no_rename(tmp_path, capsys, copy):
    """A platform measured with --same-programs-as a packed one that the dataset still has (other timings, or,
    as a copy, the same): both are packed, the packed one's shards where they are."""
    data, out = tmp_path / "d.h5", tmp_path / "p"
    shutil.copy(SMALL, data)
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    before = _files(out / "records")
    if copy:
        _subset(tmp_path / "c.h5", np.arange(80))
        with open_dataset(tmp_path / "c.h5") as ds, DatasetWriter(data) as w:
            p, table, b = ds.platforms[OLD_ID], ds.records(OLD_ID), RecordBatch()
            w.add_platform("cpu-copy", p.target, p.spec, p.host)
            values, offsets = table.costs()
            for i, sched in enumerate(table.schedules()):
                b.append(int(table.task[i]), sched, values[offsets[i]:offsets[i + 1]].tolist(), int(table.error[i]),
                         float(table.column("timestamp")[i]), int(table.program_id[i]))
            w.add_records("cpu-copy", b)
    else:
        _made_again(data, "cpu-copy", OLD_ID, True)
    capsys.readouterr()
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{OLD_ID}: 80 records (0 new)\n" in err + "\n" and "cpu-copy: 80 records (80 new)" in err
    assert "renamed" not in err and "new platform" not in err
    assert all(_files(out / "records")[k] == v for k, v in before.items())
    assert main(["dataset", "unpack", str(out), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")


class _Stop(Exception):
    pass


@pytest.mark.parametrize("same_programs, writes", [(False, w) for w in range(3)] + [(True, w) for w in range(5)])
def test_an_interrupted_packing_of_a_platform_renamed_and_made_again_continues(tmp_path, monkeypatch,
                                                                                same_programs, writes):
    """A packing of a platform renamed and made again that stopped after the move and ``writes`` files (the meta
    file of the moved shards first, then the new platform's shards, then its meta file): packed again, it
    finishes, and unpack gives the dataset."""
    from costlab.datasets import pack as packing

    monkeypatch.setattr("costlab.datasets.pack.SHARD_ROWS", 32)
    data, out = tmp_path / "d.h5", tmp_path / "p"
    shutil.copy(SMALL, data)
    packing.pack(data, out)
    assert main(["dataset", "rename-platform", str(data), OLD_ID, "cpu-1t"]) == 0
    _made_again(data, OLD_ID, "cpu-1t", same_programs)
    write, done = packing._write_gz, []

    def stopping(path, payload):
        if len(done) == writes:
            raise _Stop(path)
        done.append(path)
        write(path, payload)

    monkeypatch.setattr("costlab.datasets.pack._write_gz", stopping)
    with pytest.raises(_Stop):
        packing.pack(data, out)
    monkeypatch.setattr("costlab.datasets.pack._write_gz", write)
    packing.pack(data, out)
    assert main(["dataset", "unpack", str(out), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")


def test_a_split_seed_beyond_64_bits_is_refused_before_anything_is_written(tmp_path, capsys):
    """Such a seed (stored by a costlab that did not check `dataset split --seed`) made pack fail with orjson's
    TypeError after it had written the shards."""
    from costlab.datasets import make_split

    data, out = tmp_path / "d.h5", tmp_path / "p"
    shutil.copy(SMALL, data)
    with open_dataset(data) as ds:
        split = make_split(ds, "task", seed=10**23, name="big")
    with DatasetWriter(data) as w:
        split.write(w.h5.require_group("splits"))
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "split 'big' has seed 100000000000000000000000, beyond 64 bits" in err
    assert not out.exists()


def test_a_split_of_named_networks_packs_and_unpacks_without_a_seed(tmp_path):
    """Networks named by --held-out are a split of no seed or test fraction (stored as null): the pack keeps them
    so, and unpack reads them back."""
    data = tmp_path / "d.h5"
    shutil.copy(SMALL, data)
    assert main(["dataset", "split", str(data), "--held-out", "GMM:1,16,16,16"]) == 0
    with open_dataset(data) as ds:
        meta = ds.split("network-GMM_1_16_16_16").meta
    assert meta["seed"] is None and meta["test_fraction"] is None
    assert main(["dataset", "pack", str(data), "-o", str(tmp_path / "p")]) == 0
    assert main(["dataset", "unpack", str(tmp_path / "p"), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")


def test_a_second_pack_into_a_folder_waits_for_the_first(tmp_path, capsys):
    """Two packs into one folder of the dataset read at different moments both wrote shards from row 0, and
    neither a pack nor an unpack read the folder again: a pack holds the folder's lock, a second waits for it."""
    import threading
    import time

    from costlab.common.locks import take_lock

    data, out = tmp_path / "d.h5", tmp_path / "p"
    shutil.copy(SMALL, data)
    lock = take_lock(tmp_path / ".p.lock", wait=False, holder="pack")  # a pack running into it
    threading.Thread(target=lambda: (time.sleep(1.0), lock.close()), daemon=True).start()
    t0 = time.monotonic()
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    assert time.monotonic() - t0 >= 0.9 and f"waiting for another command packing into {out}" in capsys.readouterr().err
    assert main(["dataset", "unpack", str(out), "-o", str(tmp_path / "back.h5")]) == 0
    _same(data, tmp_path / "back.h5")


def test_an_unpack_whose_output_another_command_made_meanwhile_is_refused(tmp_path, capsys, monkeypatch):
    """Two unpacks into one new file: the second waited for the first's writer and then added its records to the
    first's dataset, both saying they succeeded. Checked again once the writer holds the file."""
    from costlab.datasets import pack as pack_module

    data, out, made = tmp_path / "d.h5", tmp_path / "p", tmp_path / "m.h5"
    shutil.copy(SMALL, data)
    assert main(["dataset", "pack", str(data), "-o", str(out)]) == 0
    real = pack_module.DatasetWriter

    def first_unpack_done(path):  # the other unpack committed while this one waited for the writer's lock
        shutil.copy(SMALL, made)
        return real(path)

    monkeypatch.setattr(pack_module, "DatasetWriter", first_unpack_done)
    assert main(["dataset", "unpack", str(out), "-o", str(made)]) == 2
    assert f"{made}: exists already (another command wrote it meanwhile)" in capsys.readouterr().err
    assert made.read_bytes() == SMALL.read_bytes()
