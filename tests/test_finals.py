"""A network's final programs are chosen by a second measurement (export/finals.py): the contenders are the
task's fastest records within the margin, they are measured again for real, and the check and the build take
the fastest of that measurement, whatever the search's first measurement said."""

from __future__ import annotations

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.timeout(600)


def _lucky_database(work):
    """One 128^3 matmul task whose records lie: a naive program (k innermost, B read across rows)
    recorded at 1.00 us, a tiled, vectorized one at 1.10 us, and a third at 2.00 us, outside
    the margin. Measured, the naive one is several times slower on any x86 CPU."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from costlab.datasets.extract import te_workload_task, workload_json_mod

    mod = workload_json_mod(te_workload_task("GMM:1,128,128,128")[1])
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    work.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(work))
    wl = db.commit_workload(mod)
    naive = Schedule(mod)
    naive.split(naive.get_loops(naive.get_sblock("Z"))[1], [2, 64])  # get_top_k passes over an empty trace
    fast = Schedule(mod)
    block = fast.get_sblock("Z")
    b, i, j, k = fast.get_loops(block)
    jo, ji = fast.split(j, [None, 16])
    fast.reorder(b, i, jo, k, ji)
    fast.vectorize(ji)  # one thread, as the naive one: a busy machine delays both alike
    far = Schedule(mod)
    far.split(far.get_loops(far.get_sblock("Z"))[1], [8, 16])
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    for sch, secs in ((naive, 1.00e-6), (fast, 1.10e-6), (far, 2.0e-6)):
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, [secs], target, args))
    return db, mod, target, (naive, fast, far)


def _stack(target):
    from costlab.export.workdir import MeasuringStack

    stack = MeasuringStack()
    builder, runner = stack.start(target, workers=2)
    return stack, builder, runner


def test_the_fastest_of_a_second_measurement_is_first_and_checked_first(tmp_path):
    from costlab.export.check import check_task
    from costlab.export.finals import contenders, remeasure

    db, mod, target, (naive, fast, _far) = _lucky_database(tmp_path / "w")
    assert [str(r.trace) for r in contenders(db, mod)] == [str(naive.trace), str(fast.trace)]  # 2.0 us is out
    stack, builder, runner = _stack(target)
    try:
        [order], stats = remeasure(db, [mod], builder, runner, target)
    finally:
        stack.close()
    assert [str(r.trace) for r, _ in order] == [str(fast.trace), str(naive.trace)]
    assert order[0][1] < order[1][1] and order[1][1] > 2e-6  # measured now, not the recorded 1 us
    assert stats["measured"] == 2 and stats["changed"] == 1
    # the check takes them in the new order: the fast one is the result, though it was not the database's best
    out = check_task(db, mod, target, records=[r for r, _ in order])
    assert out["status"] == "ok" and out["best_us"] == 1.1 and str(out["record"].trace) == str(fast.trace)


def test_a_task_with_one_contender_is_not_measured_again(tmp_path):
    from costlab.export.finals import remeasure

    db, mod, target, (naive, _fast, _far) = _lucky_database(tmp_path / "w")
    stack, builder, runner = _stack(target)
    try:
        [order], stats = remeasure(db, [mod], builder, runner, target, within=1.05)
    finally:
        stack.close()
    assert stats["measured"] == 0 and stats["changed"] == 0
    assert [(str(r.trace), s) for r, s in order] == [(str(naive.trace), 1e-6)]


def test_the_untuned_program_is_measured_with_a_tasks_contenders_its_one_contender_too(tmp_path):
    """``untuned``: the task's program as the untuned build schedules it runs in the same rounds as its
    contenders, a task with one contender included (measured now, not its recorded 1 us); a task with nothing
    measured gets no figure."""
    from costlab.export.finals import remeasure

    db, mod, target, (naive, _fast, _far) = _lucky_database(tmp_path / "w")
    from costlab.datasets.extract import te_workload_task, workload_json_mod

    other = workload_json_mod(te_workload_task("GMM:1,16,16,16")[1])  # no record in the database
    stack, builder, runner = _stack(target)
    try:
        [order, none], stats = remeasure(db, [mod, other], builder, runner, target, within=1.05, untuned=True)
    finally:
        stack.close()
    assert none == [] and stats["untuned_s"][1] is None
    assert stats["measured"] == 1 and [str(r.trace) for r, _ in order] == [str(naive.trace)]
    assert order[0][1] > 2e-6  # the naive 128^3 matmul measured now, not its recorded 1 us
    assert 0 < stats["untuned_s"][0] < float("inf")


def test_the_untuned_program_is_scheduled_on_a_copy_of_the_task():
    """DLight schedules a module that it alone holds in place: the task's own module (what the database's
    workload and the summary's trial counts match against) stays as extracted."""
    import tvm
    from tvm import te

    from costlab.export.finals import untuned_candidate

    x, w = te.placeholder((2, 16), name="x"), te.placeholder((16, 8), name="w")
    k = te.reduce_axis((0, 16), name="k")
    y = te.compute((2, 8), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="matmul")
    b = te.placeholder((8,), name="b")
    z = te.compute((2, 8), lambda i, j: y[i, j] + b[j], name="T_add")  # a network's Linear: matmul, bias added
    mod = tvm.IRModule({"main": te.create_prim_func([x, w, b, z])})
    before = mod.script()
    cand = untuned_candidate(mod, tvm.target.Target({"kind": "llvm", "num-cores": 2}))
    assert mod.script() == before
    assert cand is not None and cand.sch.mod.script() != before  # DLight's CPU rules scheduled the copy


