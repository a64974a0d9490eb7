"""benchmarks/networks.py without tuning: its curves and figures on hand-made run histories, MetaSchedule's task
scheduler log read back, the refusal of a library that holds one of the benchmark networks' tasks, and a
failed run said in the exit status."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import another_cpu_than_this

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import netcurves  # noqa: E402

UNTUNED = {"mm": 100.0, "ew": 10.0}
WEIGHTS = {"mm": 2.0, "ew": 1.0}


def _progress(tmp_path: Path, rows) -> Path:
    path = tmp_path / "progress.jsonl"
    path.write_text("".join(json.dumps(dict(elapsed_s=s, task=t, trials=n, best_us=b)) + "\n" for s, t, n, b in rows)
                    + '{"elapsed_s": 9')  # a line an interruption cut short is skipped
    return path


def test_curve_reach_and_figures(tmp_path):
    hist = netcurves.costlab_history(_progress(tmp_path, [(10, "mm", 8, 50.0), (20, "ew", 16, 5.0),
                                                          (30, "mm", 24, 60.0), (40, "mm", 32, 25.0)]))
    curve = netcurves.estimate(hist, WEIGHTS, UNTUNED)
    # untuned 2x100+10; mm best 50; ew 5; a worse batch keeps the best; mm 25
    assert [round(ms * 1e3, 3) for _s, _n, ms in curve] == [210.0, 110.0, 105.0, 105.0, 55.0]
    cal = netcurves.calibrated(curve, 0.11)  # the final build timed at 0.11 ms: everything scaled by 2
    assert cal[-1][2] == pytest.approx(0.11) and cal[0][2] == pytest.approx(0.42)
    assert netcurves.reach(cal, 0.21) == 20 and netcurves.reach(cal, 0.1) is None
    assert netcurves.at_time(cal, 25) == (16, pytest.approx(0.21))

    def arm(points, final, secs):
        return dict(curve=[(s, i, ms) for i, (s, ms) in enumerate(points)], final_ms=final, tune_s=secs)
    runs = {("net", 0): dict(stock=arm([(0, 1.0), (500, 0.4)], 0.4, 1000), a=arm([(0, 1.0), (200, 0.5)], 0.5, 400),
                             k=arm([(0, 1.0), (10, 0.5), (50, 0.38)], 0.38, 80)),
            ("net", 1): dict(stock=arm([(0, 1.0), (900, 0.3)], 0.3, 1000), a=arm([(0, 1.0)], 0.9, 400),
                             k=arm([(0, 1.0), (60, 0.32)], 0.32, 100))}
    f = netcurves.figures(runs)
    # seed 0: k reaches 0.4 at 50 s of stock's 1000; seed 1 never reaches 0.3: it ran 100 s, counted at stock's
    # full 1000 s (a miss is never better than the arm it did not reach); the geometric mean of the runs' ratios
    assert f["reach"]["k_to_stock"] == dict(ratio=pytest.approx((0.05 * 1.0) ** 0.5), pooled=pytest.approx(1050 / 2000),
                                           runs=2, reached=1, worst=pytest.approx(1.0))
    assert f["reach"]["k_to_a"]["ratio"] == pytest.approx((10 / 400 * 60 / 400) ** 0.5)
    assert f["per_run"]["net/s1"]["k_to_stock"] == dict(seconds=100, reached=False, of=1000, ratio=1.0)
    assert f["final"]["k_over_stock"]["geomean"] == pytest.approx((0.38 / 0.4 * 0.32 / 0.3) ** 0.5)
    assert f["final"]["k_over_stock"]["worst"] == pytest.approx(0.32 / 0.3)


def test_ms_task_scheduler_log(tmp_path):
    table = ("2026-01-02 03:04:{sec} [INFO] [task_scheduler.cc:344] \n"
             " ID | Name | FLOP | Weight | Speed (GFLOPS) | Latency (us) | Weighted Latency (us) | Trials | Done \n"
             "----\n"
             "  0 |   mm | 3355 |      2 |  {speed} |  {mm} | {wmm} | {n} |     \n"
             "  1 |   ew |  163 |      1 |  N/A |  N/A | N/A | 0 |     \n"
             "----\n"
             "Total trials: {n}\nTotal latency (us): {wmm}\n\n")
    log = tmp_path / "task_scheduler.log"
    log.write_text(table.format(sec="00,123", speed="N/A", mm="N/A", wmm="0", n=0)
                   + "2026-01-02 03:04:30 [INFO] Sending 64 sample(s) to builder\n"
                   + table.format(sec="50", speed="200.1", mm="40.5", wmm="81", n=64))
    import time

    started = time.mktime(time.strptime("2026-01-02 03:04:00", "%Y-%m-%d %H:%M:%S"))
    hist, weights = netcurves.ms_history(log, started)
    assert weights == {"mm": 2.0, "ew": 1.0}
    assert hist == [(0.123, 0, {}), (50.0, 64, {"mm": 40.5})]


def test_library_holding_a_network_task_is_refused(tmp_path, monkeypatch):
    from tvm.s_tir import meta_schedule as ms

    import networks
    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.tasks import Task

    monkeypatch.setenv("COSTLAB_STARTER_LIBRARY", "none")
    mine = Task("gmm", workload_json_mod(te_workload_task("GMM:1,16,16,16")[1]))
    other = workload_json_mod(te_workload_task("GMM:1,32,16,16")[1])  # the same kernel at another shape: allowed
    lib = tmp_path / "lib"
    (lib / "x").mkdir(parents=True)
    (lib / "y").mkdir()
    ms.database.JSONDatabase(work_dir=str(lib / "x")).commit_workload(other)
    assert networks.library_overlap(lib, [mine]) == (1, [])
    ms.database.JSONDatabase(work_dir=str(lib / "y")).commit_workload(mine.mod)
    assert networks.library_overlap(lib, [mine]) == (2, ["gmm"])
    monkeypatch.setattr(networks, "_network", lambda net, target: ([mine], None))
    with pytest.raises(SystemExit, match="holds 1 of net's 1 tasks"):
        networks._start_library(lib, tmp_path / "run" / "library", "net", "host")


def test_the_table_reads_finals_as_median_or_fastest_round(tmp_path):
    """A final is the median of its rounds timed together, or their fastest; the curve is scaled to it."""
    import networks

    runs = tmp_path / "runs" / "net" / "s0"
    for arm, rounds in (("a", [5.0, 9.0, 6.0]), ("k", [4.0, 8.0, 7.0])):
        work = runs / arm
        work.mkdir(parents=True)
        _progress(work, [(10, "mm", 8, 50.0)])
        (work / "costlab_tune.json").write_text(json.dumps(dict(tasks=[dict(name="mm", weight=2.0)], wall_s=12)))
    timed = dict(untuned_tasks_us=UNTUNED, untuned_ms=300.0, timed={
        arm: dict(rounds_ms=rounds, final_ms=sorted(rounds)[1], tune_s=10.0, checkpoints=[],
                  output_check=dict(status="ok")) for arm, rounds in (("a", [5.0, 9.0, 6.0]), ("k", [4.0, 8.0, 7.0]))})
    (runs / "timed.json").write_text(json.dumps(timed))
    med, _ = networks.collect(tmp_path)
    fast, _ = networks.collect(tmp_path, "min")
    assert med[("net", 0)]["a"]["final_ms"] == 6.0 and med[("net", 0)]["k"]["final_ms"] == 7.0
    assert fast[("net", 0)]["a"]["final_ms"] == 5.0 and fast[("net", 0)]["k"]["final_ms"] == 4.0
    assert fast[("net", 0)]["k"]["curve"][-1][2] == pytest.approx(4.0)


def test_an_arm_run_again_is_timed_again(tmp_path):
    """timed.json stands for the runs it timed: the same arms, none finished after it; an arm added or run
    again (its done.json newer) makes the network and seed be timed again."""
    import os

    import networks

    runs = tmp_path / "s0"
    for arm in ("stock", "a"):
        (runs / arm).mkdir(parents=True)
        (runs / arm / "done.json").write_text("{}")
    assert not networks.timed_already(runs, ["stock", "a"])  # never timed
    (runs / "timed.json").write_text(json.dumps(dict(arms=["stock", "a"])))
    t = (runs / "timed.json").stat().st_mtime
    for arm in ("stock", "a"):
        os.utime(runs / arm / "done.json", (t - 10, t - 10))
    assert networks.timed_already(runs, ["stock", "a"])
    assert not networks.timed_already(runs, ["stock", "a", "k"])  # another arm finished
    os.utime(runs / "a" / "done.json", (t + 10, t + 10))  # a run again after the timing
    assert not networks.timed_already(runs, ["stock", "a"])


def test_in_network_order_agreement_counts_pairs_within_a_task():
    import in_network

    rows = [dict(task="mm", warm_us=1.0, in_network_us=2.0), dict(task="mm", warm_us=1.1, in_network_us=1.5),
            dict(task="mm", warm_us=1.2, in_network_us=3.0), dict(task="sm", warm_us=5.0, in_network_us=9.0)]
    # mm pairs: (0,1) warm says 0 first, the network 1: wrong; (0,2) right; (1,2) right; sm alone: no pair
    assert in_network.order_agreement(rows, "warm_us") == (2, 3)


def test_k_runs_are_continued_only_with_their_weights(tmp_path):
    """A benchmark whose k runs were made with one model's weights (x86-cpu-v1, the alias's version then) is not
    continued with another's (the alias's version now): refused before anything runs, naming the versioned model
    that has those weights."""
    import argparse

    import networks
    from costlab.costmodels.predictors import weights_sha256

    done = tmp_path / "runs" / "llama" / "s0" / "k"
    done.mkdir(parents=True)
    (done / "done.json").write_text(json.dumps(dict(model="x86-cpu", model_sha256=weights_sha256("x86-cpu-v1"))))
    with pytest.raises(SystemExit, match="made with x86-cpu-v1, not x86-cpu-v2"):
        networks.run(argparse.Namespace(out=str(tmp_path), model="x86-cpu-v2"))
    assert not (tmp_path / "benchmark.json").exists()


def _timed_run(out: Path, seed: int, rounds: dict, host: dict) -> None:
    """A benchmark out dir with one network and seed timed: arms a and k, each a one-line history."""
    runs = out / "runs" / "net" / f"s{seed}"
    for arm in rounds:
        (runs / arm).mkdir(parents=True)
        _progress(runs / arm, [(10, "mm", 8, 50.0)])
        (runs / arm / "costlab_tune.json").write_text(json.dumps(dict(tasks=[dict(name="mm", weight=2.0)], wall_s=12)))
    (runs / "timed.json").write_text(json.dumps(dict(untuned_tasks_us=UNTUNED, untuned_ms=300.0, timed={
        arm: dict(rounds_ms=r, final_ms=sorted(r)[1], tune_s=100.0, checkpoints=[], output_check=dict(status="ok"))
        for arm, r in rounds.items()})))
    (out / "benchmark.json").write_text(json.dumps(dict(host=host, trials=1000, model="x86-cpu-v1")))


def test_an_earlier_tables_seeds_are_summed_in_only_from_the_same_host(tmp_path, monkeypatch):
    """A seed whose work dirs are gone counts through its table's results.json: its runs, median and fastest
    figures beside this benchmark's own; a table of another machine or budget is refused."""
    import networks

    from costlab.common.host import host_info

    monkeypatch.setattr(netcurves, "plot", lambda *a, **k: None)
    host = host_info()
    # seed 0: k's median (8.9) reaches a's (9) at 10 s, its fastest round (8.5) does not reach a's (8)
    _timed_run(tmp_path / "old", 0, {"a": [8.0, 10.0, 9.0], "k": [8.5, 9.5, 8.9]}, host)
    assert networks.main(["table", "--out", str(tmp_path / "old"), "--to", str(tmp_path / "old-results")]) == 0
    _timed_run(tmp_path / "new", 1, {"a": [4.0, 5.0, 6.0], "k": [5.5, 7.0, 6.5]}, host)  # seed 1: never reaches
    earlier = tmp_path / "old-results" / "results.json"
    assert networks.main(["table", "--out", str(tmp_path / "new"), "--with", str(earlier), "--to",
                          str(tmp_path / "both")]) == 0
    res = json.loads((tmp_path / "both" / "results.json").read_text())
    assert sorted(res["runs"]) == ["net/s0", "net/s1"]
    med, fast = res["figures"]["reach"]["k_to_a"], res["figures_fastest_round"]["reach"]["k_to_a"]
    assert med == dict(ratio=pytest.approx((10 / 100 * 100 / 100) ** 0.5), pooled=pytest.approx((10 + 100) / 200),
                       runs=2, reached=1, worst=pytest.approx(1.0))
    assert fast["ratio"] == pytest.approx(1.0) and fast["runs"] == 2 and fast["reached"] == 0
    assert res["runs"]["net/s0"]["k"]["fastest_ms"] == 8.5  # kept, so that a later table can sum it in again
    assert f"net/s0 from {earlier}" in (tmp_path / "both" / "results.md").read_text()
    other = json.loads(earlier.read_text())
    other["benchmark"]["trials"] = 2000
    earlier.write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="another host or budget"):
        networks.main(["table", "--out", str(tmp_path / "new"), "--with", str(earlier)])
    new_bench = dict(json.loads((tmp_path / "new" / "benchmark.json").read_text()), model_sha256="a" * 64,
                     target={"kind": "llvm", "mcpu": "znver4"})
    (tmp_path / "new" / "benchmark.json").write_text(json.dumps(new_bench))
    for key, theirs in (("model_sha256", "0" * 64), ("target", {"kind": "llvm", "mcpu": "other"})):
        other["benchmark"] = dict(new_bench, **{key: theirs})  # runs of other weights, or another target
        earlier.write_text(json.dumps(other))
        with pytest.raises(SystemExit, match=f"another {key.split('_')[0]}"):
            networks.main(["table", "--out", str(tmp_path / "new"), "--with", str(earlier)])
    for bad, text in ((tmp_path / "missing.json", None), (tmp_path / "other.json", '{"runs": {}}')):
        if text is not None:
            bad.write_text(text)
        with pytest.raises(SystemExit, match=f"error: {bad}: not a"):
            networks.main(["table", "--out", str(tmp_path / "new"), "--with", str(bad)])


