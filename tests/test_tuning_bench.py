"""benchmarks/tuning.py without tuning: the trial curve it reads from a run's MetaSchedule records, plain or as
its ``archive`` keeps them (gzipped), bad lines skipped."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import tuning  # noqa: E402

RUN = ROOT / "benchmarks" / "results" / "exploit-zen5-confirm" / "runs" / "base" / "c2d" / "s0"  # archived, gzipped


def test_the_curve_of_an_archived_run_and_of_its_plain_records(tmp_path):
    lines = gzip.decompress((RUN / "database_tuning_record.json.gz").read_bytes()).decode().splitlines()
    expected = []
    for line in lines:
        secs = json.loads(line)[1][1]
        expected.append(sum(secs) / len(secs) * 1e6 if secs and sum(secs) / len(secs) < 1e3 else math.inf)
    assert tuning._curve(RUN) == expected and len(expected) > 10
    plain = tmp_path / "run"
    plain.mkdir()
    shutil.copy(RUN / "database_workload.json.gz", plain)
    # a damaged line and a failed trial among good ones: the first is skipped, the second is inf
    failed = json.loads(lines[0])
    failed[1][1] = [1e10]
    records = [lines[0], "{not json", json.dumps(failed), *lines[1:]]
    (plain / "database_tuning_record.json").write_text("\n".join(records) + "\n")
    assert tuning._curve(plain) == [expected[0], math.inf, *expected[1:]]
    assert tuning._curve(tmp_path / "nothing") == []


def test_two_models_in_one_benchmark_each_with_its_own_arms():
    assert tuning._arm_args("b", "m1", "m2") == ["--model", "m1", "--strategy", "model-led", "--adapt", "none"]
    assert tuning._arm_args("c", "m1", "m2") == ["--model", "m1", "--strategy", "model-led", "--adapt", "momentum"]
    assert tuning._arm_args("b2", "m1", "m2") == ["--model", "m2", "--strategy", "model-led", "--adapt", "none"]
    assert tuning._arm_args("c2", "m1", "m2") == ["--model", "m2", "--strategy", "model-led", "--adapt", "momentum"]
    assert tuning._arm_args("a", None) == ["--strategy", "evolutionary"]
    try:
        tuning._arm_args("c2", "m1", None)
    except SystemExit as exc:
        assert "--model2" in str(exc)
    else:
        raise AssertionError("arm c2 ran without --model2")


def test_a_benchmark_is_continued_only_with_the_models_its_arms_ran_with(tmp_path, monkeypatch):
    from costlab.common.host import host_info
    from costlab.costmodels.predictors import weights_sha256

    out = tmp_path / "bench"
    out.mkdir()
    host = {k: v for k, v in host_info().items() if k != "mhz"}  # the clock is no part of a host's identity
    (out / "benchmark.json").write_text(json.dumps(dict(host=host, target={}, trials=200, model="x86-cpu",
                                                        model_sha256=weights_sha256("x86-cpu-v1"))))
    ran = []
    monkeypatch.setattr(tuning, "_run_one", lambda arm, wl, seed, args, out: ran.append((arm, args.model, args.model2)))
    monkeypatch.setattr(tuning, "table", lambda args: 0)
    args = tuning.argparse.Namespace(out=str(out), model="x86-cpu-v2", model2=None, trials=200, target="host",
                                     workloads=["gmm"], seeds="0", arms="b")
    try:
        tuning.run(args)
    except SystemExit as exc:
        assert "x86-cpu-v2" in str(exc) and "another --out" in str(exc)
    else:
        raise AssertionError("arm b was continued with another model than its runs'")
    assert ran == []
    # no --model: the runs' own weights, by the versioned name that has them now that the alias names another
    # version; a second model for b2/c2: continued, both recorded
    args = tuning.argparse.Namespace(out=str(out), model=None, model2="x86-cpu-v2", trials=200, target="host",
                                     workloads=["gmm"], seeds="0", arms="b,c2")
    assert tuning.run(args) == 0
    assert ran == [("b", "x86-cpu-v1", "x86-cpu-v2"), ("c2", "x86-cpu-v1", "x86-cpu-v2")]
    meta = json.loads((out / "benchmark.json").read_text())
    assert meta["model_sha256"] == weights_sha256("x86-cpu-v1") and meta["model2_sha256"] == weights_sha256("x86-cpu-v2")
    assert meta["host"] == host and meta["model"] == "x86-cpu-v1"
    meta["model_sha256"] = "0" * 64  # weights no shipped model has: refused, nothing run
    (out / "benchmark.json").write_text(json.dumps(meta))
    args.model = None
    with pytest.raises(SystemExit, match="which no model shipped now has"):
        tuning.run(args)
    assert len(ran) == 2


@pytest.mark.parametrize("remeasure", [True, False])
def test_a_run_is_remeasured_after_it_unless_a_retime_follows(tmp_path, monkeypatch, remeasure):
    """Each run's best programs are measured again after it (``remeasured.json``), unless ``--no-remeasure`` leaves
    that to the retime of all runs together; a run failed is never remeasured (the tune command is a stand-in)."""
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))  # the suite may run under the machine's
    measured = []
    monkeypatch.setattr(tuning, "_remeasure", lambda work, target: measured.append(work))
    args = tuning.argparse.Namespace(trials=8, target="host", model=None, model2=None, remeasure=remeasure)
    for code in (0, 3):
        monkeypatch.setattr(tuning, "COSTLAB", [sys.executable, "-c", f"import sys; sys.exit({code})"])
        tuning._run_one("a", f"GMM:1,{8 + code},8,8", 0, args, tmp_path)
    assert measured == ([tmp_path / "runs" / "a" / "GMM_1_8_8_8" / "s0"] if remeasure else [])


def test_the_table_says_which_finals_were_retimed_and_which_runs_have_none(tmp_path):
    """The H200 lease's runs (archived): two workloads retimed together, one whose retime the lease's end cut
    (its runs have no final: the table says so rather than calling them re-measured)."""
    out = tmp_path / "tuning"
    shutil.copytree(ROOT / "benchmarks" / "results" / "gpu-h200" / "tuning", out)
    assert tuning.table(tuning.argparse.Namespace(out=str(out))) == 0
    text = (out / "table.md").read_text()
    assert ("retimed together, every run's best programs in turn (`retime`): "
            "C2D_1_28_28_128_128_3_1_1_1_1_float16_float16, C2D_1_56_56_64_64_3_1_1\n") in text
    assert "no final for some runs of GMM_1_1024_1024_1024_float16_float16 (neither" in text
    assert "one run at a time" not in text
    assert "over all 3 workloads and 3 runs of c, a seed that never reached it" in text


def test_a_benchmark_stopped_by_sigterm_ends_only_after_its_run(tmp_path, monkeypatch):
    """SIGTERM to the benchmark alone (a job's time limit): it is passed on to the run in flight, and the
    benchmark ends (exit 143) only once the run has, so that no run left behind measures beside the next step.
    The run is a stand-in that takes a second to end its round."""
    from conftest import sigterm_once_started, slow_to_stop

    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))  # the driver's too: not the machine's
    child = tmp_path / "child.py"
    child.write_text(slow_to_stop(tmp_path, 143))
    driver = f"""
import argparse, pathlib, sys
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
import tuning
tuning.COSTLAB = [sys.executable, {str(child)!r}]
args = argparse.Namespace(trials=8, target="host", model=None, model2=None, remeasure=False)
tuning._run_one("a", "GMM:1,8,8,8", 0, args, pathlib.Path({str(tmp_path / 'out')!r}))
"""
    proc = sigterm_once_started(driver, tmp_path / "started")
    assert proc.wait(timeout=60) == 143
    assert (tmp_path / "ended").exists()  # the run ended first
    assert "stopped by SIGTERM; the run ended" in proc.stdout.read()


def test_the_best_programs_of_a_damaged_run_come_from_its_good_lines_and_say_so(tmp_path, capsys):
    """An archived run whose records file a kill cut short: its best programs are read from the good lines, and
    the benchmark names the line it left out."""
    work = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "fixtures" / "ms_tune_db", work)
    records = work / "database_tuning_record.json"
    lines = records.read_text().splitlines()
    records.write_text("\n".join(lines) + "\n" + lines[0][: len(lines[0]) // 2])
    best = tuning._best_programs(work, 3)
    assert len(best) == 3 and len({trace for _rec, trace in best}) == 3
    err = capsys.readouterr().err
    assert f"{work}: 1 bad line(s) of the database left out, the first" in err and f":{len(lines) + 1}:" in err


def test_a_benchmark_is_continued_only_for_its_target_and_its_remeasure_finds_every_finished_run(tmp_path,
                                                                                                monkeypatch):
    """Runs compiled for another target are not another seed of the same table: refused. `remeasure` measures
    again every finished run (a costlab arm's work dir, an a0 run's database), not only those measured before."""
    from costlab.common.host import host_info
    from costlab.metaschedule.targets import runnable_target

    out = tmp_path / "bench"
    out.mkdir()
    host = {k: v for k, v in host_info().items() if k != "mhz"}
    other = dict(runnable_target("host"), mcpu="skylake")
    (out / "benchmark.json").write_text(json.dumps(dict(host=host, target=other, trials=200)))
    monkeypatch.setattr(tuning, "_run_one", lambda *a: None)
    monkeypatch.setattr(tuning, "table", lambda args: 0)
    args = tuning.argparse.Namespace(out=str(out), model=None, model2=None, trials=200, target="host",
                                     workloads=["gmm"], seeds="0", arms="a")
    with pytest.raises(SystemExit, match="holds a benchmark of target"):
        tuning.run(args)
    for arm in ("a", "c"):
        (out / "runs" / arm / "gmm" / "s0").mkdir(parents=True)
        (out / "runs" / arm / "gmm" / "s0" / "costlab_tune.json").write_text("{}")
    (out / "runs" / "a0" / "gmm" / "s1" / "ms").mkdir(parents=True)
    (out / "runs" / "a0" / "gmm" / "s1" / "a0.json").write_text("{}")
    measured = []
    monkeypatch.setattr(tuning, "_remeasure", lambda work, target: measured.append(work.relative_to(out)))
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))
    assert tuning.remeasure(tuning.argparse.Namespace(out=str(out), target="host")) == 0
    assert sorted(map(str, measured)) == ["runs/a/gmm/s0", "runs/a0/gmm/s1/ms", "runs/c/gmm/s0"]


def test_an_a0_run_killed_before_its_end_starts_again_from_nothing(tmp_path, monkeypatch):
    """tune_tir loads the database in its work dir: an a0 run that a kill cut short (no a0.json) would go on
    from its own records. Its database is removed before it runs again."""
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))
    ms_dir = tmp_path / "runs" / "a0" / "GMM_1_8_8_8" / "s0" / "ms"
    ms_dir.mkdir(parents=True)
    (ms_dir / "database_tuning_record.json").write_text("[0, []]\n")
    seen = []
    monkeypatch.setattr(tuning, "run_or_stop", lambda cmd, **kw: seen.append(ms_dir.exists()) or 0)
    args = tuning.argparse.Namespace(trials=8, target="host", model=None, model2=None, remeasure=False)
    tuning._run_one("a0", "GMM:1,8,8,8", 0, args, tmp_path)
    assert seen == [False]


def test_a_run_that_would_not_end_in_the_time_left_is_not_started(tmp_path, monkeypatch, capsys):
    """``run --seconds``: each run that went from nothing to its end records its seconds (``spans.json``; a
    continued or failed one does not), and a run is not started where the longest of them is more than what is
    left (a run stopped before its end loses the round it was searching). The tune command is a stand-in."""
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))
    started = []
    monkeypatch.setattr(tuning, "run_or_stop", lambda cmd, **kw: started.append(kw["cwd"].name) or 0)
    args = tuning.argparse.Namespace(trials=8, target="host", model="x86-cpu", model2=None, remeasure=False,
                                     deadline=None)
    tuning._run_one("a", "GMM:1,8,8,8", 0, args, tmp_path)  # fresh: its seconds recorded
    continued = tmp_path / "runs" / "a" / "GMM_1_8_8_8" / "s1"
    continued.mkdir(parents=True)
    (continued / "database_tuning_record.json").write_text("")
    tuning._run_one("a", "GMM:1,8,8,8", 1, args, tmp_path)  # continued: a part of a run, not recorded
    spans = json.loads((tmp_path / "spans.json").read_text())
    assert list(spans) == ["a/GMM_1_8_8_8/s0"] and spans["a/GMM_1_8_8_8/s0"] >= 0 and started == ["s0", "s1"]
    (tmp_path / "spans.json").write_text(json.dumps({"a/GMM_1_8_8_8/s0": 90.0}))
    args.deadline = tuning.time.time() + 60
    tuning._run_one("c", "GMM:1,8,8,8", 0, args, tmp_path)
    assert started == ["s0", "s1"] and not (tmp_path / "runs" / "c").exists()
    assert "c GMM:1,8,8,8 seed 0: not started (it may take 90 s by this benchmark's runs so far, 60 s left)" in \
        capsys.readouterr().out
    args.deadline = tuning.time.time() + 120  # time enough: it runs
    tuning._run_one("c", "GMM:1,8,8,8", 0, args, tmp_path)
    assert started == ["s0", "s1", "s0"]


def test_a_continued_run_needs_the_part_of_the_longest_run_its_trials_to_come_are(tmp_path, monkeypatch, capsys):
    """A run stopped part-way (its database holds 6 of its 8 trials) is continued with a quarter of the longest
    run left (at least a quarter: it starts again), not the whole of it (a second call of a lease, shorter than
    the longest run, continued nothing)."""
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))
    started = []
    monkeypatch.setattr(tuning, "run_or_stop", lambda cmd, **kw: started.append(kw["cwd"].name) or 0)
    monkeypatch.setattr(tuning, "_curve", lambda work: [5.0] * 6)
    (tmp_path / "spans.json").write_text(json.dumps({"a/GMM_1_8_8_8/s0": 90.0}))
    work = tmp_path / "runs" / "c" / "GMM_1_8_8_8" / "s0"
    work.mkdir(parents=True)
    (work / "database_tuning_record.json").write_text("")
    args = tuning.argparse.Namespace(trials=8, target="host", model="x86-cpu", model2=None, remeasure=False,
                                     deadline=tuning.time.time() + 60)
    tuning._run_one("c", "GMM:1,8,8,8", 0, args, tmp_path)
    assert started == ["s0"]
    args.deadline = tuning.time.time() + 10
    tuning._run_one("c", "GMM:1,8,8,8", 0, args, tmp_path)
    assert started == ["s0"]
    assert "c GMM:1,8,8,8 seed 0: not started (it may take 22 s" in capsys.readouterr().out


def test_a_relative_out_and_model_are_the_runs_own(tmp_path, monkeypatch):
    """run --out and --model given relative to the caller: the runs start in their work dirs, and were given
    paths relative to the caller (the runs nested in themselves; the model was not found)."""
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ROOT / "costmodels" / "models" / "x86-cpu-v2", tmp_path / "mymodel")
    cmds = []
    monkeypatch.setattr(tuning, "run_or_stop", lambda cmd, **kw: cmds.append((cmd, kw["cwd"])) or 0)
    monkeypatch.setattr(tuning, "table", lambda args: 0)
    tuning.main(["run", "--out", "bench", "--model", "mymodel", "--arms", "c", "--workloads", "GMM:1,8,8,8",
                 "--seeds", "0", "--trials", "4", "--no-remeasure"])
    (cmd, cwd), = cmds
    assert cwd.is_absolute()
    assert Path(cmd[cmd.index("--work-dir") + 1]) == tmp_path / "bench" / "runs" / "c" / "GMM_1_8_8_8" / "s0"
    assert cmd[cmd.index("--model") + 1] == str(tmp_path / "mymodel")


def test_the_table_lists_an_arm_of_another_name_after_the_benchmarks_own(tmp_path):
    """Runs kept under an arm name the benchmark does not know (a copy of runs made by other code, set beside
    its own for one retime) are listed after the known arms, not left out."""
    out = tmp_path / "tuning"
    shutil.copytree(ROOT / "benchmarks" / "results" / "gpu-h200-s1" / "tuning", out)
    shutil.copytree(out / "runs" / "c", out / "runs" / "c-copy")
    assert tuning.table(tuning.argparse.Namespace(out=str(out))) == 0
    rows = [ln.split(" | ")[:2] for ln in (out / "table.md").read_text().splitlines() if ln.startswith("| GMM")]
    assert rows == [["| GMM_1_1024_1024_1024_float16_float16", "a"], ["| GMM_1_1024_1024_1024_float16_float16", "c"],
                    ["| GMM_1_1024_1024_1024_float16_float16", "c-copy"]]


def test_archive_keeps_a_run_whose_database_is_already_gzipped(tmp_path):
    """A run copied from an archive into a benchmark (an a1000 run shared by two tables) holds its database gzipped:
    archiving the benchmark again kept its summaries and dropped the database, and with it the run's curve."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    shutil.copytree(RUN, src / "runs" / "a" / "c2d" / "s0")
    assert tuning.archive(tuning.argparse.Namespace(out=str(src), to=str(dst))) == 0
    kept = dst / "runs" / "a" / "c2d" / "s0"
    name = "database_tuning_record.json.gz"
    assert (kept / name).read_bytes() == (RUN / name).read_bytes()
    assert tuning._curve(kept) == tuning._curve(RUN) != []


def test_a_seed_that_never_reaches_counts_at_no_less_than_the_baselines_seconds(tmp_path):
    """Over all seeds, one that never reaches a's final is counted at the longer of its own wall time and a's: at its
    own, a miss that ran shorter than a counted as better than a (bert-softmax b seed 0: 99 s against a's 108 s),
    and b's published figure was 0.64 for 0.65."""
    out = tmp_path / "verify"
    shutil.copytree(ROOT / "benchmarks" / "results" / "tuning-zen5-verify", out)
    assert tuning.table(tuning.argparse.Namespace(out=str(out))) == 0
    text = (out / "table.md").read_text()
    assert "18 runs of b, a seed that never reached it counted at the longer of its and a's wall time (6 such): " \
           "0.65 of a's seconds" in text
    assert "(2 such): 0.43 of a's seconds" in text  # c's figure: its misses ran longer than a


def test_retime_remeasure_and_openblas_measure_only_on_the_benchmarks_host(tmp_path, monkeypatch):
    """A final measured again here, or OpenBLAS timed here, is compared with the runs' tuning measurements and
    with each other: on another machine than benchmark.json's host they are refused, naming both; an
    openblas.json of another host gives no ratio in the table."""
    from costlab.common.host import host_info
    from costlab.metaschedule.targets import runnable_target

    out = tmp_path / "bench"
    (out / "runs" / "a" / "gmm" / "s0").mkdir(parents=True)
    (out / "runs" / "a" / "gmm" / "s0" / "costlab_tune.json").write_text("{}")
    here = {k: v for k, v in host_info().items() if k != "mhz"}
    other = dict(here, family="other", threads=here["threads"] + 1)
    (out / "benchmark.json").write_text(json.dumps(dict(host=other, target=runnable_target("host"), trials=200)))
    monkeypatch.setattr(tuning, "_remeasure", lambda *a: pytest.fail("measured on another host"))
    monkeypatch.setattr(tuning, "_retime", lambda *a: pytest.fail("measured on another host"))
    monkeypatch.setattr(tuning.subprocess, "run", lambda *a, **k: pytest.fail("measured on another host"))
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))
    for fn, args in ((tuning.remeasure, dict(target=None)), (tuning.retime, dict(target=None, rounds=1, workloads=[]))):
        with pytest.raises(SystemExit, match="runs were measured on .* this host is"):
            fn(tuning.argparse.Namespace(out=str(out), **args))
    (out / "openblas.json").write_text(json.dumps(dict(kernel="k", us=10.0, gflops=400.0, threads=2, host=here)))
    run = out / "runs" / "a" / "gmm" / "s0"
    (run / "costlab_tune.json").write_text(json.dumps(dict(tasks=[dict(trials=200)], wall_s=1.0)))
    (run / "remeasured.json").write_text(json.dumps(dict(best_us=10.0)))
    tuning.table(tuning.argparse.Namespace(out=str(out)))
    text = (out / "table.md").read_text()
    assert "not on this benchmark's host: no OpenBLAS ratio" in text and "GFLOP/s" not in text
