"""Measuring through a real local RPC tracker that goes away: nothing is recorded for candidates that were not
measured, the command stops with one line, and a re-run with a tracker measures exactly what is missing."""

from __future__ import annotations

import json
import threading
import time

import pytest

from costlab.common.errors import UsageError
from costlab.datasets import open_dataset
from costlab.datasets.extract import extract
from costlab.datasets.measure import MeasureOptions, measure
from costlab.export.tune import TuneOptions, tune
from costlab.metaschedule.results import ERROR_NONE

pytestmark = pytest.mark.slow


def _local_rpc():
    from tvm.s_tir.meta_schedule.testing.local_rpc import LocalRPC

    from costlab.metaschedule.rpc import tracker_problem

    rpc = LocalRPC(silent=True)
    deadline = time.time() + 60
    while tracker_problem(rpc.tracker_host, rpc.tracker_port, rpc.tracker_key) and time.time() < deadline:
        time.sleep(0.2)  # the server registers its key with the tracker on its own
    return rpc


def _stop(rpc) -> None:
    """The server and tracker gone: stopped, and no longer answering (on a loaded machine a stopped tracker's
    process answered for a moment after terminate returned, and a command meant to find it gone measured through
    it)."""
    from costlab.metaschedule.rpc import tracker_problem

    host, port, key = rpc.tracker_host, rpc.tracker_port, rpc.tracker_key
    rpc.server.terminate()
    rpc.tracker.terminate()
    def gone() -> bool:
        return (tracker_problem(host, port, key, timeout=1.0) or "").startswith("no RPC tracker answers")

    deadline = time.time() + 60
    while not gone() and time.time() < deadline:
        time.sleep(0.2)
    assert gone(), "the local RPC tracker still answers after it was stopped"


def _rpc(rpc, wait: float = 0.0) -> dict:
    return dict(rpc_key=rpc.tracker_key, rpc_host=rpc.tracker_host, rpc_port=rpc.tracker_port, rpc_wait=wait)


def test_measure_stops_without_failed_records_and_continues(tmp_path):
    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,4,4,4"])
    opts = dict(target="llvm -num-cores=1", seed=0, builder_timeout=60.0, number=1, repeat=1, min_repeat_ms=0,
                progress=False, batch_size=2, platform="remote")
    rpc = _local_rpc()
    try:
        measure(path, MeasureOptions(per_task=2, **opts, **_rpc(rpc)))
    finally:
        _stop(rpc)  # gone before the next command's first batch: its tracker check fails, after --rpc-wait 1 s
    with pytest.raises(UsageError, match=r"no RPC tracker answers .* stopped after 0 candidates, every one saved"):
        measure(path, MeasureOptions(per_task=4, **opts, **_rpc(rpc, wait=1.0)))
    with open_dataset(path) as ds:
        assert len(ds.records("remote")) == 2  # no failed record for the programs that were never run
    with _local_rpc() as again:
        measure(path, MeasureOptions(per_task=4, **opts, **_rpc(again)))
    with open_dataset(path) as ds:
        table = ds.records("remote")
        assert len(table) == 4 and len(set(table.program_id.tolist())) == 4
        assert (table.error == ERROR_NONE).all()


def _records(work) -> list:
    path = work / "database_tuning_record.json"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_tune_stops_when_the_tracker_goes_away_and_the_rerun_fills_the_budget(tmp_path):
    """The tracker answers at the start and goes away after the first measured batch: the run ends with one
    error, the database holds only real measurements (none failed), and the re-run with a tracker measures
    the rest of the budget."""
    work = tmp_path / "w"
    opts = dict(workloads=["GMM:1,8,8,8"], target="llvm -num-cores=1", trials=6, per_iter=2, population=16,
                work_dir=str(work), progress=False, seed=0)
    rpc = _local_rpc()

    def stop_after_first_batch():
        history = work / "progress.jsonl"
        deadline = time.time() + 300
        while time.time() < deadline and not (history.exists() and history.read_text().strip()):
            time.sleep(0.05)
        _stop(rpc)

    watcher = threading.Thread(target=stop_after_first_batch, daemon=True)
    watcher.start()
    try:
        with pytest.raises(UsageError, match=r"no RPC tracker answers .* the run stopped with \d measured trials"):
            tune(TuneOptions(**opts, **_rpc(rpc)))
    finally:
        _stop(rpc)  # however the run ended, no tracker or server process outlives the test
    watcher.join()
    first = _records(work)
    assert 2 <= len(first) < 6
    assert all(r[1][1] and r[1][1][0] < 1e9 for r in first)  # every record is a measurement, none a connection failure
    with _local_rpc() as again:
        summary = tune(TuneOptions(**opts, **_rpc(again)))
    records = _records(work)
    assert len(records) == 6 and summary["tasks"][0]["trials"] == 6
    assert all(r[1][1] and r[1][1][0] < 1e9 for r in records)