def test_a_run_that_fails_is_said_in_the_exit_status(tmp_path, capsys):
    """An arm whose `costlab tune` fails (here: a budget it refuses) leaves the table of what finished and a
    non-zero exit status naming the run, so a script running the benchmark sees the failure."""
    import networks

    out = tmp_path / "bench"
    assert networks.main(["run", "--out", str(out), "--networks", "llama-small", "--arms", "a", "--seeds", "0",
                          "--trials", "0", "--target", "host"]) == 1
    assert "runs that failed: llama-small s0 a" in capsys.readouterr().err
    assert "--trials" in (out / "runs" / "llama-small" / "s0" / "a" / "run.log").read_text()


def test_the_finals_build_a_result_whose_kept_tasks_are_tuned_again(tmp_path):
    """``finals``' control for the untuned schedules a run kept: its result plus, for each kept task only, the
    task's fastest record of the database; none when the run kept no task."""
    from types import SimpleNamespace

    import networks
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.workdir import WorkDir

    work = WorkDir(tmp_path / "a")
    work.result_dir.mkdir(parents=True)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    tasks = [SimpleNamespace(name=f"t{i}", mod=workload_json_mod(te_workload_task(f"GMM:1,{n},{n},{n}")[1]))
             for i, n in enumerate((8, 16))]
    db, result = json_database(work.path), json_database(work.result_dir)
    for t in tasks:
        args = ms.arg_info.ArgInfo.from_prim_func(t.mod["main"])
        for secs in (2e-6, 1e-6):
            sch = Schedule(t.mod)
            sch.split(sch.get_loops(sch.get_sblock("Z"))[1], [None, 2 if secs > 1.5e-6 else 4])
            rec = ms.database.TuningRecord(sch.trace, db.commit_workload(t.mod), [secs], target, args)
            db.commit_tuning_record(rec)
    result.commit_tuning_record(ms.database.TuningRecord(  # t1's choice; t0 was kept untuned
        rec.trace, result.commit_workload(tasks[1].mod), [1e-6], target, args))
    work.summary_file.write_text(json.dumps({"tasks": [{"name": "t0", "kept": "untuned"}, {"name": "t1"}]}))
    out = networks._kept_tuned(work.path, tasks, tmp_path / "kept")
    got = json_database(out)
    assert len(got) == 2 and all(got.has_workload(t.mod) for t in tasks)
    (best,) = got.get_top_k(got.commit_workload(tasks[0].mod), 1)
    assert float(best.run_secs[0]) == pytest.approx(1e-6)  # the kept task's fastest record
    assert len(json_database(work.result_dir)) == 1  # the result itself is left as it was
    work.summary_file.write_text(json.dumps({"tasks": [{"name": "t0"}, {"name": "t1"}]}))
    assert networks._kept_tuned(work.path, tasks, tmp_path / "none") is None


