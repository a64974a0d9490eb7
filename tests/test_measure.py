"""measure: real builds and runs of a tiny workload, resume, same-programs replay, RPC, and the round trip
through export-ms and MetaSchedule's JSONDatabase."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from costlab.cli import main
from costlab.common.errors import InputError
from costlab.common.host import host_info
from costlab.datasets import open_dataset
from costlab.datasets import records as rec
from costlab.datasets.extract import extract
from costlab.datasets.measure import MeasureOptions, measure
from costlab.datasets.ms_database import export_ms, import_ms
from costlab.metaschedule.results import ERROR_NONE, MS_FAILURE_SECS
from costlab.metaschedule.traces import compact_json, trace_json

pytestmark = pytest.mark.slow

TARGET = "llvm -num-cores=2"


def _opts(**kw) -> MeasureOptions:
    base = dict(target=TARGET, per_task=4, batch_size=4, number=1, repeat=1, min_repeat_ms=0, progress=False,
                platform="cpu")
    base.update(kw)
    return MeasureOptions(**base)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A dataset with GMM:1,8,8,8 measured 4 times on platform 'cpu'."""
    path = tmp_path_factory.mktemp("measure") / "d.h5"
    extract(path, workloads=["GMM:1,8,8,8"])
    text = measure(path, _opts())
    assert "measured 4 candidates of 1 task(s) on 'cpu'" in text
    # where the seconds went, each phase once
    phases = re.search(r"seconds: start-up [\d.]+, design spaces [\d.]+, sampling [\d.]+, building [\d.]+, "
                       r"running [\d.]+, saving [\d.]+$", text, re.M)
    assert phases, text
    return path


def test_measure_stores_distinct_programs_with_raw_costs(measured):
    with open_dataset(measured) as ds:
        table = ds.records("cpu")
        assert len(table) == 4
        assert len(set(table.program_id.tolist())) == 4
        assert ds.platforms["cpu"].target["kind"] == "llvm"
        assert ds.platforms["cpu"].target["num-cores"] == 2
        task = ds.tasks[0]
        values, offsets = table.costs()
        for i, schedule in enumerate(table.schedules()):
            assert table.program_id[i] == np.uint64(rec.program_id("ms", task.workload_hash, schedule))
            costs = values[offsets[i]:offsets[i + 1]]
            assert len(costs) == 1  # repeat=1: one raw cost
            if table.error[i] == ERROR_NONE:
                assert 0 < costs[0] < 1.0
            else:
                assert costs[0] == MS_FAILURE_SECS
        assert (table.error == ERROR_NONE).sum() >= 2


def test_resume_measures_only_the_difference(measured):
    text = measure(measured, _opts())
    assert "nothing to measure" in text
    measure(measured, _opts(per_task=6, seed=1))
    with open_dataset(measured) as ds:
        table = ds.records("cpu")
        assert len(table) == 6
        assert len(set(table.program_id.tolist())) == 6


def test_same_programs_on_a_second_platform_line_up(measured):
    measure(measured, _opts(platform="cpu-b", same_programs_as="cpu", per_task=1))
    with open_dataset(measured) as ds:
        a, b = ds.records("cpu"), ds.records("cpu-b")
        assert sorted(b.program_id.tolist()) == sorted(a.program_id.tolist())
        sched_a = dict(zip(a.program_id.tolist(), a.schedules()))
        assert all(sched_a[p] == s for p, s in zip(b.program_id.tolist(), b.schedules()))
        # programs that built on one platform build on the other (same target here)
        ok_a = {p for p, e in zip(a.program_id.tolist(), a.error.tolist()) if e == 0}
        ok_b = {p for p, e in zip(b.program_id.tolist(), b.error.tolist()) if e == 0}
        assert ok_b == ok_a


def test_round_trip_through_export_ms_and_metaschedule(measured, tmp_path):
    import tvm
    from tvm.s_tir.meta_schedule.database import JSONDatabase, Workload

    with open_dataset(measured) as ds:
        table = ds.records("cpu")
        lat = table.latency()
        best = int(np.argmin(lat))
        best_schedule = table.schedules([best])[0]
        task = ds.tasks[0]
        ids = set(table.program_id.tolist())
        n_ok = int(np.isfinite(lat).sum())
        target = ds.platforms["cpu"].target
    export_ms(measured, "cpu", tmp_path / "db")
    db = JSONDatabase(work_dir=str(tmp_path / "db"), allow_missing=False)
    assert len(db) == n_ok
    mod = Workload.from_json([task.workload_hash, task.workload]).mod
    top = db.query_tuning_record(mod, tvm.target.Target(target), "main")
    assert compact_json(trace_json(top.trace)) == best_schedule
    assert np.mean([float(x) for x in top.run_secs]) == pytest.approx(lat[best])
    # the exported records read back by import-ms are the same programs (measure and import-ms agree)
    back = tmp_path / "back.h5"
    import_ms([tmp_path / "db"], back, platform="cpu", progress=False)
    with open_dataset(back) as ds:
        got = set(ds.records("cpu").program_id.tolist())
        assert got <= ids and len(got) == n_ok