def test_a_task_keeps_its_untuned_schedule_only_where_it_ran_faster_than_the_chosen_program():
    from costlab.export.finals import keep_untuned

    a, b, c, d = object(), object(), object(), object()
    finals = [[(a, 2e-6), (b, 3e-6)], [(c, 2e-6)], [(d, 5e-6)], [], [(a, 1e-6)]]
    # task 0: its chosen b (the check replaced a) against 2.5 us; 1: faster than untuned; 2: untuned failed;
    # 3: nothing chosen; 4: the chosen record is not among the measured ones
    chosen = [b, c, d, None, object()]
    before = list(chosen)
    kept = keep_untuned(chosen, finals, [2.5e-6, 3e-6, float("inf"), 1e-6, 1e-9])
    assert kept == [True, False, False, False, False]
    assert chosen == [None, *before[1:]]


def test_final_top_is_checked(tmp_path, capsys):
    from costlab.cli import main

    assert main(["tune", "--workload", "GMM:1,8,8,8", "--final-top", "-1", "--work-dir", str(tmp_path / "w"),
                 "--no-progress"]) == 2
    assert "--final-top must be 0-64" in capsys.readouterr().err


def test_the_cold_second_measurement_flushes_the_caches_and_restores_the_runner(tmp_path):
    """Measured cold (caches flushed of the weights before each of COLD_REPEATS runs), the contenders are still
    ordered by real runs (the tiled program first); the runner's own settings are back afterwards, and the
    stats say how they were measured."""
    from costlab.export.finals import remeasure
    from costlab.metaschedule.runners import COLD_REPEATS, cold_runs

    db, mod, target, (naive, fast, _far) = _lucky_database(tmp_path / "w")
    stack, builder, runner = _stack(target)
    try:
        before = runner.evaluator_config
        with cold_runs(runner):
            cfg = runner.evaluator_config
            assert cfg.enable_cpu_cache_flush and cfg.number == 1 and cfg.repeat >= COLD_REPEATS
            assert cfg.min_repeat_ms == 0
        assert runner.evaluator_config == before and not before.enable_cpu_cache_flush
        [order], stats = remeasure(db, [mod], builder, runner, target, cold=True)
        assert runner.evaluator_config == before
    finally:
        stack.close()
    assert [str(r.trace) for r, _ in order] == [str(fast.trace), str(naive.trace)]
    assert stats["measure"] == "cold" and stats["measured"] == 2


def test_final_measure_is_checked(tmp_path, capsys):
    from costlab.cli import main

    with pytest.raises(SystemExit) as exc:  # refused by the parser: its choices
        main(["tune", "--workload", "GMM:1,8,8,8", "--final-measure", "hot", "--work-dir", str(tmp_path / "w")])
    assert exc.value.code == 2 and "--final-measure" in capsys.readouterr().err
    from costlab.common.errors import UsageError
    from costlab.export.tune import TuneOptions

    with pytest.raises(UsageError, match="--final-measure"):
        TuneOptions(str(tmp_path / "w"), workloads=["GMM:1,8,8,8"], final_measure="hot").check()
    with pytest.raises(UsageError, match="--keep-untuned is one of auto, on, off"):
        TuneOptions(str(tmp_path / "w"), workloads=["GMM:1,8,8,8"], keep_untuned="yes").check()


