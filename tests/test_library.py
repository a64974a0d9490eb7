"""The schedule library with real replays, builds and measurements: a tuned work dir's checked programs go into
the library of its platform; a run of another shape of the same kernel class starts from them (shape-adapted,
measured anew) and adds its own checked best when it ends; list, prune and export round-trip; a library of
another host is a start only; another host's run is refused by a library; a damaged library is one clear error."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from costlab.cli import main
from conftest import error_line

FIXTURE = Path(__file__).parent / "fixtures" / "ms_tune_db"  # a tuned 16x16x16 matmul and a small conv2d
CONV = "C2D:1,12,12,4,8,3,1,1"  # the fixture's conv2d class at another shape


def _platform() -> str:
    from costlab.metaschedule.targets import host_target, platform_id_for

    return platform_id_for(host_target())


def _library(root: Path) -> dict:
    return json.loads((root / _platform() / "library.json").read_text())


def _tune(work: Path, *extra) -> dict:
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["tune", "--workload", CONV, "--trials", "4", "--per-iter", "2", "--work-dir", str(work),
                     "--no-progress", "--json", *extra]) == 0
    return json.loads(out.getvalue().strip().splitlines()[-1])


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """The fixture's work dir added (and checked) into a fresh library."""
    root = tmp_path_factory.mktemp("lib")
    # the fixture was tuned for a generic x86 target: filed under this host's platform, which runs here read
    assert main(["library", "add", str(FIXTURE), "--library", str(root), "--platform", _platform()]) == 0
    return root


def test_add_keeps_checked_programs_per_task_with_structure(library):
    lib = _library(library)
    assert lib["platform"] == _platform() and lib["host"]["cpu_model"]
    assert len(lib["entries"]) == 2  # the matmul and the conv2d
    for entry in lib["entries"].values():
        progs = entry["programs"]
        assert 1 <= len(progs) <= 4
        assert [p["us"] for p in progs] == sorted(p["us"] for p in progs)
        assert progs[0]["checked"] is True  # the fastest right program is the checked one
        assert entry["structure"]["anchor"] >= 0 and entry["structure"]["extents"]


def test_a_programs_identity_is_one_text_whichever_form_its_trace_was_written_in(library, tmp_path):
    """Traces are stored as the database writes them (booleans as 1/0); a library written when they were
    stored as ``Trace.as_json()`` gives them (true/false) holds the same programs: adding the same run to it
    again adds nothing."""
    from costlab.export.library.store import trace_key
    from costlab.metaschedule.databases import work_dir_database
    from costlab.metaschedule.traces import plain_json, trace_json, trace_text

    with work_dir_database(FIXTURE) as db:
        records = db.get_all_tuning_records()
    old_form = {trace_text(r.trace): plain_json(r.trace.as_json()) for r in records}
    assert any("true" in json.dumps(t) for t in old_form.values())  # the two forms differ on these traces
    for r in records:
        assert trace_key(plain_json(r.trace.as_json())) == trace_key(trace_json(r.trace)) == trace_text(r.trace)
    root = tmp_path / "lib"
    shutil.copytree(library, root)
    file = root / _platform() / "library.json"
    lib = json.loads(file.read_text())
    count = 0
    for entry in lib["entries"].values():
        for prog in entry["programs"]:
            assert "true" not in json.dumps(prog["trace"])  # stored as the database writes it
            prog["trace"] = old_form[trace_text(prog["trace"])]
            count += 1
    file.write_text(json.dumps(lib))
    assert main(["library", "add", str(FIXTURE), "--library", str(root), "--platform", _platform()]) == 0
    assert sum(len(e["programs"]) for e in _library(root)["entries"].values()) == count


@pytest.mark.slow
def test_a_run_starts_from_the_library_and_adds_its_best(library, tmp_path):
    root = tmp_path / "lib"
    shutil.copytree(library, root)
    summary = _tune(tmp_path / "w", "--library", str(root), "--transfer-top", "2")
    start = summary["library_start"]
    assert start["matching_entries"] == 1  # the conv2d, not the matmul
    (row,) = start["tasks"].values()
    assert row["measured"] == 2 and row["replayed"] >= 1
    state = json.loads((tmp_path / "w" / "library_start.json").read_text())
    (task,) = state["tasks"].values()
    assert all(m["source"].startswith("library ") and m["tilings_adapted"] for m in task["measured"])
    assert summary["tasks"][0]["trials"] == 4  # the library's programs count in the budget
    assert summary["library"]["added"] >= 1
    assert len(_library(root)["entries"]) == 3  # the new shape is in the library now
    # a re-run of the finished run measures nothing and adds nothing new
    again = _tune(tmp_path / "w", "--library", str(root), "--transfer-top", "2")
    assert again["tasks"][0]["trials"] == 4


