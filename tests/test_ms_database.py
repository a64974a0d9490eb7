"""import-ms / export-ms on a real MetaSchedule database (tests/fixtures/ms_tune_db, made by tune_tir with
scripts/make_ms_database.py) and round trips through MetaSchedule's own JSONDatabase."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from costlab.common.errors import InputError
from costlab.datasets import DatasetWriter, RecordBatch, open_dataset, program_id
from costlab.datasets.ms_database import export_ms, import_ms
from costlab.metaschedule.databases import RECORD_FILE, WORKLOAD_FILE
from costlab.metaschedule.results import ERROR_MS_FAILED, ERROR_MS_NO_RESULT, ERROR_NONE
from costlab.metaschedule.traces import compact_json, trace_json

FIXTURES = Path(__file__).parent / "fixtures"
TUNE_DB = FIXTURES / "ms_tune_db"


def _lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture()
def tune_db(tmp_path) -> Path:
    dst = tmp_path / "tune_db"
    shutil.copytree(TUNE_DB, dst)
    return dst


def test_import_keeps_every_record_as_written(tmp_path, tune_db):
    out = tmp_path / "d.h5"
    report = import_ms([tune_db], out, network="tiny", progress=False)
    workloads = _lines(tune_db / WORKLOAD_FILE)
    records = _lines(tune_db / RECORD_FILE)
    assert report.bad == 0 and report.usable
    target = records[0][1][2]
    with open_dataset(out) as ds:
        (pid,) = ds.record_platforms()
        assert pid == "llvm-" + target["mtriple"].split("-")[0] + "-2c"
        assert ds.platforms[pid].target == target
        table = ds.records(pid)
        assert len(table) == len(records)
        # tasks: the shash and the base64 IR exactly as in the file, described with TVM
        assert sorted((t.workload_hash, t.workload) for t in ds.tasks) == sorted(map(tuple, workloads))
        assert sorted(t.kernel_class for t in ds.tasks) == ["mac.s2r1", "mac.s4r3"]
        assert all(t.flops > 0 and t.extra["args_info"] for t in ds.tasks)
        assert ds.networks["tiny"] == [(0, 1.0), (1, 1.0)]
        by_hash = {t.workload_hash: t.index for t in ds.tasks}
        values, offsets = table.costs()
        schedules = table.schedules()
        for i, (widx, (trace, run_secs, _target, _args)) in enumerate(records):
            shash = workloads[widx][0]
            assert table.task[i] == by_hash[shash]
            assert schedules[i] == compact_json(trace)
            assert table.program_id[i] == np.uint64(program_id("ms", shash, compact_json(trace)))
            assert values[offsets[i]:offsets[i + 1]].tolist() == run_secs  # raw run_secs
            failed = run_secs[0] >= 1e10
            assert table.error[i] == (ERROR_MS_FAILED if failed else ERROR_NONE)
        assert (table.error == ERROR_NONE).sum() > 0, "the fixture should hold successful records"


def test_reimport_adds_nothing_and_platform_override(tmp_path, tune_db):
    out = tmp_path / "d.h5"
    first = import_ms([tune_db], out, progress=False)
    again = import_ms([tune_db], out, progress=False)
    assert sum(again.added.values()) == 0
    assert sum(again.duplicates.values()) == sum(first.added.values())
    named = import_ms([tune_db], out, platform="my-box", progress=False)
    assert named.added == {"my-box": sum(first.added.values())}
    with open_dataset(out) as ds:
        assert len(ds.tasks) == 2
        assert ds.platforms["my-box"].target["kind"] == "llvm"


def test_missing_files_are_one_clear_error(tmp_path, tune_db):
    (tune_db / RECORD_FILE).unlink()
    with pytest.raises(InputError, match=f"missing {RECORD_FILE}"):
        import_ms([tune_db], tmp_path / "d.h5", progress=False)
    with pytest.raises(InputError, match="no such MetaSchedule work directory"):
        import_ms([tmp_path / "nope"], tmp_path / "d.h5", progress=False)
    assert not (tmp_path / "d.h5").exists()


def test_bad_lines_are_skipped_and_counted(tmp_path, tune_db):
    rec_path, wl_path = tune_db / RECORD_FILE, tune_db / WORKLOAD_FILE
    good = rec_path.read_text().splitlines()
    n = len(good)
    broken = good[:2] + ["[0, [\"truncated", "[7, " + good[0].split(",", 1)[1], "{\"not\": \"a record\"}"] + good[2:]
    rec_path.write_text("\n".join(broken) + "\n")
    wl_path.write_text(wl_path.read_text() + "not json at all\n")
    report = import_ms([tune_db], tmp_path / "d.h5", progress=False)
    assert report.bad == 4
    assert sum(report.added.values()) == n
    text = report.format()
    assert f"{rec_path}:3: not JSON" in text
    assert f"{rec_path}:4: workload index 7" in text
    assert f"{rec_path}:5: not a tuning record" in text
    assert f"{wl_path}:3: not JSON" in text


def test_a_record_of_another_target_into_one_platform_is_skipped_and_counted(tmp_path, tune_db):
    """--platform names one setup: a record of another target among the good ones is a bad record named by its
    file and line, not the end of the import nor an error naming the dataset."""
    rec_path = tune_db / RECORD_FILE
    lines = rec_path.read_text().splitlines()
    odd = json.loads(lines[-1])
    odd[1][2] = dict(odd[1][2], mcpu="skylake-avx512")
    rec_path.write_text("\n".join(lines[:-1] + [json.dumps(odd)]) + "\n")
    report = import_ms([tune_db], tmp_path / "d.h5", platform="box", progress=False)
    assert report.bad == 1 and sum(report.added.values()) == len(lines) - 1
    assert f"{rec_path}:{len(lines)}: platform 'box' holds records of target" in report.format()


def test_records_of_a_workload_tvm_cannot_decode_are_skipped_and_counted(tmp_path, tune_db):
    """A workload line of valid base64 that is no IRModule: its records are bad records (no command could replay,
    measure or export them), each named, the others imported."""
    rec_path, wl_path = tune_db / RECORD_FILE, tune_db / WORKLOAD_FILE
    workloads, good = wl_path.read_text().splitlines(), rec_path.read_text().splitlines()
    wl_path.write_text("\n".join(workloads + ['["123", "AAAA"]']) + "\n")
    bad = f"[{len(workloads)}, " + good[0].split(",", 1)[1]
    rec_path.write_text("\n".join(good + [bad, bad]) + "\n")
    out = tmp_path / "d.h5"
    report = import_ms([tune_db], out, progress=False)
    assert report.bad == 2 and sum(report.added.values()) == len(good)
    assert f"{rec_path}:{len(good) + 1}: workload does not decode: " in report.format()
    with open_dataset(out) as ds:
        assert len(ds.tasks) == len(workloads)


def test_a_network_imported_again_with_other_tasks_is_replaced_and_said(tmp_path, tune_db):
    """`import-ms --network N` of another work dir replaces N's task list: the report says so; the same import
    again changes nothing and says nothing."""
    out = tmp_path / "d.h5"
    import_ms([tune_db], out, network="tiny", progress=False)
    assert import_ms([tune_db], out, network="tiny", progress=False).notes == []
    rec_path, wl_path = tune_db / RECORD_FILE, tune_db / WORKLOAD_FILE
    first = json.loads(rec_path.read_text().splitlines()[0])[0]  # the work dir cut to one workload's records
    rec_path.write_text("".join(ln + "\n" for ln in rec_path.read_text().splitlines() if json.loads(ln)[0] == first))
    with open_dataset(out) as ds:
        before = len(ds.networks["tiny"])
    report = import_ms([tune_db], out, network="tiny", progress=False)
    assert report.notes == [f"network 'tiny' replaced: it had {before} tasks, it has 1 now"]
    assert "note: network 'tiny' replaced" in report.format()


def test_failed_and_missing_results_are_flagged(tmp_path, tune_db):
    rec_path = tune_db / RECORD_FILE
    lines = _lines(rec_path)
    lines[0][1][1] = None  # no run_secs at all
    lines[1][1][1] = [1e10]
    lines[2][1][1] = [2e-6, 3e-6]
    rec_path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "d.h5"
    import_ms([tune_db], out, progress=False)
    with open_dataset(out) as ds:
        table = ds.records(ds.record_platforms()[0])
        assert table.error[:3].tolist() == [ERROR_MS_NO_RESULT, ERROR_MS_FAILED, ERROR_NONE]
        lat = table.latency([0, 1, 2])
        assert np.isinf(lat[0]) and np.isinf(lat[1]) and lat[2] == pytest.approx(2.5e-6)


def test_export_loads_in_metaschedule_and_best_record_matches(tmp_path, tune_db):
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    out = tmp_path / "d.h5"
    import_ms([tune_db], out, progress=False)
    with open_dataset(out) as ds:
        pid = ds.record_platforms()[0]
        table = ds.records(pid)
        lat = table.latency()
        ok = int(np.isfinite(lat).sum())
        best_row = {t: rows[np.argmin(lat[rows])] for t, rows in table.rows_by_task().items()}
        schedules = table.schedules()
        tasks = list(ds.tasks)
        target = ds.platforms[pid].target
    summary = export_ms(out, pid, tmp_path / "db")
    assert f"{ok} records" in summary
    db = JSONDatabase(work_dir=str(tmp_path / "db"), allow_missing=False)
    assert len(db) == ok
    import tvm
    from tvm.s_tir.meta_schedule.database import Workload

    for t in tasks:
        r = best_row[t.index]
        if not np.isfinite(lat[r]):
            continue
        wl = Workload.from_json([t.workload_hash, t.workload])
        (top,) = db.get_top_k(db.commit_workload(wl.mod), 1)
        assert compact_json(trace_json(top.trace)) == schedules[r]
        assert np.mean([float(x) for x in top.run_secs]) == pytest.approx(lat[r])
        best = db.query_tuning_record(wl.mod, tvm.target.Target(target), "main")
        assert compact_json(trace_json(best.trace)) == schedules[r]


def test_export_then_import_gives_the_same_programs(tmp_path, tune_db):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    import_ms([tune_db], a, progress=False)
    with open_dataset(a) as ds:
        pid = ds.record_platforms()[0]
        ids_a = set(ds.records(pid).program_id.tolist())
        n = ds.num_records(pid)
    text = export_ms(a, pid, tmp_path / "db", include_failed=True)
    assert f"{n} records" in text
    import_ms([tmp_path / "db"], b, platform=pid, progress=False)
    with open_dataset(b) as ds:
        assert set(ds.records(pid).program_id.tolist()) == ids_a
        assert ds.num_records(pid) == n


def test_an_export_whose_second_file_cannot_be_written_leaves_no_half_database(tmp_path, tune_db, monkeypatch):
    """The disk fills while the records are written: one error naming the file, the workload file written
    before removed again, and the same export, with room, succeeds in the same directory."""
    import errno
    import os

    out = tmp_path / "d.h5"
    import_ms([tune_db], out, platform="p", progress=False)
    real, synced = os.fsync, []

    def full_at_the_records(fd):  # the second file's sync (the records'): the disk is full
        synced.append(fd)
        if len(synced) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", full_at_the_records)
    with pytest.raises(InputError, match=f"{RECORD_FILE}: cannot write \\(No space left on device\\)"):
        export_ms(out, "p", tmp_path / "db")
    assert not list((tmp_path / "db").iterdir())
    monkeypatch.setattr(os, "fsync", real)
    assert "records" in export_ms(out, "p", tmp_path / "db")


def test_export_refuses_ansor_tasks_and_existing_databases(tmp_path, tune_db):
    out = tmp_path / "d.h5"
    import_ms([tune_db], out, platform="p", progress=False)
    export_ms(out, "p", tmp_path / "db")
    with pytest.raises(InputError, match="already holds a MetaSchedule database"):
        export_ms(out, "p", tmp_path / "db")
    with pytest.raises(InputError, match="no records for platform 'q'"):
        export_ms(out, "q", tmp_path / "db2")
    with DatasetWriter(out) as w:
        t = w.add_task('["matmul", 16, 16, 16]', "ansor", '["matmul", 16, 16, 16]', name="ansor-mm")
        w.add_platform("p", w.platforms["p"].target)
        batch = RecordBatch()
        batch.append(t, '[["SP", 2, 0, 16, [4], 1]]', [1e-5], 0, 0.0, program_id("ansor", "x", "s"))
        w.add_records("p", batch)
    with pytest.raises(InputError, match="Ansor-dialect task"):
        export_ms(out, "p", tmp_path / "db3")
    assert not (tmp_path / "db3" / WORKLOAD_FILE).exists()


def test_trace_json_is_the_database_form(tune_db):
    """Traces loaded by MetaSchedule and written by ``trace_json`` are the lines of the file, character
    for character once compact: what ``measure`` stores is what a tuning database holds."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    db = JSONDatabase(work_dir=str(tune_db), allow_missing=False)
    from_file = sorted(compact_json(r[1][0]) for r in _lines(tune_db / RECORD_FILE))
    assert sorted(compact_json(trace_json(r.trace)) for r in db.get_all_tuning_records()) == from_file