def test_a_contender_that_failed_its_second_measurement_is_never_checked_nor_chosen(tmp_path):
    """A record whose second measurement failed (``inf``) is skipped by the check even where its first one makes
    it the fastest of the database: the check takes the next, and the result is never a failed program."""
    from costlab.export.check import check_task
    from costlab.metaschedule.traces import trace_text

    db, mod, target, (naive, fast, _far) = _lucky_database(tmp_path / "w")
    recs = {trace_text(r.trace): r for r in db.get_all_tuning_records()}
    naive_rec, fast_rec = recs[trace_text(naive.trace)], recs[trace_text(fast.trace)]
    out = check_task(db, mod, target, records=[fast_rec], skip=[naive_rec])
    assert out["status"] == "ok" and trace_text(out["record"].trace) == trace_text(fast.trace)
    assert all(trace_text(r.trace) != trace_text(naive.trace) for r in out["tried"])
    alone = check_task(db, mod, target, records=[], skip=[naive_rec])  # every contender failed: the others
    assert trace_text(alone["record"].trace) != trace_text(naive.trace)


def test_a_check_whose_worker_ended_checks_each_program_on_its_own(tmp_path, monkeypatch):
    """A program that crashes the check's process (an out-of-bounds read) ends the check of every program it
    shares the worker with: each is then checked in a worker of its own, so the others still count."""
    import costlab.export.check as check

    db, mod, target, _ = _lucky_database(tmp_path / "w")
    real, calls = check._verdicts_of, []

    def first_worker_dies(jobs, target, seed, timeout, workers=1, done=None):
        calls.append([len(scheduled) for _, scheduled in jobs])
        if len(calls) == 1:
            return [[f"{check.WORKER_ENDED} (ChildProcessError)"] * len(scheduled) for _, scheduled in jobs]
        return real(jobs, target, seed, timeout, workers, done)

    monkeypatch.setattr(check, "_verdicts_of", first_worker_dies)
    out = check.check_task(db, mod, target)
    assert calls == [[3], [1], [1], [1]] and out["status"] == "ok" and out["checked"][0]["result"] == "ok"


def test_many_tasks_are_checked_at_once_as_each_on_its_own(tmp_path):
    """A network's tasks are checked together in one pool of workers (each started once): every task gets the
    answer its own check gives, in the order asked, and a task with nothing measured gets ``none``."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.check import check_task, check_tasks
    from costlab.metaschedule.traces import trace_text

    db, mod, target, _ = _lucky_database(tmp_path / "w")
    small = workload_json_mod(te_workload_task("GMM:1,16,16,16")[1])
    sch = Schedule(small)
    sch.split(sch.get_loops(sch.get_sblock("Z"))[1], [4, 4])
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, db.commit_workload(small), [3e-7], target,
                                                     ms.arg_info.ArgInfo.from_prim_func(small["main"])))
    unmeasured = workload_json_mod(te_workload_task("GMM:1,8,8,8")[1])
    items = [(small, None, None), (unmeasured, None, None), (mod, None, None)]
    together = check_tasks(db, items, target, workers=2)
    alone = [check_task(db, m, target) for m, _, _ in items]
    assert [a["status"] for a in together] == [a["status"] for a in alone] == ["ok", "none", "ok"]
    for a, b in zip(together, alone):
        assert a["checked"] == b["checked"]
        assert [trace_text(r.trace) for r in a["tried"]] == [trace_text(r.trace) for r in b["tried"]]


def test_a_gpu_tasks_reference_is_built_for_this_machines_own_cpu(monkeypatch):
    """A GPU task's reference runs on the host CPU, compiled for it by LLVM's own name of it (generic x86-64
    code converts float16 in software, ~10x slower): never for a faked host's CPU, whose code might not run here.
    The float16 reference so built gives the generic build's output."""
    import numpy as np
    import tvm
    from tvm.target import codegen

    from costlab.common.host import FAKE_HOST_ENV
    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.check import close, reference_cpu_target
    from costlab.metaschedule.targets import host_cpu_name

    real = str(codegen.llvm_get_system_cpu())
    other = next(d for d in (FIXTURES / "hosts").iterdir() if (d / "llvm_cpu").read_text().strip() != real)
    monkeypatch.setenv(FAKE_HOST_ENV, str(other))  # a faked host of another CPU name
    assert host_cpu_name() != real
    target = reference_cpu_target()
    assert target == {"kind": "llvm", "mcpu": real}
    mod = workload_json_mod(te_workload_task("GMM:1,32,32,32,float16,float16")[1])
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, (1, 32, 32)).astype("float16") for _ in range(2)]
    outs = []
    for t in (target, {"kind": "llvm"}):
        args = [tvm.runtime.tensor(x) for x in inputs] + [tvm.runtime.tensor(np.zeros((1, 32, 32), "float16"))]
        tvm.compile(mod, target=tvm.target.Target(t))["main"](*args)
        outs.append(args[-1].numpy())
    assert close(outs[1], outs[0]) and np.any(outs[0] != 0)


