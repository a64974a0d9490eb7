"""PSA: the trace simulator against the TIR walk, the formula's ranking, measured records, bad traces, GPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

import _sched_cases as cases  # noqa: E402
from costlab.featurizers import create  # noqa: E402
from costlab.featurizers.psa import TaskModel, Unsupported, estimate, program_of, simulate, spec_for_platform, spec_for_target  # noqa: E402

@pytest.fixture
def measured():
    return cases.measured_dataset()


CPU_CASES = {
    "naive": (cases.matmul, cases.naive),
    "tiled": (cases.matmul, cases.cpu_tiled),
    "tiled+relu": (cases.matmul_relu, lambda m: cases.cpu_tiled(m, (2, 2, 2, 8), (2, 2, 2, 16), (8, 8), 16, True)),
    "conv, pad inlined": (cases.conv2d, cases.cpu_conv),
    "conv, pad at tile": (cases.conv2d, lambda m: cases.cpu_conv(m, inline_pad=False)),
    "rfactor": (cases.matmul, cases.cpu_rfactor),
    "layout rewrite": (lambda: cases.matmul(64), cases.cpu_layout),
}


def _squared_plus_one():
    """B = A + 1, C = B * B: C loads B twice, so inlining B computes its add once per load."""
    from tvm import te

    a = te.placeholder((64, 64), "float32", name="A")
    b = te.compute((64, 64), lambda i, j: a[i, j] + 1.0, name="B")
    c = te.compute((64, 64), lambda i, j: b[i, j] * b[i, j], name="C")
    return cases.module(te.create_prim_func([a, c]))


def _inline(name):
    def schedule(mod):
        from tvm.s_tir import Schedule

        sch = Schedule(mod)
        sch.compute_inline(sch.get_sblock(name)) if name == "B" else sch.reverse_compute_inline(sch.get_sblock(name))
        return sch
    return schedule


def _matmul_bias():
    """C = A @ B, D = bias[j] + C: the epilogue reads the bias before the product (as Relax's matmul + add)."""
    from tvm import te

    a = te.placeholder((64, 64), "float32", name="A")
    b = te.placeholder((64, 128), "float32", name="B")
    bias = te.placeholder((128,), "float32", name="bias")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 128), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    d = te.compute((64, 128), lambda i, j: bias[j] + c[i, j], name="D")
    return cases.module(te.create_prim_func([a, b, bias, d]))


