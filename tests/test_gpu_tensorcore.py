"""Tensor-core (float16, WMMA) tasks without a GPU: which tasks get MetaSchedule's tensor-core rules and the
intrinsic registry, and PSA's, PaCM's and the output check's view of programs an H100 measured
(tests/fixtures/h100_tc, made by scripts/gpu_bench.sh: see its README)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "h100_tc"
SM90 = {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32}
# in a fresh process's code: whether TVM has registered a tensor intrinsic of that name
REGISTERED = """from tvm.s_tir import TensorIntrin
def registered(name):
    try:
        TensorIntrin.get(name)
        return True
    except Exception:
        return False
"""
# the float16 matmuls of the fixture and their FLOPs (2 M N K): every dimension a multiple of 16, so no padding
GMM_FLOPS = {"GMM:1,512,512,512,float16,float16": 2 * 512 ** 3,
             "GMM:1,128,768,3072,float16,float16": 2 * 128 * 768 * 3072,
             "GMM:1,256,2048,512,float16,float16": 2 * 256 * 2048 * 512}


@pytest.fixture(scope="module")
def tc_data(tmp_path_factory):
    from costlab.datasets.pack import unpack

    path = tmp_path_factory.mktemp("tc") / "h100_tc.h5"
    unpack(FIXTURE, path)
    return path


def _prim(spec: str):
    from costlab.datasets.extract import te_workload_task

    return te_workload_task(spec)[1]


@pytest.mark.parametrize("spec,target,kind", [
    ("GMM:1,64,64,64,float16,float16", SM90, "cuda-tensorcore"),
    ("C2D:1,14,14,32,32,3,1,1,1,1,float16,float16", SM90, "cuda-tensorcore"),
    ("GMM:1,64,64,64", SM90, "cuda"),  # float32: no tensor cores
    ("GMM:1,64,64,64,float16,float32", SM90, "cuda"),  # a float32 accumulator fails to build in TVM 0.27
    ("GMM:1,64,64,64,int8,int32", SM90, "cuda-tensorcore"),
    ("GMM:1,64,64,64,float16,float16", dict(SM90, arch="sm_80"), "cuda-tensorcore"),
    ("GMM:1,64,64,64,float16,float16", dict(SM90, arch="sm_75"), "cuda"),  # MetaSchedule's tensor-core rules: sm_80+
    ("GMM:1,64,64,64,float16,float16", dict(SM90, arch="sm_61"), "cuda"),  # before tensor cores
    ("GMM:1,64,64,64", {"kind": "llvm", "mcpu": "znver5"}, "llvm"),
])
def test_tensor_core_rules_only_for_float16_and_int8_reductions_on_sm80_and_later(spec, target, kind):
    import tvm

    from costlab.metaschedule.tune_context import rules_kind, tensor_core_task

    t = tvm.target.Target(target)
    mod = tvm.IRModule({"main": _prim(spec)})
    assert rules_kind(mod, t) == kind
    assert tensor_core_task(mod, t) == (kind == "cuda-tensorcore")


def test_the_rule_choice_reads_the_ir_not_its_printed_form():
    """Two forms the printed TVMScript hid: an int8 matmul with int64 extents (as networks' tasks have them) is a
    tensor-core and a dot-product task; float16 data summed into a float32 buffer allocated inside the function
    (which prints without its dtype) is not a tensor-core task (its programs fail to build in TVM 0.27)."""
    import tvm
    from tvm import te, tirx

    from costlab.metaschedule.tune_context import needs_intrinsics, tensor_core_task

    n = tirx.IntImm("int64", 64)
    a, b = te.placeholder((n, n), "int8", name="A"), te.placeholder((n, n), "int8", name="B")
    k = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k].astype("int32") * b[k, j].astype("int32"), axis=k))
    int8 = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    assert "T.int64(64)" in int8["main"].script()
    assert tensor_core_task(int8, tvm.target.Target(SM90))
    assert needs_intrinsics(int8, tvm.target.Target({"kind": "llvm", "mcpu": "sapphirerapids"}))

    h, w = te.placeholder((64, 64), "float16", name="A"), te.placeholder((64, 64), "float16", name="B")
    r = te.reduce_axis((0, 64), "k")
    acc = te.compute((64, 64), lambda i, j: te.sum(h[i, r].astype("float32") * w[r, j].astype("float32"), axis=r))
    out = te.compute((64, 64), lambda i, j: acc[i, j].astype("float16"))
    fp16 = tvm.IRModule({"main": te.create_prim_func([h, w, out])})
    assert "T.sblock_alloc_buffer((64, 64))" in fp16["main"].script()  # the accumulator prints without its dtype
    assert not tensor_core_task(fp16, tvm.target.Target(SM90))


def test_registry_loaded_for_tensor_core_tasks_alone():
    """A plain CUDA task's design space is made without the intrinsic registry (tens of seconds to import); a
    tensor-core task's loads its CUDA part alone (no x86 or ARM intrinsic registered) and tensorizes with WMMA
    intrinsics; importing the package afterwards (as MetaSchedule does) registers the rest. In a fresh process: the registry, once loaded,
    stays."""
    code = f"""
import json, sys, tvm
from tvm.s_tir import TensorIntrin
from costlab.datasets.extract import te_workload_task
from costlab.metaschedule import intrinsics
from costlab.metaschedule.tune_context import tune_context
{REGISTERED}
def cpu():
    return [registered(n) for n in ("dot_16x4_vnni", "dot_4x4_i8i8s32_neon")]
target = tvm.target.Target(json.loads({json.dumps(json.dumps(SM90))}))
out = {{}}
for spec in ("GMM:1,64,64,64", "GMM:1,64,64,64,float16,float16"):
    spaces = tune_context(te_workload_task(spec)[1], target).generate_design_space()
    out[spec] = dict(registry=intrinsics.loaded(), package="tvm.s_tir.tensor_intrin" in sys.modules, cpu=cpu(),
                     wmma=any("wmma_sync_16x16x16_f16f16f16" in str(s.trace) for s in spaces))
import tvm.s_tir.tensor_intrin  # the package's own __init__ (as MetaSchedule imports it): all of it
out["all"] = cpu()
print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd="/")
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["GMM:1,64,64,64"] == {"registry": False, "package": False, "cpu": [False, False], "wmma": False}
    # the package's stand-in gone: a later import of it runs its __init__
    assert out["GMM:1,64,64,64,float16,float16"] == {"registry": True, "package": False, "cpu": [False, False],
                                                      "wmma": True}
    assert out["all"] == [True, True]