def test_a_gathers_indices_stay_inside_the_table_it_reads():
    """An embedding's token ids index a table of a few rows (BERT's token types: 2): ids drawn up to 8 read past
    the table (TVM's take checks no bounds), so the reference differed from itself and every program was called
    wrong. Index arguments are drawn below the float arguments' extents."""
    import tvm
    from tvm import te

    from costlab.export.check import _compare_worker

    table = te.placeholder((2, 16), "float32", name="table")
    ids = te.placeholder((64,), "int64", name="ids")
    out = te.compute((64, 16), lambda i, j: table[ids[i], j], name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([table, ids, out])})
    assert _compare_worker(mod, [mod, mod], {"kind": "llvm", "num-cores": 2}, 0) == ["ok", "ok"]


def test_a_record_whose_trace_does_not_replay_is_failed_not_a_traceback(tmp_path):
    """A contender whose trace does not apply to the task (a database edited by hand, another TVM) ended the
    check, and the run after its search, in a traceback; it is failed with what TVM said, and the check goes on."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export.check import check_task

    db, mod, target, _ = _lucky_database(tmp_path / "w")
    small = workload_json_mod(te_workload_task("GMM:1,16,16,16")[1])
    sch = Schedule(small)
    sch.split(sch.get_loops(sch.get_sblock("Z"))[1], [4, 4])
    conv = workload_json_mod(te_workload_task("C2D:1,8,8,4,4,3,1,1")[1])  # has no block "Z"
    rec = ms.database.TuningRecord(sch.trace, db.commit_workload(conv), [3e-7], target,
                                   ms.arg_info.ArgInfo.from_prim_func(conv["main"]))
    out = check_task(db, conv, target, records=[rec])
    assert out["status"] == "wrong" and out["record"] is None
    assert out["checked"][0]["result"].startswith("failed: its trace does not replay on the task")


class _KilledWhenUnpacked:
    """A job's argument that ends the check's worker as it unpacks it (SIGKILL, which leaves no core file), as the
    out-of-memory killer ends it."""

    def __reduce__(self):
        import signal

        return signal.raise_signal, (signal.SIGKILL,)


def test_a_check_whose_worker_died_says_how_it_ended():
    """A check whose worker died read "the check's worker ended (ChildProcessError)": it names the signal now."""
    from costlab.export import check

    (got,) = check._verdicts_of([(_KilledWhenUnpacked(), ["a program"])], {"kind": "llvm"}, 0, 60.0)
    assert got == [f"{check.WORKER_ENDED} (ChildProcessError: Subprocess terminated (the worker was killed by "
                   "SIGKILL; the kernel's out-of-memory killer sends it))"]


def test_integer_and_boolean_outputs_must_equal_the_references():
    """An int32 accumulator in the thousands was let off by several units under the float tolerances (rtol 1e-3): a
    program off by a constant everywhere was "ok", could be chosen and go to the library as checked."""
    import numpy as np

    from costlab.export.check import close

    ref = np.full((4, 4), 3000, np.int32)
    assert close(ref, ref.copy()) and not close(ref, ref + 1) and not close(ref, ref - 2)
    flags = np.array([True, False, True])
    assert close(flags, flags.copy()) and not close(flags, ~flags)
    assert close(np.full(3, 3000.0, np.float32), np.full(3, 3000.5, np.float32))  # floats: the tolerance stays


def test_bfloat16_programs_are_checked_on_fractional_inputs_within_the_formats_rounding(monkeypatch):
    """bfloat16 arguments were drawn as the small integers of an index argument, whose products and sums round
    nowhere, and bfloat16 outputs compared exactly (numpy does not count ml_dtypes' types as floats): a program
    that sums in another order than the reference, one bfloat16 rounding apart, would have been called wrong."""
    import ml_dtypes
    import numpy as np
    import tvm
    from tvm import te

    from costlab.export import check

    ref = np.linspace(-3, 3, 64).astype(ml_dtypes.bfloat16)
    one_rounding = (ref.astype(np.float32) * (1 + 2.0 ** -8)).astype(ml_dtypes.bfloat16)
    assert not np.array_equal(ref, one_rounding) and check.close(ref, one_rounding)
    assert not check.close(ref, (ref.astype(np.float32) + 0.5).astype(ml_dtypes.bfloat16))
    for low in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):  # 8 epsilons would be a tolerance of 1 or 2
        eight = np.linspace(-3, 3, 64).astype(low)
        assert check.close(eight, eight.copy()) and not check.close(eight, np.zeros_like(eight))
        assert not check.close(eight, -eight)

    seen = []
    a = te.placeholder((8, 32), "bfloat16", name="A")
    k = te.reduce_axis((0, 32), "k")
    out = te.compute((8,), lambda i: te.sum(a[i, k].astype("float32"), axis=k), name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([a, out])})
    original = check.close
    monkeypatch.setattr(check, "close", lambda e, g, *rest: seen.append(e.copy()) or original(e, g, *rest))
    assert check._compare_worker(mod, [mod], {"kind": "llvm", "num-cores": 2}, 0) == ["ok"]
    drawn = seen[0].astype(np.float32)  # the input argument comes back as it went in
    assert np.any(drawn != np.round(drawn)) and np.all(np.abs(drawn) <= 1)


def test_an_extent_of_one_does_not_bound_the_indices_a_gather_is_checked_with(monkeypatch):
    """Indices were drawn below every float argument's least extent: a batch of one made that 1, so every index was
    0 and a gather that reads the wrong row passed as "ok"."""
    import tvm
    from tvm import te

    from costlab.export.check import _compare_worker

    table = te.placeholder((16, 8), "float32", name="W")
    ids = te.placeholder((1, 4), "int64", name="ids")

    def gather(first_only: bool):
        out = te.compute((1, 4, 8), lambda b, s, h: table[ids[b, 0 if first_only else s], h], name="out")
        return tvm.IRModule({"main": te.create_prim_func([table, ids, out])})

    verdicts = _compare_worker(gather(False), [gather(False), gather(True)], {"kind": "llvm", "num-cores": 2}, 0)
    assert verdicts[0] == "ok" and verdicts[1].startswith("wrong output")


def test_float32_outputs_of_small_values_are_not_close_to_zeros():
    """The absolute tolerance of 2e-3 let every output below it pass: a long softmax's zeros were "ok"."""
    import numpy as np

    from costlab.export.check import close

    softmax = np.full((4, 4096), 1 / 4096, np.float32)
    assert close(softmax, softmax * (1 + 1e-5)) and not close(softmax, np.zeros_like(softmax))
    assert close(np.full(3, 3000.0, np.float32), np.full(3, 3000.5, np.float32))


def test_a_gather_from_a_table_of_one_row_draws_its_indices_inside_it():
    """Extents of 1 left out of the indices' bound, a take from a table of one row (RoBERTa's token types with
    type_vocab_size 1) read past it: the reference differed from itself and every program was called wrong. An axis
    an index read from a buffer selects along bounds the indices, whatever its extent."""
    import tvm
    from tvm import te, topi

    from costlab.export.check import _compare_worker
    from costlab.metaschedule.structure import index_bounds

    table = te.placeholder((1, 64), "float32", name="A")
    ids = te.placeholder((1, 32), "int32", name="I")
    out = topi.take(table, ids, axis=0, mode="fast")
    mod = tvm.IRModule({"main": te.create_prim_func([table, ids, out])})
    assert index_bounds(mod) == {1: 1}
    assert _compare_worker(mod, [mod], {"kind": "llvm", "num-cores": 2}, 0) == ["ok"]


def test_each_index_argument_is_bounded_by_the_axis_it_selects_along():
    """One bound for every integer argument: an index of an axis of extent 1 (llama's index_tensor) drew every
    integer argument 0, the gathered integer table and the other axis's index too, so any program writing zeros
    passed; a scatter along an axis of 1 was not seen at all, and its reference wrote out of bounds."""
    import tvm
    from tvm import te, topi

    from costlab.export.check import _compare_worker
    from costlab.metaschedule.structure import index_bounds

    table = te.placeholder((1, 16), "int64", name="T")
    rows = te.placeholder((4,), "int64", name="r")
    cols = te.placeholder((4,), "int64", name="c")

    def gather(first_column: bool):
        out = te.compute((4,), lambda k: table[rows[k], 0 if first_column else cols[k]], name="out")
        return tvm.IRModule({"main": te.create_prim_func([table, rows, cols, out])})

    assert index_bounds(gather(False)) == {1: 1, 2: 16}
    verdicts = _compare_worker(gather(False), [gather(False), gather(True)], {"kind": "llvm", "num-cores": 2}, 0)
    assert verdicts[0] == "ok" and verdicts[1].startswith("wrong output")
    data, updates = te.placeholder((1, 16), "float32", name="x"), te.placeholder((1, 4), "float32", name="u")
    ids = te.placeholder((1, 4), "int64", name="i")
    scatter = topi.scatter_elements(data, ids, updates, 0)
    assert index_bounds(tvm.IRModule({"main": te.create_prim_func([data, ids, updates, scatter])}), default=8) == {1: 1}


def test_half_precision_outputs_of_small_values_are_not_close_to_zeros():
    """float16 and bfloat16 tolerances were relative to the output's largest value taken as at least 1: a softmax
    over 128 (values near 1/128) was "close" to zeros and to another row's."""
    import ml_dtypes
    import numpy as np

    from costlab.export.check import close

    for dtype in (np.float16, ml_dtypes.bfloat16):
        softmax = np.full((8, 128), 1 / 128, np.float32).astype(dtype)
        assert close(softmax, softmax.copy()) and not close(softmax, np.zeros_like(softmax))


def test_an_index_of_a_narrow_integer_type_is_bounded_by_its_table_too():
    """Only int32/int64 arguments took their bound: an int8 index into a table of 6 rows was drawn up to 7, read
    past the table, and the reference differed from itself."""
    import tvm
    from tvm import te, topi

    from costlab.export.check import _compare_worker

    table, ids = te.placeholder((6, 4), "float32", name="x"), te.placeholder((5,), "int8", name="i")
    mod = tvm.IRModule({"main": te.create_prim_func([table, ids, topi.take(table, ids, axis=0, mode="fast")])})
    assert _compare_worker(mod, [mod, mod], {"kind": "llvm", "num-cores": 2}, 3) == ["ok", "ok"]


def test_a_table_of_symbolic_rows_gives_no_index_bound_and_no_error():
    """A symbolic extent (a cast of a shape variable has a ``value`` too) was taken for a number: the bound's
    int() raised, and every check of such a task would have failed."""
    import tvm
    from tvm import te, topi

    from costlab.metaschedule.structure import index_bounds

    rows = te.var("n", "int32").astype("int64")  # a Cast: its ``value`` is the variable
    table, ids = te.placeholder((rows, 4), "float32", name="x"), te.placeholder((5,), "int64", name="i")
    mod = tvm.IRModule({"main": te.create_prim_func([table, ids, topi.take(table, ids, axis=0, mode="fast")])})
    assert index_bounds(mod) == {}


def test_a_long_float16_sum_added_in_another_order_passes_and_one_missing_a_sixteenth_does_not():
    """A float16 matmul over 16,384 values summed in a float16 accumulator: a correct program that adds in another
    order than the reference (an rfactor into 16 partial sums) differs by more than the fixed float16 tolerance
    (2% of the output's largest value) and was called wrong; the tolerance now grows with the sum's length
    (``structure.narrow_float_sums``), and a program that drops the last sixteenth of the sum is still
    caught. So for the same sum cast to a float32 output, which the float32 tolerance judged alone."""
    import tvm
    from tvm import te

    from costlab.export.check import _compare_worker
    from costlab.metaschedule.structure import narrow_float_sums

    def gmm(k_used: int, n: int = 16384, dtype: str = "float16", cast: bool = False):
        a, b = te.placeholder((16, n), dtype, name="A"), te.placeholder((n, 16), dtype, name="B")
        k = te.reduce_axis((0, k_used), name="k")
        z = te.compute((16, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="Z")
        if cast:
            z = te.compute((16, 16), lambda i, j: z[i, j].astype("float32"), name="out")
        return tvm.IRModule({"main": te.create_prim_func([a, b, z])})

    def rfactor(mod):
        sch = tvm.s_tir.Schedule(mod)
        _ko, ki = sch.split(sch.get_loops(sch.get_sblock("Z"))[-1], [None, 16])
        sch.rfactor(ki, 0)
        return sch.mod

    assert narrow_float_sums(gmm(16384)) == narrow_float_sums(gmm(16384, cast=True)) == {"float16": 16384}
    assert narrow_float_sums(gmm(64, 64, "float32")) == {}  # a float32 accumulator rounds to 24 bits
    target = {"kind": "llvm", "num-cores": 2}
    for cast in (False, True):
        reference = gmm(16384, cast=cast)
        verdicts = _compare_worker(reference, [rfactor(reference), gmm(16384 - 1024, cast=cast)], target, 0)
        assert verdicts[0] == "ok" and verdicts[1].startswith("wrong output"), (cast, verdicts)


def _legalized(op, shapes: list, dtypes: list):
    """The TIR function Relax legalizes ``op`` of arguments of these shapes and dtypes into, as a task's module (how
    a network's tasks are made)."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    args = [relax.Var(f"a{i}", relax.TensorType(s, d)) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    with bb.function("main", args):
        with bb.dataflow():
            out = bb.emit_output(op(*args))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def test_a_gather_nds_rows_of_indices_are_each_bounded_by_their_own_axis():
    """A gather_nd's indices hold one row per data axis: a data axis of one (a batch of one) bounded every row to
    0, so a program that read the wrong position along the other axis passed the check. Each row is now drawn
    below its own axis's extent, through the transpose Relax puts before a gather_nd too."""
    import numpy as np
    import tvm
    from tvm import relax, te, topi

    from costlab.export.check import _compare_worker
    from costlab.metaschedule.structure import index_bounds

    data, ind = te.placeholder((1, 16, 4), "float32", name="x"), te.placeholder((2, 5), "int64", name="i")
    reference = tvm.IRModule({"main": te.create_prim_func([data, ind, topi.gather_nd(data, ind)])})
    wrong = te.compute((5, 4), lambda k, j: data[ind[0, k], ind[0, k], j], name="T_gather_nd")  # row 0 twice
    bounds = index_bounds(reference)
    assert list(bounds) == [1] and np.array_equal(bounds[1], [[1], [16]])
    target = {"kind": "llvm", "num-cores": 2}
    verdicts = _compare_worker(reference, [reference, tvm.IRModule({"main": te.create_prim_func([data, ind, wrong])})],
                               target, 0)
    assert verdicts[0] == "ok" and verdicts[1].startswith("wrong output"), verdicts
    # Relax: indices of shape (5, 2), transposed into rows first
    legal = _legalized(relax.op.gather_nd, [(1, 16, 4), (5, 2)], ["float32", "int64"])
    assert np.array_equal(index_bounds(legal)[1], [[1, 16]])
    ind = te.placeholder((5, 2), "int64", name="i")
    rows = te.compute((2, 5), lambda a, b: ind[b, a], name="T_transpose")
    wrong = te.compute((5, 4), lambda k, j: data[rows[0, k], rows[0, k], j], name="T_gather_nd")
    verdicts = _compare_worker(legal, [legal, tvm.IRModule({"main": te.create_prim_func([data, ind, wrong])})],
                               target, 0)
    assert verdicts[0] == "ok" and verdicts[1].startswith("wrong output"), verdicts


def test_indices_that_add_two_loaded_values_stay_within_the_table_together():
    """``x[a[k] + b[k]]``: each index argument was bounded by the table's rows alone, so their sum read past a
    table of under 15 rows. Each is drawn below half of it now; an index read through another (``x[c[a[k]]]``)
    keeps its own table's bound."""
    import tvm
    from tvm import te

    from costlab.export.check import _compare_worker
    from costlab.metaschedule.structure import index_bounds

    table = te.placeholder((6, 4), "float32", name="x")
    a, b = (te.placeholder((5,), "int64", name=n) for n in "ab")
    c = te.placeholder((3,), "int64", name="c")
    added = te.compute((5, 4), lambda k, j: table[a[k] + b[k], j], name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([table, a, b, added])})
    assert index_bounds(mod) == {1: 3, 2: 3}  # 2 + 2 < 6
    through = te.compute((5, 4), lambda k, j: table[c[a[k]], j], name="out")
    assert index_bounds(tvm.IRModule({"main": te.create_prim_func([table, a, c, through])})) == {1: 3, 2: 6}
    assert _compare_worker(mod, [mod], {"kind": "llvm", "num-cores": 2}, 0) == ["ok"]



def test_a_flattened_index_keeps_each_axis_within_its_extent_and_its_column_free():
    """Relax writes scatter_elements and index_put through a flattened position, ``out[flat // W, flat % W]``, with
    TVM's wrap of a negative index (``a[k] + (a[k] < 0) * n``) in it. Every index was bounded by every axis its
    position reaches, so a batch of one drew every column 0 (a program ignoring the column passed); and an axis
    of one folded into its neighbour's index let the indices' sum write past the buffer (the reference itself
    crashed). Each index is now kept within its axis by its range (``structure._interval``), lowering the bound of
    the index that moves it most: the row before the column."""
    import tvm
    from tvm import relax

    from costlab.export.check import _compare_worker, _verdicts_of
    from costlab.metaschedule.structure import index_bounds

    scatter = _legalized(lambda d, i, u: relax.op.scatter_elements(d, i, u, axis=1),
                         [(3, 2), (3, 2), (3, 2)], ["float32", "int64", "float32"])
    assert index_bounds(scatter, default=8) == {1: 2}
    put = _legalized(lambda d, i, j, u: relax.op.index_put(d, relax.Tuple([i, j]), u),
                     [(4, 16), (5,), (5,), (5,)], ["float32", "int64", "int64", "float32"])
    assert index_bounds(put, default=8) == {1: 4, 2: 8}  # rows below 4, columns up to the cap of 8
    # a batch of one: the row is 0, the column is drawn, and a program writing every value to column 0 is caught
    one = _legalized(lambda d, i, j, u: relax.op.index_put(d, relax.Tuple([i, j]), u),
                     [(1, 16), (5,), (5,), (5,)], ["float32", "int64", "int64", "float32"])
    assert index_bounds(one, default=5) == {1: 1, 2: 5}
    text = one.script()
    column = "a2[v % T.int64(5)] + T.Cast(\"int64\", a2[v % T.int64(5)] < T.int64(0)) * T.int64(16)"
    assert column in text
    wrong = tvm.script.from_source(text.replace(column, "T.int64(0)"))
    verdicts = _compare_worker(one, [one, wrong], {"kind": "llvm", "num-cores": 2}, 0)
    assert verdicts[0] == "ok" and verdicts[1].startswith("wrong output"), verdicts
    # an axis of one folded into its neighbour's index: the reference stays within its buffer (it crashed)
    folded = _legalized(lambda d, i, u: relax.op.scatter_elements(d, i, u, axis=1),
                        [(2, 1, 16), (2, 1, 16), (2, 1, 16)], ["float32", "int64", "float32"])
    assert _verdicts_of([(folded, [folded])], {"kind": "llvm", "num-cores": 2}, 0, 120.0) == [["ok"]]
    # each index by its own axis, which TVM's wrap of a negative index names (x + (x < 0) * n): the index into the
    # axis of one is the one drawn 0, not the row's (the first version lowered the first argument among equals)
    for shape, cap, bounds in [((4, 1, 6), 4, {1: 4, 2: 1, 3: 4}), ((3, 4, 1), 3, {1: 3, 2: 3, 3: 1})]:
        put = _legalized(lambda d, i, j, k, u: relax.op.index_put(d, relax.Tuple([i, j, k]), u),
                         [shape, (5,), (5,), (5,), (5,)], ["float32", "int64", "int64", "int64", "float32"])
        assert index_bounds(put, default=cap) == bounds
    # a bound is lowered one at a time (halved, 3 went to 1 where 3 fits), and a narrow integer index keeps the cap
    # of 8 the check gives it (it took the check's least float extent)
    rows = _legalized(lambda d, i, u: relax.op.scatter_elements(d, i, u, axis=0),
                      [(3, 6), (3, 6), (3, 6)], ["int32", "int64", "int32"])
    assert index_bounds(rows, default=8) == {1: 3}
    take = _legalized(lambda d, i: relax.op.take(d, i, axis=0), [(4, 1), (2, 3)], ["float32", "uint8"])
    assert index_bounds(take, default=2) == {1: 4}