def test_unknown_task_and_empty_dataset_are_clear_errors(measured, tmp_path):
    with pytest.raises(InputError, match="no task 'nope'"):
        measure(measured, _opts(tasks="nope"))
    with pytest.raises(InputError, match="no such file"):
        measure(tmp_path / "missing.h5", _opts())


def test_rpc_runner_through_a_local_tracker(tmp_path):
    from tvm.s_tir.meta_schedule.testing.local_rpc import LocalRPC

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,4,4,4"])
    with LocalRPC() as rpc:
        text = measure(path, _opts(per_task=2, batch_size=2, rpc_key=rpc.tracker_key, rpc_host=rpc.tracker_host,
                                   rpc_port=rpc.tracker_port, platform="remote"))
    assert "measured 2 candidates" in text
    with open_dataset(path) as ds:
        table = ds.records("remote")
        assert len(table) == 2
        assert (table.error == ERROR_NONE).sum() >= 1


def test_stored_schedule_is_what_metaschedule_writes(measured, tmp_path):
    """A measured program committed through MetaSchedule's own JSONDatabase writer gives the very
    schedule text measure stored (so import-ms of a tuning run and measure agree on program ids)."""
    import json

    import tvm
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord, Workload
    from tvm.s_tir.schedule import Schedule, Trace

    with open_dataset(measured) as ds:
        task = ds.tasks[0]
        schedules = ds.records("cpu").schedules()
    (tmp_path / "db").mkdir()
    db = JSONDatabase(work_dir=str(tmp_path / "db"))
    mod = Workload.from_json([task.workload_hash, task.workload]).mod
    workload = db.commit_workload(mod)
    for schedule in schedules:
        sch = Schedule(mod)
        Trace.apply_json_to_schedule(json.loads(schedule), sch)
        db.commit_tuning_record(TuningRecord(sch.trace, workload, [1e-6], tvm.target.Target({"kind": "llvm"})))
    lines = (tmp_path / "db" / "database_tuning_record.json").read_text().splitlines()
    assert [compact_json(json.loads(x)[1][0]) for x in lines] == schedules


def test_interrupted_run_keeps_finished_batches_and_continues(tmp_path, monkeypatch):
    import costlab.datasets.measure as m

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,4,4,4"])
    real, calls = m.build_and_run, []

    def interrupt_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the second batch is being measured
        return real(*args, **kwargs)

    monkeypatch.setattr(m, "build_and_run", interrupt_second_batch)
    with pytest.raises(KeyboardInterrupt):
        measure(path, _opts(per_task=4, batch_size=2))
    with open_dataset(path) as ds:
        assert ds.num_records("cpu") == 2  # the first batch was saved
    monkeypatch.setattr(m, "build_and_run", real)
    assert "measured 2 candidates" in measure(path, _opts(per_task=4, batch_size=2))
    with open_dataset(path) as ds:
        assert len(set(ds.records("cpu").program_id.tolist())) == 4


_TERM_IN_THE_DRAW = """
import os, signal
import numpy as np
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from costlab.cli import _terminate_as_interrupt
from costlab.commands.signals import Terminated
from costlab.datasets.extract import te_workload_task, workload_json_mod
from costlab.datasets.measure import _Sampler

SENT = []


@derived_object
class TermOnce(PyCostModel):  # the sampler's random model, which sends SIGTERM the first time TVM calls it
    def __init__(self, *, seed=None): super().__init__()
    def load(self, path): pass
    def save(self, path): pass
    def update(self, context, candidates, results): pass
    def predict(self, context, candidates):
        if not SENT:
            SENT.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return np.random.rand(len(candidates))


ms.cost_model.RandomModel = TermOnce
_terminate_as_interrupt()  # costlab's handler: SIGTERM raises Terminated
sampler = _Sampler(workload_json_mod(te_workload_task("GMM:1,16,16,16")[1]),
                   tvm.target.Target({"kind": "llvm", "num-cores": 2}), 0, 8)
try:
    drawn = sampler.sample(64, set(), "h")
except Terminated:
    print("terminated after the draw", SENT)
"""