def test_a_transfer_and_the_library_start_together_stay_within_a_workloads_trials(library, tmp_path):
    """--transfer-from takes its --transfer-top of a workload's --trials first; the library start has what is left
    (here nothing), so the run measures no more than --trials."""
    import io
    from contextlib import redirect_stdout

    work, root = tmp_path / "w", tmp_path / "lib"
    shutil.copytree(library, root)  # the run adds to it: the module's library stays as the other tests expect
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["tune", "--workload", CONV, "--trials", "2", "--transfer-from", str(FIXTURE), "--transfer-top",
                     "2", "--library", str(root), "--work-dir", str(work), "--no-progress", "--json"]) == 0
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    assert sum(row["measured"] for row in summary["transfer"].values()) == 2
    assert summary["tasks"][0]["trials"] == 2
    assert len((work / "database_tuning_record.json").read_text().splitlines()) == 2
    # re-run: the transfer's share is still taken, so the library start (skipped before) measures nothing now
    with redirect_stdout(io.StringIO()):
        assert main(["tune", "--workload", CONV, "--trials", "2", "--transfer-from", str(FIXTURE), "--transfer-top",
                     "2", "--library", str(root), "--work-dir", str(work), "--no-progress", "--json"]) == 0
    assert len((work / "database_tuning_record.json").read_text().splitlines()) == 2


