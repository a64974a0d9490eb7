"""The search of `costlab tune`, for real on tiny workloads: every strategy over three rounds, no tensor-
intrinsic registry on a float32 CPU task (parent and workers), small first rounds, a wall-time budget that
leaves a complete database, one run per work dir, and tuned programs checked against a reference build."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from costlab.cli import main
from costlab.export.search import STRATEGIES, make_strategy
from costlab.export.search.model_led import round_size

from test_export import run  # noqa: F401  (the trained and exported tiny TLP model)
from test_tune import SMALL_SEARCH, _program_hashes, _records

pytestmark = pytest.mark.slow

TARGET = ["--target", "llvm -num-cores=2"]


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_each_strategy_tunes_over_three_rounds(run, tmp_path, capsys, strategy):  # noqa: F811
    work = tmp_path / "w"
    model = ["--model", str(run / "model")] if strategy != "evolutionary" else []
    assert main(["tune", "--workload", "GMM:1,16,16,16", *TARGET, "--trials", "12", *model, "--strategy", strategy,
                 "--work-dir", str(work), "--json", *SMALL_SEARCH]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["options"]["strategy"] == strategy and summary["tasks"][0]["trials"] == 12
    hist = [json.loads(x) for x in (work / "progress.jsonl").read_text().splitlines()]
    assert [h["batch"] for h in hist] == [4, 4, 4]  # three rounds of --per-iter 4
    for h in hist:  # every arm logs its seconds of search, build and run per round
        assert h["search_s"] > 0 and h["build_s"] > 0 and h["run_s"] > 0
    assert len(_program_hashes(work, "GMM:1,16,16,16")) == 12  # nothing measured twice
    assert summary["tasks"][0]["check"]["status"] == "ok" and summary["check_s"] > 0
    assert 0 < summary["first_batch_s"] < summary["wall_s"]
    parts = summary["first_batch"]  # where the seconds to the first batch went: they add up
    assert parts["search_s"] > 0 and parts["build_s"] > 0 and parts["run_s"] > 0 and parts["start_up_s"] > 0
    assert abs(sum(parts.values()) - summary["first_batch_s"]) < 0.05
    assert parts["search_s"] == round(hist[0]["search_s"], 2)
    assert (work / "tuning_curve.png").stat().st_size > 1000


def test_model_led_rounds_start_small_and_the_model_scores_the_evolution(run, tmp_path, capsys):  # noqa: F811
    assert [round_size(i, 64) for i in range(5)] == [8, 16, 32, 64, 64]
    assert [round_size(i, 12) for i in range(4)] == [8, 12, 12, 12]
    work = tmp_path / "w"
    assert main(["tune", "--workload", "GMM:1,16,16,16", *TARGET, "--trials", "14", "--model", str(run / "model"),
                 "--first-rounds", "2,4", "--per-iter", "8", "--adapt", "momentum", "--work-dir", str(work),
                 "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["options"]["strategy"] == "model-led"  # the default with a model
    rounds = [json.loads(x) for x in (work / "search_rounds.jsonl").read_text().splitlines()]
    assert [r["picked"] for r in rounds] == [2, 4, 8]
    assert summary["adaptation"]["updates"] == 3  # the model adapted after each round, from the first on
    # the learned model scored the genetic search's generations, far more programs than were measured
    assert summary["cost_model"]["candidates"] + summary["cost_model"]["cached"] > 10 * 14
    assert all(r["verify_s"] > 0 and r["draft_s"] > 0 for r in rounds)


def test_no_tensor_intrinsic_registry_on_a_float_cpu_task(run, tmp_path):  # noqa: F811
    """The registry parses every tensor intrinsic TVM ships (13-40 s here): neither the tuning process nor its
    builder and runner workers import it for a float32 task on a CPU."""
    script = textwrap.dedent(f"""
        import json, sys
        from costlab.datasets.measure import MeasureOptions
        from costlab.export.tune import TuneOptions, tune
        from costlab.metaschedule.builders import make_builder
        from costlab.metaschedule.runners import build_and_run, make_runner
        summary = tune(TuneOptions(work_dir={str(tmp_path / 'w')!r}, workloads=["GMM:1,16,16,16"],
                                   target="llvm -num-cores=2", trials=4, model={str(run / 'model')!r}, per_iter=4,
                                   progress=False))
        import tvm
        from tvm.s_tir import meta_schedule as ms
        from costlab.datasets.extract import te_workload_task, workload_json_mod
        from costlab.metaschedule.tune_context import tune_context
        target = tvm.target.Target({{"kind": "llvm", "num-cores": 2}})
        ctx = tune_context(workload_json_mod(te_workload_task("GMM:1,16,16,16")[1]), target, num_threads=2)
        builder, runner = make_builder(workers=1, pooled=True), make_runner(MeasureOptions(number=1), target)
        res = build_and_run(builder, runner, target, [ms.MeasureCandidate(ctx.generate_design_space()[0],
            ms.arg_info.ArgInfo.from_prim_func(ctx.mod["main"]))])
        probe = lambda: any(m.startswith("tvm.s_tir.tensor_intrin") for m in sys.modules)  # a part, or all
        print(json.dumps(dict(parent=probe(), error=res[0][1],
                              builder=builder._pool.submit(probe).result(),
                              runner=runner.pool.submit(probe).result(), trials=summary["tasks"][0]["trials"])))
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == dict(parent=False, error=0, builder=False, runner=False, trials=4)