def test_the_whole_registry_costlab_loads_is_the_package_metaschedule_imports():
    """``intrinsics.load("all")`` (a fraction of the package import's seconds: ``benchmarks/gpu.py registry``)
    leaves what that import leaves: the package and its modules in
    ``sys.modules`` and as attributes, every intrinsic each module names registered; importing the package
    afterwards (as MetaSchedule does) and loading again register nothing twice (TVM refuses a name registered
    twice), nor do loads in threads at once. In a fresh process."""
    code = """
import json, sys, tvm
from tvm.s_tir import TensorIntrin
import threading
from costlab.metaschedule import intrinsics
errors = []
def load(kind):
    try:
        intrinsics.load(kind)
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=load, args=(kind,)) for kind in ("all", "cuda", "all")]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
import tvm.s_tir.tensor_intrin as package
from tvm.s_tir.tensor_intrin.x86 import VNNI_DOT_16x4_INTRIN
intrinsics.load("all"); intrinsics.load("cuda")
""" + REGISTERED + """
out = {}
for name in ("cuda", "arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu"):
    module = sys.modules[package.__name__ + "." + name]
    names = [v for k, v in vars(module).items() if k.endswith("_INTRIN") and isinstance(v, str)]
    out[name] = dict(attribute=getattr(package, name) is module, names=len(names),
                     registered=sum(map(registered, names)))
print(json.dumps(dict(modules=out, vnni=VNNI_DOT_16x4_INTRIN, file=package.__file__)))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd="/")
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["vnni"] == "dot_16x4_vnni" and out["file"].endswith("tensor_intrin/__init__.py")
    for name, row in out["modules"].items():
        assert row["attribute"] and row["registered"] == row["names"], (name, row)
    assert out["modules"]["cuda"]["names"] > 50 and out["modules"]["x86"]["names"] >= 2


def test_psa_counts_tensor_core_flops_and_fragments(tc_data):
    """Every measured float16 matmul program: its tensor-core statements do the task's FLOPs exactly, its WMMA
    fragments are in no global traffic, and its block's threads are the product of its axes (the warps of
    threadIdx.y times the 32 lanes)."""
    from costlab.datasets import open_dataset
    from costlab.featurizers.ms_records import task_module
    from costlab.featurizers.psa.formula import block_threads
    from costlab.featurizers.psa.tir_nest import program_of
    from costlab.metaschedule.traces import replay

    seen = 0
    with open_dataset(tc_data) as ds:
        table = ds.records("cuda-sm_90")
        for task in ds.tasks:
            if task.name not in GMM_FLOPS:
                continue
            rows = np.flatnonzero(np.asarray(table.task) == task.index)
            for schedule in table.schedules(rows):
                prog = program_of(replay(task_module(task), schedule).mod, gpu=True)
                mma = [s for s in prog.stmts if s.tensor_core]
                assert mma and sum(s.instances() * s.flops for s in mma) == GMM_FLOPS[task.name]
                assert all(a.scope.startswith("wmma.") for s in mma for a in s.accesses)
                warps = max((lp.extent for s in mma for lp in s.loops if lp.kind == "threadIdx.y"), default=1)
                assert block_threads(prog.stmts) == warps * 32  # not the largest axis
                assert block_threads(mma) == warps * 32  # the warp's lanes implied
                seen += 1
    assert seen == 12 * 3 + 20  # the three matmuls' records (the first measured 20 more before the time ran out)


def test_psa_ranks_tensor_core_programs_and_finds_none_impossible(tc_data):
    """PSA (version 3) on the fixture: every program the H100 ran has a finite estimate, and PSA's ranking is
    above random's (both are formulas over the same records, so these figures are the same on every machine)."""
    import argparse

    from test_gpu import _gpu_benchmark

    out = _gpu_benchmark().features(argparse.Namespace(data=tc_data, platform=None))
    assert out["gpu"]["name"] == "NVIDIA H100 80GB HBM3" and out["psa_spec"] == "h100"
    assert out["records"] == out["featurized"] == 116 and out["all_finite"]
    assert out["psa_impossible"]["records"] == out["psa_impossible"]["failed_on_gpu"]
    assert out["levels"]["fragment"] > 0 and out["levels"]["shared"] > 0
    psa, rnd = out["ranking"]["psa"], out["ranking"]["random"]
    assert psa["top5"] > rnd["top5"] and psa["pairwise"] > rnd["pairwise"] + 0.1


