"""Bad input to ``costlab dataset import-ansor``: one clear message naming the file (and line) and what is
wrong; bad lines among good ones skipped and counted; the output dataset never damaged."""

from __future__ import annotations

from pathlib import Path

import h5py
import orjson
import pytest

from conftest import FIXTURES
from costlab.cli import main
from costlab.datasets import DatasetWriter, open_dataset, schema
from costlab.datasets import ansor_log
from costlab.datasets.ansor_log import import_ansor

MLP = FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"
BERT = FIXTURES / "ansor" / "2080ti-bert-B1-head128.json"


def _run(capsys, *argv):
    code = main(["dataset", "import-ansor", *map(str, argv)])
    return code, capsys.readouterr().err


def _good_lines(n=None):
    lines = MLP.read_bytes().splitlines()
    return lines if n is None else lines[:n]


def _record(**changes) -> bytes:
    rec = orjson.loads(_good_lines(1)[0])
    for path, value in changes.items():
        node = rec
        keys = [int(k) if k.isdigit() else k for k in path.split("__")]
        for k in keys[:-1]:
            node = node[k]
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return orjson.dumps(rec)


def _log(tmp_path, lines, name="log.json") -> str:
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("costlab: error:")]
    assert len(lines) == 1, err
    return lines[0]


# -- bad lines among good ones: skipped, counted, named ------------------------------------------------

BAD_LINES = {
    "truncated": (lambda: _good_lines(1)[0][:-40], "truncated or corrupt JSON line"),
    "garbage": (lambda: b"\x00\xff not json", "truncated or corrupt JSON line"),
    "version": (lambda: _record(v="v9.9"), "unknown Ansor log version 'v9.9' (this reader knows"),
    "no version": (lambda: _record(v=KeyError), "not an Ansor record: no 'v' field"),
    "no workload key": (lambda: _record(i__0=[]), "record has no workload key"),
    "key not json": (lambda: _record(i__0__0="[\"abc\", [1, 2"), "workload key is not JSON"),
    "key not a list": (lambda: _record(i__0__0='{"a": 1}'), "workload key is not a JSON list starting with"),
    "key not a string": (lambda: _record(i__0__0=17), "workload key must be a string, got int"),
    "no target": (lambda: _record(i__0=[_record_key()]), "record has no target"),
    "bad target": (lambda: _record(i__0__1="-mcpu=x"), "bad target: target has no kind"),
    "unknown target kind": (lambda: _record(i__0__1="notatarget -foo"), "bad target: unknown target kind 'notatarget'"),
    "num-cores": (lambda: _record(i__0__1="llvm -model=platinum-8358 -num-cores=two"),
                  "bad target: num-cores must be a positive integer, not 'two'"),
    "host kind": (lambda: _record(i__0__3="notahost"), "bad target: target host: unknown target kind 'notahost'"),
    "mcpu without a value": (lambda: _record(i__0__1="llvm -mcpu"), "bad target: mcpu must be a name, not True"),
    "target not a string": (lambda: _record(i__0__1={"kind": "llvm"}), "target ('i'[0][1]) must be a string"),
    "host not a string": (lambda: _record(i__0__3=["llvm"]), "target host ('i'[0][3]) must be a string"),
    "no steps": (lambda: _record(i__1=[[]]), "'i'[1] must be [stages, steps]"),
    "costs": (lambda: _record(r__0=["fast"]), "costs ('r'[0]) must be a list of numbers"),
    "error_no": (lambda: _record(r__1="0"), "error_no ('r'[1]) must be an integer"),
    "error_no range": (lambda: _record(r__1=40000), "error_no ('r'[1]) 40000 is out of range (-32768..32767)"),
    "version a list": (lambda: _record(v=["v0.6"]), "unknown Ansor log version ['v0.6']"),
    "not a record": (lambda: b"[1, 2, 3]", "not an Ansor record (a JSON list"),
}