def test_command_line_import_and_export(tmp_path, tune_db, capsys):
    from costlab.cli import main

    out = tmp_path / "d.h5"
    assert main(["dataset", "import-ms", str(tune_db), "-o", str(out), "--platform", "p", "--network", "n"]) == 0
    assert "p: 16 records added" in capsys.readouterr().err
    assert main(["dataset", "export-ms", str(out), "--platform", "p", "-o", str(tmp_path / "db")]) == 0
    assert "2 workloads, 16 records" in capsys.readouterr().err
    (tune_db / WORKLOAD_FILE).unlink()
    assert main(["dataset", "import-ms", str(tune_db), "-o", str(out)]) == 2
    assert f"missing {WORKLOAD_FILE}" in capsys.readouterr().err


def _gzipped(src: Path, dst: Path, names=(WORKLOAD_FILE, RECORD_FILE)) -> Path:
    import gzip

    dst.mkdir(parents=True)
    for name in (WORKLOAD_FILE, RECORD_FILE):
        if name in names:
            (dst / (name + ".gz")).write_bytes(gzip.compress((src / name).read_bytes()))
        else:
            shutil.copy(src / name, dst / name)
    return dst


def test_import_reads_gzip_databases_as_benchmarks_archive_them(tmp_path, tune_db, capsys):
    """database_workload.json.gz / database_tuning_record.json.gz (either or both) import to the same records
    as the plain files; transfer-tuning reads them through the same reader and gets the same programs."""
    from costlab.cli import main
    from costlab.export.transfer.sources import read_sources

    plain = tmp_path / "plain.h5"
    import_ms([tune_db], plain, progress=False)
    def records(path):  # every stored column of every record, and the tasks' workloads
        with open_dataset(path) as ds:
            (pid,) = ds.record_platforms()
            table = ds.records(pid)
            values, offsets = table.costs()
            rows = range(ds.num_records(pid))
            return pid, [(t.workload_hash, t.workload, t.name) for t in ds.tasks], sorted(
                (int(table.program_id[r]), int(table.task[r]), table.schedules([r])[0], int(table.error[r]),
                 values[int(offsets[r]):int(offsets[r + 1])].tolist()) for r in rows)

    pid, tasks, want = records(plain)
    for i, names in enumerate([(WORKLOAD_FILE, RECORD_FILE), (RECORD_FILE,)]):
        gz = _gzipped(tune_db, tmp_path / f"gz{i}", names)
        out = tmp_path / f"gz{i}.h5"
        assert main(["dataset", "import-ms", str(gz), "-o", str(out)]) == 0
        assert f"{pid}: 16 records added" in capsys.readouterr().err
        assert records(out) == (pid, tasks, want)
        got, report = read_sources([gz], 4)
        exp, _ = read_sources([tune_db], 4)
        assert report.bad == 0 and [(t.shash, t.programs) for t in got] == [(t.shash, t.programs) for t in exp]