def test_an_int8_task_still_gets_the_registry_and_its_rules():
    import tvm
    from tvm import te

    from costlab.metaschedule.tune_context import needs_intrinsics

    a = te.placeholder((16, 16), "uint8", name="A")
    b = te.placeholder((16, 16), "int8", name="B")
    k = te.reduce_axis((0, 16), "k")
    c = te.compute((16, 16), lambda i, j: te.sum(a[i, k].astype("int32") * b[k, j].astype("int32"), axis=k))
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    x86 = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    assert needs_intrinsics(mod, x86)
    f = te.placeholder((16, 16), "float32", name="F")
    fmod = tvm.IRModule({"main": te.create_prim_func([f, te.compute((16, 16), lambda i, j: f[i, j] * 2)])})
    assert not needs_intrinsics(fmod, x86)
    assert needs_intrinsics(fmod, tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}))
    # an 8-bit mask beside float math (BERT's masked softmax) cannot use a dot-product intrinsic
    m = te.placeholder((16, 1), "int8", name="M")
    masked = te.compute((16, 16), lambda i, j: te.if_then_else(m[i, 0] > 0, f[i, j], f[i, j] * 0))
    assert not needs_intrinsics(tvm.IRModule({"main": te.create_prim_func([f, m, masked])}), x86)