def test_sigterm_inside_tvms_draw_of_candidates_is_handled_after_it(tmp_path):
    """A stop signal while TVM's search draws candidates (here: from inside the Python cost model it calls back)
    is held until the draw returns, then ends the command as an interruption. Raised in there, the handler's
    exception crossed TVM's C++ frames: a RuntimeError out of the draw, and with TVM's threads in it, at times
    a crash of the whole process (``costlab dataset measure`` stopped by a process-group SIGTERM 3 s in)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _TERM_IN_THE_DRAW], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "terminated after the draw [1]", done.stderr[-3000:]


@pytest.mark.parametrize("cores", [1, 2])
def test_local_runner_runs_kernels_on_the_targets_cores(cores):
    """TVM sizes its thread pool from the machine unless told; a '1c' platform must run on 1 thread."""
    import tvm

    from costlab.metaschedule.runners import close_runner, make_runner, runner_threads
    from costlab.metaschedule.targets import normalize_target

    target = tvm.target.Target(normalize_target(f"llvm -num-cores={cores}"))
    runner = make_runner(_opts(target=f"llvm -num-cores={cores}"), target)
    try:
        assert runner.pool.submit(runner_threads).result() == cores
    finally:
        close_runner(runner)


def test_rounds_build_once_and_run_the_candidates_in_turn():
    """``build_and_run(..., rounds=3)``: two programs built once, then run all of them three times over (real
    builds and runs), each program's costs of the three rounds in one list."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import build_and_run, close_runner, make_runner
    from costlab.metaschedule.targets import normalize_target
    from costlab.metaschedule.tune_context import tune_context

    target = tvm.target.Target(normalize_target(TARGET))
    ctx = tune_context(workload_json_mod(te_workload_task("GMM:1,8,8,8")[1]), target, num_threads=2)
    args = ms.arg_info.ArgInfo.from_prim_func(ctx.mod["main"])
    cands = [ms.MeasureCandidate(sch, args) for sch in ctx.generate_design_space()[:1] * 2]

    class Spy:  # the real runner, its batches counted
        def __init__(self, inner):
            self.inner, self.batches = inner, []

        def run(self, inputs):
            self.batches.append(len(inputs))
            return self.inner.run(inputs)

    builder, runner = make_builder(workers=1, pooled=True), make_runner(_opts(repeat=2), target)
    spy = Spy(runner)
    try:
        out = build_and_run(builder, spy, target, cands, rounds=3)
        assert builder._uses == 1 and spy.batches == [2, 2, 2]
        assert [(len(costs), error, msg) for costs, error, msg in out] == [(6, ERROR_NONE, None)] * 2
        assert all(0 < c < 1 for costs, _, _ in out for c in costs)
        assert len(build_and_run(builder, spy, target, cands[:1])[0][0]) == 2 and spy.batches[-1] == 1
    finally:
        close_runner(runner)
        builder.close()


def test_rename_platform_moves_records_and_caches(measured, tmp_path, capsys):
    import shutil

    from costlab.cli import main
    from costlab.featurizers.cache import build_cache

    path = tmp_path / "r.h5"
    shutil.copy(measured, path)
    build_cache(path, "tlp", "cpu", progress=False)
    with open_dataset(path) as ds:
        ids = ds.records("cpu").program_id.tolist()
    assert main(["dataset", "rename-platform", str(path), "cpu", "cpu-a"]) == 0
    with open_dataset(path) as ds:
        assert "cpu" not in ds.platforms and ds.platforms["cpu-a"].target["num-cores"] == 2
        assert ds.records("cpu-a").program_id.tolist() == ids
        assert "cpu-a" in ds.h5["features/tlp@1"] and "cpu" not in ds.h5["features/tlp@1"]
    # another target: the records stay, the features (which may depend on the target) go
    assert main(["dataset", "rename-platform", str(path), "cpu-a", "cpu-1c", "--target", "llvm -num-cores=1"]) == 0
    with open_dataset(path) as ds:
        assert ds.platforms["cpu-1c"].target["num-cores"] == 1 and ds.records("cpu-1c").program_id.tolist() == ids
        assert not any(p in ds.h5["features/tlp@1"] for p in ("cpu-a", "cpu-1c"))
    capsys.readouterr()
    assert main(["dataset", "rename-platform", str(path), "cpu", "x"]) == 2
    assert "no platform 'cpu'" in capsys.readouterr().err
    assert main(["dataset", "rename-platform", str(path), "cpu-1c", "cpu-1c"]) == 2


def test_rename_platform_with_its_own_target_written_otherwise_keeps_the_caches(tmp_path):
    """An imported platform's target holds TVM's keys and tag; the same target as a user types it (the string
    form) is no new target: the caches stay (they were all dropped and rebuilt), and the target as recorded."""
    from costlab.featurizers.cache import build_cache

    path = tmp_path / "z.h5"
    assert main(["dataset", "import-ms", str(FIXTURES / "zen5_small"), "-o", str(path)]) == 0
    with open_dataset(path) as ds:
        (pid,) = ds.record_platforms()
        target = ds.platforms[pid].target
    assert target.get("keys") and target["mcpu"] == "znver5"
    build_cache(path, "tlp", pid, progress=False)
    typed = f"llvm -mcpu=znver5 -num-cores={target['num-cores']}"
    assert main(["dataset", "rename-platform", str(path), pid, "z5", "--target", typed]) == 0
    with open_dataset(path) as ds:
        assert "z5" in ds.h5["features/tlp@1"] and ds.platforms["z5"].target == target
    assert main(["dataset", "rename-platform", str(path), "z5", "z4", "--target", typed.replace("znver5", "znver4")]) == 0
    with open_dataset(path) as ds:
        assert "z4" not in ds.h5["features/tlp@1"] and ds.platforms["z4"].target["mcpu"] == "znver4"