def test_a_damaged_gzip_database_is_one_line(tmp_path, tune_db, capsys):
    """A compressed record file damaged before its first whole line: nothing usable, one line naming it."""
    from costlab.cli import main

    gz = _gzipped(tune_db, tmp_path / "gz")
    data = (gz / (RECORD_FILE + ".gz")).read_bytes()
    (gz / (RECORD_FILE + ".gz")).write_bytes(data[:30])  # cut short inside the first line
    assert main(["dataset", "import-ms", str(gz), "-o", str(tmp_path / "d.h5")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{RECORD_FILE}.gz: is not a readable gzip file" in err
    assert not (tmp_path / "d.h5").exists()


def test_a_gzip_file_cut_short_keeps_the_lines_before_and_the_other_work_dirs(tmp_path, tune_db, capsys):
    """A compressed record file that lost its last bytes (a copy cut short): the lines read before the damage
    are imported, the damage is one problem naming the file, and the other work dirs of the import are read."""
    from costlab.cli import main

    n = len(_lines(tune_db / RECORD_FILE))
    gz = _gzipped(tune_db, tmp_path / "gz")
    rec_gz = gz / (RECORD_FILE + ".gz")
    whole = rec_gz.read_bytes()
    # the last 10 bytes (the gzip trailer and the stream's end: every line is there), then half the file
    for cut, kept in ((10, range(n, n + 1)), (len(whole) // 2, range(1, n))):
        rec_gz.write_bytes(whole[:-cut])
        report = import_ms([gz], tmp_path / f"cut{cut}.h5", platform="cut", progress=False)
        assert report.bad == 1 and len(report.problems) == 1, report.format()
        read = re.fullmatch(re.escape(f"{rec_gz}: is not a readable gzip file (Compressed file ended before the "
                                      "end-of-stream marker was reached); the ") + r"(\d+) lines before the damage "
                            "were read", report.problems[0])
        assert read, report.problems
        assert report.added["cut"] == int(read.group(1)) and report.added["cut"] in kept
    assert main(["dataset", "import-ms", str(gz), str(tune_db), "-o", str(tmp_path / "both.h5")]) == 0
    err = capsys.readouterr().err
    assert f"skipped {rec_gz}: is not a readable gzip file" in err and "1 bad line(s)/record(s) skipped" in err
    with open_dataset(tmp_path / "both.h5") as ds:
        assert sum(ds.num_records(p) for p in ds.record_platforms()) == len(_lines(tune_db / RECORD_FILE))


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc/self/mem (opens, never reads)")
def test_a_database_file_that_cannot_be_read_is_one_error_naming_it(tmp_path, tune_db):
    """A file that opens but fails to read (an I/O error) is one InputError naming it, not a traceback."""
    rec_path = tune_db / RECORD_FILE
    rec_path.unlink()
    rec_path.symlink_to("/proc/self/mem")
    with pytest.raises(InputError, match=f"{RECORD_FILE}: cannot be read \\(Input/output error\\)"):
        import_ms([tune_db], tmp_path / "d.h5", progress=False)
    assert not (tmp_path / "d.h5").exists()


def _changed_line(lines, n, change):
    """Line ``n`` of a record file's lines with ``change(record)`` applied to its parsed record."""
    rec = json.loads(lines[n])
    change(rec)
    return json.dumps(rec)


BROKEN_RECORDS = {
    # what breaks MetaSchedule's loader (and so an export of the record), by the message that names it
    "instruction not a list": (lambda r: r[1][0][0].insert(1, "not-a-list-instr"),
                               "trace instruction 1 is not [kind, inputs, attrs, outputs]: not-a-list-instr"),
    "instruction of three fields": (lambda r: r[1][0][0][2].pop(),
                                    "trace instruction 2 is not [kind, inputs, attrs, outputs]"),
    "unknown instruction kind": (lambda r: r[1][0][0].append(["Bogus", [], [], []]),
                                 "trace instruction 'Bogus' is no instruction kind TVM knows"),
    "decision not a pair": (lambda r: r[1][0][1].append(7), "trace decision 4 is not [instruction index, value]"),
    "decision of no instruction": (lambda r: r[1][0][1][0].__setitem__(0, 999),
                                   "trace decision 0 is not [instruction index, value]"),
    "decisions not a list": (lambda r: r[1][0].__setitem__(1, {"4": 1}), "trace is not [instructions, decisions]"),
    "tile factors a string": (lambda r: r[1][0][1][0].__setitem__(1, "oops"),
                              "trace decision 0 (of instruction 4, SamplePerfectTile) is not a list of 4 positive "
                              "integers"),
    "tile factors null": (lambda r: r[1][0][1][0].__setitem__(1, None),  # MetaSchedule's loader crashes on it
                          "trace decision 0 (of instruction 4, SamplePerfectTile) is not a list of 4 positive "
                          "integers"),
    "categorical choice a list": (lambda r: r[1][0][1][3].__setitem__(1, [1, 2]),
                                  "trace decision 3 (of instruction 13, SampleCategorical) is not the index of one "
                                  "of its candidates (0 to 3)"),
    "unknown target kind": (lambda r: r[1].__setitem__(2, {"kind": "notatarget", "foo": True}),
                            "bad target: unknown target kind 'notatarget'"),
    "num-cores not a number": (lambda r: r[1][2].__setitem__("num-cores", "two"),
                               "bad target: num-cores must be a positive integer, not 'two'"),
    # an import stores the first args_info and target it reads for every record of the task and platform
    "args_info without shapes": (lambda r: r[1].__setitem__(3, [["TENSOR", "float32"]] * 3),
                                 'args_info is not a list of ["TENSOR", dtype, shape]'),
    "target option TVM does not know": (lambda r: r[1][2].__setitem__("bogus", 1), "bad target: TVM refuses it"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_RECORDS))
def test_structurally_broken_records_are_skipped_and_counted(tmp_path, tune_db, case):
    """A record whose trace MetaSchedule cannot load, or whose target is no TVM target: skipped and named
    (``file:line: what``) among the good ones."""
    change, message = BROKEN_RECORDS[case]
    rec_path = tune_db / RECORD_FILE
    lines = rec_path.read_text().splitlines()
    rec_path.write_text("\n".join(lines[:3] + [_changed_line(lines, 0, change)] + lines[3:]) + "\n")
    report = import_ms([tune_db], tmp_path / "d.h5", progress=False)
    assert report.bad == 1, report.format()
    assert report.problems[0].startswith(f"{rec_path}:4: {message}"), report.problems
    assert sum(report.added.values()) == len(lines)


def test_an_export_after_broken_records_loads_in_metaschedule(tmp_path, tune_db):
    """Every kind of broken record among the good ones: the dataset holds the good ones only, so its export loads
    in MetaSchedule's JSONDatabase with every one of them."""
    rec_path = tune_db / RECORD_FILE
    lines = rec_path.read_text().splitlines()
    broken = [_changed_line(lines, 0, change) for change, _ in BROKEN_RECORDS.values()]
    rec_path.write_text("\n".join(lines + broken) + "\n")
    out = tmp_path / "d.h5"
    report = import_ms([tune_db], out, progress=False)
    assert report.bad == len(broken) and sum(report.added.values()) == len(lines), report.format()
    (pid,) = report.added
    export_ms(out, pid, tmp_path / "db", include_failed=True)
    assert _loads_in_metaschedule(tmp_path / "db") == len(lines)


def test_structural_checks_of_a_record_need_no_tvm():
    """``parse_record`` checks the trace's shape alone (no TVM): instructions and decisions."""
    from costlab.metaschedule.databases import parse_record

    good = json.loads((TUNE_DB / RECORD_FILE).read_text().splitlines()[0])
    assert parse_record(good)[0] == 0
    for trace, message in [([["not-a-list-instr"], []], "trace instruction 0 is not"),
                           ([[["Split", [], [], "l0"]], []], "trace instruction 0 is not"),
                           ([[[True, [], [], []]], []], "trace instruction 0 is not"),
                           ([[["Split", [], [], []]], [[True, 1]]], "trace decision 0 is not"),
                           ([[["Split", [], [], []]], [[1, 1]]], "trace decision 0 is not"),
                           ([[["SamplePerfectTile", ["l0"], [2, 64], ["v1", "v2"]]], [[0, [4]]]],
                            "trace decision 0 (of instruction 0, SamplePerfectTile) is not a list of 2 positive"),
                           ([[["SampleComputeLocation", ["b0"], [], ["l1"]]], [[0, "inline"]]],
                            "trace decision 0 (of instruction 0, SampleComputeLocation) is not a location"),
                           ([[["Split", [], [], []]], [[0, 3]]],
                            "trace decision 0 (of instruction 0, Split) is the decision of an instruction that"),
                           ([[], None], "trace is not [instructions, decisions]")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_record([0, [trace, [1e-6]]])


def test_a_last_workload_line_without_its_end_of_line_gets_it_back(tune_db):
    """A write cut just before a workload line's newline leaves a good line the next appended workload would
    join: repair restores the newline, moves nothing, and the database reads as before."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from costlab.metaschedule.repair import repair_work_dir

    wl_path = tune_db / WORKLOAD_FILE
    text = wl_path.read_text()
    n = len(JSONDatabase(work_dir=str(tune_db)).get_all_tuning_records())
    wl_path.write_text(text.rstrip("\n"))
    assert repair_work_dir(tune_db) == []
    assert wl_path.read_text() == text and not (tune_db / "database_tuning_record.bad-lines.jsonl").exists()
    assert len(JSONDatabase(work_dir=str(tune_db)).get_all_tuning_records()) == n


def _loads_in_metaschedule(work) -> int:
    """Records MetaSchedule's own loader reads from ``work``, in a process of its own (a damaged database can
    crash it); -1 when it fails."""
    import subprocess
    import sys

    code = ("from tvm.s_tir.meta_schedule.database import JSONDatabase; "
            f"print(len(JSONDatabase(work_dir={str(work)!r}).get_all_tuning_records()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else -1


def _blank_record_line(db):
    lines = (db / RECORD_FILE).read_text().splitlines(keepends=True)
    (db / RECORD_FILE).write_text("".join(lines[:3] + ["\n"] + lines[3:]))
    return 0, 0


def _blank_workload_line_at_the_end(db):
    (db / WORKLOAD_FILE).write_text((db / WORKLOAD_FILE).read_text() + "\n")
    return 0, 0


def _record_of_two_fields(db):
    lines = (db / RECORD_FILE).read_text().splitlines()
    rec = json.loads(lines[2])
    rec[1] = rec[1][:2]
    lines[2] = json.dumps(rec)
    (db / RECORD_FILE).write_text("\n".join(lines) + "\n")
    return 1, 1


def _whole_last_record_without_its_end_of_line(db):
    (db / RECORD_FILE).write_text((db / RECORD_FILE).read_text().rstrip("\n"))
    return 0, 0


@pytest.mark.parametrize("damage", [_blank_record_line, _blank_workload_line_at_the_end, _record_of_two_fields,
                                    _whole_last_record_without_its_end_of_line])
def test_repair_leaves_a_database_metaschedules_loader_reads(tune_db, damage):
    """What a kill or an editor leaves that MetaSchedule's loader refuses or crashes on (a blank line, a record
    of too few fields): repair drops or moves it aside; a whole record that lost only its end of line is kept.
    The repaired database loads in MetaSchedule with every good record."""
    from costlab.metaschedule.repair import repair_work_dir

    n = len(_lines(tune_db / RECORD_FILE))
    moved, lost = damage(tune_db)
    problems = repair_work_dir(tune_db)
    assert len(problems) == moved
    assert _loads_in_metaschedule(tune_db) == n - lost
    assert (tune_db / RECORD_FILE).read_text().endswith("\n")


def test_a_blank_workload_line_before_others_is_refused_naming_it(tune_db):
    from costlab.metaschedule.repair import repair_work_dir

    lines = (tune_db / WORKLOAD_FILE).read_text().splitlines(keepends=True)
    (tune_db / WORKLOAD_FILE).write_text("".join(lines[:1] + ["\n"] + lines[1:]))
    with pytest.raises(InputError, match=f"{WORKLOAD_FILE}: line 2 is not a workload"):
        repair_work_dir(tune_db)


def test_a_record_of_an_instruction_kind_tvm_has_not_registered_is_moved_aside(tmp_path, tune_db):
    """A record whose trace names an instruction kind TVM has not registered makes MetaSchedule's loader refuse the
    whole database (a TVM traceback in tune, exploit, library add): the repair of a work dir moves it aside like any
    bad line, and the read-only opening of one (what `library add` reads) leaves it out and names it."""
    from costlab.metaschedule.databases import work_dir_database
    from costlab.metaschedule.repair import BAD_LINES_FILE, repair_work_dir

    rec_path = tune_db / RECORD_FILE
    lines = rec_path.read_text().splitlines(keepends=True)
    assert '"SamplePerfectTile"' in lines[3]
    lines[3] = lines[3].replace('"SamplePerfectTile"', '"SampleBogusTile"', 1)
    rec_path.write_text("".join(lines))
    message = f"{rec_path}:4: trace instruction 'SampleBogusTile' is no instruction kind TVM knows"
    before = rec_path.read_bytes()
    skipped: list = []
    with work_dir_database(tune_db, skipped) as database:
        assert len(database.get_all_tuning_records()) == len(lines) - 1
    assert skipped == [message] and rec_path.read_bytes() == before  # read-only: the work dir as it was
    assert repair_work_dir(tune_db) == [message]
    assert (tune_db / BAD_LINES_FILE).read_text() == lines[3]
    assert _loads_in_metaschedule(tune_db) == len(lines) - 1


@pytest.mark.parametrize("value, what", [
    ("oops", "is not a list of 4 positive integers"),  # MetaSchedule's loader: a TVM traceback
    (None, "is not a list of 4 positive integers"),  # MetaSchedule's loader: a segfault
    ([4, 2, 2], "is not a list of 4 positive integers"),
    ([4, -2, 1, 2], "is not a list of 4 positive integers"),
])
def test_a_trace_decision_of_the_wrong_kind_is_moved_aside(tune_db, value, what):
    """A record whose SamplePerfectTile decision is no list of one positive integer per tile makes MetaSchedule's
    loader refuse the whole database (TVM's traceback in tune, exploit, transfer, library add) or crash (a null):
    the scan finds it without TVM, the read-only opening leaves it out and names it, the repair moves it aside."""
    from costlab.metaschedule.databases import work_dir_database
    from costlab.metaschedule.repair import BAD_LINES_FILE, DatabaseScan, repair_work_dir

    rec_path = tune_db / RECORD_FILE
    lines = rec_path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[3])
    assert rec[1][0][0][rec[1][0][1][0][0]][0] == "SamplePerfectTile"
    rec[1][0][1][0][1] = value
    lines[3] = json.dumps(rec) + "\n"
    rec_path.write_text("".join(lines))
    message = f"{rec_path}:4: trace decision 0 (of instruction 4, SamplePerfectTile) {what}"
    # the scan first: before it caught this, opening the database below could crash the test process
    problems = DatabaseScan(tune_db).problems
    assert len(problems) == 1 and problems[0].startswith(message), problems
    before = rec_path.read_bytes()
    skipped: list = []
    with work_dir_database(tune_db, skipped) as database:
        assert len(database.get_all_tuning_records()) == len(lines) - 1
    assert skipped == problems and rec_path.read_bytes() == before
    assert repair_work_dir(tune_db) == problems
    assert (tune_db / BAD_LINES_FILE).read_text() == lines[3]
    assert _loads_in_metaschedule(tune_db) == len(lines) - 1


def test_a_workload_line_that_decodes_to_no_irmodule_is_refused_naming_it(tmp_path, tune_db, capsys):
    """A workload line of valid base64 that decodes to no IRModule makes MetaSchedule's loader fail with TVM's
    traceback (std::bad_alloc): like any other whole bad workload line it is one error naming the file and line,
    from the repair (tune, exploit, transfer), the read-only opening and `library add`, and nothing is changed."""
    import base64

    from costlab.cli import main
    from costlab.metaschedule.databases import work_dir_database
    from costlab.metaschedule.repair import repair_work_dir

    wl_path = tune_db / WORKLOAD_FILE
    lines = wl_path.read_text().splitlines()
    shash, _ = json.loads(lines[1])
    lines[1] = json.dumps([shash, base64.b64encode(b"hello, not an IRModule").decode()])
    wl_path.write_text("\n".join(lines) + "\n")
    before = {p.name: p.read_bytes() for p in tune_db.iterdir()}
    message = f"{WORKLOAD_FILE}: line 2 is not a workload \\(workload IR does not decode as an IRModule"
    with pytest.raises(InputError, match=message):
        repair_work_dir(tune_db)
    with pytest.raises(InputError, match=message):
        with work_dir_database(tune_db, []):
            pass
    assert main(["library", "add", "--no-progress", "--library", str(tmp_path / "lib"), str(tune_db)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert {p.name: p.read_bytes() for p in tune_db.iterdir()} == before


def test_a_compressed_work_dir_cut_short_opens_with_the_lines_before_the_damage(tmp_path, tune_db):
    """A gzipped work dir (as benchmarks archive runs) whose record file was copied only in part: `library add` and
    the benchmark reader open it with the records before the damage (the last one cut is left out like any cut
    line), and the damage is one skipped line naming the file, not a gzip traceback."""
    import gzip

    from costlab.metaschedule.databases import work_dir_database

    lines = (tune_db / RECORD_FILE).read_bytes().splitlines(keepends=True)
    archived = tmp_path / "archived"
    archived.mkdir()
    (archived / (WORKLOAD_FILE + ".gz")).write_bytes(gzip.compress((tune_db / WORKLOAD_FILE).read_bytes()))
    whole = gzip.compress(b"".join(lines) * 20, compresslevel=0)  # stored blocks: a cut keeps the lines before it
    (archived / (RECORD_FILE + ".gz")).write_bytes(whole[:len(whole) // 2])
    skipped: list = []
    with work_dir_database(archived, skipped) as database:
        kept = len(database.get_all_tuning_records())
    assert 0 < kept < len(lines) * 20
    assert f"{archived / (RECORD_FILE + '.gz')}: is not a readable gzip file" in skipped[0]
    with pytest.raises(InputError, match="is not a readable gzip file"):  # no list to say it in: an error
        with work_dir_database(archived):
            pass


@pytest.mark.parametrize("end_of_line", [True, False])
def test_only_a_last_workload_line_without_its_end_of_line_is_taken_for_a_write_cut_short(tune_db, end_of_line):
    """A bad last workload line that ends with its newline is whole (damage, an edit), no write a kill cut short:
    an error naming the file and line, and nothing moved (moving it would take its task's records with it, and
    the run would tune that task again from nothing). Without its newline it is a cut write: moved aside with the
    records of its workload."""
    from costlab.metaschedule.repair import BAD_LINES_FILE, repair_work_dir

    wl_path, rec_path = tune_db / WORKLOAD_FILE, tune_db / RECORD_FILE
    lines = wl_path.read_text().splitlines()
    shash, b64 = json.loads(lines[-1])
    lines[-1] = json.dumps([shash, "!" + b64[1:]])  # its base64 corrupted
    wl_path.write_text("\n".join(lines) + ("\n" if end_of_line else ""))
    before = {p.name: p.read_bytes() for p in tune_db.iterdir()}
    n = len(_lines(rec_path))
    of_last = sum(1 for rec in _lines(rec_path) if rec[0] == len(lines) - 1)
    if end_of_line:
        with pytest.raises(InputError, match=f"{WORKLOAD_FILE}: line {len(lines)} is not a workload \\(workload IR "
                                             "is not valid base64"):
            repair_work_dir(tune_db)
        assert {p.name: p.read_bytes() for p in tune_db.iterdir()} == before
    else:
        problems = repair_work_dir(tune_db)
        assert problems[0].startswith(f"{wl_path}:{len(lines)}: not a workload")
        assert len(problems) == 1 + of_last and len(_lines(rec_path)) == n - of_last
        assert len((tune_db / BAD_LINES_FILE).read_text().splitlines()) == 1 + of_last


def test_records_without_their_machine_never_join_a_platform_whose_machine_is_recorded(tmp_path, tune_db):
    """A platform whose records' machine is recorded (a measurement's, or an import's --host) took records
    that came without one (a database of tune_tir, an Ansor log) without a word, and its labels then compared
    two machines' timings; the other way round was refused already. Refused in one line, the dataset as it was;
    a machine stated by `dataset set-machine` for records that came without one takes more of them."""
    from costlab.cli import main
    from costlab.common.host import host_info
    from costlab.datasets.ansor_log import import_ansor
    from costlab.metaschedule.targets import target_from_string

    data = tmp_path / "d.h5"
    import_ms([tune_db], data, progress=False, host=host_info())
    before = data.read_bytes()
    with pytest.raises(InputError, match="come without the machine that measured them"):
        import_ms([tune_db], data, progress=False)
    assert data.read_bytes() == before
    log = FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"
    with DatasetWriter(data) as w:  # the log's platform, its machine recorded as a measurement records it
        w.add_platform("platinum-8358", target_from_string("llvm -keys=cpu -mcpu=icelake-server "
                                                           "-model=platinum-8358"), host=host_info())
        w.add_records("platinum-8358", _one_record(w))
    before = data.read_bytes()
    with pytest.raises(InputError, match="come without the machine that measured them"):
        import_ansor([log], data, progress=False)
    assert data.read_bytes() == before
    other = tmp_path / "e.h5"  # records that came without a machine, and the machine stated for them after
    import_ms([tune_db], other, progress=False)
    host = tmp_path / "host.json"
    host.write_text(json.dumps(host_info()))
    with open_dataset(other) as ds:
        (pid,) = ds.record_platforms()
    assert main(["dataset", "set-machine", str(other), "--platform", pid, "--host", str(host)]) == 0
    assert import_ms([tune_db], other, progress=False).bad == 0


def _one_record(w) -> RecordBatch:
    t = w.add_task("k", "ansor", "[\"k\", [1]]", name="k")
    b = RecordBatch()
    b.append(t, "[]", [1e-3], 0, 1.0, program_id("ansor", "k", "[]"))
    return b


def test_a_bad_platform_id_is_said_before_anything_is_read(tmp_path, tune_db, capsys):
    from costlab.cli import main
    from costlab.common.host import host_info

    host = tmp_path / "host.json"
    host.write_text(json.dumps(host_info()))
    data = tmp_path / "d.h5"
    import_ms([tune_db], data, progress=False)
    before = data.read_bytes()
    assert main(["dataset", "import-ms", str(tune_db), "-o", str(data), "--platform", "/tasks", "--host",
                 str(host)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--platform: " in err, err
    assert data.read_bytes() == before


def test_a_compressed_work_dir_that_cannot_be_decompressed_for_want_of_space_is_one_line(tune_db, tmp_path, monkeypatch,
                                                                                        capsys):
    """A gzip-compressed work dir (as benchmarks archive them) is read from a copy in the temporary folder: a write
    there that fails (a full disk: its copy written to /dev/full) is one line naming the file and the folder, where
    it was a traceback (the write's error names no file)."""
    import gzip

    import costlab.metaschedule.databases as databases
    from costlab.cli import main

    for name in (WORKLOAD_FILE, RECORD_FILE):
        with gzip.open(tune_db / f"{name}.gz", "wb") as f:
            f.write((tune_db / name).read_bytes())
        (tune_db / name).unlink()
    full = tmp_path / "full"

    def mkdtemp(**kwargs):
        full.mkdir()
        (full / WORKLOAD_FILE).symlink_to("/dev/full")
        return str(full)

    monkeypatch.setattr(databases.tempfile, "mkdtemp", mkdtemp)
    assert main(["library", "add", str(tune_db), "--library", str(tmp_path / "lib")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("costlab: error:")]
    assert f"{tune_db / WORKLOAD_FILE}.gz: cannot be decompressed into the temporary folder {tmp_path}" in line, line
    assert "No space left on device" in line