def _epilogue_at_tile(mod):
    """MetaSchedule's CPU tiling with the bias add (no cache write) moved under the second spatial tile."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i0, i1, i2, i3 = sch.split(i, [2, 4, 2, 4])
    j0, j1, j2, j3 = sch.split(j, [2, 2, 2, 16])
    k0, k1 = sch.split(k, [16, 4])
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    sch.reverse_compute_at(sch.get_sblock("D"), j1)
    return sch


CPU_CASES["matmul + bias, the epilogue at the tile"] = (_matmul_bias, _epilogue_at_tile)
CPU_CASES["inlined producer loaded twice"] = (_squared_plus_one, _inline("B"))
CPU_CASES["consumer loading its producer twice, reverse-inlined"] = (_squared_plus_one, _inline("C"))


@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_trace_simulation_matches_tir_walk_cpu(name):
    make_mod, make_sch = CPU_CASES[name]
    mod = make_mod()
    sch = make_sch(mod)
    ref = program_of(sch.mod)
    sim = simulate(TaskModel(mod), json.dumps(cases.trace_of(sch)))
    assert sim.exact and ref.exact
    assert sim.signature() == ref.signature()  # loops, kinds, pragmas, FLOPs, every footprint at every depth


def test_trace_simulation_matches_tir_walk_gpu():
    mod = cases.matmul()
    sch = cases.gpu_tiled(mod)
    ref = program_of(sch.mod, gpu=True)
    sim = simulate(TaskModel(mod, gpu=True), cases.trace_of(sch))
    assert sim.signature() == ref.signature()
    kinds = {lp.kind for s in sim.stmts for lp in s.loops}
    assert {"blockIdx.x", "vthread.x", "threadIdx.x", "vectorized"} <= kinds
    scopes = {a.scope for s in sim.stmts for a in s.accesses}
    assert {"shared", "local", "global"} <= scopes


def test_psa_ranks_naive_matmul_below_tiled_parallel_vectorized():
    mod = cases.matmul(256)
    bad = cases.naive(mod)
    good = cases.cpu_tiled(mod, (4, 4, 2, 8), (4, 2, 2, 16), (32, 8))
    psa = create("psa")
    out = psa.featurize_candidates(mod, tvm.target.Target(cases.LLVM), [bad, good])
    est_bad, est_good = out["estimate"]
    assert np.all(out["valid"])
    # a scalar single-core triple loop streaming B with stride 256 against 2 cores, vector units and tiles
    assert est_bad > 4 * est_good, (est_bad, est_good)
    assert out["score"][1] > out["score"][0]
    # the trace path gives the same numbers
    spec = spec_for_target(cases.LLVM)
    task = TaskModel(mod)
    for sch, est in ((bad, est_bad), (good, est_good)):
        assert estimate(simulate(task, cases.trace_of(sch)), spec) == pytest.approx(est, rel=1e-9)


@pytest.mark.slow
def test_bad_schedule_really_is_slower_when_measured():
    """The ranking above is not an artefact of the formula: built and run, the naive matmul is slower."""
    mod = cases.matmul(256)
    target = tvm.target.Target(cases.LLVM)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.random.rand(256, 256).astype("float32"), dev) for _ in range(2)]
    args.append(tvm.runtime.tensor(np.zeros((256, 256), "float32"), dev))
    times = []
    for sch in (cases.naive(mod), cases.cpu_tiled(mod, (4, 4, 2, 8), (4, 2, 2, 16), (32, 8))):
        run = tvm.compile(sch.mod, target=target).jit()
        times.append(min(run.time_evaluator("main", dev, number=3, repeat=3)(*args).results))
    assert times[0] > 2 * times[1], times


def test_measured_records(measured):
    path, platform = measured
    from costlab.datasets import open_dataset

    psa = create("psa")
    with open_dataset(path) as ds:
        n = ds.num_records(platform)
        out = psa.featurize_records(ds, platform, np.arange(n))
        assert out["estimate"].shape == (n,) and out["valid"].all()
        assert np.isfinite(out["estimate"]).all() and (out["estimate"] > 0).all()
        assert psa.stats["simulated"] == n and psa.stats["fallback"] == 0
        # the formula tells programs apart and, over the tasks, its order agrees with the measured one
        # (mean rank correlation with latency on the records that ran; +0.46 over 42 held-out tasks in
        # benchmarks/psa_recall.py, see docs/featurizers.md)
        lat = ds.records(platform).latency()
        rhos = []
        for tr in ds.iter_tasks(platform):
            ok = np.isfinite(lat[tr.rows])
            est = out["estimate"][tr.rows][ok]
            assert len(np.unique(est)) > 1
            if ok.sum() >= 8:
                rank_e = np.argsort(np.argsort(est))
                rank_l = np.argsort(np.argsort(lat[tr.rows][ok]))
                rhos.append(np.corrcoef(rank_e, rank_l)[0, 1])
        assert rhos and np.mean(rhos) > 0.2, rhos


def test_unreplayable_trace_is_reported_not_fatal(tmp_path):
    from costlab.datasets import open_dataset

    mod = cases.matmul(64)
    good = json.dumps(cases.trace_of(cases.cpu_tiled(mod, (2, 2, 2, 8), (2, 2, 2, 8), (8, 8))))
    broken = good.replace('"C"', '"no_such_block"')
    assert broken != good
    cases.dataset_of(tmp_path / "d.h5", cases.LLVM, [("matmul", mod, [good, broken, "not json"])])
    psa = create("psa")
    with open_dataset(tmp_path / "d.h5") as ds:
        out = psa.featurize_records(ds, "p", np.arange(3))
    assert out["valid"].tolist() == [True, False, False]
    assert np.isfinite(out["estimate"][0]) and np.isinf(out["estimate"][1:]).all()
    assert out["score"][1] == 0.0
    assert psa.stats["invalid"] == 2


def test_a_record_the_formula_fails_on_is_invalid_alone(tmp_path, monkeypatch):
    """An error of the estimate itself (not of the replay) on one record makes that record invalid, the others
    of the batch estimated, in their rows."""
    import costlab.featurizers.psa.featurizer as featurizer
    from costlab.datasets import open_dataset

    mod = cases.matmul(64)
    traces = [json.dumps(cases.trace_of(cases.cpu_tiled(mod, (2, 2, 2, 8), (2, 2, 2, 8), (8, 8), unroll=u)))
              for u in (0, 16, 64)]
    cases.dataset_of(tmp_path / "d.h5", cases.LLVM, [("matmul", mod, traces)])
    calls = []

    def second_fails(program, spec):
        calls.append(1)
        if len(calls) == 2:
            raise ZeroDivisionError("float division by zero")
        return estimate(program, spec)

    monkeypatch.setattr(featurizer, "estimate", second_fails)
    psa = create("psa")
    with open_dataset(tmp_path / "d.h5") as ds:
        out = psa.featurize_records(ds, "p", np.arange(3))
    assert out["valid"].tolist() == [True, False, True] and psa.stats["invalid"] == 1
    assert np.isfinite(out["estimate"][[0, 2]]).all() and out["score"][1] == 0.0


def test_unsupported_primitive_falls_back_to_the_tir_walk(tmp_path):
    """A trace using a primitive the simulator does not model (reindex) is replayed and walked instead."""
    from costlab.datasets import open_dataset

    mod = cases.matmul(64)
    sch = cases.naive(mod)
    sch.reindex(sch.get_sblock("C"), ("write", 0))
    trace = cases.trace_of(sch)
    with pytest.raises(Unsupported, match="ReIndex"):
        simulate(TaskModel(mod), trace)
    cases.dataset_of(tmp_path / "d.h5", cases.LLVM, [("matmul", mod, [json.dumps(trace)])])
    psa = create("psa")
    with open_dataset(tmp_path / "d.h5") as ds:
        out = psa.featurize_records(ds, "p", np.arange(1))
        spec = spec_for_platform(ds.platforms["p"])  # the dataset's CPU (its -mcpu's), not this machine's
    assert out["valid"].all() and psa.stats["fallback"] == 1
    assert out["estimate"][0] == pytest.approx(estimate(program_of(sch.mod), spec))


def test_gpu_candidates_without_a_gpu():
    mod = cases.matmul(128)
    target = tvm.target.Target(cases.CUDA)
    fit = cases.gpu_tiled(mod)
    coarse = cases.gpu_tiled(mod, tiles=((1, 1, 2, 8, 8), (1, 1, 4, 4, 8), (16, 1, 8)))
    too_big = cases.gpu_tiled(mod, tiles=((1, 1, 32, 2, 2), (1, 1, 64, 1, 2), (8, 2, 8)))  # 2048 threads
    out = create("psa").featurize_candidates(mod, target, [fit, coarse, too_big])
    est = out["estimate"]
    assert np.isfinite(est[:2]).all() and est[0] > 0
    assert np.isinf(est[2]) and not out["valid"][2]  # more threads than a block may have
    # 16 threads per block on 108 SMs leaves most of the GPU idle; 128 threads and 8 blocks use more
    assert est[1] > est[0]


def test_config_round_trip_and_bad_mode():
    from costlab.featurizers import from_json

    f = create("psa", {"mode": "tir", "spec": {"cores": 4}})
    g = from_json(json.loads(json.dumps(f.to_json())))
    assert g.config == f.config and g.fingerprint == f.fingerprint
    with pytest.raises(ValueError, match="mode"):
        create("psa", {"mode": "fast"})
    with pytest.raises(ValueError, match="unknown config keys"):
        create("psa", {"cores": 4})


def test_task_scale_divides_by_the_first_best_and_ranks_unreadable_programs_last():
    from costlab.featurizers.psa import TaskScale

    scale = TaskScale([0.0, 2.0, 4.0, -1.0, np.nan, -np.inf])
    assert scale.best == 4.0  # fixed by the first population
    assert scale([0.0, 2.0, 4.0, 8.0, -1.0, np.nan, -np.inf]).tolist() == [0.0, 0.5, 1.0, 2.0, 0.0, 0.0, 0.0]
    assert TaskScale([0.0, -np.inf]).best == 1.0  # nothing readable: no scale


def test_one_psa_scorer_for_the_draft_stage_and_model_psa():
    """The draft stage (``draft_model``: every candidate scored afresh) and ``--model psa`` (remembering scores
    per program) score live candidates alike: 1 / estimate over the best of the task's first population, fixed
    after."""
    from test_export import _context

    from costlab.export.cost_model import CostlabCostModel, draft_model

    ctx, cands = _context()
    draft, model = draft_model(), CostlabCostModel("psa")
    first = draft.predict(ctx, cands)
    assert np.array_equal(first, model.predict(ctx, cands))
    assert first.max() == 1.0 and (first > 0).all()
    later = draft.predict(ctx, cands[::-1][:4])  # a later call keeps the first call's scale
    assert np.array_equal(later, first[::-1][:4]) and np.array_equal(later, model.predict(ctx, cands[::-1][:4]))
    assert (draft.stats["candidates"], draft.stats["cached"]) == (len(cands) + 4, 0)  # the draft keeps no memo
    assert (model.stats["candidates"], model.stats["cached"]) == (len(cands), 4)


@pytest.mark.parametrize("record", [15, 91, 94, 115])
def test_a_cooperative_fetch_guarded_by_a_predicate_counts_only_what_it_fetches(record):
    """On a GPU, MetaSchedule's cooperative fetch splits a fused loop into threads x lanes that may overshoot the
    tile; the lowered block is guarded by ``T.where``. The TIR walk bounds the loops by that predicate, so its
    loop nest (footprints included) is the trace simulator's, which clips the split: before, the fetch counted
    up to 64x the elements it reads (H100 records, tests/fixtures/h100)."""
    from costlab.datasets import open_dataset
    from costlab.featurizers.ms_records import record_batch, task_module
    from costlab.metaschedule.traces import parse_trace, replay

    with open_dataset(Path(__file__).parent / "fixtures" / "h100" / "cuda_sm90.h5") as ds:
        _rows, _p, _gpu, tids, scheds = record_batch(ds, "cuda-sm_90", np.array([record]))
        mod = task_module(ds.tasks[tids[0]])
    trace = parse_trace(scheds[0])
    lowered = replay(mod, trace).mod
    assert "T.where" in lowered.script()
    assert simulate(TaskModel(mod, gpu=True), trace).signature() == program_of(lowered, gpu=True).signature()


def test_a_predicate_bounds_only_whole_loop_variables_of_a_sum():
    """``_predicate_caps``: each conjunct ``sum(coef * var) + c < C`` bounds its variables (an upper bound of
    what each reaches, never less); a ``%`` or ``//`` digit bounds part of a variable and bounds nothing."""
    from costlab.featurizers.psa.tir_nest import _predicate_caps

    tir = tvm.tirx
    g, h = tir.Var("g", "int32"), tir.Var("h", "int32")
    spans = {g.__chandle__(): 8, h.__chandle__(): 16}

    def caps(e):
        return {("g" if k == g.__chandle__() else "h"): v for k, v in _predicate_caps(e, spans).items()}

    assert caps(tir.floormod(h, 4) < 2) == {} and caps(tir.floormod(g * 4 + h, 8) < 3) == {}
    assert caps((g * 64 + h) * 4 < 64) == {"g": 1, "h": 16}  # the cooperative fetch's guard
    assert caps(tir.And(g * 2 + h < 10, h <= 3)) == {"g": 5, "h": 4}
    assert caps(g * 32 - h < 100) == {}  # a negative coefficient: no bound


