"""Transfer-tuning with real replays and builds: schedules of a tuned matmul and convolution move to other
shapes with every tiling a perfect tiling of the new loops, other kernel classes take nothing, a schedule that
cannot apply is counted and skipped, and a transfer into a work dir is followed by a search that continues
from it; the database imports back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import error_line
from costlab.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "ms_tune_db"  # a tuned 16x16x16 matmul and a small conv2d
CONV = "C2D:1,10,10,4,8,3,1,1"
# what a builder's result says when the stop's signal ended its worker (TVM's pools in the command's process group)
KILLED = "LocalBuilder: An exception occurred\nSubprocess terminated"


def _target():
    import tvm

    from costlab.metaschedule.targets import runnable_target

    return tvm.target.Target(runnable_target("host"))


def _matmul(n: int, m: int, k: int):
    from tvm import te

    from costlab.datasets.extract import workload_json_mod

    a, b = te.placeholder((n, k), name="A"), te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return workload_json_mod(te.create_prim_func([a, b, c]))


def _workload(spec: str):
    from costlab.datasets.extract import te_workload_task, workload_json_mod

    return workload_json_mod(te_workload_task(spec)[1])


def _sources(paths=(FIXTURE,)):
    from costlab.export.transfer.run import _decode
    from costlab.export.transfer.sources import read_sources

    raw, report = read_sources(list(paths), 4)
    return _decode(raw, report)


def _candidates(mod, sources):
    from costlab.export.transfer.run import candidates_for
    from costlab.metaschedule.tune_context import tune_context

    target = _target()
    return candidates_for(mod, target, tune_context(mod, target).space_generator.postprocs, sources, set(), 64)


def _tilings(mod, sch):
    from costlab.export.search.decisions import sites

    return [s for s in sites(mod, sch.trace) if s.kind == "SamplePerfectTile"]


def test_matmul_schedules_move_to_another_shape_as_perfect_tilings():
    mod = _matmul(24, 40, 48)  # 16x16x16 in the source: every tile of 16 must change
    scheds, prov, counts = _candidates(mod, _sources())
    assert len(scheds) >= 2 and counts["source_tasks"] == 1 and counts["adapted"] == len(scheds)
    for sch, p in zip(scheds, prov):
        tiles = _tilings(mod, sch)
        assert {s.extent for s in tiles} == {24, 40, 48}
        assert all(math.prod(s.decision) == s.extent for s in tiles)
        assert p["match"] == "same" and p["tilings_adapted"] == 3
    # without adaptation TVM would replay the source's factors: their product is 16, not the new extents
    from costlab.export.transfer.replay import source_trace, tile_decisions

    src = next(s for s in _sources() if s.structure.extents == (16, 16, 16))
    assert all(math.prod(t) == 16 for t in tile_decisions(source_trace(src.mod, src.task.programs[0][0])))


def test_convolution_schedules_move_within_their_class_only():
    mod = _workload(CONV)
    scheds, prov, counts = _candidates(mod, _sources())
    assert scheds and counts["source_tasks"] == 1 and all(p["match"] == "same" for p in prov)
    for sch in scheds:
        assert all(math.prod(s.decision) == s.extent for s in _tilings(mod, sch))
    # a batch matmul (three spatial loops) is another class: nothing of the 2-D matmul or conv applies
    scheds, _prov, counts = _candidates(_workload("GMM:1,16,16,16"), _sources())
    assert not scheds and counts["source_tasks"] == 0


def test_a_schedule_that_cannot_apply_is_counted_and_skipped():
    sources = _sources()
    src = next(s for s in sources if s.structure.extents == (16, 16, 16))
    good = src.task.programs[0]
    broken = json.loads(json.dumps(good[0]))
    for inst in broken[0]:
        if inst[0] == "GetSBlock":
            inst[2][0] = "no_such_block"
    src.task.programs = [(broken, good[1]), good]
    scheds, _prov, counts = _candidates(_matmul(24, 40, 48), [src])
    assert len(scheds) == 1 and counts["tried"] == 2
    assert sum(v for k, v in counts.items() if k.startswith("failed: the source record does not replay")) == 1


def test_anchor_match_other_epilogue():
    from costlab.export.transfer.match import match, structure

    m = match(structure(_workload("C2D:1,14,14,8,8,3,1,1")), structure(_workload("CBR:1,14,14,8,8,3,1,1")))
    assert m is not None and m.kind == "anchor" and m.names["conv2d_nhwc"] == "Conv2dOutput"
    assert match(structure(_workload("C2D:1,14,14,8,8,3,1,1")), structure(_workload("DEP:1,14,14,8,3,1,1"))) is None


def _records(work: Path) -> int:
    return sum(1 for line in (work / "database_tuning_record.json").read_text().splitlines() if line.strip())


@pytest.mark.slow
def test_transfer_then_tune_continues_from_it(tmp_path, capsys):
    work = tmp_path / "w"
    args = ["transfer", "--from", str(FIXTURE), "--workload", CONV, "--top", "2", "--work-dir", str(work),
            "--no-progress", "--json"]
    assert main(args) == 0
    state = json.loads(capsys.readouterr().out)
    (row,) = state["tasks"].values()
    assert len(row["measured"]) == 2 and row["best_us"] is not None and row["done"]
    assert all(m["source"] == str(FIXTURE) and m["match"] == "same" for m in row["measured"])
    assert json.loads((work / "transfer.json").read_text())["tasks"] == state["tasks"]
    assert _records(work) == 2
    assert main(args) == 0  # re-run: the task is done, nothing measured again
    capsys.readouterr()
    assert _records(work) == 2
    # with other options the done task would be skipped and the old summary read as new: refused, nothing measured
    assert main([*args[:6], "3", *args[7:]]) == 2
    assert "records a transfer with other options (top: 2 -> 3)" in capsys.readouterr().err
    # records of another machine beside these (no run record: the records' own target says whose they are)
    assert main([*args, "--target", "llvm -mcpu=btver2 -num-cores=1"]) == 2
    assert "--target llvm btver2 is not the machine of the run in" in capsys.readouterr().err
    assert _records(work) == 2
    # the search continues from the database: the 2 transferred trials count, 2 more are searched
    assert main(["tune", "--workload", CONV, "--trials", "4", "--per-iter", "2", "--work-dir", str(work),
                 "--no-progress", "--no-check", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"][0]["trials"] == 4 and _records(work) == 4
    assert summary["tasks"][0]["best_us"] <= row["best_us"] + 1e-9
    data = tmp_path / "t.h5"
    assert main(["dataset", "import-ms", str(work), "-o", str(data)]) == 0
    from costlab.datasets.store import open_dataset

    with open_dataset(data) as ds:
        assert sum(ds.num_records(p) for p in ds.record_platforms()) == 4


@pytest.mark.slow
def test_tune_transfer_from_starts_its_search_from_the_sources(tmp_path, capsys):
    work = tmp_path / "w"
    assert main(["tune", "--workload", CONV, "--trials", "2", "--transfer-from", str(FIXTURE), "--transfer-top", "2",
                 "--work-dir", str(work), "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    (row,) = summary["transfer"].values()
    assert row["measured"] == 2 and summary["tasks"][0]["trials"] == 2 and _records(work) == 2
    assert summary["tasks"][0]["check"]["status"] in ("ok", "replaced")  # the transferred program computes right


@pytest.mark.parametrize("command", ["transfer", "tune"])
def test_sources_of_garbage_are_refused_before_anything_is_written(tmp_path, capsys, command):
    """A --from / --transfer-from folder whose database files hold no readable line: one line, exit 2, no
    work dir (no empty database, no costlab_run.json, no transfer.json marking the task done)."""
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "database_workload.json").write_text("not a workload\n")
    (garbage / "database_tuning_record.json").write_text("[0, nonsense\n")
    work = tmp_path / "w"
    argv = (["transfer", "--from", str(garbage), "--workload", CONV] if command == "transfer" else
            ["tune", "--transfer-from", str(garbage), "--workload", CONV, "--trials", "2"])
    assert main([*argv, "--work-dir", str(work), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{garbage}: nothing to transfer from: 2 bad line(s)" in err, err
    assert not work.exists()


def test_a_compressed_source_cut_short_gives_its_programs_before_the_damage(tmp_path):
    """A gzipped --from work dir copied only in part reads as the rest of costlab opens it
    (``work_dir_database``: the same reader): the programs before the damage, and the damage one problem naming
    the file; garbage with a .gz name is that one problem, and nothing to transfer from."""
    import gzip

    from costlab.common.errors import InputError
    from costlab.export.transfer.run import usable_sources
    from costlab.export.transfer.sources import read_sources
    from costlab.metaschedule.databases import RECORD_FILE, WORKLOAD_FILE, work_dir_database

    records = (FIXTURE / RECORD_FILE).read_bytes()
    archived = tmp_path / "archived"
    archived.mkdir()
    (archived / (WORKLOAD_FILE + ".gz")).write_bytes(gzip.compress((FIXTURE / WORKLOAD_FILE).read_bytes()))
    whole = gzip.compress(records * 20, compresslevel=0)  # stored blocks: a cut keeps the lines before it
    (archived / (RECORD_FILE + ".gz")).write_bytes(whole[:len(whole) // 2])
    tasks, report = read_sources([archived], 4)
    assert tasks and report.problems[0].startswith(f"{archived / (RECORD_FILE + '.gz')}: is not a readable gzip file")
    skipped: list = []
    with work_dir_database(archived, skipped):
        pass
    assert report.problems[0] == skipped[0]  # one damage, said the same way
    (archived / (RECORD_FILE + ".gz")).write_bytes(b"not gzip at all\n" * 10)
    with pytest.raises(InputError, match=f"nothing to transfer from: 1 bad line.*{RECORD_FILE}.gz: is not a readable "
                                         "gzip file"):
        usable_sources([archived])


def test_transfer_tasks_refuse_sources_with_nothing_to_start_from(tmp_path):
    """tune's --transfer-from path (transfer_tasks into its database) raises instead of marking tasks done."""
    from types import SimpleNamespace

    from costlab.common.errors import InputError
    from costlab.export.transfer.run import TransferOptions, transfer_tasks

    empty = tmp_path / "src"
    empty.mkdir()
    (empty / "database_workload.json").write_text("")
    (empty / "database_tuning_record.json").write_text("")
    state = tmp_path / "w" / "transfer.json"
    with pytest.raises(InputError, match="nothing to transfer from: no successfully measured program"):
        transfer_tasks([SimpleNamespace(mod=_workload(CONV), name="conv")], None, None, None, None,
                       TransferOptions(str(tmp_path / "w"), sources=[empty]), state)
    assert not state.exists()


