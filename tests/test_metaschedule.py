"""costlab.metaschedule: the one list of GPU target kinds, the one count of cores, the one trace replay and
trace JSON, the one database writer (read back by the one reader, plain or gzip)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from costlab.common.errors import InputError
from costlab.common.host import usable_cores
from costlab.common.import_report import ImportReport
from costlab.metaschedule.databases import (RECORD_FILE, WORKLOAD_FILE, database_file, read_records, read_workloads,
                                            write_database)
from costlab.metaschedule.targets import GPU_KINDS, host_target, is_gpu, platform_id_for
from costlab.metaschedule.traces import ReplayError, compact_json, parse_trace, replay, trace_json

TUNE_DB = Path(__file__).parent / "fixtures" / "ms_tune_db"


def test_gpu_kinds_are_one_list():
    for kind in GPU_KINDS:
        assert is_gpu({"kind": kind}) and platform_id_for({"kind": kind, "arch": "sm_90"}) == f"{kind}-sm_90"
    assert "nvptx" in GPU_KINDS
    assert is_gpu({"kind": "llvm", "keys": ["gpu"]}) and not is_gpu({"kind": "llvm", "mcpu": "znver4"})


def test_the_string_form_of_a_target_becomes_a_dict_tvm_takes():
    """``-host`` is a target itself (a nested dict), and names stay strings even when all digits (TVM refuses
    a number there); lists and numbers are typed as before."""
    import tvm

    from costlab.metaschedule.targets import target_from_string

    cuda = target_from_string("cuda -arch=sm_80 -host='llvm -mcpu=znver4 -num-cores=2'")
    assert cuda["host"] == {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
    cpu = target_from_string("llvm -mcpu=icelake-server -model=8358 -num-cores=4 -mattr=+avx2,+fma")
    assert cpu == {"kind": "llvm", "mcpu": "icelake-server", "model": "8358", "num-cores": 4,
                   "mattr": ["+avx2", "+fma"]}
    for target in (cuda, cpu):
        tvm.target.Target(target)  # accepted as it is


def test_cores_are_the_affinity():
    want = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert usable_cores() == want
    assert host_target()["num-cores"] == want


def test_parse_trace_refuses_what_is_no_trace():
    with pytest.raises(ReplayError, match="not JSON"):
        parse_trace("not json")
    with pytest.raises(ReplayError, match="not a MetaSchedule trace"):
        parse_trace("[1, 2, 3]")
    assert parse_trace("[[], []]") == [[], []]


def _first_record():
    workloads = read_workloads(database_file(TUNE_DB, WORKLOAD_FILE), ImportReport())
    for _i, _size, parsed in read_records(database_file(TUNE_DB, RECORD_FILE), ImportReport()):
        if parsed is not None:
            return workloads[parsed[0]], parsed
    raise AssertionError("the fixture database holds no record")


def test_replay_and_trace_json_give_back_the_database_line():
    """A record replayed on its workload and written by ``trace_json`` is the trace of the file, character for
    character; a trace that does not apply is a ReplayError with TVM's reason."""
    from costlab.metaschedule.workloads import decode_workload

    (shash, b64), (_idx, trace, *_rest) = _first_record()
    mod = decode_workload(shash, b64)
    assert compact_json(trace_json(replay(mod, compact_json(trace)).trace)) == compact_json(trace)
    bad = json.loads(json.dumps(trace).replace('"C"', '"no_such_block"'))
    if bad != trace:
        with pytest.raises(ReplayError, match="does not replay") as exc:
            replay(mod, bad)
        assert exc.value.reason


def test_write_database_reads_back_plain_and_gzip(tmp_path):
    report = ImportReport()
    workloads = read_workloads(database_file(TUNE_DB, WORKLOAD_FILE), report)
    records = [p for _i, _s, p in read_records(database_file(TUNE_DB, RECORD_FILE), report) if p is not None]
    index = {i: n for n, i in enumerate(sorted(workloads))}
    out = write_database(tmp_path / "db", [workloads[i] for i in sorted(workloads)],
                         [(index[i], trace, secs, target, args) for i, trace, secs, target, args in records])
    with pytest.raises(InputError, match="already holds a MetaSchedule database"):
        write_database(out, [], [])
    gz = tmp_path / "gz"
    gz.mkdir()
    for name in (WORKLOAD_FILE, RECORD_FILE):
        (gz / (name + ".gz")).write_bytes(gzip.compress((out / name).read_bytes()))
    for where in (out, gz):
        again = [p for _i, _s, p in read_records(database_file(where, RECORD_FILE), ImportReport()) if p is not None]
        assert [(compact_json(r[1]), r[2], r[3]) for r in again] == [(compact_json(r[1]), r[2], r[3]) for r in records]
        assert list(read_workloads(database_file(where, WORKLOAD_FILE), ImportReport()).values()) == \
            [workloads[i] for i in sorted(workloads)]
    with pytest.raises(InputError, match=r"already holds a MetaSchedule database \(database_workload.json.gz"):
        write_database(gz, [], [])  # plain files beside it would hide it from every reader
    assert sorted(p.name for p in gz.iterdir()) == [RECORD_FILE + ".gz", WORKLOAD_FILE + ".gz"]
    shutil.rmtree(gz)
    assert write_database(out, [], [], replace=True) == out and (out / RECORD_FILE).read_bytes() == b""


@pytest.mark.parametrize("replace", [False, True])
def test_a_database_write_that_fails_at_either_file_leaves_what_was_there(tmp_path, monkeypatch, replace):
    """Both files or neither: a full disk at the records' sync (after the workloads were written) leaves the
    folder as it was, a database replaced (a library's export) included, with one error naming the folder."""
    import errno
    import os

    out = tmp_path / "db"
    if replace:
        write_database(out, [("1", "QUJD")], [(0, [[], []], [1.0], {"kind": "llvm"}, [])])
    before = {p.name: p.read_bytes() for p in out.iterdir()} if replace else {}
    real, calls = os.fsync, []

    def full_at_second_file(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", full_at_second_file)
    with pytest.raises(InputError, match="No space left on device.*nothing was written") as err:
        write_database(out, [("2", "REVG")], [(0, [[], []], [2.0], {"kind": "llvm"}, [])], replace=replace)
    assert str(out) in str(err.value)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
