"""The screening runner on real tiny kernels: a program of one task far slower than its task's best gets only
its one screening run, the fast one a full measurement; two tasks with the same argument shapes never share a
best; failures stay failures; `costlab tune` screens by default and `--screen 0` is today's runner.

The slow program recomputes a reduction for every row it is consumed in (``compute_at``), ~128x the work of
the fast one: no CPU's noise turns that into less than the 1.5x the runner screens at."""

from __future__ import annotations

import json

import pytest

from costlab.cli import main

pytestmark = pytest.mark.slow

TARGET = "llvm -num-cores=2"
N = 128


def _task(reduce: str):
    """C[i, j] = R(A[j, :]) + B[i, j], R a sum or max: two tasks with the same argument shapes."""
    import tvm
    from tvm import te

    a = te.placeholder((N, N), name="A")
    b = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    fn = te.sum if reduce == "sum" else te.max
    p = te.compute((N,), lambda j: fn(a[j, k], axis=k), name="P")
    c = te.compute((N, N), lambda i, j: p[j] + b[i, j], name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")})


def _candidate(mod, slow: bool):
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    sch = Schedule(mod)
    if slow:  # P recomputed under C's row loop: N x the reduction's work
        i, _ = sch.get_loops(sch.get_sblock("C"))
        sch.compute_at(sch.get_sblock("P"), i)
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


@pytest.fixture(scope="module")
def stack():
    """A pooled builder timed by a clock with task tags, and the run's LocalRunner, as `costlab tune` makes
    them."""
    import tvm

    from costlab.datasets.measure import MeasureOptions
    from costlab.export.search.timed import RoundClock, TimedBuilder
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import close_runner, make_runner
    from costlab.metaschedule.screening import TaskTags

    from costlab.metaschedule.targets import runnable_target

    target = tvm.target.Target(runnable_target(TARGET))
    clock = RoundClock()
    clock.tags = TaskTags()
    builder = make_builder(workers=2, pooled=True)
    local = make_runner(MeasureOptions(target=TARGET), target)
    yield target, clock, TimedBuilder(builder, clock), local
    close_runner(local)
    builder.close()


def _build(target, builder, candidates):
    from tvm.s_tir import meta_schedule as ms

    built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in candidates])
    assert all(b.error_msg is None for b in built), [b.error_msg for b in built]
    return built, [ms.runner.RunnerInput(b.artifact_path, "cpu", c.args_info) for b, c in zip(built, candidates)]


def _screen(stack, tagged: list, ratio: float = 1.5, runner=None):
    """``tagged``: (task key, candidate) in batch order; returns the runner and its results."""
    from costlab.metaschedule.screening import ScreeningRunner

    target, clock, builder, local = stack
    for key, cand in tagged:
        clock.tags.candidates([cand], key)
    _, inputs = _build(target, builder, [c for _, c in tagged])
    runner = runner or ScreeningRunner(local, ratio, clock.tags)
    return runner, [f.result() for f in runner.run(inputs)]


def test_the_slow_program_gets_its_screening_run_the_fast_one_a_full_measurement(stack):
    from costlab.metaschedule.screening import task_key

    mod = _task("sum")
    key = task_key(mod)
    runner, (slow, fast) = _screen(stack, [(key, _candidate(mod, True)), (key, _candidate(mod, False))])
    assert slow.error_msg is None and fast.error_msg is None
    assert runner.stats == dict(candidates=2, screened_out=1, full=1, failed=0, untagged=0)
    assert runner.last_screened == 1
    assert float(slow.run_secs[0]) >= 1.5 * float(fast.run_secs[0])
    assert runner.best[key] == pytest.approx(float(fast.run_secs[0]))
    # a later batch of the task is screened against that best: the slow program alone is not measured again
    runner, (again,) = _screen(stack, [(key, _candidate(mod, True))], runner=runner)
    assert runner.stats["full"] == 1 and runner.stats["screened_out"] == 2 and again.error_msg is None
    # seeded from a database's best (a continued run): the same holds for a fresh runner
    from costlab.metaschedule.screening import ScreeningRunner

    seeded = ScreeningRunner(stack[3], 1.5, stack[1].tags)
    seeded.seed(key, float(fast.run_secs[0]))
    seeded, _ = _screen(stack, [(key, _candidate(mod, True))], runner=seeded)
    assert seeded.stats["screened_out"] == 1 and seeded.stats["full"] == 0