def _record_key():
    return orjson.loads(_good_lines(1)[0])["i"][0][0]


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_bad_line_among_good_is_skipped_and_named(tmp_path, capsys, kind):
    make, message = BAD_LINES[kind]
    good = _good_lines(10)
    log = _log(tmp_path, good[:4] + [make()] + [b"", b"   "] + good[4:])  # blank lines are not errors
    out = tmp_path / "d.h5"
    code, err = _run(capsys, log, "-o", out)
    assert code == 0, err
    assert "1 bad line(s)/record(s) skipped" in err
    assert f"skipped {log}:5: {message}" in err
    with open_dataset(out) as ds:
        assert len(ds.records("platinum-8358")) == 10


def test_a_target_naming_an_odd_machine_gets_a_valid_platform_id(tmp_path, capsys):
    """A ``-model`` that begins with a character a platform id may not begin with is trimmed to one, never the
    end of the import."""
    rec = orjson.loads(_good_lines(1)[0])
    rec["i"][0][1] = rec["i"][0][1].replace("-model=platinum-8358", "-model=_box+1")
    out = tmp_path / "d.h5"
    code, err = _run(capsys, _log(tmp_path, _good_lines(4) + [orjson.dumps(rec)]), "-o", out)
    assert code == 0, err
    with open_dataset(out) as ds:
        assert sorted(ds.record_platforms()) == ["box+1", "platinum-8358"]


def test_a_tenset_folder_of_an_odd_name_gets_a_valid_platform_id(tmp_path, capsys):
    """``measure_records/<folder>/``: a folder name that is no platform id (``my box``) is made one, as a target's
    odd machine name is, never the end of the import."""
    folder = tmp_path / "measure_records" / "my box"
    folder.mkdir(parents=True)
    _log(folder, _good_lines(4), name="x.json")
    code, err = _run(capsys, tmp_path / "measure_records", "-o", tmp_path / "d.h5")
    assert code == 0, err
    with open_dataset(tmp_path / "d.h5") as ds:
        assert ds.record_platforms() == ["my-box"] and len(ds.records("my-box")) == 4


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc/self/mem (opens, never reads)")
def test_a_log_that_cannot_be_read_is_one_error_naming_it(tmp_path, capsys):
    """A file that opens but fails to read (an I/O error) is one line naming it, not a traceback; the output is not
    made."""
    code, err = _run(capsys, MLP, "/proc/self/mem", "-o", tmp_path / "d.h5")
    assert code == 2 and _error_line(err) == "costlab: error: /proc/self/mem: cannot be read (Input/output error)"
    assert "Traceback" not in err and not (tmp_path / "d.h5").exists()


def test_logs_of_another_target_into_an_existing_platform_are_refused(tmp_path, capsys):
    """--platform names one setup: a second import of another target's logs into it is refused in one line, the
    dataset as it was."""
    out = tmp_path / "d.h5"
    assert _run(capsys, BERT, "-o", out, "--platform", "box")[0] == 0
    before = out.read_bytes()
    code, err = _run(capsys, MLP, "-o", out, "--platform", "box")
    assert code == 2 and "platform 'box' holds records of target" in _error_line(err) and "another --platform" in err
    assert out.read_bytes() == before


def test_a_line_of_another_target_among_good_ones_is_skipped_counted_and_adds_no_task(tmp_path, capsys):
    """--platform names one setup: a line of another target, in a log of good ones, is a bad line named by its
    file and line (not the end of the import, nor an error naming the dataset), and its new workload is no
    task of the dataset."""
    rec = orjson.loads(_good_lines(1)[0])
    rec["i"][0][1] = rec["i"][0][1].replace("-model=platinum-8358", "-model=other-box")
    rec["i"][0][0] = '["deadbeef", 1]'  # a workload none of the good lines has
    log = _log(tmp_path, _good_lines(4) + [orjson.dumps(rec)], name="mixed.json")
    out = tmp_path / "d.h5"
    code, err = _run(capsys, log, "-o", out, "--platform", "box")
    assert code == 0, err
    assert "1 bad line" in err and "mixed.json:5" in err and "holds records of target" in err
    with open_dataset(out) as ds:
        assert ds.num_records("box") == 4
        assert all("deadbeef" not in t.workload_hash for t in ds.tasks) and len(ds.tasks) == 1