def test_the_modes_benchmark_compares_the_same_records_both_ways(capsys):
    """benchmarks/psa_modes.py: both modes on the same drawn records, counts that hold together, a row a line."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import psa_modes

    data = Path(__file__).parent / "fixtures" / "h100" / "cuda_sm90.h5"
    r = psa_modes.compare(data, records=24)
    assert r["records"] == 24 and len(set(r["rows"].tolist())) == 24 and r["compared"] == 24
    assert r["over_1pct"] <= r["differ"] <= r["compared"] and r["differ"] == int((r["rel"] > 1e-9).sum())
    assert psa_modes.main([str(data), "--records", "24", "--list"]) == 0
    assert capsys.readouterr().out.count("  row ") == r["differ"]


def test_an_element_is_as_many_bytes_as_its_dtype_says():
    """The bytes came from the last number of the name: float8_e4m3fn counted 4 bytes (the "3" of its mantissa)."""
    from costlab.featurizers.psa.tir_nest import dtype_bytes

    sizes = {"float8_e4m3fn": 1, "float8_e5m2": 1, "float4_e2m1fn": 1, "int8": 1, "bool": 1, "float16": 2,
             "bfloat16": 2, "float32": 4, "int64": 8, "float32x4": 16, "float16x8": 16}
    assert {d: dtype_bytes(d) for d in sizes} == sizes


@pytest.mark.parametrize("name", ["psa", "pacm"])
def test_records_in_any_order_are_featurized_in_that_order(tmp_path, name):
    """PSA's and PaCM's ``featurize_records`` read rows through HDF5, which takes them in increasing order only:
    rows in another order (or one twice) were a TypeError; TLP's always took them."""
    import shutil

    from conftest import FIXTURES
    from costlab.datasets import open_dataset

    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    featurizer = create(name)
    with open_dataset(data) as ds:
        (pid,) = ds.record_platforms()
        ordered = featurizer.featurize_records(ds, pid, np.array([3, 5]))
        given = featurizer.featurize_records(ds, pid, np.array([5, 3, 5]))
    for key, value in ordered.items():
        want = [value[1], value[0], value[1]]
        got = given[key]
        assert len(got) == 3 and all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(got, want)), key


