"""Hand-written schedules for the PSA / PaCM tests, built with the TensorIR schedule API.

They use the primitives MetaSchedule's rules emit (multi-level tiling, cache stages placed with
compute-at, fusion + parallel / vectorize / unroll pragmas, thread binding, cooperative fetching), with
fixed tile sizes, so a test does not depend on the random sampler (whose default rules take ~a minute to
set up: TuneContext imports every tensor intrinsic).
"""

from __future__ import annotations

import tvm
from tvm import te
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.testing import te_workload

LLVM = {"kind": "llvm", "num-cores": 2}
CUDA = {"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32}


def module(func) -> tvm.IRModule:
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def matmul(n=128, m=None, k=None) -> tvm.IRModule:
    return module(te.create_prim_func(te_workload.matmul(n, m or n, k or n)))


def matmul_relu(n=64, m=128, k=64) -> tvm.IRModule:
    return module(te.create_prim_func(te_workload.matmul_relu(n, m, k)))


def conv2d() -> tvm.IRModule:
    return module(te.create_prim_func(te_workload.conv2d_nhwc(1, 14, 14, 16, 32, 3, 1, 1)))


def naive(mod) -> Schedule:
    """No transformation at all: scalar, single core."""
    return Schedule(mod)


def cpu_tiled(mod, i_tiles=(2, 4, 2, 8), j_tiles=(2, 2, 2, 16), k_tiles=(16, 8), unroll=64, inline_relu=False):
    """MetaSchedule's CPU tiling (SSRSRS) of a matmul: cache write at the second spatial level, outer loops
    fused and parallel, the write-back vectorised, an unroll pragma, the reduction decomposed."""
    sch = Schedule(mod)
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i0, i1, i2, i3 = sch.split(i, list(i_tiles))
    j0, j1, j2, j3 = sch.split(j, list(j_tiles))
    k0, k1 = sch.split(k, list(k_tiles))
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    wb = sch.cache_write(blk, 0, "global")
    if inline_relu:  # the elementwise consumer becomes part of the write-back
        sch.reverse_compute_inline(sch.get_sblock("compute"))
    sch.reverse_compute_at(wb, j1)
    fused = sch.fuse(i0, j0, i1, j1)
    sch.parallel(fused)
    sch.annotate(fused, "pragma_auto_unroll_max_step", unroll)
    sch.annotate(fused, "pragma_unroll_explicit", 1)
    sch.vectorize(sch.get_loops(blk)[-1])
    wl = sch.get_loops(wb)
    sch.vectorize(sch.fuse(*wl[-1:]))
    sch.decompose_reduction(blk, k0)
    return sch


def cpu_conv(mod, inline_pad=True):
    """Conv2d with its padding inlined (or computed at the output tile), tiled, parallel and vectorised."""
    sch = Schedule(mod)
    conv = sch.get_sblock("conv2d_nhwc")
    pad = sch.get_sblock("PadInput")
    n, h, w, co, rh, rw, rc = sch.get_loops(conv)
    h0, h1 = sch.split(h, [7, 2])
    co0, co1 = sch.split(co, [2, 16])
    sch.reorder(n, h0, co0, rh, rw, h1, w, rc, co1)
    if inline_pad:
        sch.compute_inline(pad)
    else:
        sch.compute_at(pad, co0)
    sch.parallel(sch.fuse(n, h0, co0))
    sch.vectorize(co1)
    sch.decompose_reduction(conv, rh)
    return sch


def cpu_layout(mod):
    """The tiled matmul with B stored in the order its tile walks it (what RewriteLayout does to weights)."""
    sch = cpu_tiled(mod, (2, 2, 2, 8), (2, 2, 1, 16), (8, 8))
    sch.transform_layout(sch.get_sblock("C_update"), ("read", 2), lambda k, j: (j // 16, k, j % 16))
    return sch


def cpu_rfactor(mod):
    """MetaSchedule's AddRFactor on a matmul: the reduction split, its inner part factored out into a
    partial-sum buffer, the final reduction computed at the output loop."""
    sch = Schedule(mod)
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    k0, k1 = sch.split(k, [16, 8])
    rf = sch.rfactor(k1, 1)
    sch.parallel(sch.get_loops(rf)[0])
    sch.reverse_compute_at(blk, sch.get_loops(rf)[0])
    sch.decompose_reduction(rf, sch.get_loops(rf)[2])
    return sch


def gpu_tiled(mod, tiles=((1, 2, 8, 2, 4), (2, 1, 16, 2, 2), (8, 2, 8)), threads_x=None, fetch_vec=2):
    """MetaSchedule's GPU tiling (SSSRRSRS) of a matmul: blockIdx / vthread / threadIdx, shared-memory
    cache reads computed at the outer reduction loop and fetched cooperatively, a local cache write."""
    sch = Schedule(mod)
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i0, i1, i2, i3, i4 = sch.split(i, list(tiles[0]))
    j0, j1, j2, j3, j4 = sch.split(j, list(tiles[1]))
    k0, k1, k2 = sch.split(k, list(tiles[2]))
    sch.reorder(i0, j0, i1, j1, i2, j2, k0, k1, i3, j3, k2, i4, j4)
    bx = sch.fuse(i0, j0)
    vt = sch.fuse(i1, j1)
    tx = sch.fuse(i2, j2)
    sch.bind(bx, "blockIdx.x")
    sch.bind(vt, "vthread.x")
    sch.bind(tx, "threadIdx.x")
    local = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(local, tx)
    nthreads = threads_x or sch.get(tx).extent.value
    for idx in (0, 1):
        shared = sch.cache_read(blk, idx, "shared")
        sch.compute_at(shared, k0)
        loops = sch.get_loops(shared)
        fused = sch.fuse(*loops[-2:])
        _, t, v = sch.split(fused, [None, nthreads, fetch_vec])
        sch.bind(t, "threadIdx.x")
        sch.vectorize(v)
    sch.decompose_reduction(blk, k0)
    return sch


def trace_of(sch) -> list:
    """The schedule's trace as the JSON a MetaSchedule database stores."""
    from costlab.metaschedule.traces import trace_json

    return trace_json(sch.trace)


def workload_json(mod) -> tuple[str, str]:
    """``(shash, base64 IR)`` of a module, as a MetaSchedule database (and a costlab task) stores it."""
    from tvm.s_tir.meta_schedule.database import Workload

    shash, b64 = Workload(mod).as_json()
    return str(shash), str(b64)


def dataset_of(path, target: dict, tasks: list) -> None:
    """A dataset of unmeasured programs: ``tasks`` = [(name, module, [schedule JSON text, ...])]; every record
    gets the same placeholder cost (tests of featurizers, which never read costs)."""
    from costlab.datasets import DatasetWriter, RecordBatch, program_id

    with DatasetWriter(path) as w:
        w.add_platform("p", target)
        batch = RecordBatch()
        for name, mod, schedules in tasks:
            shash, b64 = workload_json(mod)
            t = w.add_task(shash, "ms", b64, name=name)
            for s in schedules:
                batch.append(t, s, [1e-3], 0, 0.0, program_id("ms", shash, s))
        w.add_records("p", batch)


FIXTURES = __import__("pathlib").Path(__file__).resolve().parent / "fixtures"


def measured_dataset():
    """``(path, platform)`` of the shared fixture of measured MetaSchedule records, ``ms_small.h5`` (four
    te_workload tasks, 20 records each, measured by ``costlab dataset measure`` on ``llvm -num-cores=2``)."""
    import pytest

    from costlab.datasets import open_dataset

    path = FIXTURES / "ms_small.h5"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    with open_dataset(path) as ds:
        platform = max(ds.record_platforms(), key=ds.num_records)
    return path, platform