def test_measure_refuses_a_platform_of_another_or_an_unknown_machine(tmp_path, capsys):
    """A platform that mixes two CPUs is two platforms: measure says so and names a new platform."""
    import hashlib

    import h5py

    data = tmp_path / "d.h5"
    shutil.copy(Path(__file__).parent / "fixtures" / "ms_small.h5", data)
    argv = ["dataset", "measure", str(data), "--platform", "llvm-x86_64-2c", "--target", "llvm -num-cores=2",
            "--per-task", "24", "--no-progress"]

    def digest():
        return hashlib.sha256(data.read_bytes()).hexdigest()

    before = digest()
    assert main(argv) == 2  # the fixture's records were measured before hosts were recorded
    err = capsys.readouterr().err
    assert "holds records of an unknown machine" in err and "--platform llvm-x86_64-2c-" in err
    assert digest() == before
    other = dict(host_info(), cpu_model="Some Other CPU", caches={"L2": "256K"})
    with h5py.File(data, "r+") as f:
        f["platforms"]["llvm-x86_64-2c"].attrs["host"] = json.dumps(other, sort_keys=True)
    before = digest()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "was measured on another machine (Some Other CPU" in err and "differs in" in err
    assert digest() == before
    # a remote device's timings (an RPC run records no host of this machine) beside that machine's: refused too,
    # before any tracker is asked
    assert main(argv + ["--rpc-key", "board", "--rpc-wait", "1"]) == 2
    err = capsys.readouterr().err
    assert "holds records measured on Some Other CPU" in err and "--platform llvm-x86_64-2c-rpc" in err
    assert digest() == before


def test_a_task_name_several_tasks_share_selects_them_all():
    """A fused kernel of several shapes (from several networks) has one name: ``--tasks NAME`` means all of them."""
    from types import SimpleNamespace

    from costlab.datasets.measure import _select_tasks

    tasks = [SimpleNamespace(index=i, name=n, dialect="ms") for i, n in enumerate(["conv", "dense", "conv"])]
    ds = SimpleNamespace(tasks=tasks)
    assert [t.index for t in _select_tasks(ds, "conv", "d.h5")] == [0, 2]
    assert [t.index for t in _select_tasks(ds, "dense,0", "d.h5")] == [1, 0]


def test_runner_starts_its_worker_in_the_background(tmp_path):
    """costlab's runner returns from its constructor while its worker cannot start yet (MetaSchedule's
    LocalRunner waits for the worker there); its first run waits for that start, then measures for real."""
    import functools
    import subprocess
    import threading

    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import _runner_class, build_and_run, close_runner
    from costlab.metaschedule.targets import normalize_target
    from costlab.metaschedule.tune_context import tune_context

    gate = tmp_path / "open"  # the worker's start blocks until this file exists
    hold = functools.partial(subprocess.run, ["sh", "-c", f"while [ ! -e '{gate}' ]; do sleep 0.05; done"])
    made: list = []
    maker = threading.Thread(target=lambda: made.append(_runner_class()(timeout_sec=60, initializer=hold)))
    maker.start()
    maker.join(timeout=30)
    try:
        assert not maker.is_alive(), "the constructor waited for a worker that could not start"
        runner = made[0]
        runner.start("cpu")
        assert not runner.started.done()  # the worker is still held at the gate
    finally:
        gate.touch()
        maker.join()
    target = tvm.target.Target(normalize_target(TARGET))
    ctx = tune_context(workload_json_mod(te_workload_task("GMM:1,8,8,8")[1]), target, num_threads=2)
    cands = [ms.MeasureCandidate(ctx.generate_design_space()[0], ms.arg_info.ArgInfo.from_prim_func(ctx.mod["main"]))]
    builder = make_builder(workers=1, pooled=True)
    try:
        [(costs, error, msg)] = build_and_run(builder, runner, target, cands)
        assert (error, msg) == (ERROR_NONE, None) and 0 < costs[0] < 1
        assert runner.started is None and runner.failure is None
    finally:
        close_runner(runner)
        builder.close()


