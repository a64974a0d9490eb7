"""Tuning with costlab models, for real on tiny workloads: tune_tir with the cost model, `costlab tune` with
Draft-then-Verify and momentum adaptation, its database read back by import-ms, an interrupted run that
continues, and the refusals that come before any tuning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from costlab.common import jsontext
from costlab.cli import main
from costlab.datasets import open_dataset
from costlab.export.tune import TuneOptions, _measure_stack

from conftest import FIXTURES
from test_export import run  # noqa: F401  (the trained and exported tiny TLP model)

pytestmark = pytest.mark.slow

SMALL_SEARCH = ["--per-iter", "4", "--population", "32", "--no-progress"]


def _records(work) -> list:
    path = work / "database_tuning_record.json"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _program_hashes(work, workload: str) -> set:
    """The distinct programs (structural hashes of the scheduled modules) of a work dir's database."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.metaschedule.traces import replay

    mod = workload_json_mod(te_workload_task(workload)[1])
    db = ms.database.JSONDatabase(work_dir=str(work))
    return {int(tvm_ffi.structural_hash(replay(mod, r.trace, 1).mod)) for r in db.get_all_tuning_records()}


def test_tune_tir_takes_the_cost_model(run, tmp_path):  # noqa: F811
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task
    from costlab.datasets.measure import MeasureOptions
    from costlab.export import load
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import close_runner, make_runner

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    _, func = te_workload_task("GMM:1,16,16,16")
    model = load(str(run / "model"))
    runner = make_runner(MeasureOptions(number=1), target)
    try:
        db = ms.tune_tir(func, target, str(tmp_path / "w"), max_trials_global=8, num_trials_per_iter=4,
                         cost_model=model, builder=make_builder(), runner=runner)
    finally:
        close_runner(runner)
    assert len(db.get_all_tuning_records()) == 8
    assert model.stats["candidates"] > 8  # the evolutionary search scored its populations with the model