def test_list_prune_export_round_trip(library, tmp_path, capsys):
    root = tmp_path / "lib"
    shutil.copytree(library, root)
    assert main(["library", "list", "--library", str(root), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert len(listed["rows"]) == 2
    assert main(["library", "prune", "--library", str(root), "--per-task", "1"]) == 0
    assert all(len(e["programs"]) == 1 for e in _library(root)["entries"].values())
    out = tmp_path / "exported"
    assert main(["library", "export", str(out), "--library", str(root)]) == 0
    assert len((out / "database_workload.json").read_text().splitlines()) == 2
    assert len((out / "database_tuning_record.json").read_text().splitlines()) == 2
    other = tmp_path / "lib2"
    assert main(["library", "add", str(out), "--library", str(other)]) == 0
    def programs(root):  # when each was added is the merging library's own
        return {k: [{f: v for f, v in p.items() if f != "added"} for p in e["programs"]]
                for k, e in _library(root)["entries"].items()}

    assert programs(other) == programs(root)
    assert main(["dataset", "import-ms", str(out), "-o", str(tmp_path / "d.h5")]) == 0  # MetaSchedule's format
    assert main(["library", "prune", "--library", str(root), "--remove", "*"]) == 0
    assert _library(root)["entries"] == {}
    # a mistyped platform: one error naming the libraries there, for each verb; no empty library made
    capsys.readouterr()
    for verb in (["list"], ["prune", "--per-task", "1"], ["export", str(tmp_path / "x")]):
        assert main(["library", *verb, "--library", str(root), "--platform", "typo-llvm"]) == 2
        err = capsys.readouterr().err
        assert f"holds no schedule library of platform 'typo-llvm' (libraries here: {_platform()})" in err
    assert not (root / "typo-llvm").exists()


def test_one_bad_folder_under_the_root_leaves_the_other_libraries_listed(library, tmp_path, capsys):
    """An export into the libraries' root made every `library list` fail (the export's library.json is another
    platform's), as did one damaged library: the others were not listed either. An export there is refused now,
    a bad folder is one error line and the rest are listed (exit 2); an export that cannot make its folder is one
    line."""
    root = tmp_path / "lib"
    shutil.copytree(library, root)
    assert main(["library", "export", str(root / "backup"), "--library", str(root)]) == 2
    assert "or a folder of it" in error_line(capsys) and not (root / "backup").exists()
    assert main(["library", "export", str(root), "--library", str(root)]) == 2
    assert "is the libraries' root" in error_line(capsys) and not (root / "library.json").exists()
    shutil.copytree(root / _platform(), root / "llvm-other-1c")  # another platform's library, damaged
    (root / "llvm-other-1c" / "library.json").write_text("{not json")
    assert main(["library", "list", "--library", str(root), "--json"]) == 2
    out, err = capsys.readouterr()
    assert [row["platform"] for row in json.loads(out)] == [_platform()]
    assert err.startswith("costlab: error: ") and "llvm-other-1c" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "notes.txt").write_text("")
    assert main(["library", "export", str(tmp_path / "notes.txt" / "sub"), "--library", str(root)]) == 2
    assert "cannot be created" in error_line(capsys)


@pytest.mark.slow
def test_another_hosts_library_is_a_start_only(library, tmp_path, monkeypatch):
    lib = _library(library)
    lib["host"] = dict(lib["host"], cpu_model="Some Other CPU", model="999")
    for entry in lib["entries"].values():
        for p in entry["programs"]:
            p["run_secs"], p["us"] = [0.5], 5e5  # the other host's timings: never taken as this one's
    starter = tmp_path / "starter.json.gz"
    starter.write_bytes(gzip.compress(json.dumps(lib).encode()))
    monkeypatch.setenv("COSTLAB_STARTER_LIBRARY", str(starter))
    summary = _tune(tmp_path / "w", "--transfer-top", "2")  # the user's own library is empty
    (row,) = summary["library_start"]["tasks"].values()
    assert row["measured"] == 2
    measured = json.loads((tmp_path / "w" / "library_start.json").read_text())
    for m in next(iter(measured["tasks"].values()))["measured"]:
        assert m["source_us"] == 5e5 and m["us"] is not None and m["us"] < 1e5  # measured here, not copied


def test_a_library_refuses_another_hosts_run(library, tmp_path, capsys):
    work = tmp_path / "w"
    shutil.copytree(FIXTURE, work)
    from costlab.common.host import host_info

    other = dict(host_info(), cpu_model="Some Other CPU", family="99", flags=["sse2"])
    (work / "costlab_run.json").write_text(json.dumps({"host": other}))
    root = tmp_path / "lib"
    shutil.copytree(library, root)
    before = (root / _platform() / "library.json").read_bytes()
    assert main(["library", "add", str(work), "--library", str(root), "--platform", _platform(),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Some Other CPU" in err and "library" in err and len(err.strip().splitlines()) == 1
    assert (root / _platform() / "library.json").read_bytes() == before  # nothing written
    # not into this machine's default libraries (the first such run would make one another host's) ...
    assert main(["library", "add", str(work), "--platform", _platform()]) == 2
    err = capsys.readouterr().err
    assert "Some Other CPU" in err and "--library DIR" in err and len(err.strip().splitlines()) == 1
    # ... into a library of its own (an empty one) it goes, unchecked: it cannot run here
    assert main(["library", "add", str(work), "--library", str(tmp_path / "lib3"), "--platform", _platform()]) == 0
    progs = [p for e in _library(tmp_path / "lib3")["entries"].values() for p in e["programs"]]
    assert progs and not any(p["checked"] for p in progs)


def test_no_library_neither_starts_from_nor_adds(library, tmp_path):
    root = tmp_path / "lib"
    shutil.copytree(library, root)
    before = (root / _platform() / "library.json").read_bytes()
    summary = _tune(tmp_path / "w", "--library", str(root), "--no-library", "--trials", "2", "--model", "random")
    assert "library_start" not in summary and "library" not in summary
    assert (root / _platform() / "library.json").read_bytes() == before


def test_a_damaged_library_is_one_clear_error(tmp_path, capsys):
    root = tmp_path / "lib"
    (root / _platform()).mkdir(parents=True)
    (root / _platform() / "library.json").write_text("{not json")
    assert main(["library", "list", "--library", str(root)]) == 2
    err = capsys.readouterr().err
    assert "library.json" in err and len(err.strip().splitlines()) == 1
    assert main(["tune", "--workload", CONV, "--trials", "2", "--work-dir", str(tmp_path / "w"), "--no-progress",
                 "--library", str(root)]) == 2
    assert "library.json" in capsys.readouterr().err


def test_a_damaged_compressed_or_deeply_nested_library_is_one_line(tmp_path, capsys):
    """A .json.gz library damaged inside (zlib.error) and JSON nested too deep (RecursionError) were tracebacks
    naming no file; a damaged starter library stopped every tune."""
    import gzip

    bad = tmp_path / "corrupt.json.gz"
    raw = bytearray(gzip.compress(b'{"costlab_library": 1, "entries": {}}' * 50))
    raw[20:40] = b"\xff" * 20
    bad.write_bytes(bytes(raw))
    root = tmp_path / "lib"
    (root / _platform()).mkdir(parents=True)
    (root / _platform() / "library.json").write_text('{"a": ' + "[" * 200000 + "]" * 200000 + "}")
    for argv, name in ((["library", "add", str(bad), "--library", str(tmp_path / "other")], "corrupt.json.gz"),
                       (["library", "list", "--library", str(root)], "library.json")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and f"{name}: is not a readable schedule library" in err, err


def test_a_library_platform_is_a_platform_id_never_a_path(tmp_path, capsys):
    """`library add --platform ..` wrote the library outside the libraries' folder, where nothing lists it."""
    from costlab.common.errors import UsageError
    from costlab.export.library.store import read_library

    for platform in ("..", "a/b", "llvm znver5 2c"):
        with pytest.raises(UsageError, match="bad platform id"):
            read_library(tmp_path / "lib", platform)
    assert not (tmp_path / "library.json").exists()


def test_a_run_adds_the_program_its_check_vouched_for_when_a_second_measurement_reordered_them():
    """A network's check follows the order of its second measurement (finals), not the database's. Finals
    put the database's second fastest (B) first; B computed a wrong result and the fastest (A) the right one:
    A is the checked program, B is left out, and only programs slower than A follow it, unchecked."""
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.records import record_latency
    from costlab.export.check import fastest_records
    from costlab.export.library.collect import task_programs
    from costlab.metaschedule.traces import trace_json

    db = ms.database.JSONDatabase(work_dir=str(FIXTURE))
    mod = db.get_all_tuning_records()[0].workload.mod
    recs = fastest_records(db, mod, 10)
    assert len(recs) >= 5 and record_latency(recs[0].run_secs) < record_latency(recs[1].run_secs)
    a, b = recs[0], recs[1]
    check = dict(status="replaced", best_us=1.0, checked=[{}, {}], record=a, tried=[b, a])
    programs = task_programs(db, mod, 4, "run", check=check)

    def key(trace) -> str:
        return json.dumps(trace, sort_keys=True)

    keys = [key(p["trace"]) for p in programs]
    assert keys[0] == key(trace_json(a.trace)) and programs[0]["checked"] is True
    assert key(trace_json(b.trace)) not in keys and not any(p["checked"] for p in programs[1:])
    assert len(programs) == 4 and all(p["us"] >= programs[0]["us"] for p in programs)


def test_a_run_starts_only_from_the_starters_of_its_target_kind(tmp_path, monkeypatch):
    """The shipped starter is a CPU's: a CPU run (of any CPU) starts from it, a GPU run does not (a CPU's
    schedules bind no GPU threads)."""
    from costlab.export.library.start import run_libraries
    from costlab.export.library.store import STARTER_DIR

    monkeypatch.delenv("COSTLAB_STARTER_LIBRARY", raising=False)
    shipped = sorted(p.name for p in STARTER_DIR.glob("*.json.gz"))
    assert shipped and all(name.startswith("llvm-") for name in shipped)

    def starters(platform, kind):
        return [lib.path.name for lib in run_libraries(tmp_path, platform, kind)[1:]]

    assert starters("llvm-znver4-2c", "llvm") == shipped
    assert starters("llvm-skylake-avx512-16c", "llvm") == shipped
    assert starters("cuda-sm_90", "cuda") == []
    # a starter whose platform a machine model names (no kind in its id): its programs' targets say the kind
    named = tmp_path / "epyc-9655.json.gz"
    data = json.loads(gzip.decompress((STARTER_DIR / shipped[0]).read_bytes()))
    named.write_bytes(gzip.compress(json.dumps(dict(data, platform="epyc-9655")).encode()))
    monkeypatch.setenv("COSTLAB_STARTER_LIBRARY", str(named))
    assert starters("llvm-znver4-2c", "llvm") == [named.name] and starters("cuda-sm_90", "cuda") == []


def test_adding_a_run_whose_last_write_a_kill_cut_reads_its_good_lines(tmp_path, capsys):
    """A work dir whose last record line a kill cut short (MetaSchedule's loader fails on it): `library add`
    reads the good lines, says the one it skipped by file and line, and leaves the work dir as it was."""
    from costlab.metaschedule.databases import RECORD_FILE

    work = tmp_path / "w"
    shutil.copytree(FIXTURE, work)
    text = (work / RECORD_FILE).read_text()
    n = len(text.splitlines())
    (work / RECORD_FILE).write_text(text + text.splitlines()[0][:200])
    before = (work / RECORD_FILE).read_bytes()
    assert main(["library", "add", str(work), "--library", str(tmp_path / "lib"), "--no-check",
                 "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "programs of 2 tasks added" in out and "Traceback" not in err
    assert f"skipped 1 bad line(s) of its database: {work / RECORD_FILE}:{n + 1}:" in err
    assert (work / RECORD_FILE).read_bytes() == before


def test_a_networks_start_takes_a_share_of_its_trials_not_more():
    """A network's --trials are for all its tasks: the start before the search (the transfer, then the library)
    takes each task's share, at least one (19 tasks at 32 trials: one each, not --transfer-top 4 = 76, which left
    the search nothing and measured more than --trials); a workload's start keeps its whole --trials."""
    from costlab.export.tune import TuneOptions, _start_share

    network = TuneOptions("w", network="bert", trials=32)
    assert _start_share(network, 19) == 1 and _start_share(TuneOptions("w", network="bert", trials=200), 19) == 10
    assert _start_share(TuneOptions("w", network="bert", trials=4), 19) == 1
    assert _start_share(TuneOptions("w", workloads=[CONV], trials=32), 1) == 32


def test_a_damaged_start_state_stops_only_a_run_that_has_that_start(tmp_path):
    """A run counts both starts' records (which tell a search that has begun); a damaged state file of a start
    the run does not have (--no-library, no --transfer-from) is read as none, one it has is refused naming it."""
    from costlab.common.errors import InputError
    from costlab.export.tune import _start_state

    state = tmp_path / "library_start.json"
    state.write_text("{not json")
    assert _start_state(state, "start from the library afresh", needed=False) == {}
    with pytest.raises(InputError, match="remove it to start from the library afresh"):
        _start_state(state, "start from the library afresh", needed=True)
    state.write_text(json.dumps({"tasks": {"abc": {"done": False, "measured": [{}, {}]}}}))
    assert _start_state(state, "start from the library afresh", needed=False) == {"abc": (False, 2)}


def _damage(root: Path) -> tuple[str, dict, str, dict]:
    """The library under ``root`` with one program of its matmul lacking its latency, and its conv2d's structure
    lacking its anchor; returns each entry's key and the program and entry as they are now written."""
    file = root / _platform() / "library.json"
    lib = json.loads(file.read_text())
    matmul, conv = sorted(lib["entries"], key=lambda k: lib["entries"][k]["name"].startswith("conv2d"))
    program = lib["entries"][matmul]["programs"][-1]
    del program["us"]
    del lib["entries"][conv]["structure"]["anchor"]
    file.write_text(json.dumps(lib))
    return matmul, program, conv, lib["entries"][conv]


def _aside(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / _platform() / "library.bad-entries.jsonl").read_text().splitlines()]


def test_a_librarys_bad_entries_are_skipped_counted_said_in_one_line_and_kept(library, tmp_path, capsys, caplog):
    """An entry whose structure lacks a field, and a program that lacks its latency, in a library that is valid
    JSON: list says them in one line naming the file and the entries and lists the rest; prune (which rewrites
    the library) moves them, as they were, to library.bad-entries.jsonl beside it, and prunes the rest."""
    root = tmp_path / "lib"
    shutil.copytree(library, root)
    matmul, program, conv, entry = _damage(root)
    file = root / _platform() / "library.json"
    assert main(["library", "list", "--library", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "1 tasks" in out  # the matmul, with its good programs; the conv2d skipped
    (said,) = [r.getMessage() for r in caplog.records if str(file) in r.getMessage()]
    assert "skipped 1 bad entry and 1 bad program" in said and "\n" not in said
    assert f"entry {conv}: its structure has no 'anchor'" in said and f"entry {matmul}: program " in said
    assert "has no 'us'" in said
    assert not (root / _platform() / "library.bad-entries.jsonl").exists()  # a reader writes nothing
    caplog.clear()
    n = len(json.loads(file.read_text())["entries"][matmul]["programs"])
    assert main(["library", "prune", "--library", str(root), "--per-task", "1"]) == 0
    assert "removed 0 tasks and %d programs" % (n - 2) in capsys.readouterr().out  # of the good programs only
    (said,) = [r.getMessage() for r in caplog.records if str(file) in r.getMessage()]
    assert f"moved 1 bad entry and 1 bad program aside, to {root / _platform() / 'library.bad-entries.jsonl'}" in said
    assert {(a["entry"], a.get("program") is not None) for a in _aside(root)} == {(conv, False), (matmul, True)}
    assert [a["value"] for a in _aside(root)] in ([entry, program], [program, entry])  # as they were
    assert list(_library(root)["entries"]) == [matmul] and len(_library(root)["entries"][matmul]["programs"]) == 1
    caplog.clear()
    assert main(["library", "list", "--library", str(root)]) == 0  # the library is whole again: nothing said
    assert not [r for r in caplog.records if str(file) in r.getMessage()]


def test_bad_entries_and_programs_of_every_kind_are_skipped_and_counted():
    """What every reader of a library uses is checked when it is read: a missing field, a value of another type,
    an anchor that names no block, a latency that is not a finite number above 0 (inf and 0 were taken); an entry
    none of whose programs is good, or of no programs, is skipped whole; the good entries and programs are kept in
    order."""
    from costlab.export.library.store import bad_parts

    program = dict(trace=[[], []], run_secs=[1e-6], us=1.0, target={"kind": "llvm"}, args_info=[], checked=True)
    entry = dict(name="t", workload="b64", structure=dict(names=["Z"], signatures=["s"], anchor=0, extents=[4]),
                 programs=[program, dict(program, us=2.0)], added=1)
    entries = {"good": entry, "not-an-object": [], "no-name": {k: v for k, v in entry.items() if k != "name"},
               "anchor": dict(entry, structure=dict(entry["structure"], anchor=3)),
               "extents": dict(entry, structure=dict(entry["structure"], extents=["4"])),
               "names": dict(entry, structure=dict(entry["structure"], names=[])),  # a block without its name
               "no-good-program": dict(entry, programs=[dict(program, us="fast")]),
               "some-bad": dict(entry, programs=[dict(program, run_secs=None), program, dict(program, us=float("nan")),
                                                 dict(program, checked="yes"), 7]),
               "no-programs": dict(entry, programs=[]),
               "latencies": dict(entry, programs=[dict(program, us=float("inf")), dict(program, us=0), program])}
    good, bad = bad_parts(entries)
    assert good == {"good": entry, "some-bad": dict(entry, programs=[program]),
                    "latencies": dict(entry, programs=[program])}
    assert [(b["entry"], b.get("program")) for b in bad] == [
        ("not-an-object", None), ("no-name", None), ("anchor", None), ("extents", None), ("names", None),
        ("no-good-program", None),
        ("some-bad", 0), ("some-bad", 2), ("some-bad", 3), ("some-bad", 4),
        ("no-programs", None), ("latencies", 0), ("latencies", 1)]
    assert bad[-1]["why"] == "entry latencies: program 1 has a 'us' that is not a finite latency above 0"
    assert bad[0]["why"] == "entry not-an-object is list, not an object"
    assert bad[1]["why"] == "entry no-name has no 'name'"
    assert bad[4]["why"] == "entry names: its structure names 0 blocks but has 1 signatures"
    assert bad[6]["why"] == "entry some-bad: program 0 has a 'run_secs' that is not a list of numbers"
    assert all(b["value"] is (entries[b["entry"]] if b.get("program") is None else entries[b["entry"]]["programs"][
        b["program"]]) for b in bad)  # each as it was


def test_library_add_names_a_damaged_librarys_bad_entries_once(library, tmp_path, caplog):
    """Adding a run to a library with bad entries says them once, in the line that says where they were moved
    (before, the host check's read said them too, as skipped)."""
    root = tmp_path / "lib"
    shutil.copytree(library, root)
    matmul, _program, conv, _entry = _damage(root)
    file = root / _platform() / "library.json"
    assert main(["library", "add", str(FIXTURE), "--library", str(root), "--platform", _platform(),
                 "--no-progress"]) == 0
    (said,) = [r.getMessage() for r in caplog.records if str(file) in r.getMessage()]
    assert f"moved 1 bad entry and 1 bad program aside, to {root / _platform() / 'library.bad-entries.jsonl'}" in said
    assert f"entry {conv}: its structure has no 'anchor'" in said and f"entry {matmul}: program " in said


def test_a_finished_run_writes_its_summary_when_its_library_holds_a_bad_entry(library, tmp_path, caplog):
    """A library whose entry of the run's own workload has a program without its latency (what made a finished
    run end in a KeyError, its summary never written): the run finishes, adds its programs, writes its summary,
    and the entry, none of whose programs could be read, is kept as it was beside the library."""
    from costlab.export.library.collect import structure_json
    from costlab.export.tasks import workload_tasks
    from costlab.export.tune import TuneOptions
    from costlab.metaschedule.workloads import workload_json

    root = tmp_path / "lib"
    shutil.copytree(library, root)
    file = root / _platform() / "library.json"
    lib = json.loads(file.read_text())
    (task,), _ = workload_tasks(TuneOptions("w", workloads=[CONV]), None)
    shash, b64 = workload_json(task.mod)
    conv = next(e for e in lib["entries"].values() if e["name"].startswith("conv2d"))
    bad = {k: v for k, v in conv["programs"][0].items() if k != "us"}
    lib["entries"][shash] = dict(conv, name=task.name, workload=b64, structure=structure_json(task.mod),
                                 programs=[bad])
    file.write_text(json.dumps(lib))
    summary = _tune(tmp_path / "w", "--library", str(root), "--trials", "2", "--model", "random")
    assert json.loads((tmp_path / "w" / "costlab_tune.json").read_text())["library"] == summary["library"]
    assert summary["library"]["added"] >= 1 and "why" not in summary["library"]
    assert [a["value"] for a in _aside(root)] == [lib["entries"][shash]]  # the entry as it was, its one program bad
    assert len(_library(root)["entries"][shash]["programs"]) >= 1  # the run's own programs
    said = [r.getMessage() for r in caplog.records if str(file) in r.getMessage()]
    assert len(said) == 2 and all(f"entry {shash}: none of its programs is readable" in s for s in said)
    assert "skipped 1 bad entry (not used)" in said[0] and "moved 1 bad entry aside" in said[1]


def test_a_finished_run_writes_its_summary_when_adding_to_its_library_fails(library, tmp_path, monkeypatch, caplog):
    """Whatever adding a run's programs to its library raises, the run is finished: its summary is written,
    saying why nothing was added, and the run says it as a warning."""
    import costlab.export.tune as tune_module

    def fails(*args, **kwargs):
        raise KeyError("us")

    monkeypatch.setattr(tune_module, "add_run", fails)
    summary = _tune(tmp_path / "w", "--trials", "2", "--model", "random")
    assert summary["library"] == dict(added=0, why="not added: KeyError: 'us'")
    assert json.loads((tmp_path / "w" / "costlab_tune.json").read_text())["library"] == summary["library"]
    assert any("not added to the schedule library: KeyError: 'us'" in r.getMessage() for r in caplog.records)


def test_another_hosts_exported_library_goes_only_into_a_library_named_for_it(library, tmp_path, capsys):
    """As for another host's run: the default libraries are this machine's, and an exported library of another host
    added to an empty one made it that host's, so that every later run of this machine was refused there."""
    from costlab.export.library.store import default_root

    out = tmp_path / "exported"
    assert main(["library", "export", str(out), "--library", str(library)]) == 0
    meta = json.loads((out / "library.json").read_text())
    meta["host"] = dict(meta["host"], cpu_model="Some Other CPU", family="99")
    (out / "library.json").write_text(json.dumps(meta))
    assert main(["library", "add", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Some Other CPU" in err and "--library DIR" in err and len(err.strip().splitlines()) == 1
    assert not (default_root() / _platform()).exists()
    assert main(["library", "add", str(out), "--library", str(tmp_path / "theirs")]) == 0
    assert _library(tmp_path / "theirs")["host"]["cpu_model"] == "Some Other CPU"


def test_library_export_replaces_its_own_export_and_never_a_tuning_runs_database(library, tmp_path, capsys):
    work = tmp_path / "w"
    shutil.copytree(FIXTURE, work)
    before = {p.name: p.read_bytes() for p in work.iterdir()}
    assert main(["library", "export", str(work), "--library", str(library)]) != 0
    assert "database" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in work.iterdir()} == before  # the run's records as they were
    out = tmp_path / "exported"
    for _ in range(2):  # a second export replaces the first
        assert main(["library", "export", str(out), "--library", str(library)]) == 0
    assert len((out / "database_tuning_record.json").read_text().splitlines()) == sum(
        len(e["programs"]) for e in _library(library)["entries"].values())


def test_a_program_added_unchecked_is_marked_checked_when_a_later_add_checks_it(tmp_path):
    root = tmp_path / "lib"
    assert main(["library", "add", str(FIXTURE), "--library", str(root), "--platform", _platform(), "--no-check"]) == 0
    assert not any(p["checked"] for e in _library(root)["entries"].values() for p in e["programs"])
    assert main(["library", "add", str(FIXTURE), "--library", str(root), "--platform", _platform()]) == 0
    assert all(e["programs"][0]["checked"] for e in _library(root)["entries"].values())


def test_library_export_into_a_librarys_own_folder_is_refused(library, tmp_path, capsys):
    """A library's folder holds a library.json: an export there took it for an earlier export and replaced
    it, another platform's library lost. It is refused, the library as it was."""
    other = tmp_path / "lib"
    shutil.copytree(library, other)
    folder = other / _platform()
    before = (folder / "library.json").read_bytes()
    assert main(["library", "export", str(folder), "--library", str(library)]) == 2
    assert "library's folder" in error_line(capsys)
    assert (folder / "library.json").read_bytes() == before and not (folder / "database_workload.json").exists()


def test_a_library_that_cannot_be_written_is_one_line_and_left_as_it_was(library, tmp_path, capsys, monkeypatch):
    """A full disk while saving (prune, add): one line naming the file, the library unchanged."""
    import errno

    import costlab.export.library.store as store

    root = tmp_path / "lib"
    shutil.copytree(library, root)
    before = (root / _platform() / "library.json").read_bytes()

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "write_atomically", full)
    assert main(["library", "prune", "--library", str(root), "--platform", _platform(), "--per-task", "1"]) == 2
    line = error_line(capsys)
    assert "library.json" in line and "No space left" in line
    assert (root / _platform() / "library.json").read_bytes() == before


def test_library_add_checks_every_path_before_adding_any(tmp_path, capsys):
    """A path that does not exist among good ones: nothing is added (it said only the error, while the paths
    before it had been added)."""
    root = tmp_path / "lib"
    assert main(["library", "add", str(FIXTURE), str(tmp_path / "missing"), "--library", str(root),
                 "--platform", _platform(), "--no-check"]) == 2
    assert "missing" in error_line(capsys) and not (root / _platform() / "library.json").exists()


def test_a_librarys_programs_of_another_target_kind_start_no_task(library, tmp_path):
    """A library given a GPU run's programs (library add --platform takes any work dir): a CPU run's start
    reads only its own kind's programs, as --from sources and starters."""
    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.library.start import library_sources
    from costlab.export.library.store import read_library
    from costlab.export.tasks import Task

    root = tmp_path / "lib"
    shutil.copytree(library, root)
    path = root / _platform() / "library.json"
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        for p in entry["programs"]:
            p["target"] = {"kind": "cuda", "arch": "sm_90"}
    path.write_text(json.dumps(data))
    lib = read_library(root, _platform())
    task = Task("conv", workload_json_mod(te_workload_task(CONV)[1]))
    assert library_sources([lib], [task])[0]  # every kind: the entry matches
    assert library_sources([lib], [task], kind="llvm")[0] == []
    assert library_sources([lib], [task], kind="cuda")[0]


def test_a_gpu_runs_programs_go_in_unchecked_where_no_gpu_can_check_them(tmp_path, capsys):
    """A work dir of a GPU run with no host recorded was taken as this machine's and checked here, where no GPU can
    run its programs: every one was called wrong and none was added, said as "0 programs of 0 tasks added". They
    are added unchecked, and the line says why (as for another machine's run)."""
    from costlab.metaschedule.targets import local_gpu

    if local_gpu() is not None:
        pytest.skip("this machine has a GPU: the programs would be checked on it")
    work = tmp_path / "gpu_run"
    shutil.copytree(FIXTURE, work)
    records = work / "database_tuning_record.json"
    rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    for row in rows:
        row[1][2] = {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024, "thread_warp_size": 32}
    records.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["library", "add", str(work), "--library", str(tmp_path / "lib"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "8 programs of 2 tasks added" in out and "this machine has none to check them on" in out, out


def test_an_add_never_makes_an_entry_smaller(tmp_path):
    """An entry grown to 8 programs (`library add --per-task 8`) was cut back to 4 by the next run's add, whose
    default is 4: only prune makes an entry smaller; an add keeps the fastest of as many as the entry held."""
    from costlab.export.library.store import Library

    lib = Library(tmp_path / "library.json", "llvm-test-1c")

    def programs(*us):
        return [dict(trace=[[f"p{u}"]], run_secs=[u * 1e-6], us=u, target={}, args_info=[], checked=False,
                     source="t") for u in us]

    assert lib.add("w", "", "GMM", {}, programs(*range(10, 18)), per_task=8) == 8
    assert lib.add("w", "", "GMM", {}, programs(1, 2)) == 2  # the default of 4
    assert [p["us"] for p in lib.entries["w"]["programs"]] == [1, 2, 10, 11, 12, 13, 14, 15]
    assert lib.add("v", "", "GMM", {}, programs(*range(1, 7))) == 4  # a new entry: the default