def test_a_runner_that_cannot_use_its_device_is_one_clear_error():
    """A worker that cannot make its device's context fails the first run with RunnerUnavailable (not every
    candidate failed), and ``runner_failure`` finds it behind the screening runner."""
    import tvm

    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import (RunnerUnavailable, _runner_class, build_and_run, close_runner,
                                              runner_failure)
    from costlab.metaschedule.screening import ScreeningRunner
    from costlab.metaschedule.targets import normalize_target

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA GPU")
    runner = _runner_class()(timeout_sec=60)
    runner.start("cuda")
    try:
        assert runner_failure(runner) is None
        with pytest.raises(RunnerUnavailable, match="could not run programs on cuda: .*cuda"):
            runner.ready()
        with pytest.raises(Exception, match="could not run programs on cuda"):  # through TVM's FFI: a RuntimeError
            runner.run([])
        assert runner_failure(ScreeningRunner(runner)) is runner.failure
        builder = make_builder(workers=1, pooled=True)
        try:  # costlab's own measuring (dataset measure) says it as the RunnerUnavailable itself
            with pytest.raises(RunnerUnavailable, match="could not run programs on cuda"):
                build_and_run(builder, runner, tvm.target.Target(normalize_target(TARGET)), [])
        finally:
            builder.close()
    finally:
        close_runner(runner)


def test_a_remote_boards_platform_stated_by_set_machine_takes_more_rpc_records(tmp_path, capsys):
    """RPC records carry no host; `set-machine --host` states the board's. More RPC measurements into that
    platform are not refused as another machine's (they fail here only for want of a tracker)."""
    data = tmp_path / "d.h5"
    shutil.copy(Path(__file__).parent / "fixtures" / "ms_small.h5", data)
    board = tmp_path / "board.json"
    board.write_text(json.dumps(dict(host_info(), cpu_model="Rockchip RK3588", caches={"L2": "512K"})))
    assert main(["dataset", "set-machine", str(data), "--platform", "llvm-x86_64-2c", "--host", str(board)]) == 0
    capsys.readouterr()
    argv = ["dataset", "measure", str(data), "--platform", "llvm-x86_64-2c", "--target", "llvm -num-cores=2",
            "--per-task", "24", "--no-progress", "--rpc-key", "board", "--rpc-port", "1", "--rpc-wait", "1"]
    code = main(argv)
    err = capsys.readouterr().err
    assert "holds records measured on" not in err and "tracker" in err.lower(), err
    assert code != 0
    # a local measurement into it is still refused: the board is not this machine
    assert main(argv[:-6]) == 2
    assert "was measured on another machine (Rockchip RK3588" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--builder-timeout", "0"], "--builder-timeout must be a positive number of seconds, not 0.0"),
    (["--builder-timeout", "-5"], "--builder-timeout must be a positive number of seconds, not -5.0"),
    (["--builder-timeout", "nan"], "--builder-timeout must be a positive number of seconds, not nan"),
    (["--builder-timeout", "inf"], "--builder-timeout must be a positive number of seconds, not inf"),
    (["--rpc-wait", "nan"], "--rpc-wait must be a number of seconds (0 or more), not nan"),
    (["--rpc-wait", "-1"], "--rpc-wait must be a number of seconds (0 or more), not -1.0"),
    (["--platform", "my box"], "--platform: bad platform id 'my box'"),
    (["--platform", "records/x"], "--platform: bad platform id 'records/x'"),
    # a selection of no task, into a new platform: it was "has no MetaSchedule tasks" (for ","), or every task ("")
    (["--platform", "new", "--tasks", ","], "--tasks names no task (','): give task indices or names"),
    (["--platform", "new", "--tasks", ""], "--tasks names no task (''): give task indices or names"),
    (["--platform", "new", "--tasks", " , ,"], "--tasks names no task (' , ,'): give task indices or names"),
])
def test_options_that_would_waste_the_run_are_refused_before_any_work(tmp_path, capsys, monkeypatch, argv, says):
    """A build timeout of 0 stores every candidate as a timeout (never measured again), a platform id that is not a
    name was refused only when the first batch was saved, and a --tasks of no task was said to be a dataset without
    tasks: each is one error line before anything is built, and the dataset is unchanged."""
    import hashlib

    import costlab.datasets.measure as measure_module

    def no_builder(*a, **k):
        raise AssertionError("a builder was started")

    monkeypatch.setattr(measure_module, "make_builder", no_builder)
    data = tmp_path / "d.h5"
    shutil.copy(Path(__file__).parent / "fixtures" / "ms_small.h5", data)
    before = hashlib.sha256(data.read_bytes()).hexdigest()
    assert main(["dataset", "measure", str(data), "--target", TARGET, "--per-task", "24", "--no-progress"]
                + argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("costlab: error:") and says in err[0], err
    assert hashlib.sha256(data.read_bytes()).hexdigest() == before


def test_a_pooled_build_for_a_remote_device_keeps_the_objects_for_it_to_link():
    """This machine's linker cannot link another architecture's objects: a build for an RPC device (``shared=False``,
    what a tuning run over RPC uses) keeps MetaSchedule's tar, which the device links itself; a shared library
    build of the same program for an ARM board fails."""
    import platform

    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.tune_context import tune_context

    target = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 4})
    ctx = tune_context(workload_json_mod(te_workload_task("GMM:1,8,8,8")[1]), target, num_threads=4)
    inputs = [ms.builder.BuilderInput(sch.mod, target) for sch in ctx.generate_design_space()[:1]]
    for shared, ends in ((False, ".tar"), (True, None)):
        builder = make_builder(workers=1, pooled=True, shared=shared)
        try:
            (res,) = builder.build(inputs)
        finally:
            builder.close()
        if ends:
            assert res.error_msg is None and str(res.artifact_path).endswith(ends), res.error_msg
        elif platform.machine() in ("x86_64", "AMD64"):  # this machine's linker, another architecture's objects
            assert res.error_msg is not None and res.artifact_path is None