def test_a_program_that_fails_while_the_transfer_is_stopped_is_not_recorded(tmp_path, capsys, monkeypatch):
    """The signal that stops ``costlab transfer`` (and the library start of ``costlab tune``) reaches the workers of
    TVM's pools in its process group: a program of the batch in flight whose worker it ended has not failed, and
    is not recorded (as the search's own batches); its measured neighbour is. Real builds and runs; the stop and
    a killed worker's failure are made by a wrapper of the measurement."""
    import signal

    import costlab.export.transfer.run as run
    from costlab.export.stop import clear_stop, request_stop
    from costlab.metaschedule.results import ERROR_MS_FAILED, MS_FAILURE_SECS

    real = run.build_and_run

    def stopped_during_the_batch(*args, **kwargs):
        results = real(*args, **kwargs)
        request_stop(signal.SIGTERM)  # SIGTERM arrived while the batch was measured, and took a worker with it
        return [([MS_FAILURE_SECS], ERROR_MS_FAILED, KILLED)] + results[1:]

    monkeypatch.setattr(run, "build_and_run", stopped_during_the_batch)
    work = tmp_path / "w"
    try:
        assert main(["transfer", "--from", str(FIXTURE), "--workload", CONV, "--top", "2", "--work-dir", str(work),
                     "--no-progress"]) == 143
    finally:
        clear_stop()
    assert "interrupted" in capsys.readouterr().err
    assert _records(work) == 1  # the measured one; not the one the stop failed
    (row,) = json.loads((work / "transfer.json").read_text())["tasks"].values()
    assert len(row["measured"]) == 1 and row["measured"][0]["us"] is not None
    assert row["done"] is False  # its top was not measured: a re-run goes on with it
    monkeypatch.setattr(run, "build_and_run", real)
    assert main(["transfer", "--from", str(FIXTURE), "--workload", CONV, "--top", "2", "--work-dir", str(work),
                 "--no-progress"]) == 0
    assert _records(work) == 2  # the one the stop failed, measured now; not the first again, nor a third
    (row,) = json.loads((work / "transfer.json").read_text())["tasks"].values()
    assert row["done"] is True and len(row["measured"]) == 2
    # the line says what the record holds: programs tried, and of them the new ones replayed (the one measured
    # before is tried, not replayed again)
    out = capsys.readouterr().out
    assert row["counts"]["tried"] > row["replayed"]
    assert f"{row['counts']['tried']} tried, {row['replayed']} replayed" in out, out


