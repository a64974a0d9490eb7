"""PaCM: per-store features and data-flow pattern tokens on CPU and (lowered, not run) GPU programs."""

from __future__ import annotations

import json

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

import _sched_cases as cases  # noqa: E402
from costlab.featurizers import create  # noqa: E402
from costlab.featurizers.pacm import (  # noqa: E402
    PATTERN_FEATURES, PATTERN_NAMES, PROGRAM_FEATURES, PROGRAM_NAMES, STMT_FEATURES, pattern_tokens)
from costlab.featurizers.psa import program_of, spec_for_platform, spec_for_target  # noqa: E402

LEVEL = slice(0, 5)


@pytest.fixture
def measured():
    return cases.measured_dataset()


def _levels(tokens, buffer_rows):
    return [int(np.argmax(tokens[i, LEVEL])) for i in buffer_rows]


def test_cpu_patterns_follow_the_tiling():
    """Different tilings of one matmul give different pattern tokens, and their memory levels say where the
    operands live: register-blocked tiles read A and B from L1, the naive loop streams B from L2 or
    further (its column of B, 512 floats at stride 512, is reused only across the whole i loop)."""
    mod = cases.matmul(512)
    spec = spec_for_target(cases.LLVM)
    naive = pattern_tokens(program_of(cases.naive(mod).mod), spec)
    tiled = pattern_tokens(program_of(cases.cpu_tiled(mod, (8, 4, 2, 8), (8, 2, 2, 16), (64, 8)).mod), spec)
    coarse = pattern_tokens(program_of(cases.cpu_tiled(mod, (1, 2, 2, 128), (1, 2, 2, 128), (2, 256)).mod), spec)
    for t in (naive, tiled, coarse):
        assert t.shape[1] == PATTERN_FEATURES == len(PATTERN_NAMES)
        assert np.abs(t).sum() > 0
        assert len({row.tobytes() for row in t}) > 1  # not all alike
    assert not np.array_equal(tiled, coarse) and tiled.shape != naive.shape
    # naive: [A read, B read, C read-write]: B is reused only once every 512 * 512 iterations
    assert _levels(naive, [1])[0] >= 2
    # tiled: the update statement reads A and B from registers or L1
    update = [i for i in range(tiled.shape[0]) if tiled[i, 5] == 1 and tiled[i, 20] > 0]  # reads with FLOPs
    assert update and max(_levels(tiled, update)) <= 1
    # the coarse tiling's accumulator tile (128 x 128 floats, 64 KB) does not stay in L1 between two steps of
    # the reduction; the tiled one's (8 x 16) does
    dis = PATTERN_NAMES.index("log_reuse_dis_bytes")
    rmw = PATTERN_NAMES.index("read_write")
    c_acc = [i for i in range(coarse.shape[0]) if coarse[i, rmw] == 1]
    t_acc = [i for i in range(tiled.shape[0]) if tiled[i, rmw] == 1]
    assert coarse[c_acc, dis].max() > tiled[t_acc, dis].max() + 4  # > 16x the bytes
    assert max(_levels(coarse, c_acc)) >= 2 and max(_levels(tiled, t_acc)) <= 1
    # vectorisation and parallel context are recorded
    assert tiled[:, PATTERN_NAMES.index("log_vector_lanes")].max() > 0
    assert tiled[:, PATTERN_NAMES.index("log_parallel")].max() > 0 and naive[:, 17].max() == 0


def test_every_pattern_column_is_its_own_quantity():
    """No two numeric columns of the tokens carry the same numbers on a tiled matmul (version 1 wrote the
    reuse distance twice): the access's own footprint differs from the working set of the whole statement."""
    mod = cases.matmul(512)
    tiled = pattern_tokens(program_of(cases.cpu_tiled(mod, (8, 4, 2, 8), (8, 2, 2, 16), (64, 8)).mod),
                           spec_for_target(cases.LLVM))
    first = PATTERN_NAMES.index("log_bytes")  # the numeric columns (before them: one-hot level and type)
    varying = [j for j in range(first, PATTERN_FEATURES) if np.ptp(tiled[:, j]) > 0]
    for i in varying:
        for j in varying:
            assert i >= j or not np.array_equal(tiled[:, i], tiled[:, j]), (PATTERN_NAMES[i], PATTERN_NAMES[j])
    own = tiled[:, PATTERN_NAMES.index("log_access_footprint")]
    dis = tiled[:, PATTERN_NAMES.index("log_reuse_dis_bytes")]
    assert (own <= dis + 1e-6).all() and (own < dis).any()  # one access's share of the working set
    assert create("pacm").version == 3