def test_a_workload_task_whose_name_holds_commas_is_selected_by_name():
    """A --workload task is named by its spec (GMM:1,32,32,32): split at every comma, it was no task of the dataset,
    and the error pointed to a command that lists no task names. A name's commas are its own; the error lists them."""
    from types import SimpleNamespace

    from costlab.datasets.measure import _select_tasks

    names = ["GMM:1,32,32,32", "C1D:1,32,8,8,3", "GMM:1,32,32,32,relu"]
    tasks = [SimpleNamespace(index=i, name=n, dialect="ms") for i, n in enumerate(names)]
    ds = SimpleNamespace(tasks=tasks)
    assert [t.index for t in _select_tasks(ds, "GMM:1,32,32,32", "d.h5")] == [0]
    assert [t.index for t in _select_tasks(ds, "GMM:1,32,32,32,relu", "d.h5")] == [2]
    assert [t.index for t in _select_tasks(ds, "1,GMM:1,32,32,32", "d.h5")] == [1, 0]
    assert [t.index for t in _select_tasks(ds, "GMM:1,32,32,32,C1D:1,32,8,8,3", "d.h5")] == [0, 1]
    with pytest.raises(InputError, match=r"no task 'nope' \(give task indices 0\.\.2 or names: 0 GMM:1,32,32,32, 1 C1D"):
        _select_tasks(ds, "nope", "d.h5")


def test_records_of_an_unknown_machine_imported_during_a_measure_stop_it(tmp_path, monkeypatch):
    """The platform's machine was checked only when ``measure`` began: records of an unknown machine written
    into the platform meanwhile (an import from another terminal) were then labelled as measured here. It is
    checked again under the writer's lock, before each batch is saved."""
    from costlab.common.errors import InputError
    from costlab.datasets import DatasetWriter, RecordBatch, program_id
    from costlab.datasets import measure as measure_module

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,4,4,4"])
    real, imported = measure_module.DatasetWriter, []

    def writer_after_an_import(data):
        if not imported:  # another command imports records of an unknown machine into the platform first
            imported.append(1)
            with DatasetWriter(data) as w:
                w.add_platform("cpu", {"kind": "llvm", "num-cores": 2})
                b = RecordBatch()
                b.append(0, '[["x"]]', [1e-5], 0, 0.0, program_id("ms", "imported", '[["x"]]'))
                w.add_records("cpu", b)
        return real(data)

    monkeypatch.setattr(measure_module, "DatasetWriter", writer_after_an_import)
    with pytest.raises(InputError, match="platform 'cpu' holds records of an unknown machine"):
        measure(path, _opts(per_task=2, batch_size=2))
    with open_dataset(path) as ds:
        assert len(ds.records("cpu")) == 1 and ds.platforms["cpu"].host is None


def test_the_same_seed_samples_the_same_programs(tmp_path):
    """``measure --seed`` reproduces the programs sampled (not their timings): MetaSchedule's random cost model
    was seeded from the OS, and its per-thread random states went to whichever thread was free, so each run of
    one seed sampled other programs."""
    ids = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.h5"
        extract(path, workloads=["GMM:1,8,8,8"])
        measure(path, _opts(per_task=6, batch_size=6, seed=5))
        with open_dataset(path) as ds:
            ids.append(sorted(ds.records("cpu").program_id.tolist()))
    assert len(ids[0]) == 6 and ids[0] == ids[1]