def test_tunes_transfer_stops_at_the_runs_deadline(tmp_path):
    """``--max-seconds`` holds for the transfer before the search too: a run whose time is spent when the
    transfer starts measures nothing there, and leaves its task to a re-run (not done)."""
    import time

    from costlab.export.tune import TuneOptions, tune

    work = tmp_path / "w"
    summary = tune(TuneOptions(str(work), workloads=[CONV], trials=2, transfer_from=[str(FIXTURE)], transfer_top=2,
                               max_seconds=1, started_at=time.time() - 60, progress=False, check_output=False))
    assert summary["stopped"] == "--max-seconds 1 reached"
    assert _records(work) == 0
    state = work / "transfer.json"
    assert not state.exists() or not any(row.get("done") for row in json.loads(state.read_text())["tasks"].values())


def test_programs_of_another_target_kind_are_no_start(tmp_path, capsys):
    """A GPU's programs bind threads a CPU task has not (and a CPU's bind none a GPU task needs): sources of
    another target kind are left out and said, and a transfer with nothing else to start from is refused in one
    line, before anything is written."""
    from costlab.export.transfer.sources import read_sources

    gpu = FIXTURE.parent / "h100" / "cuda_sm90.h5"
    cpu_tasks, report = read_sources([gpu], 4, kind="llvm")
    assert cpu_tasks == [] and "of target kind 'cuda' left out: no start for a 'llvm' task" in report.notes[0]
    assert report.bad == 0 and not report.problems  # a note: no line of the source is bad
    assert read_sources([gpu], 4, kind="cuda")[0]
    assert read_sources([FIXTURE], 4, kind="cuda")[0] == [] and read_sources([FIXTURE], 4, kind="llvm")[0]
    work = tmp_path / "w"
    assert main(["transfer", "--from", str(gpu), "--workload", "GMM:1,64,64,64", "--target", "llvm -num-cores=2",
                 "--work-dir", str(work), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "nothing to transfer from" in err and "target kind 'cuda'" in err and not work.exists()
    assert "bad line" not in err
    # tune --transfer-from refuses them the same way, before its work dir is made
    assert main(["tune", "--transfer-from", str(gpu), "--workload", "GMM:1,64,64,64", "--target",
                 "llvm -num-cores=2", "--trials", "2", "--work-dir", str(work), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "nothing to transfer from" in err and "target kind 'cuda'" in err and not work.exists()
    # beside a source of the task's kind, they are left out, and the transfer says so
    assert main(["transfer", "--from", str(gpu), "--from", str(FIXTURE), "--workload", CONV, "--top", "1", "--target",
                 "llvm -num-cores=2", "--work-dir", str(work), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert f"note: {gpu}#" in err and "program(s) of target kind 'cuda' left out" in err and "1 measured" in out


def test_a_tuning_runs_transfer_that_a_stop_cut_short_is_finished_by_its_rerun(tmp_path, capsys, monkeypatch):
    """`tune --transfer-from` stopped in its transfer (a program failed by the stop, so the task's top is not
    measured) leaves the task with a record: its re-run still finishes the transfer before the search, as
    `costlab transfer` does, instead of taking the task for a searched one."""
    import signal

    import costlab.export.transfer.run as run
    from costlab.export.stop import clear_stop, request_stop
    from costlab.metaschedule.results import ERROR_MS_FAILED, MS_FAILURE_SECS

    real = run.build_and_run

    def stopped_during_the_batch(*args, **kwargs):
        results = real(*args, **kwargs)
        request_stop(signal.SIGTERM)
        return [([MS_FAILURE_SECS], ERROR_MS_FAILED, KILLED)] + results[1:]

    monkeypatch.setattr(run, "build_and_run", stopped_during_the_batch)
    work = tmp_path / "w"
    argv = ["tune", "--transfer-from", str(FIXTURE), "--transfer-top", "2", "--workload", CONV, "--trials", "2",
            "--no-library", "--no-check", "--work-dir", str(work), "--no-progress"]
    try:
        assert main(argv) == 143
    finally:
        clear_stop()
    capsys.readouterr()
    (row,) = json.loads((work / "transfer.json").read_text())["tasks"].values()
    assert row["done"] is False and len(row["measured"]) == 1 and _records(work) == 1
    monkeypatch.setattr(run, "build_and_run", real)
    assert main(argv) == 0
    (row,) = json.loads((work / "transfer.json").read_text())["tasks"].values()
    assert row["done"] is True and len(row["measured"]) == 2 and _records(work) == 2  # the transfer's top


def test_a_tiling_the_replay_refuses_is_said_once_and_not_replayed_again(monkeypatch):
    """A TransferError raised by the decision provider comes back through TVM as TVM's own error: the replay
    says the provider's reason, without trying the schedule a second time with its compute-at resampled."""
    from tvm.s_tir import meta_schedule as ms

    from costlab.export.transfer import replay as rp

    rec = ms.database.JSONDatabase(work_dir=str(FIXTURE)).get_all_tuning_records()[0]
    made = []
    real = rp._Adapt.__init__

    def counted(self, *args, **kwargs):
        made.append(kwargs.get("drop_compute_at"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(rp._Adapt, "__init__", counted)
    with pytest.raises(rp.TransferError) as err:
        rp._replay(rec.workload.mod, rec.trace, 1, tiles=[])  # no tilings for a trace that has some
    assert str(err.value) == "the schedule has more tilings than the source's" and made == [False]


def test_transfer_continues_on_the_targets_of_its_work_dir(tmp_path, capsys):
    """Re-run without --target, a transfer measures on the target its work dir's records were measured on (here a
    generic one), as exploit does: it is not refused as another machine than this one."""
    work = tmp_path / "w"
    args = ["transfer", "--from", str(FIXTURE), "--workload", CONV, "--top", "1", "--work-dir", str(work),
            "--no-progress", "--no-library"]
    assert main([*args, "--target", "llvm -num-cores=1"]) == 0
    assert _records(work) == 1
    capsys.readouterr()
    assert main(args) == 0, capsys.readouterr().err
    assert _records(work) == 1


def _measured_for(work: Path, target: dict) -> None:
    """Rewrite the target every tuning record of ``work`` names (the records' own word for their machine)."""
    lines = []
    for line in (work / "database_tuning_record.json").read_text().splitlines():
        row = json.loads(line)
        row[1][2] = target
        lines.append(json.dumps(row))
    (work / "database_tuning_record.json").write_text("\n".join(lines) + "\n")


def test_the_machine_of_records_without_a_run_record_is_the_one_they_name(tmp_path, capsys):
    import shutil

    from costlab.export.machines import run_target

    work = tmp_path / "w"
    shutil.copytree(FIXTURE, work)
    _measured_for(work, {"kind": "llvm", "mcpu": "znver9", "num-cores": 2})  # a CPU this LLVM does not know
    assert run_target(work).export()["mcpu"] == "znver9"  # what exploit and transfer both take as the run's
    n = _records(work)
    # transfer measures on the records' machine, which is not this one: refused, never measured on this machine
    assert main(["transfer", "--from", str(FIXTURE), "--workload", CONV, "--top", "1", "--work-dir", str(work),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "znver9" in err and "Traceback" not in err, err
    assert _records(work) == n and not (work / "transfer.json").exists()
    _measured_for(work, {"kind": "no-such-kind"})  # a target this TVM does not know: as if none were named
    assert run_target(work) is None


@pytest.mark.slow
def test_the_progress_history_starts_from_what_the_transfer_measured(tmp_path, capsys):
    """progress.jsonl's best is the task's best so far, the programs the transfer measured before the search
    included (it was the search's own best: a curve above what the database held). The transfer's are the best
    two of an earlier run of eight trials on this very matmul: the search's first small batch rarely beats them."""
    small = ["--workload", "GMM:1,8,8,8", "--population", "32", "--no-progress", "--no-check", "--no-library"]
    assert main(["tune", *small, "--trials", "8", "--per-iter", "4", "--work-dir", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    work = tmp_path / "w"
    assert main(["tune", *small, "--trials", "4", "--per-iter", "2", "--transfer-from", str(tmp_path / "a"),
                 "--transfer-top", "2", "--work-dir", str(work), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    (row,) = summary["transfer"].values()
    rows = [json.loads(line) for line in (work / "progress.jsonl").read_text().splitlines()]
    assert row["measured"] == 2 and rows
    # the transfer's best_us is rounded to 3 decimals, progress.jsonl's to 4: equal bests differ by that rounding
    assert all(r["best_us"] <= row["best_us"] + 5e-4 for r in rows), (row, rows)


@pytest.mark.slow
def test_a_transfer_run_again_says_it_measured_nothing_and_says_only_its_own_tasks(tmp_path, capsys):
    """A finished task's row was printed again as measured now, and every task earlier transfers had put in the
    work dir was printed as this command's."""
    work = tmp_path / "w"

    def transfer(workload) -> str:
        assert main(["transfer", "--from", str(FIXTURE), "--workload", workload, "--top", "1", "--work-dir", str(work),
                     "--no-progress", "--no-library"]) == 0
        return capsys.readouterr().out

    first = transfer(CONV)
    assert CONV in first and "earlier transfer" not in first
    n = _records(work)
    again = transfer(CONV)
    assert "done by an earlier transfer: nothing measured now" in again and _records(work) == n
    other = "C2D:1,12,12,4,8,3,1,1"
    third = transfer(other)
    assert other in third and CONV not in third


@pytest.mark.parametrize("edit, words", [(lambda row: ["x"], "is not a JSON object"),
                                         (lambda row: {**row, "done": False, "measured": 3},
                                          "'measured' is not a list of measured programs"),
                                         (lambda row: {**row, "done": "no"}, "'done' is not true or false")])
def test_a_damaged_task_row_of_the_state_is_one_line_naming_it(tmp_path, capsys, edit, words):
    """``transfer.json`` (and a library start's state) was checked as an object of tasks, its rows used unchecked:
    a damaged row was an AttributeError or TypeError traceback. It is one line naming the file and the task."""
    from costlab.common.errors import InputError
    from costlab.export.transfer.run import started_tasks

    work = tmp_path / "w"
    args = ["transfer", "--from", str(FIXTURE), "--workload", CONV, "--top", "1", "--work-dir", str(work),
            "--no-progress"]
    assert main(args) == 0
    state = work / "transfer.json"
    data = json.loads(state.read_text())
    (key,) = data["tasks"]
    data["tasks"][key] = edit(data["tasks"][key])
    state.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(args) == 2
    line = error_line(capsys)
    assert f"{state}: is damaged (task {key}: {words}" in line and "remove it to transfer afresh" in line
    with pytest.raises(InputError, match=f"task {key}: {words}"):
        started_tasks(state)


def test_a_folder_of_work_dirs_reads_each_once_and_the_work_dir_itself_is_no_source(tmp_path, capsys):
    """A folder of tuning runs read each run twice: its database, and its result/ (the chosen programs, also in its
    database) taken for a work dir of its own. And --from the very work dir transferred into was refused as holding
    "no successfully measured program"."""
    import shutil

    from costlab.export.transfer.sources import read_sources

    run = tmp_path / "runs" / "w"
    shutil.copytree(FIXTURE, run)
    shutil.copytree(FIXTURE, run / "result")
    alone, _ = read_sources([run], 4)
    under, _ = read_sources([tmp_path / "runs"], 4)
    assert len(under) == len(alone) > 0
    shutil.copytree(FIXTURE, run / "kept")  # a work dir kept inside another is a source of its own
    assert len(read_sources([tmp_path / "runs"], 4)[0]) == 2 * len(alone)
    assert main(["transfer", "--from", str(run), "--workload", "GMM:1,8,8,8", "--work-dir", str(run),
                 "--no-progress"]) == 2
    assert "is the work dir the programs are transferred into (--work-dir)" in error_line(capsys)


def test_a_transfer_whose_measurements_failed_says_so(tmp_path, capsys):
    """Every build killed by --builder-timeout: the line said "2 measured, nothing measured". It says how many
    failed and why."""
    assert main(["transfer", "--from", str(FIXTURE), "--workload", CONV, "--top", "2", "--work-dir",
                 str(tmp_path / "w"), "--no-progress", "--builder-timeout", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "2 measured (2 failed: " in out and "no program ran" in out, out


def test_a_transferred_task_has_its_own_name_in_the_library(tmp_path, capsys):
    """A transfer's tasks went into the library under the names of their blocks (``conv2d_nhwc:1x10x10x4...``), a
    tuning run's under the names it gave them (``C2D:1,10,10,4,8,3,1,1``): one task had two names, and `library prune
    --remove 'C2D*'` missed the transferred ones. The work dir's own names are taken."""
    assert main(["transfer", "--from", str(FIXTURE), "--workload", CONV, "--top", "1", "--work-dir",
                 str(tmp_path / "w"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["library", "list", "--json"]) == 0
    (lib,) = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in lib["rows"]] == [CONV]