def json_database(path):
    from costlab.metaschedule.databases import json_database as open_db

    return open_db(work_dir=str(path))


@pytest.mark.parametrize("script", ["checks", "keep_untuned"])
def test_a_damaged_database_is_one_line_before_the_network_is_extracted(tmp_path, script, monkeypatch):
    import importlib

    import networks

    work = tmp_path / "w"
    work.mkdir()
    # a finished run of checks.py's defaults: it does not tune it again
    options = dict(network=networks.NETWORKS["bert"], trials=64, target="host")
    (work / "costlab_tune.json").write_text(json.dumps(dict(options=options)))
    (work / "database_workload.json").write_text('["not a workload"\n')
    (work / "database_tuning_record.json").write_text("")
    monkeypatch.setattr(networks, "_network", lambda *a: pytest.fail("the network was extracted"))
    with pytest.raises(SystemExit, match=r"database does not load: \S"):
        importlib.import_module(script).main(["--work", str(work), "--rounds", "1"])


def test_keep_untuned_on_a_run_whose_tasks_have_one_contender_gives_no_ratio(tmp_path, monkeypatch):
    """A run of few trials (one program a task): without the untuned programs the second measurement measures
    nothing, so there is no ratio of the two ways' seconds; the untuned program and the one contender are still
    measured and compared (real builds and runs of one tiny task)."""
    from types import SimpleNamespace

    import keep_untuned
    import networks
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.metaschedule.databases import json_database

    task = SimpleNamespace(name="gmm", weight=2, mod=workload_json_mod(te_workload_task("GMM:1,8,8,8")[1]))
    work = tmp_path / "w"
    work.mkdir()
    (work / "costlab_tune.json").write_text(json.dumps(dict(options=dict(network=networks.NETWORKS["bert"]))))
    db = json_database(work_dir=str(work))
    sch = Schedule(task.mod)
    sch.split(sch.get_loops(sch.get_sblock("Z"))[1], [None, 4])
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, db.commit_workload(task.mod), [1e-6],
                                                     tvm.target.Target({"kind": "llvm", "num-cores": 2}),
                                                     ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])))
    monkeypatch.setattr(networks, "_network", lambda *a: ([task], None))
    out = tmp_path / "k.json"
    assert keep_untuned.main(["--work", str(work), "--rounds", "1", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["ratio"] is None and got["contenders"] == {"without": 0, "with": 1}
    (row,) = got["tasks"]
    assert isinstance(row["tuned_us"], float) and isinstance(row["untuned_us"], float)


def test_keep_untuned_refuses_a_run_of_another_network(tmp_path, monkeypatch):
    """A work dir tuned for another network (or for workloads) holds none of --network's contenders: refused,
    naming both, before its database is opened or the network extracted."""
    import keep_untuned
    import networks

    work = tmp_path / "w"
    work.mkdir()
    (work / "costlab_tune.json").write_text(json.dumps(dict(options=dict(network=networks.NETWORKS["llama"]))))
    (work / "database_tuning_record.json").write_text("")
    monkeypatch.setattr(networks, "_network", lambda *a: pytest.fail("the network was extracted"))
    with pytest.raises(SystemExit, match="tuning run of nets:llama_layer, not --network bert"):
        keep_untuned.main(["--work", str(work), "--rounds", "1"])


def test_a_benchmark_of_another_library_is_not_continued():
    """The k arm's runs start from --library: a call with another one is refused, so that one table never holds
    k runs of two libraries (benchmark.json names one)."""
    import networks

    from costlab.common.host import host_info

    meta = dict(host=host_info(), trials=200, target="host", library="/a")
    assert networks.other_benchmark(meta, dict(meta, library=None)) is None  # a call without k
    assert networks.other_benchmark(meta, dict(meta, library="/b")) == "library (/a vs /b)"


def test_a_benchmark_is_continued_on_the_same_host_at_another_clock_and_refused_elsewhere():
    """A host record's clock moves with the governor between two calls of one lease: the same machine at
    another ``mhz`` continues its benchmark; another machine, budget or target is refused, saying what differs."""
    import networks

    from costlab.common.host import host_info

    host = host_info()
    meta = dict(host=host, trials=200, target="cuda")
    assert networks.other_benchmark(dict(meta, host=dict(host, mhz=1234)), meta) is None
    why = networks.other_benchmark(dict(meta, host=dict(host, threads=host["threads"] + 1)), meta)
    assert why.startswith("host (") and "threads" in why
    assert networks.other_benchmark(dict(meta, trials=64), meta) == "budget (64 vs 200)"
    assert networks.other_benchmark(dict(meta, target="host"), meta) == "target (host vs cuda)"


def test_finals_are_refused_on_another_host(tmp_path):
    """`networks.py finals` times the runs' programs beside their own timings: on another host it is refused
    before anything is built (the finals would compare two machines)."""
    import networks

    other = another_cpu_than_this()  # a fixed Xeon Platinum 8592+ was this machine on that Emerald Rapids
    out = tmp_path / "bench"
    out.mkdir()
    (out / "benchmark.json").write_text(json.dumps(dict(host=other, trials=1000)))
    with pytest.raises(SystemExit, match="finals timed here would compare two machines"):
        networks.main(["finals", "--out", str(out), "--networks", "llama", "--seeds", "0", "--target", "host"])