def test_a_second_measure_of_the_same_tasks_meanwhile_is_neither_repeated_nor_exceeded(tmp_path, monkeypatch):
    """Two ``measure --per-task 4`` of one dataset at once each measured 4 programs a task: 8 records where 4
    were asked for, the same programs twice when they sampled alike. Under the writer's lock, before saving, a
    measure now reads what the other saved meanwhile: it records neither a program already there nor more than
    ``--per-task``, and says how many of its candidates it dropped."""
    from costlab.datasets import measure as measure_module

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,8,8,8"])
    real, other = measure_module.DatasetWriter, []

    def writer_after_another_measure(data):
        if not other:  # the other measure (same seed, so the same programs) saves all of its own first
            other.append(None)
            other[0] = measure(data, _opts(seed=3))
        return real(data)

    monkeypatch.setattr(measure_module, "DatasetWriter", writer_after_another_measure)
    text = measure(path, _opts(seed=3))
    assert "measured 4 candidates" in other[0]
    assert "measured 0 candidates" in text and "note: 4 measured candidate(s) not recorded" in text, text
    with open_dataset(path) as ds:
        ids = ds.records("cpu").program_id.tolist()
    assert len(ids) == len(set(ids)) == 4

    # a measure that sampled other programs keeps only what --per-task still has room for
    path2 = tmp_path / "d2.h5"
    extract(path2, workloads=["GMM:1,8,8,8"])
    other.clear()

    def writer_after_a_smaller_measure(data):
        if not other:
            other.append(None)
            other[0] = measure(data, _opts(seed=4, per_task=3, batch_size=3))
        return real(data)

    monkeypatch.setattr(measure_module, "DatasetWriter", writer_after_a_smaller_measure)
    text = measure(path2, _opts(seed=5))
    with open_dataset(path2) as ds:
        ids = ds.records("cpu").program_id.tolist()
    assert len(ids) == len(set(ids)) == 4, text
    # of its 4 distinct programs, at least one is not among the other's 3, and there is room for one
    assert "measured 1 candidates" in text and "4 records on cpu" in text and "3 measured candidate(s) not" in text


def _counting_writers(monkeypatch, on_call=None) -> list:
    """``measure``'s DatasetWriter, counted (each call one transaction); ``on_call(n)`` runs before the n-th."""
    from costlab.datasets import measure as measure_module

    real, calls = measure_module.DatasetWriter, []

    def writer(data):
        calls.append(data)
        if on_call is not None:
            on_call(len(calls))
        return real(data)

    monkeypatch.setattr(measure_module, "DatasetWriter", writer)
    return calls


def test_batches_are_gathered_into_fewer_saves_when_saving_costs_more(tmp_path, monkeypatch):
    """A save copies the whole dataset: seconds for one of a GB, each batch. Batches are saved one by one while a
    save is cheap next to measuring, and gathered once it is not (here: every save counts as cheap, then as
    expensive)."""
    from costlab.datasets import measure as measure_module

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,8,8,8", "GMM:1,4,8,8"])
    calls = _counting_writers(monkeypatch)
    monkeypatch.setattr(measure_module, "SAVE_EVERY", 0)  # every save counts as cheap
    measure(path, _opts(per_task=4, batch_size=2))
    assert len(calls) == 4  # 4 batches, each saved as it came
    with open_dataset(path) as ds:
        assert np.bincount(ds.records("cpu").task).tolist() == [4, 4]

    path2 = tmp_path / "d2.h5"
    extract(path2, workloads=["GMM:1,8,8,8", "GMM:1,4,8,8"])
    monkeypatch.setattr(measure_module, "SAVE_EVERY", 1e9)
    calls.clear()
    text = measure(path2, _opts(per_task=4, batch_size=2))
    assert len(calls) == 2  # the first batch (a save's cost is not known before), then the other three at the end
    with open_dataset(path2) as ds:
        table = ds.records("cpu")
        assert np.bincount(table.task).tolist() == [4, 4] and len(set(table.program_id.tolist())) == 8
    assert "measured 8 candidates of 2 task(s)" in text and text.count(": 4 records on cpu (0 of the new") == 2, text


def test_an_interrupted_measure_saves_the_batches_it_gathered(tmp_path, monkeypatch):
    from costlab.datasets import measure as measure_module

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,8,8,8"])
    monkeypatch.setattr(measure_module, "SAVE_EVERY", 1e9)
    calls = _counting_writers(monkeypatch)
    real, built = measure_module.build_and_run, []

    def interrupted_third(*args, **kwargs):
        built.append(1)
        if len(built) == 3:
            raise KeyboardInterrupt  # Ctrl-C while the third batch builds
        return real(*args, **kwargs)

    monkeypatch.setattr(measure_module, "build_and_run", interrupted_third)
    with pytest.raises(KeyboardInterrupt):
        measure(path, _opts(per_task=6, batch_size=2))
    assert len(calls) == 2  # the first batch at once, the second (gathered) when the run stopped
    with open_dataset(path) as ds:
        assert len(ds.records("cpu")) == 4
    monkeypatch.setattr(measure_module, "build_and_run", real)
    assert "measured 2 candidates" in measure(path, _opts(per_task=6, batch_size=2))  # a re-run continues