def test_costlab_tune_draft_verify_with_momentum_and_import_back(run, tmp_path, capsys):  # noqa: F811
    work = tmp_path / "w"
    assert main(["tune", "--workload", "GMM:1,16,16,16", "--target", "llvm -num-cores=2", "--trials", "8",
                 "--model", str(run / "model"), "--strategy", "draft-verify", "--adapt", "momentum",
                 "--work-dir", str(work), "--json", *SMALL_SEARCH]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"][0]["trials"] == 8 and summary["tasks"][0]["best_us"] > 0
    # an update after each round, reported before and after (whether it trains, and the guard keeps it, is the
    # records' outcome: 4 a round hold out few to validate with)
    adaptation = summary["adaptation"]
    assert adaptation["updates"] == 2 and [r["batch"] for r in adaptation["rounds"]] == [4, 4]
    assert all("before" in r and "after" in r and "trained" in r for r in adaptation["rounds"])
    rounds = [json.loads(x) for x in (work / "search_rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 2
    for r in rounds:  # PSA drafted every candidate of the genetic search; the model verified a fraction
        assert r["draft_scored"] >= 32 and 4 <= r["verify_scored"] < r["draft_scored"] and r["picked"] == 4
        assert r["round_s"] >= r["search_s"] >= r["verify_s"] >= 0
    # the database is MetaSchedule's own, and costlab reads it back, failures included
    assert main(["dataset", "import-ms", str(work), "-o", str(tmp_path / "back.h5")]) == 0
    with open_dataset(tmp_path / "back.h5") as ds:
        assert sum(ds.num_records(p) for p in ds.record_platforms()) == 8



def test_a_continued_run_adapts_on_every_record_the_run_measured(run, tmp_path, capsys):  # noqa: F811
    """The online update ranks "the run's records so far": a continued run's adapter is given the records its
    earlier part measured (it learned from this process's batches alone, so an interrupted run lost them)."""
    work = tmp_path / "w"
    argv = _adapting(run, work)
    assert main([*argv, "--trials", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["adaptation"]["records"] == 4
    assert main([*argv, "--trials", "8"]) == 0
    adaptation = json.loads(capsys.readouterr().out)["adaptation"]
    assert adaptation["records"] == 8 and adaptation["updates"] == 1
    # the earlier part's updates stay reported (the summary is rewritten with this part's adapter)
    assert [part["records"] for part in adaptation["earlier"]] == [4]


def _adapting(run, work) -> list:
    """The arguments of a tuning run of one small workload whose model adapts online, printing its summary."""
    return ["tune", "--workload", "GMM:1,16,16,16", "--target", "llvm -num-cores=2", "--model", str(run / "model"),
            "--adapt", "finetune", "--work-dir", str(work), "--json", "--no-library", *SMALL_SEARCH]


def _after_each_update(monkeypatch, then) -> None:
    """Every online update of the model as it is, then ``then()``."""
    from costlab.costmodels.adapt import OnlineAdapter

    real = OnlineAdapter.update

    def update(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        then()
        return out

    monkeypatch.setattr(OnlineAdapter, "update", update)


def test_the_updates_of_a_stopped_part_stay_reported_by_the_next_finished_part(run, tmp_path, capsys,
                                                                             monkeypatch):  # noqa: F811
    """A part stopped (SIGTERM) writes no summary: its adaptation updates were in no adaptation.earlier. They are
    kept beside the summary until the next finished part's summary takes them in."""
    import signal

    from costlab.export.stop import clear_stop, request_stop

    work = tmp_path / "w"
    argv = _adapting(run, work)
    # SIGTERM arrived while the model adapted to the first batch
    _after_each_update(monkeypatch, lambda: request_stop(signal.SIGTERM))
    try:
        assert main([*argv, "--trials", "8"]) == 143
    finally:
        clear_stop()
    assert not (work / "costlab_tune.json").exists()
    monkeypatch.undo()
    capsys.readouterr()
    assert main([*argv, "--trials", "8"]) == 0
    earlier = json.loads(capsys.readouterr().out)["adaptation"]["earlier"]
    assert [(part["updates"], part["stopped"]) for part in earlier] == [(1, True)]
    assert not (work / "adaptation_stopped.json").exists()  # in the summary now


def test_the_updates_of_a_part_a_write_failure_stopped_are_kept(run, tmp_path, capsys, monkeypatch):  # noqa: F811
    """A part that stops because a file of the run could not be written (a full disk) raised before it kept its
    adaptation updates: they were lost with the summary it never wrote. They are kept as a stopped part's are."""
    work = tmp_path / "w"
    history = work / "progress.jsonl"

    def unwritable():  # the batch's line cannot be written (the model adapts before the line is written)
        if not history.is_dir():
            history.unlink(missing_ok=True)
            history.mkdir()

    _after_each_update(monkeypatch, unwritable)
    assert main([*_adapting(run, work), "--trials", "8"]) == 2
    assert "progress.jsonl: could not be written" in capsys.readouterr().err
    kept = json.loads((work / "adaptation_stopped.json").read_text())
    assert [(part["updates"], part["stopped"]) for part in kept] == [(1, True)]


def test_a_continued_run_adapts_on_the_records_of_a_workload_its_first_part_finished(run, tmp_path, capsys,
                                                                                     monkeypatch):  # noqa: F811
    """Workloads are tuned one after the other: a run stopped in the second remembered, when continued, only the
    records of the workloads it still tuned, so it adapted on half of what a run never stopped had."""
    from tvm.s_tir import meta_schedule as ms

    real, calls = ms.tune_tasks, []

    def stopped_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    argv = ["tune", "--workload", "GMM:1,16,16,16", "--workload", "GMM:1,8,8,8", "--target", "llvm -num-cores=2",
            "--model", str(run / "model"), "--adapt", "finetune", "--trials", "4", "--work-dir", str(tmp_path / "w"),
            "--json", "--no-library", "--no-check", *SMALL_SEARCH]
    monkeypatch.setattr(ms, "tune_tasks", stopped_at_the_second)
    assert main(argv) == 130
    monkeypatch.undo()
    capsys.readouterr()
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["adaptation"]["records"] == 8


def test_a_failed_build_reaches_the_online_update_as_a_failure(run, tmp_path, capsys, monkeypatch):  # noqa: F811
    """MetaSchedule's UpdateCostModel leaves out candidates whose build failed: the model never learned them as bad
    during the run, while a continued run's adapter reads them back from the database as failures."""
    from tvm.s_tir.meta_schedule.builder import BuilderResult

    from costlab.export import cost_model as cm
    from costlab.export.search import timed

    real_build, real_update = timed.TimedBuilder._cls.build, cm.CostlabCostModel._cls.update
    count, seen = [0], []

    def every_fourth_fails(self, build_inputs):
        out = list(real_build(self, build_inputs))
        for i in range(len(out)):
            count[0] += 1
            if count[0] % 4 == 0:
                out[i] = BuilderResult(None, "injected build failure")
        return out

    def logged(self, context, candidates, results):
        seen.append([r.error_msg is not None for r in results])
        return real_update(self, context, candidates, results)

    monkeypatch.setattr(timed.TimedBuilder._cls, "build", every_fourth_fails)
    monkeypatch.setattr(cm.CostlabCostModel._cls, "update", logged)
    assert main(["tune", "--workload", "GMM:1,16,16,16", "--target", "llvm -num-cores=2", "--model",
                 str(run / "model"), "--adapt", "finetune", "--trials", "8", "--work-dir", str(tmp_path / "w"),
                 "--json", "--no-library", "--no-check", *SMALL_SEARCH]) == 0
    assert [len(batch) for batch in seen] == [4, 4] and [sum(batch) for batch in seen] == [1, 1], seen
    assert json.loads(capsys.readouterr().out)["adaptation"]["records"] == 8

def test_draft_verify_evolves_measured_programs_of_a_convolution(run, tmp_path, capsys):  # noqa: F811
    """From the second round on, the best measured programs join the evolution. A convolution's programs
    carry a weight-layout rewrite added by a postprocessor: replayed with it as a schedule instruction,
    every mutated trace failed (TVM: "old_outputs.size() == new_outputs.size()") and the run stopped."""
    work = tmp_path / "w"
    assert main(["tune", "--workload", "C2D:1,8,8,16,16,3,1,1", "--target", "llvm -num-cores=2", "--trials", "12",
                 "--model", str(run / "model"), "--work-dir", str(work), "--json", *SMALL_SEARCH]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"][0]["trials"] == 12
    assert len((work / "search_rounds.jsonl").read_text().splitlines()) == 3
    # no --adapt: a learned model adapts online by default (momentum), and the run records it
    assert json.loads((work / "costlab_run.json").read_text())["adapt"] == "momentum"
    assert summary["adaptation"]["updates"] >= 2


def test_adapt_auto_is_momentum_for_a_learned_model_none_otherwise_and_a_resumed_runs_own(run, tmp_path):  # noqa: F811
    from costlab.export.tune import TuneOptions, resolved_adapt

    def adapt(work, **kw):
        return resolved_adapt(TuneOptions(work_dir=str(work), workloads=["GMM:1,8,8,8"], **kw), work)

    fresh = tmp_path / "fresh"
    assert adapt(fresh, model=str(run / "model")) == "momentum"
    assert adapt(fresh, model=str(run)) == "momentum"  # a training run's directory
    assert adapt(fresh, model="psa") == adapt(fresh, model="random") == adapt(fresh) == "none"
    assert adapt(fresh, model=str(tmp_path / "missing")) == "none"  # loading it then says what is wrong
    assert adapt(fresh, model=str(run / "model"), adapt="finetune") == "finetune"
    old = tmp_path / "old"
    old.mkdir()
    (old / "costlab_run.json").write_text(json.dumps({"adapt": "none"}))  # a run started before the default
    assert adapt(old, model=str(run / "model")) == "none"
    assert adapt(old, model=str(run / "model"), adapt="momentum") == "momentum"


def test_draft_filter_strategy(run, tmp_path, capsys):  # noqa: F811
    assert main(["tune", "--workload", "GMM:1,16,16,16", "--target", "llvm -num-cores=2", "--trials", "4",
                 "--model", str(run / "model"), "--strategy", "draft-filter", "--work-dir", str(tmp_path / "w"),
                 "--json", *SMALL_SEARCH]) == 0
    stats = json.loads(capsys.readouterr().out)["cost_model"]
    assert 0 < stats["verify_scored"] < stats["draft_scored"]  # the model saw a fraction of what PSA drafted
    assert len(_records(tmp_path / "w")) == 4


def test_default_search_without_a_model_and_ms_defaults(tmp_path, capsys):
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--target", "llvm -num-cores=2", "--trials", "4",
                 "--work-dir", str(tmp_path / "w"), "--json", *SMALL_SEARCH]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["options"]["strategy"] == "evolutionary" and summary["tasks"][0]["trials"] == 4
    assert len(_records(tmp_path / "w")) == 4
    # MetaSchedule's own builder and runner, as tune_tir uses them
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--target", "llvm -num-cores=2", "--trials", "4",
                 "--ms-defaults", "--work-dir", str(tmp_path / "m"), "--json", *SMALL_SEARCH]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["options"]["ms_defaults"] and summary["tasks"][0]["trials"] == 4
    # built or not: MetaSchedule's builder imports its intrinsic registry in every fresh worker, which can
    # pass its 30 s timeout on a loaded machine (why costlab has its own); failed trials are kept as 1e10
    records = _records(tmp_path / "m")
    assert len(records) == 4
    best = summary["tasks"][0]["best_us"]
    assert (best is not None and best > 0) or all(r[1][1] == [1e10] for r in records)
    from tvm.s_tir.meta_schedule.builder import LocalBuilder
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    builder, runner = _measure_stack(TuneOptions(work_dir=".", ms_defaults=True), None, 2)
    assert type(builder) is LocalBuilder and type(runner) is LocalRunner  # exactly what "local" makes
    assert builder.timeout_sec == 30  # theirs by default; --builder-timeout was dropped here
    builder, _ = _measure_stack(TuneOptions(work_dir=".", ms_defaults=True, builder_timeout=90.0), None, 2)
    assert builder.timeout_sec == 90.0



def test_interrupted_tune_continues(run, tmp_path):  # noqa: F811
    work = tmp_path / "w"
    argv = [sys.executable, "-m", "costlab", "tune", "--workload", "GMM:1,16,16,16", "--target",
            "llvm -num-cores=2", "--trials", "12", "--model", str(run / "model"), "--work-dir", str(work),
            *SMALL_SEARCH]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while len(_records(work)) < 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "Traceback" not in err, err[-2000:]  # one line, as every command
    assert [ln for ln in err.splitlines() if ln.startswith("costlab:")] == [
        "costlab: interrupted; data written before is kept"]
    done = len(_records(work))
    assert 4 <= done < 12
    res = subprocess.run(argv, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(_records(work)) == 12  # only the difference was tuned
    assert len(_program_hashes(work, "GMM:1,16,16,16")) == 12  # and no program measured before was measured again
    # the history goes on across the interruption: trials and seconds only grow, the best only falls
    hist = [json.loads(x) for x in (work / "progress.jsonl").read_text().splitlines()]
    assert hist[-1]["trials"] == 12 and sum(h["batch"] for h in hist) == 12
    for a, b in zip(hist, hist[1:]):
        assert b["trials"] > a["trials"] and b["elapsed_s"] >= a["elapsed_s"] and b["best_us"] <= a["best_us"]
    # another run's options in the same work dir are refused
    res = subprocess.run(argv[:-len(SMALL_SEARCH)] + ["--seed", "5", *SMALL_SEARCH], capture_output=True, text=True)
    assert res.returncode == 2 and "holds a tuning run with other options (seed: 0 -> 5)" in res.stderr
    # and so is another way of timing (the database would hold programs timed two ways)
    res = subprocess.run(argv[:-len(SMALL_SEARCH)] + ["--screen", "2", *SMALL_SEARCH], capture_output=True, text=True)
    assert res.returncode == 2 and "holds a tuning run with other options (screen: 1.5 -> 2.0)" in res.stderr


@pytest.mark.parametrize("argv, message", [
    (["--trials", "4"], "name what to tune"),
    (["--workload", "GMM:1,8,8,8", "--network", "bert"], "not both"),
    (["--workload", "NOPE"], "unknown te_workload 'NOPE'"),
    (["--workload", "GMM:1,8,8,8", "--adapt", "momentum"], "--adapt needs a --model"),
    (["--workload", "GMM:1,8,8,8", "--strategy", "draft-filter"], "--strategy draft-filter needs a --model"),
    (["--workload", "GMM:1,8,8,8", "--task", "matmul*"], "--task picks tasks of a --network"),
    (["--network", "bert:layers=1", "--task", "nothing*"], "matches none of the network's tasks"),
    (["--workload", "GMM:1,8,8,8", "--trials", "0"], "--trials, --per-iter must be at least 1"),
    (["--workload", "GMM:1,8,8,8", "--verify-fraction", "0"], "--verify-fraction must be in (0, 1]"),
    (["--workload", "GMM:1,8,8,8", "--target", "llvm -mcpu=nosuchcpu"], "bad target"),
    (["--workload", "GMM:1,8,8,8", "--model", "random", "--adapt", "momentum"], "online adaptation needs a learned net"),
    (["--workload", "GMM:0,0,0,0"], "every extent must be positive"),
    (["--workload", "GMM:1,-4,8,8"], "every extent must be positive"),
    (["--workload", "GMM:1,8,8,99999999999"], "a number beyond 32 bits"),
    (["--workload", "GMM:1,8,8,8", "--trials", str(2**70)], "--trials and --per-iter are at most"),
    (["--workload", "GMM:1,8,8,8", "--population", "100000000"], "--population is at most"),
    (["--workload", "GMM:1,8,8,8", "--builder-timeout", "0"], "--builder-timeout must be a positive"),
    (["--workload", "GMM:1,8,8,8", "--builder-timeout", "-1"], "--builder-timeout must be a positive"),
    (["--workload", "GMM:1,8,8,8", "--builder-timeout", "nan"], "--builder-timeout must be a positive"),
    (["--workload", "GMM:1,8,8,8", "--seed", "-7"], "--seed must be in [0, 2^31 - 1)"),
    (["--workload", "GMM:1,8,8,8", "--seed", str(2**70)], "--seed must be in [0, 2^31 - 1)"),
    (["--workload", "GMM:1,8,8,8", "--target", "cuda"], "TVM sees no CUDA GPU on this machine"),
    (["--workload", "GMM:1,8,8,8", "--target", "opencl"], "a opencl target is not supported yet"),
    (["--workload", "GMM:1,8,8,8", "--target", "llvm -num-cores=-3"], "num-cores must be at least 1"),
    (["--workload", "GMM:1,8,8,8", "--max-seconds", "0"], "--max-seconds must be a positive"),
    (["--workload", "GMM:1,8,8,8", "--first-rounds", "8,x"], "--first-rounds takes comma-separated"),
    (["--workload", "GMM:1,8,8,8", "--rpc-key", "k", "--rpc-port", "70000"], "--rpc-port must be a TCP port"),
    (["--workload", "GMM:1,8,8,8", "--rpc-key", "k", "--rpc-port", "1", "--target", "llvm -num-cores=2"],
     "no RPC tracker answers at 127.0.0.1:1"),
    (["--workload", "GMM:1,8,8,8", "--rpc-key", "k"], "'host' and -mcpu=native are this machine, not the device"),
    (["--network", "costlab_no_such_module:f"], "cannot import 'costlab_no_such_module'"),
    # the untuned programs are measured in a whole network's finals: anywhere else the option did nothing
    (["--workload", "GMM:1,8,8,8", "--keep-untuned", "on"], "--keep-untuned on compares"),
    (["--network", "costlab_no_such_module:f", "--keep-untuned", "on", "--final-top", "1"],
     "--keep-untuned on compares"),
])
def test_bad_tune_options(tmp_path, capsys, argv, message):
    assert main(["tune", *argv, "--work-dir", str(tmp_path / "w"), "--no-progress"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("costlab: error:")]
    assert len(err) == 1 and message in err[0], err
    assert not _records(tmp_path / "w")


@pytest.mark.parametrize("body, message", [
    ("raise RuntimeError('boom')", "importing 'netmod' failed: RuntimeError: boom"),
    ("def f(:\n    pass", "'netmod' has a syntax error"),
    ("def f():\n    raise ValueError('no weights')", "netmod:f failed: ValueError: no weights"),
    ("def f():\n    return 3", "must return (model, example_inputs)"),
    ("import torch\ndef f():\n    return torch.nn.Linear(4, 4), (torch.zeros(3, 5),)", "could not be converted to Relax"),
])
def test_bad_network_module(tmp_path, capsys, monkeypatch, body, message):
    """A module in the current directory is found as `python -m costlab` finds it; what goes wrong in it is
    one line naming it."""
    (tmp_path / "netmod.py").write_text(body + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    sys.modules.pop("netmod", None)
    assert main(["tune", "--network", "netmod:f", "--work-dir", str(tmp_path / "w"), "--no-progress"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("costlab: error:")]
    assert len(err) == 1 and message in err[0], err


def test_work_dir_that_cannot_be_made(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    for bad in (tmp_path / "f" / "below", "/proc/costlab-w"):
        assert main(["tune", "--workload", "GMM:1,8,8,8", "--work-dir", str(bad), "--no-progress"]) == 2
        assert "cannot be used as the work dir" in capsys.readouterr().err
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--work-dir", "", "--no-progress"]) == 2
    assert "--work-dir must name a directory" in capsys.readouterr().err


def test_work_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--work-dir", str(tmp_path / "f"), "--no-progress"]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_a_runner_that_cannot_start_stops_the_run_in_one_line(tmp_path, capsys, monkeypatch):
    """The runner's worker starts in the background; when it cannot use the device (here it is told to use a
    CUDA GPU this machine lacks), the run stops at its first batch with that one line, nothing recorded."""
    import tvm

    from costlab.metaschedule import runners

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA GPU")
    monkeypatch.setattr(runners, "device_name", lambda target: "cuda")
    work = tmp_path / "w"
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--trials", "4", "--work-dir", str(work), *SMALL_SEARCH]) == 2
    err = capsys.readouterr().err
    assert "the runner's worker could not run programs on cuda" in err and "Traceback" not in err
    assert _records(work) == []


def test_target_default_is_the_host(tmp_path, capsys):
    from costlab.metaschedule.targets import host_target

    assert main(["tune", "--workload", "GMM:1,8,8,8", "--trials", "2", "--work-dir", str(tmp_path / "w"), "--json",
                 *SMALL_SEARCH]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["target"]["mcpu"] == host_target()["mcpu"]
    assert int(summary["target"]["num-cores"]) == host_target()["num-cores"]


def _torch_net(tmp_path, monkeypatch, name: str, source: str) -> str:
    """``--network`` spec of a PyTorch network written as module ``name`` (``source`` defines ``f()``
    returning the model and its inputs), importable from the test's directory, which is made the current one."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return f"{name}:f"


@pytest.mark.slow
def test_network_with_an_operator_no_task_covers_builds_end_to_end(tmp_path, capsys, monkeypatch):
    """A network whose Relax module keeps an operator that is dispatched, not legalized, when it is built
    (cumsum: a scan, as in GPT-2's position ids) still compiles and is timed after tuning."""
    spec = _torch_net(tmp_path, monkeypatch, "scannet",
                      "import torch\n"
                      "class M(torch.nn.Module):\n"
                      "    def __init__(self):\n"
                      "        super().__init__()\n"
                      "        self.l = torch.nn.Linear(16, 16)\n"
                      "    def forward(self, x):\n"
                      "        return self.l(x) + torch.cumsum(x, dim=-1)\n"
                      "def f():\n"
                      "    return M(), (torch.randn(2, 16),)\n")
    assert main(["tune", "--network", spec, "--trials", "2", "--per-iter", "2", "--work-dir",
                 str(tmp_path / "w"), "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    net = summary["network"]
    assert net["tuned_ms"] > 0 and net["tuned_functions"] >= 1
    # --keep-untuned auto: a CPU's untuned programs are not measured, no task keeps one
    assert not any("untuned_us" in t or "kept" in t for t in summary["tasks"])
    assert "kept_untuned" not in summary["finals"]


def test_a_network_that_fails_end_to_end_keeps_its_tuning_and_says_why_in_one_line(tmp_path, capsys, monkeypatch):
    """When the tuned network cannot be built or run end to end, the tuning before it is not lost: the
    summary is written with the error in it, the command says what failed in one line (not a traceback of
    C++ frames) and exits non-zero. The failure is injected into the network build, the one step after
    tuning that a network's operators can break (GPT-2's cumsum once did)."""
    import costlab.export.network as network

    def fails(*args, **kwargs):
        raise RuntimeError("Traceback (most recent call last):\n  0: tvm::codegen::Build\n"
                           "InternalError: Check failed: op is not lowered: relax.cumsum")

    spec = _torch_net(tmp_path, monkeypatch, "failnet",
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 8)), (torch.randn(2, 16),)\n")
    monkeypatch.setattr(network, "build", fails)
    work = tmp_path / "w"
    assert main(["tune", "--network", spec, "--trials", "2", "--per-iter", "2", "--work-dir", str(work),
                 "--no-progress"]) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "relax.cumsum" in lines[0] and "Traceback" not in err
    summary = json.loads((work / "costlab_tune.json").read_text())
    assert summary["network"] == {"error": "RuntimeError: InternalError: Check failed: op is not lowered: relax.cumsum"}
    assert sum(t["trials"] for t in summary["tasks"]) == 2 and any(t["best_us"] for t in summary["tasks"])


def test_a_network_build_that_fails_because_the_run_is_being_stopped_leaves_the_timing_to_a_re_run(
        tmp_path, capsys, monkeypatch):
    """A terminal's Ctrl-C reaches the compiler that exports the network for its timing (it runs in the command's
    process group): the failure is the stop's, not the network's. The command stops as stopped runs do, with no
    summary written, so the same command times the network again (a summary with the error was a finished run, and
    every re-run repeated the compiler's error)."""
    import costlab.export.tune as tune

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)  # the handler records the stop
        raise RuntimeError("Command line: /usr/bin/g++ -shared -fPIC -o network0.so lib0.o (killed by SIGINT)")

    spec = _torch_net(tmp_path, monkeypatch, "stopnet",
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 8)), (torch.randn(2, 16),)\n")
    monkeypatch.setattr(tune, "end_to_end", interrupted)
    work = tmp_path / "w"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job starts with it ignored
    try:
        assert main(["tune", "--network", spec, "--trials", "2", "--per-iter", "2", "--work-dir", str(work),
                     "--no-progress"]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "Traceback" not in capsys.readouterr().err
    assert not (work / "costlab_tune.json").exists()


def test_network_is_tuned_and_timed_end_to_end(tmp_path, capsys, monkeypatch):
    """`--network` compiles the whole network with the tuning database and beside the untuned build, and
    times both (what the end-to-end comparison of every network run rests on). GELU's fused task has two
    buffers named ``T_multiply``: it is tuned under names told apart, and its records still apply to the
    network's own function."""
    spec = _torch_net(tmp_path, monkeypatch, "tinynet",
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)), "
                      "(torch.randn(2, 16),)\n")
    import logging
    import os

    command = ["tune", "--network", spec, "--trials", "4", "--per-iter", "2", "--work-dir", str(tmp_path / "w"),
               "--no-progress", "--json", "--keep-untuned", "on"]
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    env, logger = os.environ.get("TVM_NUM_THREADS"), (ms_logger.level, ms_logger.propagate)
    assert main(command) == 0
    summary = json.loads(capsys.readouterr().out)
    # the process as it was (a notebook's: MetaSchedule's logger was left at DEBUG, TVM_NUM_THREADS set), and the
    # network timed on the target's threads (tests/test_network_timing.py: whatever this process ran before)
    assert (ms_logger.level, ms_logger.propagate) == logger and os.environ.get("TVM_NUM_THREADS") == env
    assert summary["network"]["threads"] == int(summary["target"]["num-cores"])
    # a run stopped after its last batch (before its summary): the same command measures its finals then
    (tmp_path / "w" / "costlab_tune.json").unlink()
    assert main(command) == 0
    summary = json.loads(capsys.readouterr().out)
    net = summary["network"]
    assert net["tuned_ms"] > 0 and net["untuned_ms"] > 0 and "dlight" in net["untuned"]
    assert sum(t["trials"] for t in summary["tasks"]) == 4
    # every task's checked program is applied in the tuned build (the fused ones too: a build that prepares
    # the module a second time makes them structurally other functions, and they run untuned)
    assert any(t["name"].startswith("fused_") for t in summary["tasks"])
    checked = [t for t in summary["tasks"] if t.get("check", {}).get("status") in ("ok", "replaced")]
    assert net["tuned_functions"] == sum(t.get("kept") != "untuned" for t in checked)
    # each measured task's untuned program was measured with its contenders; it is kept where it ran faster
    assert all(t["untuned_us"] > 0 for t in checked)
    for t in checked:
        if t["check"]["status"] == "ok" and t["untuned_us"] != t["final_us"][0]:
            assert (t.get("kept") == "untuned") == (t["untuned_us"] < t["final_us"][0]), t
    assert summary["finals"]["kept_untuned"] == sum(t.get("kept") == "untuned" for t in summary["tasks"])
    assert any("gelu" in t["name"] and t.get("check", {}).get("status") in ("ok", "replaced")
               for t in summary["tasks"])
    # the untuned schedules kept are the tasks without a record in the result (below)
    # each task's contenders were measured again and its rows list them fastest first
    assert summary["finals"]["top"] == 4 and summary["finals"]["measured"] >= 0
    finals = [t["final_us"] for t in summary["tasks"] if "final_us" in t]
    assert finals and all(f == sorted(f, key=lambda x: float("inf") if x is None else x) for f in finals)
    # the result database holds one record per task whose program was checked: the one the build applied
    from tvm.s_tir import meta_schedule as ms

    result = ms.database.JSONDatabase(work_dir=summary["result"])
    assert len(result) == net["tuned_functions"]


def test_a_networks_trial_budget_holds_when_its_last_round_would_pass_it(tmp_path, capsys, monkeypatch):
    """--trials N measures at most N over all of a network's tasks: MetaSchedule's task scheduler checks its
    budget only before a round, so with rounds of 4 and a budget of 6 its second round would end at 8; the
    round is cut to the 2 trials left."""
    spec = _torch_net(tmp_path, monkeypatch, "budgetnet",
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)), "
                      "(torch.randn(2, 16),)\n")
    work = tmp_path / "w"
    assert main(["tune", "--network", spec, "--trials", "6", "--per-iter", "4", "--work-dir", str(work),
                 "--no-progress", "--no-check", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sum(t["trials"] for t in summary["tasks"]) == 6
    assert len((work / "database_tuning_record.json").read_text().splitlines()) == 6


def test_a_networks_start_keeps_its_trials_when_they_are_fewer_than_its_tasks(tmp_path, capsys, monkeypatch):
    """Each task's start measures at least one program: a network of two tasks at --trials 1 measured two before
    its search (the library start, on by default, as --transfer-from). Only the heaviest tasks start now, as many
    as the trials."""
    from costlab.export.tasks import Task
    from costlab.export.tune import _start_within

    spec = _torch_net(tmp_path, monkeypatch, "startnet",
                      "import torch\n"
                      "def f():\n"
                      "    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))\n"
                      "    return net, (torch.randn(2, 16),)\n")
    argv = ["tune", "--network", spec, "--no-progress", "--no-check", "--no-library", "--json", "--final-top", "0"]
    assert main([*argv, "--trials", "4", "--work-dir", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    work = tmp_path / "b"
    assert main([*argv, "--trials", "1", "--transfer-from", str(tmp_path / "a"), "--work-dir", str(work)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sum(row["measured"] for row in summary["transfer"].values()) == 1
    assert len((work / "database_tuning_record.json").read_text().splitlines()) == 1
    # exploitation's trials are its own: continued at --trials 3, two are left for the start of the other task
    assert main(["exploit", "--work-dir", str(work), "--trials", "2", "--no-progress", "--no-library"]) == 0
    capsys.readouterr()
    assert main([*argv, "--trials", "3", "--transfer-from", str(tmp_path / "a"), "--work-dir", str(work)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [row["measured"] for row in summary["transfer"].values()] == [1, 1]  # the task not started before too
    light, heavy, other = Task("a", None, 1.0), Task("b", None, 3.0), Task("c", None, 1.0)
    assert _start_within(2, [light, heavy, other], [light, other]) == ([light, heavy], [light])
    assert _start_within(3, [light, heavy], [other]) == ([light, heavy], [other])


@pytest.mark.slow
def test_every_task_of_a_network_is_measured_when_first_rounds_together_pass_the_budget(tmp_path, capsys, monkeypatch):
    """Three tasks, rounds of 4, a budget of 6: MetaSchedule's evolutionary search asks 4 for each task's first
    round, so the third task in the order would never be measured (as ResNet-18's last tasks were at 1,000
    trials and rounds of 64). Each first round is cut to its share of the trials left among the tasks not yet
    measured: 2, 2, 2."""
    spec = _torch_net(tmp_path, monkeypatch, "threetasks",
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 24), "
                      "torch.nn.ReLU(), torch.nn.Linear(24, 8)), (torch.randn(2, 16),)\n")
    assert main(["tune", "--network", spec, "--trials", "6", "--per-iter", "4", "--work-dir", str(tmp_path / "w"),
                 "--no-progress", "--no-check", "--json"]) == 0
    tasks = json.loads(capsys.readouterr().out)["tasks"]
    assert len(tasks) == 3
    assert [t["trials"] for t in tasks] == [2, 2, 2], tasks


def test_a_tasks_first_batch_is_cut_to_its_share_of_the_trials_left():
    """RoundClock.affordable: a first batch gets at most trials_left // unreached (at least 1); later batches
    only the trials left."""
    from costlab.export.search.timed import RoundClock

    clock = RoundClock()
    clock.trials_left, clock.unreached = 10, 3
    assert clock.affordable(64, first=True) == 3  # 10 // 3
    assert (clock.trials_left, clock.unreached) == (7, 2)
    assert clock.affordable(64) == 7  # a task's second batch: no share
    clock.trials_left, clock.unreached = 1, 3
    assert clock.affordable(64, first=True) == 1
    assert clock.affordable(64, first=True) == 0 and clock.unreached == 1
    clock.trials_left, clock.unreached = 100, 1
    assert clock.affordable(64, first=True) == 64 and clock.unreached == 0


def test_a_batch_is_timed_when_its_results_came_in():
    """RoundClock: a batch's run ends when its results came in (``results_in``); what the measure callbacks do
    after (the database, the model's update) is its ``update_s``, and its time (``at``, the first batch's time)
    is when the results came in, not when the callbacks ended."""
    from costlab.export.search.timed import RoundClock

    clock = RoundClock()
    assert clock.affordable(4) == 4  # a batch of 4
    clock.built(time.perf_counter())
    time.sleep(0.02)
    clock.results_in()
    came_in = time.time()
    time.sleep(0.2)  # the callbacks: the model's update
    row = clock.batch_done()
    assert row["run_s"] >= 0.02 and row["update_s"] >= 0.2
    assert row["at"] <= came_in < time.time() - 0.2 and clock.first_batch_at == row["at"]
    assert clock.per_program_s >= (0.02 + 0.2) / 4  # the next batch's cost includes the update
    assert "at" in clock.batch_done()  # without results_in: now


def test_interleaved_tasks_keep_their_own_seconds():
    """RoundClock: two tasks searched and built before either is joined (MetaSchedule's gradient scheduler's
    first round) each get their own search and build seconds and their own run from their own build; the first
    batch's parts are every search and build before its results and the run after the last build."""
    from costlab.export.search.timed import RoundClock

    clock = RoundClock()
    clock.searched(0.3, task=0)
    assert clock.affordable(2, task=0) == 2
    t0 = time.perf_counter()
    time.sleep(0.02)
    clock.built(t0)  # task 0's batch: its build follows its search
    clock.searched(0.5, task=1)
    assert clock.affordable(4, task=1) == 4
    t1 = time.perf_counter()
    time.sleep(0.05)
    clock.built(t1)
    clock.results_in(0)
    first = clock.batch_done(0)
    # task 0's build alone: task 1's (at least 0.05 s) is in the first batch's, never in task 0's row; no upper
    # bound in seconds (a loaded machine wakes from sleep(0.02) late)
    assert first["search_s"] == 0.3 and 0.02 <= first["build_s"] <= clock.first_batch["build_s"] - 0.0499
    assert first["run_s"] >= 0.05
    assert clock.first_batch["search_s"] == 0.8 and clock.first_batch["build_s"] >= 0.07
    assert clock.first_batch["run_s"] < first["run_s"]  # from the last build's end
    clock.results_in(1)
    second = clock.batch_done(1)
    assert second["search_s"] == 0.5 and second["build_s"] >= 0.05 and second["run_s"] is not None
    assert clock.batch_done(1)["search_s"] == 0.0  # its next batch starts afresh


def test_a_finished_run_re_run_keeps_its_summary(tmp_path, capsys):
    """The same command on a finished work dir measures nothing and leaves costlab_tune.json as the run wrote
    it: its first batch's seconds, wall seconds and per-task checks (with --no-check added too)."""
    work = tmp_path / "w"
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--trials", "4", "--work-dir", str(work), *SMALL_SEARCH]
    assert main(argv) == 0
    first = (work / "costlab_tune.json").read_text()
    assert "first_batch_s" in json.loads(first) and "check" in json.loads(first)["tasks"][0]
    assert main(argv) == 0
    assert main(argv + ["--no-check"]) == 0
    assert (work / "costlab_tune.json").read_text() == first
    assert len(_records(work)) == 4


def test_a_finished_run_re_run_does_the_work_after_the_search_it_asks_for(tmp_path):
    """A run finished with --no-check, re-run without it: the search is not run again, its best programs are
    checked and the summary says so."""
    work = tmp_path / "w"
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--trials", "4", "--work-dir", str(work), *SMALL_SEARCH]
    assert main(argv + ["--no-check"]) == 0
    unchecked = json.loads((work / "costlab_tune.json").read_text())
    assert "check" not in unchecked["tasks"][0] and "check_s" not in unchecked
    assert main(argv) == 0
    summary = json.loads((work / "costlab_tune.json").read_text())
    assert summary["tasks"][0]["check"]["status"] == "ok" and summary["options"]["check_output"] is True
    assert len(_records(work)) == 4


def test_a_work_dir_of_another_machine_is_not_continued(tmp_path, capsys, monkeypatch, another_host):
    """A work dir records the host that measured it; continuing it on another CPU (another CPU's description faked)
    would mix two machines' timings in one database: tune, exploit and transfer into it are refused in one line,
    nothing measured or written."""
    from costlab.common.host import FAKE_HOST_ENV

    work = tmp_path / "w"
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--trials", "2", "--work-dir", str(work), "--no-check", *SMALL_SEARCH]
    assert main(argv) == 0
    assert json.loads((work / "costlab_run.json").read_text())["host"]["cpu_model"]
    before = {p.name: p.read_bytes() for p in work.iterdir() if p.is_file()}
    capsys.readouterr()
    monkeypatch.setenv(FAKE_HOST_ENV, str(another_host))
    assert main(argv[:4] + ["4"] + argv[5:]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a run measured on" in err[0] and "another --work-dir" in err[0]
    assert main(["exploit", "--work-dir", str(work), "--trials", "2", "--no-progress"]) == 2
    assert main(["transfer", "--from", str(work), "--workload", "GMM:1,8,8,8", "--work-dir", str(work),
                 "--no-progress"]) == 2
    errs = capsys.readouterr().err.strip().splitlines()
    assert len(errs) == 2 and all("holds a run measured on" in e for e in errs), errs
    assert {p.name: p.read_bytes() for p in work.iterdir() if p.is_file() and p.name in before} == before


def test_a_tuned_networks_output_is_checked_against_pytorchs(tmp_path, capsys, monkeypatch):
    """The tuned build's output on the example inputs is compared with the PyTorch module's: equal within
    float tolerance, it is reported as checked; when it differs (here PyTorch's reference is made to differ,
    as a wrong program would make the build's), the command says so in one line, exits 1 and the summary keeps
    the check."""
    import costlab.export.tasks as tasks  # where the tuned network's reference output is taken

    spec = _torch_net(tmp_path, monkeypatch, "checknet",
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()), (torch.randn(2, 16),)\n")
    argv = ["tune", "--network", spec, "--trials", "2", "--per-iter", "2", "--no-progress"]
    assert main(argv + ["--work-dir", str(tmp_path / "ok"), "--json"]) == 0
    check = json.loads(capsys.readouterr().out)["network"]["output_check"]
    assert check["status"] == "ok" and check["max_abs_diff"] <= check["atol"] + check["rtol"]
    real = tasks.reference_output
    monkeypatch.setattr(tasks, "reference_output", lambda m, x: real(m, x) + 0.5)
    work = tmp_path / "bad"
    assert main(argv + ["--work-dir", str(work)]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "differs from PyTorch's" in err[0] and "0.5" in err[0]
    assert json.loads((work / "costlab_tune.json").read_text())["network"]["output_check"]["status"] == "differs"


def test_a_run_records_the_version_a_shipped_alias_stands_for(tmp_path, capsys):
    """`--model x86-cpu` is recorded as the version the alias stands for; a run recorded under the bare alias
    (before versions were recorded, or after the alias moved on) is not continued with another version's
    weights: refused in one line, nothing measured."""
    from costlab.costmodels.shipped import aliases

    work = tmp_path / "w"
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--trials", "2", "--work-dir", str(work), "--no-check",
            "--model", "x86-cpu", "--adapt", "none", *SMALL_SEARCH]
    assert main(argv) == 0
    run = json.loads((work / "costlab_run.json").read_text())
    assert run["model"] == aliases()["x86-cpu"]
    run.pop("model_sha256")  # as recorded before the weights were
    (work / "costlab_run.json").write_text(json.dumps(dict(run, model="x86-cpu")))
    records = len(_records(work))
    capsys.readouterr()
    assert main(argv[:4] + ["4"] + argv[5:]) == 2
    err = capsys.readouterr().err
    assert "model: 'x86-cpu' -> " in err and "another --work-dir" in err
    assert len(_records(work)) == records


def test_a_batch_that_failed_while_the_run_was_stopped_is_not_recorded():
    """The signal that stops a run reaches the workers of TVM's own pools in its process group (--ms-defaults):
    the batch in flight then fails for that alone. Those candidates are not recorded (a re-run measures them);
    a failure while the run goes on is the program's and is recorded, and so is one of the round a stop lets
    finish whose worker the signal did not reach (costlab's, in sessions of their own: a build that timed out);
    a result the RPC guard marked lost never is."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from costlab.export.callbacks import recorded
    from costlab.metaschedule.rpc import LOST

    killed = "LocalBuilder: An exception occurred\nSubprocess terminated"
    interrupted = "RunnerError: Traceback (most recent call last): ... KeyboardInterrupt"
    timed_out = "LocalBuilder: Timeout, killed after 0.05 seconds"
    results = [RunnerResult([1e-6], None), RunnerResult(None, killed),
               RunnerResult(None, f"{LOST}: the device stopped answering"), RunnerResult([2e-6], None),
               RunnerResult(None, interrupted), RunnerResult(None, timed_out)]
    assert recorded(results, stopping=False) == [0, 1, 3, 4, 5]
    assert recorded(results, stopping=True) == [0, 3, 5]


def test_the_json_summary_is_strict_json_when_a_figure_is_not_a_number(tmp_path, capsys, monkeypatch):
    """A tuned network whose output holds a NaN gives a NaN largest difference: `--json` prints it as null, never
    as a bare NaN no strict JSON reader takes."""
    import costlab.commands.tune as command

    summary = dict(tasks=[], wall_s=1.0, network=dict(output_check=dict(status="differs", max_abs_diff=float("nan"))))
    monkeypatch.setattr(command, "tune", lambda opts: summary)
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--work-dir", str(tmp_path / "w"), "--json"]) == 1
    out = capsys.readouterr().out

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    printed = json.loads(out, parse_constant=refuse)
    assert printed["network"]["output_check"]["max_abs_diff"] is None


@pytest.mark.parametrize("check", [dict(status="differs", max_abs_diff=None),  # an earlier costlab's NaN, read back
                                   dict(status="differs", max_abs_diff=float("nan")),
                                   dict(status="differs", reason="3 of 8 output elements are not finite")])
def test_a_finished_network_run_whose_output_differed_is_reported_again_in_text(tmp_path, capsys, monkeypatch,
                                                                                  check):
    """A re-run of a finished run returns its costlab_tune.json as read back, where a NaN is null: the text
    output says the output differs, without a traceback."""
    import costlab.commands.tune as command

    summary = json.loads(jsontext.dumps(dict(tasks=[], wall_s=1.0, network=dict(output_check=check))))
    monkeypatch.setattr(command, "tune", lambda opts: summary)
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--work-dir", str(tmp_path / "w")]) == 1
    err = capsys.readouterr().err
    assert "the tuned network's output differs from PyTorch's" in err
    assert ("not a number" in err) != ("reason" in check)


def test_the_text_output_says_what_the_exploitation_did(tmp_path, capsys, monkeypatch):
    """`tune --exploit N`: a skipped exploitation says why, and a task whose round failed says so, in the text
    output as in the JSON summary."""
    import costlab.commands.tune as command

    argv = ["tune", "--workload", "GMM:1,8,8,8", "--work-dir", str(tmp_path / "w"), "--exploit", "4"]
    for exploited, said in [
            (dict(trials=0, wall_s=0.0, tasks=[], skipped="no successfully measured program to start from"),
             "exploitation skipped: no successfully measured program to start from"),
            (dict(trials=3, wall_s=2.0, tasks=[dict(workload="abc", error="RuntimeError: timed out"),
                                               dict(workload="def", error=None)]),
             "exploitation: 3 trials in 2 s\n  error: task abc: a round failed (RuntimeError: timed out)")]:
        monkeypatch.setattr(command, "tune", lambda opts, e=exploited: dict(tasks=[], wall_s=1.0, exploit=e))
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert said in err and "task def" not in err


def test_a_network_run_whose_deadline_left_its_finals_unmeasured_is_not_taken_as_finished(tmp_path):
    """A network run stopped by --max-seconds after its last batch writes a summary without finals; re-run, that
    summary does not stand for the finished run (its finals would never be measured), one with finals does."""
    from types import SimpleNamespace

    from costlab.export.tune import TuneOptions, _finished_summary
    from costlab.export.workdir import WorkDir

    opts = TuneOptions(network="bert", work_dir=str(tmp_path), trials=8, check_output=False, use_library=False)
    tasks, done = [SimpleNamespace(name="dense")], [8]
    summary = dict(options=dict(check_output=False, use_library=False, final_top=opts.final_top,
                                final_measure=opts.final_measure, keep_untuned=opts.keep_untuned),
                   tasks=[dict(name="dense", trials=8)], stopped="--max-seconds 60 reached")
    WorkDir(tmp_path).summary_file.write_text(json.dumps(summary))
    assert _finished_summary(tmp_path, tasks, done, opts) is None
    WorkDir(tmp_path).summary_file.write_text(json.dumps(dict(summary, finals=dict(top=opts.final_top))))
    assert _finished_summary(tmp_path, tasks, done, opts)["finals"] == dict(top=opts.final_top)
    opts.final_top = 1  # no finals asked for: the summary without them stands
    WorkDir(tmp_path).summary_file.write_text(json.dumps(dict(summary, options=dict(summary["options"], final_top=1))))
    assert _finished_summary(tmp_path, tasks, done, opts) is not None


def test_a_finished_run_re_run_says_it_measured_nothing(tmp_path, capsys, monkeypatch):
    """A re-run of a finished run returns its summary as written: the text output printed the earlier command's
    seconds, stop and exploitation as this one's. It says the run is finished and leaves those out; --json keeps
    the summary whole."""
    import costlab.commands.tune as command

    summary = dict(tasks=[dict(name="GMM:1,8,8,8", weight=1, trials=4, best_us=1.5)], wall_s=27.0,
                   first_batch_s=15.1, exploit=dict(trials=2, wall_s=11.0, tasks=[]), unchanged=True)
    monkeypatch.setattr(command, "tune", lambda opts: dict(summary))
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--work-dir", str(tmp_path / "w")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "is finished: nothing more to measure" in err and "GMM:1,8,8,8: 4 trials" in out
    assert "27 s" not in err and "15.1" not in err and "exploitation" not in err, err
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["wall_s"] == 27.0


@pytest.mark.parametrize("command", ["tune", "transfer"])
@pytest.mark.parametrize("option", ["--batch", "--seq-len"])
def test_network_input_sizes_must_be_positive(tmp_path, capsys, command, option):
    """--batch 0 or --seq-len 0 was blamed on the model's conversion to Relax."""
    extra = ["--from", str(tmp_path)] if command == "transfer" else []
    assert main([command, "--network", "bert", option, "0", "--work-dir", str(tmp_path / "w"), *extra]) == 2
    err = capsys.readouterr().err
    assert f"{option} must be" in err and "Relax" not in err, err


def test_a_damaged_progress_history_line_is_skipped_when_a_run_continues(tmp_path):
    """progress.jsonl is the run's history, not its data: a line that is JSON but not a batch's row (a list, a
    string, a field that is no number) is skipped as a line cut short is; it was an AttributeError or a
    ValueError that stopped the continued run before its first round."""
    from costlab.export.progress import TuneProgress

    history = tmp_path / "progress.jsonl"
    rows = [dict(elapsed_s=12.5, task="a", best_us=3.0), [1, 2], "str", dict(elapsed_s="soon", task="a", best_us=1.0),
            dict(elapsed_s=20.0, task="a", best_us="fast"), dict(elapsed_s=float("inf"), task="b", best_us=2.0),
            dict(elapsed_s=14.0, task="b", best_us=None)]
    history.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"elapsed_s": 9')
    progress = TuneProgress(["a", "b"], [4, 4], 16, enabled=False, history=history)
    assert progress.offset == 14.0 and progress.best == [3e-6, 2e-6]


def test_a_damaged_exploitation_state_is_one_line_naming_it_for_tune_too(tmp_path, capsys):
    """``tune`` reads exploit_state.json to count the search's trials apart from exploitation's: a field that
    does not read was a ValueError traceback there (and -5 or 2.7 trials were counted as they came), where
    ``costlab exploit`` names the file and the field."""
    work = tmp_path / "w"
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--target", "llvm -num-cores=2", "--model", "random",
            "--work-dir", str(work), "--no-library", *SMALL_SEARCH]
    assert main([*argv, "--trials", "2"]) == 0
    for trials in ("x", -5, 2.7):
        (work / "exploit_state.json").write_text(json.dumps({"123": dict(radius=1, trials=trials, rounds=0,
                                                                           improved=0)}))
        capsys.readouterr()
        assert main([*argv, "--trials", "4"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "exploit_state.json: task 123: 'trials' is" in err, err


def test_a_re_run_whose_deadline_came_before_any_batch_is_stopped_not_finished(tmp_path, capsys):
    """A run of 4 trials continued to 8 with a deadline that passes before its first batch: it measured nothing
    because it was stopped, and says so; it was reported finished (exit 0, no stop) from the earlier summary."""
    work = tmp_path / "w"
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--work-dir", str(work), "--no-check", *SMALL_SEARCH]
    assert main([*argv, "--trials", "4"]) == 0
    capsys.readouterr()
    assert main([*argv, "--trials", "8", "--max-seconds", "0.001", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "unchanged" not in summary and "--max-seconds" in summary["stopped"]
    assert len(_records(work)) == 4


def test_a_continued_run_that_chose_nothing_leaves_no_earlier_result(tmp_path):
    """A checked run wrote result/; continued with --no-check it chooses no program, and the earlier choice,
    no longer the run's, is not left in result/ for a build to take."""
    work = tmp_path / "w"
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--work-dir", str(work), *SMALL_SEARCH]
    assert main([*argv, "--trials", "4"]) == 0
    assert (work / "result").is_dir()
    assert main([*argv, "--trials", "8", "--no-check"]) == 0
    assert len(_records(work)) == 8 and not (work / "result").exists()
    assert "result" not in json.loads((work / "costlab_tune.json").read_text())


def test_a_function_whose_records_all_failed_is_not_counted_as_tuned(tmp_path):
    """MetaScheduleApplyDatabase applies a workload's best record that ran; one whose records all failed is built
    untuned, and the network's summary counted it as tuned."""
    import shutil

    from tvm.s_tir import meta_schedule as ms

    from costlab.export.network import tuned_functions

    fixture = FIXTURES / "ms_tune_db"
    shutil.copytree(fixture, tmp_path / "db")
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    mods = [r.workload.mod for r in db.get_all_tuning_records()]
    mod = mods[0]
    assert tuned_functions(mod, db) == (1, 1)
    lines = []
    for line in (tmp_path / "db" / "database_tuning_record.json").read_text().splitlines():
        rec = json.loads(line)
        rec[1][1] = [1e10]  # MetaSchedule's failure value: none of the records ran
        lines.append(json.dumps(rec))
    (tmp_path / "db" / "database_tuning_record.json").write_text("\n".join(lines) + "\n")
    assert tuned_functions(mod, ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))) == (0, 1)


@pytest.mark.slow
def test_a_finished_run_of_part_of_a_network_is_finished_when_run_again(tmp_path, capsys, monkeypatch):
    """--task picks part of a network, built as no network: it has no finals, and a re-run waited for them, so every
    re-run of a finished --task run checked its programs again and rewrote its summary."""
    spec = _torch_net(tmp_path, monkeypatch, "twolayers",
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)),"
                      " (torch.randn(2, 16),)\n")
    argv = ["tune", "--network", spec, "--task", "*matmul*", "--trials", "2", "--per-iter", "2", "--work-dir",
            str(tmp_path / "w"), "--no-progress", "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["tasks"] and "finals" not in first
    written = (tmp_path / "w" / "costlab_tune.json").read_text()
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out).get("unchanged") is True
    assert (tmp_path / "w" / "costlab_tune.json").read_text() == written


def test_the_work_dir_stays_locked_until_the_run_has_written_its_summary(tmp_path, monkeypatch):
    """The lock was released after the search: while the run checked its programs (running them), timed a
    network, wrote its result, library and summary, an `exploit` or a re-run could measure in the same work dir
    beside it. Another command is refused until the run has ended."""
    import costlab.export.tune as tune_module
    from costlab.common.errors import UsageError
    from costlab.export.workdir import WorkDir

    work, seen = tmp_path / "w", []
    real = tune_module.check_tasks

    def check_tasks(*args, **kwargs):
        try:
            WorkDir(work).lock("exploit").close()
            seen.append("free")
        except UsageError as exc:
            seen.append(str(exc))
        return real(*args, **kwargs)

    monkeypatch.setattr(tune_module, "check_tasks", check_tasks)
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--trials", "2", "--work-dir", str(work), *SMALL_SEARCH]) == 0
    assert len(seen) == 1 and "another costlab tune is running in this work dir" in seen[0], seen
    WorkDir(work).lock("exploit").close()  # and free once the run has ended


def test_a_re_run_stopped_after_it_replaced_the_result_leaves_no_summary_of_the_earlier_one(tmp_path, monkeypatch):
    """A re-run of other final options chooses again and replaces result/; stopped before its own summary is
    written (a Ctrl-C while its library is added to, or its network timed), the earlier summary stayed beside the
    new result/, and a re-run of the earlier options took it for finished: it reported programs result/ does not
    hold. The earlier summary goes before result/ is replaced; the re-run measures the finals again."""
    import costlab.export.tune as tune_module

    work = tmp_path / "w"
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--trials", "4", "--work-dir", str(work), *SMALL_SEARCH]
    assert main(argv + ["--no-check"]) == 0

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_module, "_library_add", stopped)
    assert main(argv) == 130  # checked now: chosen again, result/ replaced, stopped as the library is added to
    assert (work / "result").exists() and not (work / "costlab_tune.json").exists()
    monkeypatch.undo()
    assert main(argv + ["--no-check"]) == 0
    assert json.loads((work / "costlab_tune.json").read_text())["options"]["check_output"] is False


@pytest.mark.parametrize("model", ["psa", "x86-cpu"])
def test_an_adaptation_mode_that_is_none_is_named_as_such(model):
    """``costlab.export.load(model, adapt=...)`` asked whether the model could adapt before whether the mode was
    one: 'bogus' for PSA read "psa cannot adapt", and the modes listed left 'none' out."""
    from costlab.common.errors import UsageError
    from costlab.export import load

    with pytest.raises(UsageError, match="adapt must be one of .*none.*, not 'bogus'"):
        load(model, adapt="bogus")


def test_a_run_tuned_with_a_model_archive_is_continued_by_its_weights(run, trained, tmp_path, capsys,
                                                                     monkeypatch):  # noqa: F811
    """A model given as a path is its weights: an archive's were not read (no hash recorded), so another model
    exported over the archive continued the run, while the same archive given by its absolute path was refused.
    A run recorded before archives were hashed continues with its archive as named."""
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(run / "run"), "-o", "m.tar", "--archive"]) == 0
    argv = ["tune", "--workload", "GMM:1,8,8,8", "--work-dir", "w", "--no-check", "--no-library", "--adapt", "none",
            *SMALL_SEARCH]
    assert main([*argv, "--model", "m.tar", "--trials", "2"]) == 0
    assert json.loads((tmp_path / "w" / "costlab_run.json").read_text())["model_sha256"]
    assert main([*argv, "--model", str(tmp_path / "m.tar"), "--trials", "4"]) == 0  # the same weights, spelled so
    recorded = json.loads((tmp_path / "w" / "costlab_run.json").read_text())
    (tmp_path / "w" / "costlab_run.json").write_text(json.dumps(dict(recorded, model="m.tar", model_sha256=None)))
    assert main([*argv, "--model", "m.tar", "--trials", "6"]) == 0
    assert main(["export", str(trained / "run"), "-o", "m.tar", "--archive", "--force"]) == 0  # another model
    capsys.readouterr()
    assert main([*argv, "--model", "m.tar", "--trials", "8"]) == 2
    assert "holds a tuning run with other options (model_sha256:" in capsys.readouterr().err


def test_a_task_of_no_valid_program_says_why_its_last_candidate_failed(tmp_path, capsys):
    """Every candidate of a boolean matmul fails to build: tune said "best no valid program" and nothing of why
    (measure names its failures); the summary and the line now carry the last failure's reason."""
    work = tmp_path / "w"
    assert main(["tune", "--workload", "GMM:1,4,4,4,bool,bool", "--target", "llvm -num-cores=2", "--trials", "2",
                 "--per-iter", "2", "--model", "psa", "--work-dir", str(work), "--no-library", "--no-progress"]) == 0
    out = capsys.readouterr().out
    (task,) = json.loads((work / "costlab_tune.json").read_text())["tasks"]
    assert task["best_us"] is None and task["failure"]
    assert f"best no valid program (the last failure: {task['failure']})" in out