def test_a_run_measured_on_a_remote_device_is_never_continued_exploited_or_added_here(tmp_path, capsys):
    """A tuning run through ``--rpc-key`` records it: its timings are the device's, and the host its record names
    ran only the search. Continuing it without the key, exploiting it (which measures here) or adding it to a
    library (of the machine that measured) would mix two machines' timings; each is one line and exit 2."""
    import shutil
    from pathlib import Path

    from costlab.cli import main
    from costlab.common.host import host_info

    work = tmp_path / "w"
    shutil.copytree(Path(__file__).parent / "fixtures" / "ms_tune_db", work)
    (work / "costlab_run.json").write_text(json.dumps(dict(host=host_info(), rpc_key="board")))
    def files():  # what the work dir holds, its lock file aside
        return {p.name: p.read_bytes() for p in work.iterdir() if not p.name.endswith(".lock")}

    before = files()
    for argv in (["tune", "--workload", "GMM:1,16,16,16", "--target", "llvm -num-cores=2", "--trials", "2",
                  "--work-dir", str(work), "--no-library", "--no-progress"],
                 ["exploit", "--work-dir", str(work), "--trials", "2", "--target", "llvm -num-cores=2"],
                 ["library", "add", str(work), "--library", str(tmp_path / "lib"), "--no-progress"]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "remote device (--rpc-key board)" in err and len(err.splitlines()) == 1, err
    assert files() == before


@pytest.mark.timeout(300)  # the hang this is about would otherwise hold the suite
def test_a_device_that_dies_mid_batch_stops_the_measurement_after_rpc_wait(tmp_path):
    """A server killed while a batch runs: TVM queues the runner's next request at the tracker for a device of the
    key, without a limit, and the command hung for good (``--rpc-wait`` was never applied). The guard asks the
    tracker while it waits, gives up ``rpc_wait`` seconds after the device went, and the command stops with one
    line, every record saved a measurement."""
    import psutil

    path = tmp_path / "d.h5"
    extract(path, workloads=["GMM:1,64,64,64"])
    opts = dict(target="llvm -num-cores=1", seed=0, number=20, repeat=3, progress=False, batch_size=4,
                platform="remote")
    rpc = _local_rpc()
    server = psutil.Process(rpc.server.proc._proc.pid)
    killed = []

    def kill_in_a_session():
        deadline = time.time() + 120
        while time.time() < deadline and len(server.children(recursive=True)) < 2:  # a session runs a candidate
            time.sleep(0.05)
        time.sleep(0.3)
        for p in [*server.children(recursive=True), server]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        killed.append(time.time())

    watcher = threading.Thread(target=kill_in_a_session, daemon=True)
    watcher.start()
    try:
        with pytest.raises(UsageError, match=r"has no device of key .* stopped after \d+ candidates, every one saved"):
            measure(path, MeasureOptions(per_task=8, **opts, **_rpc(rpc, wait=3.0)))
        assert killed and time.time() - killed[0] < 60
    finally:
        _stop(rpc)
    watcher.join()
    with open_dataset(path) as ds:  # what was saved (maybe nothing) was measured: no failure of the lost device
        saved = ds.records("remote").error if "remote" in ds.record_platforms() else []
    assert all(e == ERROR_NONE for e in saved)


@pytest.mark.timeout(60)  # the hang this is about would otherwise hold the suite
def test_a_tracker_that_accepts_but_never_answers_is_a_problem_not_a_hang():
    """A tracker stopped (SIGSTOP) or on a frozen host still accepts connections and never answers: TVM's tracker
    session has no timeout, so the guard's check before each batch, and its polling during one, waited for good."""
    import socket

    from costlab.metaschedule.rpc import tracker_problem

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel accepts connections; nothing ever reads or answers them
        began = time.time()
        why = tracker_problem("127.0.0.1", silent.getsockname()[1], "k", timeout=1.0)
    assert why is not None and why.startswith("no RPC tracker answers at 127.0.0.1:") and "no answer in 1 s" in why
    assert time.time() - began < 30


def test_a_gather_task_is_measured_on_a_remote_device_on_indices_inside_its_table():
    """The RPC runner's arguments are the device's own fill, int32/int64 all 0, as the local runner's: MetaSchedule's
    fill gave an index argument a float's bits, and a take read its table there (the device's process killed)."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import build_and_run, close_runner, make_runner
    from costlab.metaschedule.tune_context import tune_context

    table = te.placeholder((4096, 64), "float32", name="W")
    ids = te.placeholder((16,), "int64", name="ids")
    out = te.compute((16, 64), lambda i, h: table[ids[i], h], name="out")
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    ctx = tune_context(tvm.IRModule({"main": te.create_prim_func([table, ids, out])}), target, num_threads=1)
    cands = [ms.MeasureCandidate(ctx.generate_design_space()[0], ms.arg_info.ArgInfo.from_prim_func(ctx.mod["main"]))]
    with _local_rpc() as rpc:
        runner = make_runner(MeasureOptions(number=1, **_rpc(rpc)), target)
        builder = make_builder(workers=1, pooled=True, shared=False)  # a tar the device links, as an RPC run's
        try:
            [(costs, error, msg)] = build_and_run(builder, runner, target, cands)
        finally:
            close_runner(runner)
            builder.close()
    assert (error, msg) == (ERROR_NONE, None) and 0 < costs[0] < 1