def test_gathered_batches_keep_to_per_task_when_another_measure_saved_meanwhile(tmp_path, monkeypatch):
    """Three gathered batches of one task saved together, after another measure of it saved 3 programs: the
    save keeps the task's records within --per-task (the batches share what room is left) and records none
    twice."""
    from costlab.datasets import measure as measure_module

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,8,8,8"])
    monkeypatch.setattr(measure_module, "SAVE_EVERY", 1e9)
    other: list = []

    def another_measure_before_the_final_save(n):
        if n == 2 and not other:
            other.append(None)  # (set first: the other measure's own saves come through this hook too)
            other[0] = measure(path, _opts(seed=4, per_task=5, batch_size=2))

    _counting_writers(monkeypatch, another_measure_before_the_final_save)
    text = measure(path, _opts(seed=5, per_task=8, batch_size=2))
    assert "measured 3 candidates" in other[0]  # to 5, after this run's first batch of 2
    with open_dataset(path) as ds:
        ids = ds.records("cpu").program_id.tolist()
    assert len(ids) == len(set(ids)) and len(ids) <= 8, text
    # of its 6 gathered candidates, room for 3 (fewer should some be the other's programs), the rest dropped
    assert f"measured {len(ids) - 3} candidates" in text and f"{len(ids)} records on cpu" in text, text
    assert "candidate(s) not recorded" in text, text


def test_a_save_that_waited_for_another_writer_counts_only_its_own_seconds(tmp_path):
    """How long measuring goes on before the next save is ten times the last save's seconds: a save that waited
    for another command's transaction (a featurize commits every minute) would have put the next one off ten
    times that wait."""
    import threading

    from costlab.common.locks import take_lock
    from costlab.datasets import program_id
    from costlab.datasets.measure import _Saver

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,4,4,4"])
    saver = _Saver(path, "cpu", {"kind": "llvm", "num-cores": 2}, None, None, {}, {0: 0})
    saver.add(0, [(None, '[["x"]]', program_id("ms", "w", '[["x"]]'))], [([1e-5], ERROR_NONE, None)], 0.0)
    held = take_lock(tmp_path / ".d.h5.lock")  # another command's transaction, for 1.5 s
    threading.Timer(1.5, held.close).start()
    saver.save()
    assert saver.count == {0: 1} and saver.measured == 1
    assert saver.last_seconds < 1.0


def test_ctrl_c_during_a_gathered_save_keeps_its_batches_for_the_save_on_the_way_out(tmp_path, monkeypatch, capsys):
    """Ctrl-C (or SIGTERM) while a save of gathered batches waits for the lock or copies the file undoes that
    transaction: its batches were dropped with it (2 of 6 measured kept). They are saved on the way out."""
    from costlab.datasets import DatasetWriter
    from costlab.datasets import measure as measure_module

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,8,8,8"])
    monkeypatch.setattr(measure_module, "SAVE_EVERY", 1e9)
    begun = []

    class CtrlCInSecondCopy(DatasetWriter):
        def _begin(self):
            begun.append(1)
            if len(begun) == 2:  # the final save of the gathered batches
                raise KeyboardInterrupt
            return super()._begin()

    monkeypatch.setattr(measure_module, "DatasetWriter", CtrlCInSecondCopy)
    with pytest.raises(KeyboardInterrupt):
        measure(path, _opts(per_task=6, batch_size=2))
    assert len(begun) == 3
    assert "costlab: saving the 4 candidates measured since the last save" in capsys.readouterr().err
    with open_dataset(path) as ds:
        ids = ds.records("cpu").program_id.tolist()
    assert len(ids) == len(set(ids)) == 6


def test_a_gather_task_is_measured_on_indices_inside_its_table():
    """TVM's random_fill gave int64 arguments a float's bits (near 10^18): a take (an embedding's token ids) read
    its table there without bounds checks, and every program of every such network task was killed by SIGSEGV or
    timed on garbage. costlab's runner allocates int32/int64 arguments as 0."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.measure import MeasureOptions
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import build_and_run, close_runner, make_runner
    from costlab.metaschedule.tune_context import tune_context

    table = te.placeholder((4096, 64), "float32", name="W")
    ids = te.placeholder((16,), "int64", name="ids")
    out = te.compute((16, 64), lambda i, h: table[ids[i], h], name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([table, ids, out])})
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    ctx = tune_context(mod, target, num_threads=2)
    cands = [ms.MeasureCandidate(ctx.generate_design_space()[0], ms.arg_info.ArgInfo.from_prim_func(ctx.mod["main"]))]
    builder, runner = make_builder(workers=1, pooled=True), make_runner(MeasureOptions(number=1), target)
    try:
        [(costs, error, msg)] = build_and_run(builder, runner, target, cands)
        assert (error, msg) == (ERROR_NONE, None) and 0 < costs[0] < 1
    finally:
        close_runner(runner)
        builder.close()