def test_records_give_statement_rows_and_tokens(tmp_path):
    from costlab.datasets import open_dataset

    mod = cases.matmul(64)
    schedules = [json.dumps(cases.trace_of(s)) for s in
                 (cases.naive(mod), cases.cpu_tiled(mod, (2, 2, 2, 8), (2, 2, 2, 8), (8, 8)),
                  cases.cpu_tiled(mod, (1, 2, 4, 8), (4, 1, 1, 16), (16, 4)))]
    schedules.append(schedules[1].replace('"C"', '"no_such_block"'))  # does not replay
    cases.dataset_of(tmp_path / "d.h5", cases.LLVM, [("matmul", mod, schedules)])
    pacm = create("pacm")
    with open_dataset(tmp_path / "d.h5") as ds:
        out = pacm.featurize_records(ds, "p", np.arange(4))
        spec = spec_for_platform(ds.platforms["p"])  # the dataset's CPU (its -mcpu's), not this machine's
    assert out["valid"].tolist() == [True, True, True, False]
    assert pacm.stats == {"ok": 3, "invalid": 1} and "does not replay" in pacm.errors[0][1]
    for i in range(3):
        assert out["stmt"][i].shape[1] == STMT_FEATURES and out["stmt"][i].shape[0] >= 1
        assert out["pattern"][i].shape[1] == PATTERN_FEATURES and out["pattern"][i].shape[0] >= 3
    assert out["stmt"][3].shape == (0, STMT_FEATURES) and out["pattern"][3].shape == (0, PATTERN_FEATURES)
    # the program features: PSA's estimate of the same program (the naive loop is the slowest), its
    # terms, and nothing for the record that does not replay
    program = out["program"]
    assert program.shape == (4, PROGRAM_FEATURES) == (4, len(PROGRAM_NAMES)) and program.dtype == np.float32
    assert (program[3] == 0).all() and (program[:3, PROGRAM_NAMES.index("log_flops")] > 0).all()
    est = program[:, PROGRAM_NAMES.index("log_estimate_ns")]
    assert est[0] > max(est[1], est[2])
    from costlab.featurizers.ms_records import feature_context
    from costlab.featurizers.psa import estimate
    from costlab.metaschedule.traces import replay

    for i in range(3):
        prog = program_of(replay(mod, schedules[i]).mod)
        assert est[i] == pytest.approx(np.log2(1 + estimate(prog, spec) * 1e9), rel=1e-5)
        assert 0 < program[i, PROGRAM_NAMES.index("cores_used")] <= 1
        assert 0 < program[i, PROGRAM_NAMES.index("lanes_used")] <= 1
    # the per-store features are TVM's own, for the same schedules
    from tvm.s_tir import meta_schedule as ms

    ctx = feature_context(mod, cases.LLVM)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    ref = ms.feature_extractor.PerStoreFeature().extract_from(
        ctx, [ms.MeasureCandidate(replay(mod, s), args) for s in schedules[:3]])
    for i in range(3):
        np.testing.assert_allclose(out["stmt"][i], ref[i].numpy(), rtol=1e-6)


def test_feature_cache_round_trip(tmp_path):
    from costlab.datasets import open_dataset
    from costlab.featurizers.cache import build_cache, open_cache

    mod = cases.matmul(64)
    schedules = [json.dumps(cases.trace_of(cases.cpu_tiled(mod, (2, 2, 2, 8), (2, 2, 2, 8), (8, 8)))),
                 json.dumps(cases.trace_of(cases.naive(mod))), "not json"]
    cases.dataset_of(tmp_path / "d.h5", cases.LLVM, [("matmul", mod, schedules)])
    stats = build_cache(tmp_path / "d.h5", "pacm", "p", progress=False)
    assert stats["computed"] == 3 and stats["invalid"] == 1
    with open_dataset(tmp_path / "d.h5") as ds:
        pacm = create("pacm")
        cached = open_cache(ds, pacm, "p").get()
        direct = pacm.featurize_records(ds, "p", np.arange(3))
    assert cached["valid"].tolist() == [True, True, False]
    for name in ("stmt", "pattern"):
        for a, b in zip(cached[name], direct[name]):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(cached["program"], direct["program"])


def test_gpu_lowering_without_a_gpu():
    """CUDA candidates are replayed, lowered and featurized on a machine without a GPU (nothing is built)."""
    mod = cases.matmul(128)
    target = tvm.target.Target(cases.CUDA)
    schs = [cases.gpu_tiled(mod), cases.gpu_tiled(mod, tiles=((1, 1, 2, 8, 8), (1, 1, 4, 4, 8), (16, 1, 8)))]
    out = create("pacm").featurize_candidates(mod, target, schs)
    assert out["valid"].all()
    is_gpu = 16 + 3 * 11  # PerStoreFeature group 1: 16 arithmetic counts, 3 x 11 loop-kind features, is_gpu
    for stmt, pattern in zip(out["stmt"], out["pattern"]):
        assert stmt.shape[1] == STMT_FEATURES and (stmt[:, is_gpu] == 1).all()
        levels = set(np.argmax(pattern[:, LEVEL], axis=1).tolist())
        assert {0, 1} <= levels  # local (registers) and shared memory
        assert levels & {3, 4}  # global memory (or L2)
        assert pattern[:, PATTERN_NAMES.index("log_threads")].max() > 0
    assert not np.array_equal(out["pattern"][0], out["pattern"][1])