def test_report_counts_every_bad_line_and_shows_the_first(tmp_path):
    good = _good_lines()
    lines = []
    for i, line in enumerate(good):
        lines.append(line)
        if i % 4 == 0:
            lines.append(line[: len(line) // 2])  # 32 truncated lines
    report = import_ansor(_log(tmp_path, lines), tmp_path / "d.h5", progress=False)
    assert report.bad == 32 and report.added == {"platinum-8358": 128}
    assert len(report.problems) == 10 and "... and 22 more" in report.format()


# -- nothing usable: exit non-zero with one message, output untouched --------------------------------------

def test_whole_file_of_unknown_version(tmp_path, capsys):
    log = _log(tmp_path, [_record(v="v1.0")] * 3)
    out = tmp_path / "d.h5"
    code, err = _run(capsys, log, "-o", out)
    assert code == 2
    assert _error_line(err) == (
        f"costlab: error: {log}:1: unknown Ansor log version 'v1.0' (this reader knows v0.2, v0.3, v0.4, v0.5, "
        "v0.6); no usable records (3 bad lines in 1 file(s))")
    assert not out.exists()


def test_empty_file(tmp_path, capsys):
    log = tmp_path / "empty.json"
    log.write_bytes(b"")
    code, err = _run(capsys, log, "-o", tmp_path / "d.h5")
    assert code == 2 and _error_line(err) == f"costlab: error: {log}: empty file (no records)"
    log.write_bytes(b"\n  \n")
    assert _run(capsys, log, "-o", tmp_path / "d.h5")[0] == 2
    assert not (tmp_path / "d.h5").exists()


def test_empty_file_among_good_ones_is_counted(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "empty.json").write_bytes(b"")
    _log(tmp_path / "logs", _good_lines(5), "good.json")
    code, err = _run(capsys, tmp_path / "logs", "-o", tmp_path / "d.h5")
    assert code == 0 and f"skipped {tmp_path / 'logs' / 'empty.json'}: empty file (no records)" in err


def test_missing_path(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    code, err = _run(capsys, MLP, missing, "-o", tmp_path / "d.h5")
    assert code == 2 and _error_line(err) == f"costlab: error: {missing}: no such file or directory"
    assert not (tmp_path / "d.h5").exists()  # checked before anything is read


def test_folder_without_logs(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.txt").write_text("x")
    code, err = _run(capsys, tmp_path / "logs", "-o", tmp_path / "d.h5")
    assert code == 2 and "logs: folder holds no *.json log files" in _error_line(err)


def test_bad_platform_option(tmp_path, capsys):
    code, err = _run(capsys, MLP, "-o", tmp_path / "d.h5", "--platform", "a b")
    assert code == 2 and _error_line(err).startswith("costlab: error: --platform: bad platform id 'a b'")


def test_bad_network_info(tmp_path, capsys):
    info = tmp_path / "nets.json"
    info.write_text('{"bert": {"not a key": 1}')
    code, err = _run(capsys, MLP, "-o", tmp_path / "d.h5", "--network-info", info)
    assert code == 2 and f"costlab: error: {info}: network info is not valid JSON" in _error_line(err)
    info.write_text('{"bert": {"not a key": 1}}')
    code, err = _run(capsys, MLP, "-o", tmp_path / "d.h5", "--network-info", info)
    assert _error_line(err) == f"costlab: error: {info}: network 'bert': workload key is not JSON: 'not a key'"
    info.write_text(orjson.dumps({"bert": {_record_key(): -1}}).decode())
    code, err = _run(capsys, MLP, "-o", tmp_path / "d.h5", "--network-info", info)
    assert "weight must be a positive number, got -1" in _error_line(err)
    pkl = tmp_path / "x.task.pkl"
    pkl.write_bytes(b"\x80\x04garbage")
    code, err = _run(capsys, MLP, "-o", tmp_path / "d.h5", "--network-info", pkl)
    assert code == 2 and "cannot read TenSet task pickle" in err and "convert the network info to JSON" in err
    assert not (tmp_path / "d.h5").exists()


# -- the output dataset ------------------------------------------------------------------------------------

def test_output_is_not_a_dataset(tmp_path, capsys):
    text = tmp_path / "notes.h5"
    text.write_text("my notes")
    code, err = _run(capsys, MLP, "-o", text)
    assert code == 2 and _error_line(err).startswith(f"costlab: error: {text}: not a costlab dataset (not an HDF5")
    assert text.read_text() == "my notes"
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = [1, 2, 3]
    before = other.read_bytes()
    code, err = _run(capsys, MLP, "-o", other)
    assert code == 2 and f"{other}: not a costlab dataset (HDF5 file without 'costlab_format')" in err
    assert other.read_bytes() == before


def test_output_of_newer_schema(tmp_path, capsys):
    out = tmp_path / "d.h5"
    import_ansor(BERT, out, progress=False)
    with h5py.File(out, "a") as f:
        f.attrs[schema.FORMAT_ATTR] = schema.FORMAT_VERSION + 1
    before = out.read_bytes()
    code, err = _run(capsys, MLP, "-o", out)
    assert code == 2
    assert f"{out}: written by a newer costlab (format {schema.FORMAT_VERSION + 1};" in _error_line(err)
    assert "upgrade costlab" in err
    assert out.read_bytes() == before


def test_ctrl_c_that_tvm_passes_on_as_its_own_error_is_an_interruption(tmp_path, capsys, monkeypatch):
    """Ctrl-C that lands inside a Python function TVM called (a builder's wait for its workers) comes back out of
    TVM as TVM's error, not KeyboardInterrupt: the command still ends as interrupted (one line, exit 130), as it
    does for SIGTERM, and the dataset is as it was."""
    import os
    import signal
    import time

    out = tmp_path / "d.h5"
    import_ansor(BERT, out, progress=False)
    before = out.read_bytes()

    def add_records(self, pid, batch):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:  # what TVM's FFI makes of an exception raised in a callback
            raise RuntimeError("Traceback (most recent call last): ... KeyboardInterrupt") from None
        raise AssertionError("Ctrl-C did not interrupt")

    monkeypatch.setattr(DatasetWriter, "add_records", add_records)
    # Ctrl-C as a terminal delivers it (a job started in the background, as a CI runner may start the suite,
    # ignores SIGINT, and costlab then leaves it ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code, err = _run(capsys, MLP, "-o", out)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130 and err.strip() == "costlab: interrupted; data written before is kept"
    assert out.read_bytes() == before


def _data_files(folder) -> list[str]:
    """Files in a folder other than the writer's lock file (``.<name>.lock``, kept between transactions)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def _interrupt_at_second_chunk(monkeypatch, exc):
    """Make the import fail while handing its second chunk of records to the writer."""
    monkeypatch.setattr(ansor_log, "CHUNK_RECORDS", 16)
    real = DatasetWriter.add_records
    calls = []

    def add_records(self, pid, batch):
        calls.append(len(batch))
        if len(calls) == 2:
            raise exc
        return real(self, pid, batch)

    monkeypatch.setattr(DatasetWriter, "add_records", add_records)
    return calls


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), OSError("disk full")], ids=["ctrl-c", "crash"])
def test_interrupted_import_leaves_the_dataset_intact(tmp_path, capsys, monkeypatch, exc):
    out = tmp_path / "d.h5"
    import_ansor(BERT, out, progress=False)
    before = out.read_bytes()
    calls = _interrupt_at_second_chunk(monkeypatch, exc)
    if isinstance(exc, KeyboardInterrupt):
        code, err = _run(capsys, MLP, "-o", out)
        assert code == 130 and "interrupted; data written before is kept" in err
    else:
        with pytest.raises(OSError, match="disk full"):
            import_ansor(MLP, out, progress=False)
    assert calls == [16, 16]  # the first chunk was written into the transaction, then it failed
    assert out.read_bytes() == before
    assert _data_files(tmp_path) == ["d.h5"]  # no temporary copy left behind
    with open_dataset(out) as ds:
        assert ds.record_platforms() == ["2080ti"] and len(ds.records("2080ti")) == 128


def test_interrupted_first_import_creates_nothing(tmp_path, monkeypatch):
    _interrupt_at_second_chunk(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        import_ansor(MLP, tmp_path / "d.h5", progress=False)
    assert _data_files(tmp_path) == []
