"""costlab's GPU (cuda) code paths that need no GPU: targets completed for MetaSchedule's CUDA rules, the GPU
named in the host record and found in PSA's table, and the Draft-then-Verify search on GPU schedules (thread
binding, shared memory), searched, featurized and built for sm_90 without running a kernel. What needs the
GPU itself (measuring, tuning, the check of a tuned program) ran on one: docs/gpu.md."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from costlab.metaschedule.targets import CUDA_LIMITS, local_gpu, runnable_target

H100 = {"name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "sms": 132, "max_threads_per_block": 1024,
        "max_shared_memory_per_block": 49152, "thread_warp_size": 32}


def test_a_cuda_target_is_completed_for_metaschedules_cuda_rules():
    """MetaSchedule's AutoBind refuses a cuda target without max_threads_per_block; costlab fills the limits
    every NVIDIA GPU has, keeps what the target gives, and needs the arch where it cannot ask the GPU."""
    import tvm

    target = runnable_target({"kind": "cuda", "arch": "sm_90"}, local=False)
    assert target == {"kind": "cuda", "arch": "sm_90", **CUDA_LIMITS}
    tvm.target.Target(target)  # TVM takes it
    assert runnable_target("cuda -arch=sm_75 -max_threads_per_block=512", local=False)["max_threads_per_block"] == 512
    with pytest.raises(ValueError, match="needs its arch"):
        runnable_target("cuda", local=False)
    if local_gpu() is None:  # kernels to run here, and no GPU: one clear refusal, nothing measured
        with pytest.raises(ValueError, match="TVM sees no CUDA GPU on this machine"):
            runnable_target({"kind": "cuda", "arch": "sm_90"})


def test_the_host_record_names_the_gpu_and_tells_two_gpus_apart():
    from costlab.common.host import describe_host, host_info, same_host

    cpu_only = host_info()
    on_h100 = host_info(gpu=H100)
    assert "gpu" not in cpu_only and on_h100["gpu"] == H100
    assert describe_host(on_h100).startswith("NVIDIA H100 80GB HBM3 (sm_90, 132 SMs) on ")
    assert same_host(on_h100, host_info(gpu=dict(H100)))
    assert not same_host(on_h100, host_info(gpu=dict(H100, name="NVIDIA H200")))
    assert not same_host(on_h100, cpu_only)


@pytest.mark.parametrize("name, entry", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti"), ("Tesla T4", "t4"),
    ("Tesla-K80", "k80"), ("nvidia/nvidia-h100", "h100"),
])
def test_psa_finds_the_gpu_by_the_name_the_driver_reports(name, entry):
    from costlab.featurizers.psa.hardware import gpu_spec

    assert gpu_spec(name).name == entry


def test_a_measured_gpu_platform_gets_its_own_gpus_spec():
    """sm_90 is an H100 or an H200 (bandwidth 3.35 vs 4.8 TB/s): the GPU named in the platform's host record
    decides; without one, the arch does."""
    from costlab.datasets.store import Platform
    from costlab.featurizers.psa.hardware import gpu_spec, spec_for_platform, spec_for_target

    target = {"kind": "cuda", "arch": "sm_90", **CUDA_LIMITS}
    h200 = Platform("cuda-sm_90", target, None, dict(gpu=dict(H100, name="NVIDIA H200")))
    assert spec_for_platform(h200).name == "h200" and spec_for_platform(h200).mem_gbs == 4800.0
    if local_gpu() is None:
        assert spec_for_platform(Platform("cuda-sm_90", target, None, None)).name == "h100"
    assert spec_for_target(target, gpu_name="NVIDIA H100 PCIe").sms == 114
    with pytest.raises(ValueError, match="unknown GPU"):
        gpu_spec("NVIDIA GeForce GTX 1080")


@pytest.mark.slow
def test_draft_then_verify_searches_featurizes_and_builds_gpu_schedules(tmp_path):
    """The model-led search on a cuda target: PSA drafts and scores GPU schedules, every candidate binds its
    loops to blocks and threads, PaCM's tokens of them sit at GPU memory levels
    (registers, shared), and where nvcc is here one candidate builds for sm_90 with costlab's builder."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.datasets.extract import te_workload_task, workload_json_mod
    from costlab.export import load
    from costlab.export.search import make_strategy
    from costlab.featurizers.pacm import LEVEL_COLUMNS, PATTERN_NAMES, PaCM
    from costlab.metaschedule.tune_context import tune_context

    target = tvm.target.Target(runnable_target({"kind": "cuda", "arch": "sm_90"}, local=False))
    _, func = te_workload_task("GMM:1,64,64,64")
    ctx = tune_context(workload_json_mod(func), target, make_strategy("model-led", first_rounds=(8,)),
                       rand_state=1, num_threads=2).clone()
    ctx.pre_tuning(16, 8, ctx.generate_design_space(), ms.database.MemoryDatabase(), load("psa"))
    cands = list(ctx.generate_measure_candidates() or [])
    assert len(cands) == 8
    for c in cands:
        text = str(c.sch.trace)
        assert "blockIdx" in text and "threadIdx.x" in text, text
    feats = PaCM().featurize_candidates(ctx.mod, target, [c.sch for c in cands])
    tokens = np.concatenate([t for t in feats["pattern"] if len(t)])
    assert np.isfinite(tokens).all() and np.isfinite(np.concatenate(feats["stmt"])).all()
    levels = tokens[:, [PATTERN_NAMES.index(c) for c in LEVEL_COLUMNS]].argmax(axis=1)
    assert {0, 1} <= set(levels.tolist())  # local (registers) and shared memory
    assert (tokens[:, PATTERN_NAMES.index("log_threads")] > 0).all()  # every access runs in a thread context
    ctx.post_tuning()
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc here: the GPU schedules were searched and featurized, not built")
    from costlab.metaschedule.builders import make_builder

    builder = make_builder(60, workers=1, pooled=True)
    try:
        (built,) = builder.build([ms.builder.BuilderInput(cands[0].sch.mod, target)])
    finally:
        builder.close()
    assert built.error_msg is None, built.error_msg