@pytest.mark.parametrize("name", ["psa", "pacm"])
def test_a_platform_of_a_target_kind_psa_models_no_machine_of_is_one_line(tmp_path, capsys, name):
    """A rocm (vulkan, metal, ...) platform has no hardware spec: `costlab featurize` ended in a traceback and
    featurized no other platform. One line names it; the others are featurized."""
    import shutil

    from conftest import FIXTURES
    from costlab.cli import main
    from costlab.datasets import DatasetWriter, RecordBatch, open_dataset

    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    with open_dataset(data) as ds:
        (pid,) = ds.record_platforms()
        table = ds.records(pid)
        rows = [(int(table.task[i]), s, [1e-3], 0, 1.0, int(table.program_id[i]))
                for i, s in zip(range(4), table.schedules(np.arange(4)))]
    with DatasetWriter(data) as w:
        w.add_platform("amd-gpu", {"kind": "rocm", "mcpu": "gfx90a"})
        batch = RecordBatch()
        for r in rows:
            batch.append(*r)
        w.add_records("amd-gpu", batch)
    capsys.readouterr()
    assert main(["featurize", str(data), "--featurizer", name, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "platform 'amd-gpu': no hardware spec for target kind 'rocm'" in err, err
    assert f"{pid}: 80 records" in err