def test_two_tasks_with_the_same_argument_shapes_never_share_a_best(stack):
    from costlab.metaschedule.screening import task_key

    fast_mod, slow_mod = _task("sum"), _task("max")
    assert task_key(fast_mod) != task_key(slow_mod)
    runner, results = _screen(stack, [(task_key(slow_mod), _candidate(slow_mod, True)),
                                      (task_key(fast_mod), _candidate(fast_mod, False))])
    assert all(r.error_msg is None for r in results)
    # the slow program is the only one of its task: measured in full, however much slower than the other task's
    assert runner.stats["screened_out"] == 0 and runner.stats["full"] == 2
    assert set(runner.best) == {task_key(fast_mod), task_key(slow_mod)}


def test_failures_stay_failures_and_untagged_artifacts_are_measured_in_full(stack):
    from tvm.s_tir import meta_schedule as ms

    from costlab.metaschedule.screening import ScreeningRunner, task_key

    target, clock, builder, local = stack
    mod = _task("sum")
    key = task_key(mod)
    cand = _candidate(mod, False)
    # an artifact that cannot be loaded (as a run that fails in the worker): tagged with its task as a build is
    clock.tags.candidates([cand], key)
    clock.tags.built([ms.builder.BuilderInput(cand.sch.mod, target)],
                     [ms.builder.BuilderResult("/nonexistent/costlab-screening.so", None)])
    runner = ScreeningRunner(local, 1.5, clock.tags)
    (res,) = [f.result() for f in runner.run([ms.runner.RunnerInput("/nonexistent/costlab-screening.so", "cpu",
                                                                     cand.args_info)])]
    assert res.run_secs is None and "LocalRunner: An exception occurred" in res.error_msg
    assert runner.stats == dict(candidates=1, screened_out=0, full=0, failed=1, untagged=0)
    # built outside the tuning loop (no task known): measured in full, as the plain runner would
    _, inputs = _build(target, builder, [_candidate(mod, True)])
    (res,) = [f.result() for f in runner.run(inputs)]
    assert res.error_msg is None and runner.stats["untagged"] == 1 and runner.stats["full"] == 1


def test_tune_screens_by_default_and_screen_0_is_todays_runner(tmp_path, capsys):
    import tvm
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    from costlab.export.search.timed import RoundClock
    from costlab.export.tune import TuneOptions, _measure_stack
    from costlab.metaschedule.runners import _runner_class, close_runner
    from costlab.metaschedule.screening import ScreeningRunner

    small = ["--per-iter", "4", "--population", "32", "--no-progress", "--target", TARGET]
    assert main(["tune", "--workload", "GMM:1,16,16,16", "--trials", "8", "--work-dir", str(tmp_path / "w"),
                 "--json", *small]) == 0
    summary = json.loads(capsys.readouterr().out)
    screening = summary["screening"]
    # every candidate's task was known to the runner (the search's tags reached it through the builder)
    assert screening["ratio"] == 1.5 and screening["sized_repeats"]
    assert screening["candidates"] == 8 and screening["untagged"] == 0
    assert screening["screened_out"] + screening["full"] + screening["failed"] == 8
    rows = [json.loads(x) for x in (tmp_path / "w" / "progress.jsonl").read_text().splitlines()]
    assert sum(r["screened_out"] for r in rows) == screening["screened_out"]
    # --screen 0: today's runner, untouched
    assert main(["tune", "--workload", "GMM:1,16,16,16", "--trials", "4", "--work-dir", str(tmp_path / "o"),
                 "--screen", "0", "--json", *small]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "screening" not in summary and summary["tasks"][0]["trials"] == 4
    from costlab.metaschedule.targets import runnable_target

    target = tvm.target.Target(runnable_target(TARGET))
    plain = _runner_class()  # MetaSchedule's LocalRunner, its worker started in the background
    assert issubclass(plain._cls, LocalRunner._cls)
    for screen, kind in ((0, plain), (None, ScreeningRunner)):
        opts = TuneOptions(work_dir=".", workloads=["GMM:1,8,8,8"], screen=screen)
        opts.check()
        clock = RoundClock()
        builder, runner = _measure_stack(opts, target, 2, clock)
        try:
            assert type(runner) is kind and (clock.tags is None) == (kind is plain)
        finally:
            close_runner(runner)
            builder.close()


@pytest.mark.parametrize("argv, message", [
    (["--screen", "1"], "--screen takes a ratio above 1"),
    (["--screen", "-2"], "--screen takes a ratio above 1"),
    (["--screen", "nan"], "--screen takes a ratio above 1"),
    (["--screen", "2", "--ms-defaults"], "cannot be used with --ms-defaults"),
])
def test_bad_screen_options(tmp_path, capsys, argv, message):
    assert main(["tune", "--workload", "GMM:1,8,8,8", *argv, "--work-dir", str(tmp_path / "w"),
                 "--no-progress"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("costlab: error:")]
    assert len(err) == 1 and message in err[0], err