def _gpu_benchmark():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    try:
        import gpu as gpu_benchmark
    finally:
        sys.path.pop(0)
    return gpu_benchmark


@pytest.mark.parametrize("argv, message", [
    (["features", "--data", "{tmp}/missing.h5"], "missing.h5: no such file"),
    (["tuning", "--run", "x"], "--run takes NAME=WORK_DIR, not 'x'"),
    (["tuning", "--run", "x={tmp}"], "is not a finished `costlab tune` work dir"),
    (["heldout", "--data", "{tmp}/d.h5", "--work", "{tmp}", "--folds", "0"], "--folds must be 1 or more"),
    (["heldout", "--data", "{tmp}/missing.h5", "--work", "{tmp}"], "costlab dataset split failed (exit 2):"),
])
def test_gpu_benchmark_says_what_is_wrong_in_one_line(tmp_path, argv, message):
    with pytest.raises(SystemExit) as exc:
        _gpu_benchmark().main([a.format(tmp=tmp_path) for a in argv])
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_psa_and_pacm_on_programs_an_h100_measured(tmp_path):
    """On real H100 measurements (tests/fixtures/h100): PaCM's features all finite and at GPU levels, PSA's
    spec found by the GPU's name, PSA ranking well above random, and no program the GPU ran is one PSA calls
    impossible (it did so for 18 of them before registers over the cap were taken as spills)."""
    import argparse
    from pathlib import Path

    data = tmp_path / "h100.h5"
    shutil.copy(Path(__file__).parent / "fixtures" / "h100" / "cuda_sm90.h5", data)
    out = _gpu_benchmark().features(argparse.Namespace(data=data, platform=None))
    assert out["gpu"]["name"] == "NVIDIA H100 80GB HBM3" and out["psa_spec"] == out["gpu_table"] == "h100"
    assert out["records"] == out["featurized"] == 208 and out["measured_ok"] == 207
    assert out["all_finite"]
    assert out["levels"]["local"] > 0 and out["levels"]["shared"] > 0
    assert out["psa_impossible"]["records"] == out["psa_impossible"]["failed_on_gpu"] == 0
    psa, rnd = out["ranking"]["psa"], out["ranking"]["random"]
    assert psa["top1"] > rnd["top1"] + 0.3 and psa["pairwise"] > 0.7 > rnd["pairwise"]