def test_pacm_puts_fragments_on_their_own_level(tc_data):
    """PaCM's tokens of a tensor-core program: the WMMA fragments on the fragment level (column 2, unused by
    GPUs before), never on L2 or global; every number finite."""
    from costlab.datasets import open_dataset
    from costlab.featurizers import create
    from costlab.featurizers.cache import build_cache, open_cache
    from costlab.featurizers.pacm import LEVEL_COLUMNS, PATTERN_NAMES

    build_cache(tc_data, "pacm", "cuda-sm_90", progress=False)
    with open_dataset(tc_data) as ds:
        feats = open_cache(ds, create("pacm"), "cuda-sm_90").get()
        names = [t.name for t in ds.tasks]
        task = np.asarray(ds.records("cuda-sm_90").task)
    cols = [PATTERN_NAMES.index(c) for c in LEVEL_COLUMNS]
    fragment_tokens = 0
    for tokens, valid, t in zip(feats["pattern"], feats["valid"], task):
        assert valid and np.isfinite(tokens).all()
        level = np.asarray(tokens[:, cols]).argmax(axis=1)
        if "float16" in names[t]:
            fragment_tokens += int((level == 2).sum())
        else:
            assert not (level == 2).any()  # a float32 program has no fragments
    assert fragment_tokens > 0


def test_pacm_gives_every_statement_its_kernels_threads_per_block(tc_data):
    """A tensor-core statement sits under threadIdx.y alone (its warp's lanes implied): PaCM's ``log_threads``
    of each of its tokens is the block's threads, the warps times 32, as PSA counts them, not the warps alone."""
    from costlab.datasets import open_dataset
    from costlab.featurizers import create
    from costlab.featurizers.ms_records import task_module
    from costlab.featurizers.pacm import PATTERN_NAMES, pattern_tokens
    from costlab.featurizers.psa.tir_nest import program_of
    from costlab.metaschedule.traces import replay

    col = PATTERN_NAMES.index("log_threads")
    pacm = create("pacm")
    seen = 0
    with open_dataset(tc_data) as ds:
        spec = pacm.spec_for(ds.platforms["cuda-sm_90"])
        table = ds.records("cuda-sm_90")
        for task in ds.tasks:
            if task.name not in GMM_FLOPS:
                continue
            rows = np.flatnonzero(np.asarray(table.task) == task.index)[:4]
            for schedule in table.schedules(rows):
                prog = program_of(replay(task_module(task), schedule).mod, gpu=True)
                # one kernel: every statement under the same outermost blockIdx loop
                kernels = {id(next(lp for lp in s.loops if lp.kind.startswith("blockIdx"))) for s in prog.stmts}
                mma = [s for s in prog.stmts if s.tensor_core]
                warps = max(lp.extent for s in mma for lp in s.loops if lp.kind == "threadIdx.y")
                tokens = pattern_tokens(prog, spec)
                assert len(kernels) == 1
                assert np.allclose(tokens[:, col], np.log2(warps * 32)), (task.name, sorted(set(tokens[:, col])))
                seen += 1
    assert seen == 12