def test_live_candidates_are_extracted_on_the_runs_cores_with_the_same_features():
    """During a tuning run's search nothing else runs: the candidates' per-store extraction uses the target's
    cores (here 2, capped at this process's CPUs), and the features are those of the one-thread extraction
    the model was trained with."""
    import os

    from costlab.featurizers.pacm import candidate_arrays, live_threads

    cpus = len(os.sched_getaffinity(0))
    assert live_threads({"kind": "llvm", "num-cores": 2}) == min(2, cpus)
    assert live_threads({"kind": "llvm", "num-cores": 64}) == cpus
    assert live_threads({"kind": "llvm"}) == cpus and live_threads(cases.CUDA) == cpus
    assert live_threads({"kind": "llvm", "num-cores": 1}, least=4) == 4  # the configured threads, at least

    mod = cases.conv2d()
    schs = [cases.cpu_conv(mod), cases.cpu_conv(mod, inline_pad=False), cases.naive(mod)]
    pacm = create("pacm")
    target = tvm.target.Target(cases.LLVM)
    live = pacm.featurize_candidates(mod, target, schs)
    (ctx, _, _), = [v for k, v in pacm._contexts.items() if k[0] == "live"]
    assert int(ctx.num_threads) == min(2, cpus)
    one = candidate_arrays(pacm._features(("one",), mod, dict(cases.LLVM), schs, pacm.spec_for(target=dict(cases.LLVM)),
                                          False, 1))
    assert int(pacm._contexts[("one",)][0].num_threads) == 1
    assert live["valid"].all()
    for key in ("stmt", "pattern"):
        for a, b in zip(live[key], one[key]):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(live["program"], one["program"])


@pytest.mark.slow
def test_measured_records(measured):
    from costlab.datasets import open_dataset

    path, platform = measured
    pacm = create("pacm")
    with open_dataset(path) as ds:
        n = ds.num_records(platform)
        out = pacm.featurize_records(ds, platform, np.arange(n))
        assert out["valid"].all()
        assert len(out["stmt"]) == len(out["pattern"]) == n
        assert all(s.shape[0] >= 1 and s.shape[1] == STMT_FEATURES for s in out["stmt"])
        # within every task, programs get different pattern sequences (the tiling shows in them)
        for tr in ds.iter_tasks(platform):
            seqs = {out["pattern"][i].tobytes() for i in tr.rows}
            assert len(seqs) > len(tr.rows) // 2, tr.task.name


def test_a_workload_whose_buffers_share_a_name_is_featurized_under_names_told_apart():
    """te's unnamed placeholders are all ``placeholder``: a depthwise convolution's input and weight. TVM's
    per-store features order tied buffers by name and then by address, so such a program's features changed
    from one process to the next (3-5 of the corpus's 10,245 records, all depthwise, per featurization), and
    PSA, which follows buffers by name, took the two for one. A dataset's workload is renamed (its identity,
    the structural hash, unchanged), and live candidates are replayed on the renamed workload."""
    from tvm import te
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.testing import te_workload

    from costlab.featurizers.ms_records import named_apart, task_module
    from costlab.metaschedule.workloads import duplicate_buffer_names, unique_buffer_names, workload_json

    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.depthwise_conv2d_nhwc(1, 14, 14, 64, 3, 1, 1))})
    assert duplicate_buffer_names(mod) == ["placeholder"]
    renamed = unique_buffer_names(mod)
    assert duplicate_buffer_names(renamed) == [] and workload_json(renamed)[0] == workload_json(mod)[0]
    assert unique_buffer_names(renamed) is renamed and unique_buffer_names(cases.matmul(64)) is not None

    class _Task:  # a dataset's task of that workload
        dialect, index = "ms", 0
        workload_hash, workload = workload_json(mod)
    assert duplicate_buffer_names(task_module(_Task())) == []

    sch = Schedule(mod)
    sch.compute_inline(sch.get_sblock("PadInput"))
    assert duplicate_buffer_names(sch.mod) == ["placeholder"]
    live_mod, (live,) = named_apart(mod, [sch])
    assert duplicate_buffer_names(live_mod) == [] and duplicate_buffer_names(live.mod) == []
    assert str(live.trace) == str(sch.trace)
    assert named_apart(cases.matmul(64), [sch])[1][0] is sch  # names apart already: nothing replayed

    target = tvm.target.Target(cases.LLVM)
    runs = [create("pacm").featurize_candidates(mod, target, [sch])["stmt"][0] for _ in range(8)]
    for stmt in runs[1:]:
        np.testing.assert_array_equal(stmt, runs[0])