def test_max_seconds_stops_with_a_complete_database(run, tmp_path):  # noqa: F811
    work = tmp_path / "w"
    res = subprocess.run([sys.executable, "-m", "costlab", "tune", "--workload", "GMM:1,16,16,16", *TARGET,
                          "--trials", "100000", "--model", str(run / "model"), "--max-seconds", "12", "--work-dir",
                          str(work), "--json", *SMALL_SEARCH], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["stopped"] == "--max-seconds 12 reached" and "stopped: --max-seconds 12 reached" in res.stderr
    hist = [json.loads(x) for x in (work / "progress.jsonl").read_text().splitlines()]
    n = summary["tasks"][0]["trials"]
    assert 0 < n < 100000 and n == len(_records(work)) == sum(h["batch"] for h in hist)
    # no round started after the budget: only the last one may end past it (on a loaded machine the first
    # round can already be the last)
    assert all(h["elapsed_s"] < 12 for h in hist[:-1])


def _database_with_a_wrong_program(work, workload="GMM:1,16,16,16"):
    """A tuning database in which the fastest record's program computes a wrong result (its accumulator is
    an int32 buffer: every partial sum is truncated) and the second is a right one."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from costlab.datasets.extract import te_workload_task, workload_json_mod

    mod = workload_json_mod(te_workload_task(workload)[1])
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    work.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(work))
    wl = db.commit_workload(mod)
    wrong = Schedule(mod)
    block = wrong.get_sblock("Z")
    wrong.cache_write(block, 0, "global")
    wrong.unsafe_set_dtype(block, 0, "int32")
    right = Schedule(mod)
    right.split(right.get_loops(right.get_sblock("Z"))[1], [4, 4])
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    db.commit_tuning_record(ms.database.TuningRecord(wrong.trace, wl, [1e-6], target, args))
    db.commit_tuning_record(ms.database.TuningRecord(right.trace, wl, [2e-6], target, args))
    return db, mod, target


def test_a_wrong_program_is_caught_and_never_chosen(tmp_path, capsys):
    from costlab.export.check import check_task

    db, mod, target = _database_with_a_wrong_program(tmp_path / "w")
    out = check_task(db, mod, target)
    assert out["status"] == "replaced" and out["best_us"] == 2.0
    assert out["checked"][0]["result"].startswith("wrong output: argument 2 differs")
    # the same through `costlab tune`: a finished run is checked when it reports
    assert main(["tune", "--workload", "GMM:1,16,16,16", *TARGET, "--trials", "2", "--work-dir",
                 str(tmp_path / "w"), "--no-progress"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "best 2.00 us" in line and "computed a wrong result and was not chosen" in line
    summary = json.loads((tmp_path / "w" / "costlab_tune.json").read_text())
    assert summary["tasks"][0]["best_us"] == 2.0 and summary["tasks"][0]["check"]["status"] == "replaced"


def test_one_run_per_work_dir(tmp_path, capsys):
    import fcntl

    work = tmp_path / "w"
    work.mkdir()
    with open(work / ".costlab_tune.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("tune")  # the holder names itself, as WorkDir.lock does
        held.flush()
        assert main(["tune", "--workload", "GMM:1,8,8,8", *TARGET, "--trials", "2", "--work-dir", str(work),
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "another costlab tune is running in this work dir" in err
    assert not _records(work) and not (work / "costlab_run.json").exists()


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_damaged_run_record_is_an_error_naming_it(tmp_path, capsys, content):
    work = tmp_path / "w"
    work.mkdir()
    (work / "costlab_run.json").write_text(content)
    assert main(["tune", "--workload", "GMM:1,8,8,8", *TARGET, "--trials", "2", "--work-dir", str(work),
                 "--no-progress"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("costlab: error:")]
    assert len(err) == 1 and "costlab_run.json" in err[0] and "damaged" in err[0]
    assert (work / "costlab_run.json").read_text() == content


def test_a_refused_first_attempt_leaves_no_run_record(tmp_path, capsys):
    work = tmp_path / "w"
    assert main(["tune", "--workload", "NOPE:1", *TARGET, "--work-dir", str(work), "--no-progress"]) == 2
    assert not (work / "costlab_run.json").exists()
    capsys.readouterr()


def test_make_strategy_knows_every_name():
    for name in STRATEGIES:
        assert make_strategy(name) is not None
    with pytest.raises(ValueError, match="unknown search strategy"):
        make_strategy("nope")


def test_evolutionary_never_measures_a_program_of_the_database_again():
    """A continued run: the database holds programs of the task, and a cost model ranking exactly those best
    makes MetaSchedule's own search send them to be measured again; costlab's ``evolutionary`` drops them."""
    import numpy as np
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.cost_model import PyCostModel

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.search.common import schedule_hash
    from costlab.metaschedule.tune_context import tune_context

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = workload_json_mod(te_workload_task("GMM:1,8,8,8")[1])
    db = ms.database.MemoryDatabase()
    sampler = tune_context(mod, target, ms.search_strategy.ReplayTrace(), rand_state=0)
    spaces = sampler.space_generator.generate_design_space(sampler.mod)
    sampler.search_strategy.pre_tuning(4, 4, spaces, db, ms.cost_model.RandomModel())
    earlier = list(sampler.search_strategy.generate_measure_candidates())
    sampler.search_strategy.post_tuning()
    workload = db.commit_workload(sampler.mod)
    for i, c in enumerate(earlier):  # the earlier run's records
        db.commit_tuning_record(ms.database.TuningRecord(c.sch.trace, workload, [1e-6 * (i + 1)], target,
                                                         c.args_info))
    known = {schedule_hash(c.sch) for c in earlier}
    assert len(known) == 4

    @derived_object
    class RanksTheMeasuredBest(PyCostModel):
        def load(self, path):
            pass

        def save(self, path):
            pass

        def update(self, context, candidates, results):
            pass

        def predict(self, context, candidates):
            return np.array([1.0 if schedule_hash(c.sch) in known else 0.0 for c in candidates])

    def first_batch(strategy) -> set:
        ctx = tune_context(mod, target, strategy, rand_state=1)
        ctx.search_strategy.pre_tuning(8, 4, spaces, db, RanksTheMeasuredBest())
        out = {schedule_hash(c.sch) for c in ctx.search_strategy.generate_measure_candidates()}
        ctx.search_strategy.post_tuning()
        return out

    # MetaSchedule's own search measures the database's programs again (its initial population holds them)
    assert first_batch(ms.search_strategy.EvolutionarySearch(population_size=64)) <= known
    batch = first_batch(make_strategy("evolutionary", population=64))
    assert batch and not batch & known


def test_a_batch_cut_to_the_runs_budget_leaves_what_it_dropped_to_later_rounds():
    """The model-led search picks its first round (8 programs); the run has 3 trials left, so 3 are measured:
    the 5 dropped were never measured, and a later round may pick them again (nothing is banned for having
    been picked)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.cost_model import CostlabCostModel
    from costlab.export.search.common import schedule_hash
    from costlab.export.search.timed import RoundClock, TimedSearch
    from costlab.metaschedule.tune_context import tune_context

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = workload_json_mod(te_workload_task("GMM:1,16,16,16")[1])
    clock = RoundClock()
    clock.trials_left = 3
    timed = TimedSearch(make_strategy("model-led"), clock)
    ctx = tune_context(mod, target, timed, rand_state=1)
    spaces = ctx.space_generator.generate_design_space(ctx.mod)
    timed.pre_tuning(16, 8, spaces, ms.database.MemoryDatabase(), CostlabCostModel("psa"))
    out = timed.generate_measure_candidates()
    assert len(out) == 3 and timed.inner._pending["picked"] == 8
    assert timed.inner.measured == {schedule_hash(c.sch) for c in out}
    timed.post_tuning()


def _start_tune(work, model, trials: int):
    import signal

    argv = [sys.executable, "-m", "costlab", "tune", "--workload", "GMM:1,16,16,16", *TARGET, "--trials",
            str(trials), "--model", str(model), "--work-dir", str(work), *SMALL_SEARCH]
    # a shell starts background jobs with SIGINT ignored; a user's Ctrl-C reaches a foreground command
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return argv, proc


def test_ctrl_c_during_a_round_is_one_line_and_the_run_continues(run, tmp_path):  # noqa: F811
    import signal
    import time

    work = tmp_path / "w"
    argv, proc = _start_tune(work, run / "model", 12)
    deadline = time.time() + 600
    while len(_records(work)) < 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert [ln for ln in err.splitlines() if ln.startswith("costlab:")] == [
        "costlab: interrupted; data written before is kept"]
    assert subprocess.run(argv, capture_output=True, text=True).returncode == 0
    assert len(_records(work)) == 12 == len(_program_hashes(work, "GMM:1,16,16,16"))


def test_resume_skips_lines_an_interrupted_write_cut_short(run, tmp_path):  # noqa: F811
    work = tmp_path / "w"
    argv, proc = _start_tune(work, run / "model", 4)
    proc.communicate(timeout=600)
    assert proc.returncode == 0
    path = work / "database_tuning_record.json"
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 4
    # a malformed record (what made TVM crash) and a last line cut short by a kill during a write
    path.write_text("".join(lines) + '[0, [[[], []], "not run_secs"]]\n' + lines[-1][: len(lines[-1]) // 2])
    res = subprocess.run([*argv[:argv.index("--trials") + 1], "8", *argv[argv.index("--trials") + 2:], "--json"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "skipped 2 bad line(s) of the database" in res.stderr
    assert json.loads(res.stdout)["tasks"][0]["trials"] == 8 == len(_records(work))
    assert len((work / "database_tuning_record.bad-lines.jsonl").read_text().splitlines()) == 2  # nothing lost
    assert len(_program_hashes(work, "GMM:1,16,16,16")) == 8


def test_draft_verify_may_pick_in_a_later_round_what_it_drafted_and_passed_over(monkeypatch):
    """MetaSchedule's ``EvolveWithCostModel`` marks every program it returns as measured: draft-verify starts
    its evolution state afresh every round, so a program PSA drafted in round 1 and the verifier passed over
    is drafted again in round 2 (nothing is banned for having been scored); what round 1 measured is not."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    import costlab.export.search.draft_verify as dv
    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.cost_model import CostlabCostModel
    from costlab.export.search.common import schedule_hash
    from costlab.metaschedule.tune_context import tune_context

    drafts = []
    real = dv.evolution_ffi

    def spy(name):
        f = real(name)
        if name != "EvolveWithCostModel":
            return f

        def evolve(*args):
            out = list(f(*args))
            drafts.append({schedule_hash(s) for s in out})
            return out
        return evolve

    monkeypatch.setattr(dv, "evolution_ffi", spy)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = workload_json_mod(te_workload_task("GMM:1,4,4,4")[1])  # a small space: what is drafted recurs
    strategy = make_strategy("draft-verify", population=128)
    ctx = tune_context(mod, target, strategy, rand_state=1)
    spaces = ctx.space_generator.generate_design_space(ctx.mod)
    strategy.pre_tuning(8, 4, spaces, ms.database.MemoryDatabase(), CostlabCostModel("psa"))
    picked = []
    for _ in range(2):
        cands = strategy.generate_measure_candidates()
        picked.append({schedule_hash(c.sch) for c in cands})
        strategy.notify_runner_results(cands, [ms.runner.RunnerResult([1e-6], None) for _ in cands])
    strategy.post_tuning()
    assert len(drafts) == 2 and len(picked[0]) == len(picked[1]) == 4
    assert drafts[1] & (drafts[0] - picked[0])  # drafted and passed over in round 1, drafted again
    assert not picked[1] & picked[0]  # nothing measured twice


def test_a_draft_verify_batch_never_holds_a_program_twice_nor_one_taken_before():
    """``pick_batch``: the verifier's best, then the epsilon-greedy random share, then the next verified where
    the random ones run out; a random pick that is also further down the verifier's order is not added again
    when the batch is filled from that order, and nothing measured or picked before is picked."""
    from costlab.export.search.common import pick_batch

    batch = pick_batch(["a", "b", "c", "d", "e"], ["c", "x"], num=4, n_rand=2, taken={"x"}, key=str, seed=0)
    assert batch == ["a", "b", "c", "d"]
    assert pick_batch(["x", "a"], [], num=3, n_rand=1, taken={"x"}, key=str, seed=0) == ["a"]
    drawn = pick_batch(["a"], list("pqrs"), num=3, n_rand=2, taken=set(), key=str, seed=5)
    assert drawn[0] == "a" and len(set(drawn)) == 3 and set(drawn[1:]) <= set("pqrs")



def test_draft_filter_ranks_a_program_its_verifier_cannot_read_below_every_other():
    """The verifier scores a program it cannot read 0, below every other; inside draft-filter that 0 became 0.5,
    PSA's best possible score and above every program PSA alone scored, so exactly those programs were measured."""
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.cost_model import CostlabCostModel
    from costlab.export.search.common import evolution_ffi, measure_candidates
    from costlab.export.search.draft_filter import DraftFilterModel
    from costlab.metaschedule.tune_context import tune_context

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    es = ms.search_strategy.EvolutionarySearch(population_size=64, init_min_unmeasured=1)
    ctx = tune_context(workload_json_mod(te_workload_task("GMM:1,16,16,16")[1]), target, es, rand_state=1)
    es.pre_tuning(8, 4, ctx.space_generator.generate_design_space(ctx.mod), ms.database.MemoryDatabase(),
                  ms.cost_model.RandomModel())
    cands = measure_candidates(list(evolution_ffi("SampleInitPopulation")(es, 20)))
    verified = np.array([0.0, 0.8, 0.0, 0.3])  # the verifier's scores of PSA's best 4: two it cannot read

    class Verifier:  # a cost model's scores in [0, 1], 0 for a program it cannot read (CostlabCostModel.predict)
        def predict(self, context, candidates):
            return verified[:len(candidates)]

    model = DraftFilterModel(Verifier(), 0.2, draft=CostlabCostModel("psa"))
    scores = model.predict(ctx, cands)
    drafted = np.argsort(-model.draft.predict(ctx, cands), kind="stable")[:4]
    unread, read = drafted[verified == 0], drafted[verified > 0]
    rest = np.setdiff1d(np.arange(len(cands)), drafted)
    assert (scores[unread] == 0).all() and (scores[rest] > 0).all()
    assert scores[read].min() > scores[rest].max()


@pytest.mark.parametrize("strategy", ["model-led", "draft-verify"])
def test_a_round_is_logged_when_its_results_are_in_not_at_its_tasks_next_round(strategy):
    """In a network the task scheduler interleaves tasks: a round closed at its task's next turn counted the other
    tasks' rounds into its ``round_s`` (twice the round, or more). It is closed when its results come in."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.cost_model import CostlabCostModel
    from costlab.export.search.common import RoundLog
    from costlab.metaschedule.tune_context import tune_context

    log = RoundLog()
    search = make_strategy(strategy, population=32, first_rounds=(4,), log=log)
    ctx = tune_context(workload_json_mod(te_workload_task("GMM:1,8,8,8")[1]),
                       tvm.target.Target({"kind": "llvm", "num-cores": 2}), search, rand_state=1)
    search.pre_tuning(8, 4, ctx.space_generator.generate_design_space(ctx.mod), ms.database.MemoryDatabase(),
                      CostlabCostModel("psa"))
    cands = search.generate_measure_candidates()
    assert log.rounds == []
    search.notify_runner_results(cands, [ms.runner.RunnerResult([1e-6], None) for _ in cands])
    (row,) = log.rounds
    assert row["trials_before"] == 0 and row["round_s"] >= row["search_s"]
    search.post_tuning()
    assert len(log.rounds) == 1  # not logged twice


@pytest.mark.parametrize("strategy", ["model-led", "draft-verify"])
def test_a_continued_runs_rounds_count_the_trials_before_it_and_a_cut_pick_is_forgotten(strategy):
    """search_rounds.jsonl's ``trials_before`` of a continued run counts the task's programs its database held
    (it restarted at 0); a pick cut from its batch (the budget, the deadline) is forgotten, so a later round may
    pick it (draft-verify kept it picked for good)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.cost_model import CostlabCostModel
    from costlab.export.search.common import RoundLog, schedule_hash
    from costlab.metaschedule.tune_context import tune_context

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = workload_json_mod(te_workload_task("GMM:1,8,8,8")[1])
    db = ms.database.MemoryDatabase()

    def search_on(database):
        log = RoundLog()
        search = make_strategy(strategy, population=32, first_rounds=(4,), log=log)
        ctx = tune_context(mod, target, search, rand_state=1)
        search.pre_tuning(16, 4, ctx.space_generator.generate_design_space(ctx.mod), database,
                          CostlabCostModel("psa"))
        return search, log

    search, log = search_on(db)
    cands = search.generate_measure_candidates()
    workload = db.commit_workload(mod)
    for c in cands:
        db.commit_tuning_record(ms.database.TuningRecord(c.sch.trace, workload, [1e-6], target,
                                                         ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    search.notify_runner_results(cands, [ms.runner.RunnerResult([1e-6], None) for _ in cands])
    assert log.rounds[0]["trials_before"] == 0
    search.post_tuning()

    again, log = search_on(db)  # the run continued: its database holds the first round's programs
    cands = again.generate_measure_candidates()
    picked = again.measured if strategy == "model-led" else again._picked
    cut = [c.sch for c in cands[2:]]
    assert cut and all(schedule_hash(s) in picked for s in cut)
    again.forget(cut)
    assert not any(schedule_hash(s) in picked for s in cut)
    again.notify_runner_results(cands[:2], [ms.runner.RunnerResult([1e-6], None) for _ in cands[:2]])
    assert log.rounds[0]["trials_before"] == 4
    again.post_tuning()


def test_model_led_passes_over_the_first_rounds_its_database_has_filled():
    """A resumed run: a task with programs measured already starts at the round they would have reached, not at
    the small first rounds again (those are there to bring the first measurements early)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.cost_model import CostlabCostModel
    from costlab.metaschedule.tune_context import tune_context

    mod = workload_json_mod(te_workload_task("GMM:1,16,16,16")[1])
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    sizes = []
    for known in (0, 6):
        db = ms.database.MemoryDatabase()
        search = make_strategy("model-led", population=32, first_rounds=(4,))
        ctx = tune_context(mod, target, search, rand_state=1)
        spaces = ctx.space_generator.generate_design_space(ctx.mod)
        if known:  # programs of the task measured before, as a resumed run's database holds them
            workload = db.commit_workload(ctx.mod)
            sampled = ms.search_strategy.EvolutionarySearch(population_size=32)
            sampled._initialize_with_tune_context(ctx)
            sampled.pre_tuning(known, known, spaces, ms.database.MemoryDatabase(), ms.cost_model.RandomModel())
            for cand in sampled.generate_measure_candidates()[:known]:
                db.commit_tuning_record(ms.database.TuningRecord(cand.sch.trace, workload, [1e-3]))
            sampled.post_tuning()
        search.pre_tuning(64, 12, spaces, db, CostlabCostModel("psa"))
        sizes.append(len(search.generate_measure_candidates()))
        search.post_tuning()
    assert sizes == [4, 12]

    from costlab.export.search.model_led import start_round

    assert [start_round(n) for n in (0, 7, 8, 23, 24, 55, 56, 500)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert start_round(5, (4,)) == 1 and start_round(5, ()) == 0


def test_no_search_runs_when_no_program_fits_before_the_deadline():
    """When the last batch's seconds per program say none fits before --max-seconds (or no trial is left), a
    round's search would be thrown away (its batch cut to nothing): a network's every live task ran one before
    the run ended. It is not started."""
    import time

    from costlab.export.search.timed import RoundClock, TimedSearch

    class Inner:
        calls = 0

        def generate_measure_candidates(self):
            Inner.calls += 1
            return []

    clock = RoundClock(deadline=time.time() + 30)
    clock.per_program_s = 100.0
    assert TimedSearch(Inner(), clock).generate_measure_candidates() is None
    clock.end_group()
    assert Inner.calls == 0 and clock.stopped_by_deadline
    clock.per_program_s, clock.stopped_by_deadline = 1.0, False
    assert not clock.nothing_fits()
    clock.trials_left = 0
    assert clock.nothing_fits()


def test_no_round_starts_whose_search_would_leave_no_time_to_measure():
    """A round that started a few seconds before --max-seconds searched (seconds of evolution), then found the
    deadline passed and measured nothing: the search is counted in, at the task's last search's seconds (a task
    not searched before: the slowest search so far)."""
    import time

    from costlab.export.search.timed import RoundClock

    clock = RoundClock(deadline=time.time() + 10)
    clock.per_program_s = 1.0
    assert not clock.nothing_fits(task=0)
    clock.search_s[0] = 30.0  # task 0's last search took 30 s: none of its programs would be measured
    assert clock.nothing_fits(task=0)
    assert clock.nothing_fits(task=1)  # never searched: taken as slow as the slowest
    clock.end_group()
    assert clock.stopped_by_deadline
    clock.search_s[1], clock.stopped_by_deadline = 2.0, False
    assert not clock.nothing_fits(task=1)
    clock.end_group()
    assert not clock.stopped_by_deadline


def test_a_round_the_deadline_refused_one_task_is_no_stop_when_the_others_spent_the_trials():
    """A network's task whose search is slow is refused its round before --max-seconds (nothing_fits), and the
    run was marked "--max-seconds reached" even when the other tasks' rounds then measured every trial left. The
    mark is the run's only when trials were left."""
    import time

    from costlab.export.search.timed import RoundClock

    clock = RoundClock(deadline=time.time() + 10)
    clock.per_program_s, clock.trials_left = 1.0, 8
    clock.search_s[0], clock.search_s[1] = 30.0, 0.1
    assert clock.nothing_fits(task=0) and not clock.nothing_fits(task=1)
    assert clock.affordable(8, task=1) == 8  # task 1's round takes the trials left
    clock.end_group()
    assert not clock.stopped_by_deadline
    clock.trials_left = 8  # the next workload's group: its slow task refused, its trials left unmeasured
    assert clock.nothing_fits(task=0)
    clock.end_group()
    assert clock.stopped_by_deadline


def test_make_strategy_refuses_a_population_that_is_not_a_positive_integer():
    """``population=0`` became the strategy's own population silently; it, and a name that is not a string, are
    one clear error."""
    for bad in (0, -4, 2.5, "32"):
        with pytest.raises(ValueError, match=f"population must be a positive integer, not {re.escape(repr(bad))}"):
            make_strategy("model-led", population=bad)
    with pytest.raises(ValueError, match=r"unknown search strategy \['model-led'\]"):
        make_strategy(["model-led"])
    assert make_strategy("model-led", population=16).options["population_size"] == 16


def test_a_databases_workload_keys_are_worked_out_once_per_workload():
    """A scan of a database names each record's workload by its structural hash; ``as_json`` serialises the whole
    IRModule (about 1 ms), so a continued run on tens of thousands of records spent minutes on it per task before
    anything was measured. ``workload_key`` works it out once per workload object and gives the same key."""
    from pathlib import Path

    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from costlab.export.search.common import workload_key

    fixture = Path(__file__).parent / "fixtures" / "ms_tune_db"
    db = JSONDatabase(str(fixture / "database_workload.json"), str(fixture / "database_tuning_record.json"),
                      allow_missing=False)
    records = db.get_all_tuning_records()
    memo = {}
    keys = [workload_key(r.workload, memo) for r in records]
    assert keys == [str(r.workload.as_json()[0]) for r in records]
    assert len(records) == 16 and len(set(keys)) == len(memo) == 2  # one entry a workload, not a record