def test_float16_outputs_checked_with_float16_tolerances():
    """A float16 sum accumulated in another order passes; a program that drops part of the sum does not."""
    from costlab.export.check import close

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, 512)).astype(np.float16)
    b = rng.uniform(-1, 1, (512, 64)).astype(np.float16)
    ref = np.zeros((64, 64), np.float16)
    for k in range(512):  # float16 accumulation, one order
        ref = (ref + np.outer(a[:, k], b[k]).astype(np.float16)).astype(np.float16)
    other = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)  # exact sum, rounded once
    wrong = (a[:, :480].astype(np.float32) @ b[:480].astype(np.float32)).astype(np.float16)
    assert close(ref, other) and not close(ref, wrong)
    assert not close(ref.astype(np.float32), other.astype(np.float32))  # float32 keeps its tight tolerance


def test_tensor_core_database_loads_in_a_fresh_process(tc_data, tmp_path):
    """A tuning database of tensor-core programs opens through costlab (which loads the registry its records'
    traces name) in a process that never made a tensor-core design space."""
    from costlab.datasets.ms_database import export_ms

    export_ms(tc_data, "cuda-sm_90", tmp_path / "db")
    code = (f"from costlab.metaschedule.databases import json_database\n"
            f"print(len(json_database(work_dir={str(tmp_path / 'db')!r}).get_all_tuning_records()))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd="/")
    assert res.returncode == 0, res.stderr[-2000:]
    assert int(res.stdout.strip().splitlines()[-1]) == 108  # the programs that ran


def test_shipped_gpu_model_scores_tensor_core_records_on_the_cpu(tc_data):
    """The shipped cuda-sm90 model (scripts/train_gpu_model.sh, on these records and tests/fixtures/h100) loads
    by name where there is no GPU and scores every record, tensor-core programs included, on the CPU."""
    from costlab.costmodels.predictors import load, weights_sha256
    from costlab.costmodels.shipped import aliases
    from costlab.train.evaluate import evaluate

    assert aliases()["cuda-sm90"].startswith("cuda-sm90-v") and weights_sha256("cuda-sm90")
    model = load("cuda-sm90")
    assert model.kind == "pacm" and model.platforms == ["cuda-sm_90"]
    assert model.featurizer.to_json()["name"] == "pacm"
    result = evaluate("cuda-sm90", tc_data, split=None, platform="cuda-sm_90")
    assert result["records"] == 116 and len(result["tasks"]) == 8
    assert all(np.isfinite(result[k]) for k in ("top1", "top5", "pairwise", "ndcg"))
    assert result["pairwise"] > 0.5  # records it trained on: ranked above chance whatever machine scores them


def test_which_intrinsics_a_record_file_or_trace_needs(tmp_path):
    """A record file's tensorizing traces: none (no registry), CUDA intrinsics named (the CUDA part), others
    named (all of it), plain or gzip-compressed, the markers across the reader's block boundary too."""
    import gzip

    from costlab.metaschedule import intrinsics
    from costlab.metaschedule.databases import _registry_kind

    plain = '[0, [[["Split", [], [], []]], []]]\n'
    cuda = '[0, [[["Annotate", [], ["meta_schedule.auto_tensorize", "wmma_sync_16x16x16_f16f16f16"], []]], []]]\n'
    x86 = '[0, [[["Annotate", [], ["meta_schedule.auto_tensorize", "dot_16x4_vnni"], []]], []]]\n'
    cases = {"plain": (plain * 3, None), "cuda": (plain + cuda, "cuda"), "x86": (x86 + plain, "all"),
             "far": (" " * ((1 << 20) - 10) + cuda, "cuda")}
    for name, (text, kind) in cases.items():
        (tmp_path / name).write_text(text)
        with gzip.open(tmp_path / f"{name}.gz", "wt") as f:
            f.write(text)
        assert _registry_kind(tmp_path / name) == kind, name
        assert _registry_kind(tmp_path / f"{name}.gz") == kind, name
    assert intrinsics.kind_for(cuda) == "cuda" and intrinsics.kind_for(x86) == "all"
    with pytest.raises(ValueError, match="'tensor'"):
        intrinsics.load("tensor")


def test_a_tuning_runs_net_scores_on_the_cpu_also_where_there_is_a_gpu(monkeypatch):
    """A tuning command's learned model is loaded onto the CPU, also on a machine with a GPU (taken here as one
    that says it has a GPU: building a CUDA tensor fails where there is none), since the GPU is what the run
    measures on and the CUDA libraries' start is seconds; ``evaluate`` and training keep the GPU default."""
    import torch

    from costlab.costmodels.predictors import load
    from costlab.export.cost_model import tuning_predictor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pred = tuning_predictor("cuda-sm90")
    assert pred.device == torch.device("cpu") and {p.device.type for p in pred.net.parameters()} == {"cpu"}
    assert load("cuda-sm90", device="cpu").device == torch.device("cpu")
    assert tuning_predictor("psa").kind == "psa"  # kinds without a net load as before
