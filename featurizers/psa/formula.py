"""The PSA formula: a run-time estimate of a scheduled program from its loop nests and a hardware spec.

Per statement, ``max(compute time, memory time)``, summed over the program (Pruner's PSA, extended to CPUs):

CPU (``CPUSpec``)
  compute = FLOPs / (FMA units x 2 x lanes in use x clock x cores used), times a register-spill penalty
  when the accumulator tile of a reduction (plus an operand vector or two) exceeds the vector registers,
  and (1 + 1/reuse) for low data reuse (reuse = 1 + FLOPs / elements brought into L1).
  Cores used: the parallel loop's extent against the cores, with wave quantisation
  (``P / ceil(P / cores)``). Lanes in use: an explicitly vectorised loop's extent against the SIMD lanes
  (``V / ceil(V / lanes)``), halved for strided (gathered) accesses; without one, what LLVM does itself:
  it fully unrolls the small constant loops at the bottom of the nest and vectorises the innermost
  remaining loop when every access walks it with unit stride (or not at all), the written one with unit
  stride (a reduction loop is not vectorised without fast-math).
  load/store issue = elements moved between registers and L1 / (loads per cycle x lanes in use x clock
  x cores used); the register file keeps data reused within ``vector registers x lanes`` elements.
  memory = the largest of the traffic into L1, L2 and LLC over the next level's bandwidth (weighted:
  hardware prefetching hides much of it). Traffic into a level: the outermost loop whose working set (all
  accesses' footprints below it) fits the level's capacity keeps its data there; everything it touches
  is re-fetched once per iteration of the loops outside it.
  statement time = max(compute, load/store, memory) + loop overhead (a fraction of a cycle per iteration
  of each loop neither vectorised nor unrolled, by pragma or by LLVM) + a fork-join per entry into a
  parallel region. The constants are in ``CPU_PARAMS``.

GPU (``GPUSpec``)
  compute = FLOPs x (1 + 1/reuse) / (peak x occupancy x warp use / register penalty), with occupancy the
  wave quantisation of thread blocks over (SMs x resident blocks per SM, limited by threads, shared memory
  and registers), warp use ``(T/32) / ceil(T/32)``, register penalty ``regs / 128`` above 128. A block's
  threads T are the product of its thread axes (threadIdx.x, .y, .z). A tensor-core statement (a tensorized
  WMMA multiply-accumulate, ``Stmt.tensor_core``) computes at the tensor-core peak (``GPUSpec.tensor_peak``),
  on a whole warp; its fragments (``wmma.*`` scopes) are a level of their own, held in the registers of the
  warp's 32 lanes.
  memory = global bytes per thread block x thread blocks / bandwidth, uncoalesced accesses (stride > 1
  along ``threadIdx.x``) costing up to a sector (8 floats) per element. A launch that does not fit the
  block limits (threads, shared memory) is invalid: its estimate is infinite.

Only the order within a task matters; the numbers are in seconds to stay interpretable.
"""

from __future__ import annotations

import math

from costlab.featurizers.psa.loopnest import (Program, Stmt, flat_strides, footprints, is_fragment,
                                              reduction_positions)

FORK_JOIN_S = 2e-6  # one entry into a TVM parallel region (thread-pool fork + join)
# Constants of the CPU formula (see ``_cpu_stmt``), set against measured MetaSchedule records
# (``benchmarks/psa_recall.py``).
CPU_PARAMS = dict(
    auto_vec=1.0,  # share of the SIMD lanes LLVM's vectoriser gets on a unit-stride innermost loop
    gather=0.5,  # lane efficiency of a vectorised loop with strided accesses
    spill_exp=0.5,  # register-spill penalty = (registers needed / registers) ** spill_exp
    loads_per_cycle=2.0,  # L1 loads + stores issued per cycle
    mem_weight=0.25,  # weight of the L2 / LLC / DRAM traffic terms (hardware prefetching hides much of it)
    reuse=1.0,  # weight of the low-reuse penalty (1 + reuse / (1 + FLOPs / elements into L1))
    llvm_unroll=128,  # LLVM fully unrolls constant loop nests up to this many iterations
    loop_cycles=0.5,  # cycles per iteration of a loop that is not unrolled
    fork_s=FORK_JOIN_S,
)
KERNEL_LAUNCH_S = 3e-6


def estimate(program: Program, spec, detail: list | None = None) -> float:
    """Estimated run time in seconds (lower is better); ``inf`` for a launch the GPU cannot run.

    ``detail``: a list that receives one dict per statement with the terms of the formula (CPU only)."""
    if getattr(spec, "kind", "cpu") == "gpu":
        return _gpu(program, spec)
    return _cpu(program, spec, detail)


def _elem_bytes(stmt: Stmt) -> int:
    for a in stmt.accesses:
        if a.write:
            return a.nbytes
    return stmt.accesses[0].nbytes if stmt.accesses else 4


# -- CPU ---------------------------------------------------------------------------------------------------

def _cpu(program: Program, spec, detail=None) -> float:
    total = 0.0
    freq = spec.freq_ghz * 1e9
    levels = [spec.vector_registers * spec.simd_bits // 8, spec.l1_bytes, spec.l2_bytes, spec.llc_bytes]
    for s in program.stmts:
        total += _cpu_stmt(s, spec, freq, levels, detail)
    return total


def _cpu_stmt(s: Stmt, spec, freq: float, levels: list, detail=None) -> float:
    k = CPU_PARAMS
    loops = s.loops
    n = len(loops)
    exts = [lp.extent for lp in loops]
    inst = s.instances()
    nbytes = _elem_bytes(s)
    lanes = spec.lanes(nbytes)
    cores = max(1, spec.cores)

    # parallelism: the outermost parallel loop (TVM runs nested ones serially), with wave quantisation
    par_pos = next((i for i, lp in enumerate(loops) if lp.kind == "parallel"), None)
    launches = 0
    if par_pos is None:
        used = 1.0
    else:
        p = exts[par_pos]
        used = p / (math.ceil(p / cores))  # cores' worth of work done per wave
        launches = 1
        for e in exts[:par_pos]:
            launches *= e

    fps = footprints(s)
    strides = [flat_strides(a) for a in s.accesses]

    # SIMD lanes in use: an explicitly vectorised loop against the lanes (halved for gathers). Otherwise
    # LLVM's own vectoriser: after fully unrolling the small constant loops at the bottom of the nest, it
    # vectorises the innermost remaining loop when every access walks it with unit stride (or not at all)
    # and the written one with unit stride (a reduction loop is not vectorised without fast-math)
    vec_pos = next((i for i in range(n - 1, -1, -1) if loops[i].kind == "vectorized"), None)
    if vec_pos is not None:
        v = exts[vec_pos]
        lanes_used = v / math.ceil(v / lanes)
        if any(st.get(vec_pos, 0) > 1 for st in strides):
            lanes_used *= k["gather"]
    else:
        lanes_used = 1.0
        prod = 1
        for i in range(n - 1, -1, -1):
            prod *= exts[i]
            if exts[i] == 1 or prod <= k["llvm_unroll"]:
                continue
            if exts[i] >= lanes and all(st.get(i, 0) <= 1 for st in strides) and all(
                    st.get(i, 0) == 1 for a, st in zip(s.accesses, strides) if a.write):
                lanes_used = max(1.0, k["auto_vec"] * lanes)
            break
    lanes_used = max(1.0, lanes_used)

    # register tile of a reduction: accumulators (and one vector per operand) live across the innermost
    # reduction loop; beyond the register file they spill
    reg_penalty = 1.0
    red = reduction_positions(s)
    if red:
        r = max(red) + 1
        regs = 0
        for a, fp in zip(s.accesses, fps):
            vecs = math.ceil(fp[r] / lanes_used)
            regs += vecs if a.write else min(vecs, 2)
        if regs > spec.vector_registers:
            reg_penalty = (regs / spec.vector_registers) ** k["spill_exp"]

    # traffic into each level: the outermost loop whose working set fits the level keeps its data there;
    # the register file holds as many elements as vector registers x lanes in use
    caps = [spec.vector_registers * lanes_used * nbytes] + levels[1:]
    traffic = []
    for cap in caps:
        d = 0
        while d < n:
            ws = 0
            for a, fp in zip(s.accesses, fps):
                ws += fp[d] * a.nbytes
            if ws <= cap:
                break
            d += 1
        outer = 1
        for e in exts[:d]:
            outer *= e
        traffic.append(sum(fp[d] * a.nbytes for a, fp in zip(s.accesses, fps)) * outer)
    act = max(1.0, used)
    # loads and stores issue at ``loads_per_cycle`` vector (or scalar) accesses per cycle
    t_load = traffic[0] / nbytes / (k["loads_per_cycle"] * lanes_used * freq * act)
    t_mem = k["mem_weight"] * max(
        traffic[1] / (spec.l2_bw * freq * act),
        traffic[2] / (spec.llc_bw * freq * act),
        traffic[3] / (spec.dram_gbs * 1e9),
    )

    flops = inst * s.flops
    ops_per_cycle = max(1, spec.fma_units) * 2 * lanes_used
    elems_in = max(1.0, traffic[1] / nbytes)
    reuse = 1.0 + flops / elems_in
    t_comp = flops / (ops_per_cycle * freq * act) * reg_penalty * (1.0 + k["reuse"] / reuse) if flops else 0.0

    # loop overhead: a cycle per iteration of every loop that is not unrolled: explicitly, by the unroll
    # pragma, or by LLVM (which fully unrolls small constant loop nests), nor vectorised
    unroll_limit = max([lp.unroll for lp in loops] + [k["llvm_unroll"]])
    inner_prod = [1] * (n + 1)
    for i in range(n - 1, -1, -1):
        inner_prod[i] = inner_prod[i + 1] * (1 if loops[i].kind == "vectorized" else exts[i])
    overhead = 0.0
    iters = 1
    for i, lp in enumerate(loops):
        iters *= exts[i]
        if lp.kind in ("vectorized", "unrolled") or exts[i] == 1 or inner_prod[i] <= unroll_limit:
            continue
        overhead += iters
    t_over = k["loop_cycles"] * overhead / (freq * act)
    t = max(t_comp, t_load, t_mem) + t_over + launches * k["fork_s"]
    if detail is not None:
        detail.append(dict(stmt=s.name, time=t, comp=t_comp, load=t_load, mem=t_mem, over=t_over,
                           fork=launches * k["fork_s"], used=used, lanes=lanes_used, reg=reg_penalty, reuse=reuse,
                           traffic=traffic))
    return t


# -- GPU ---------------------------------------------------------------------------------------------------

def _common_prefix(loop_lists: list) -> int:
    n = min(len(x) for x in loop_lists)
    for i in range(n):
        first = loop_lists[0][i]
        if any(x[i] is not first for x in loop_lists[1:]):
            return i
    return n


def gpu_kernels(program: Program) -> list:
    """A GPU program's statements by kernel, in program order: those under the same outermost blockIdx loop
    form one kernel (a statement under none is a kernel of its own)."""
    kernels: dict = {}
    for s in program.stmts:
        first = next((lp for lp in s.loops if lp.kind.startswith("blockIdx")), None)
        kernels.setdefault(id(first) if first is not None else id(s), []).append(s)
    return list(kernels.values())


def _gpu(program: Program, spec) -> float:
    return sum(_gpu_kernel(stmts, spec) for stmts in gpu_kernels(program))


def block_threads(stmts: list, warp_size: int = 32) -> int:
    """The threads of a kernel's thread block: the product of its thread axes (threadIdx.x, .y, .z), each the
    largest extent a statement binds it to (a cooperative fetch binds an inner loop to an axis again). A
    tensor-core statement runs on a whole warp: its lanes (threadIdx.x) are implied where no statement binds
    them."""
    axes: dict = {}
    for s in stmts:
        for lp in s.loops:
            if lp.kind.startswith("threadIdx"):
                axes[lp.kind] = max(axes.get(lp.kind, 1), lp.extent)
    if any(s.tensor_core for s in stmts) and "threadIdx.x" not in axes:
        axes["threadIdx.x"] = warp_size
    return math.prod(axes.values())


def _gpu_kernel(stmts: list, spec) -> float:
    blocks = 1
    per_stmt = []
    users: dict = {}  # shared / local buffer -> [(stmt, access)]
    for s in stmts:
        exts = [lp.extent for lp in s.loops]
        b = 1
        last_block = -1
        for i, lp in enumerate(s.loops):
            if lp.kind.startswith("blockIdx"):
                b *= exts[i]
                last_block = i
        blocks = max(blocks, b)
        thread_pos = {i for i, lp in enumerate(s.loops) if lp.kind.startswith(("threadIdx", "vthread"))}
        fps_block = footprints(s, relaxed=thread_pos)  # what one thread block touches below depth d
        per_stmt.append((s, exts, b, fps_block, last_block + 1))
        for a in s.accesses:
            scope = "fragment" if is_fragment(a.scope) else a.scope.split(".")[0]
            if scope in ("shared", "local", "fragment"):
                users.setdefault((a.buffer, scope), []).append((s, a))
    threads = block_threads(stmts, spec.warp_size)

    # shared memory per block and registers per thread: each buffer is allocated at the innermost loop
    # around all its uses, sized by what its uses touch inside it (shared: by all threads of the block)
    smem = 0
    regs = 0
    for (buf, scope), uses in users.items():
        prefix = _common_prefix([u[0].loops for u in uses])
        size = 0
        for st, acc in uses:
            kinds = ("threadIdx", "vthread") if scope == "shared" else ("vthread",)
            relaxed = {i for i, lp in enumerate(st.loops) if lp.kind.startswith(kinds)}
            idx = st.accesses.index(acc)
            size = max(size, footprints(st, relaxed=relaxed)[idx][prefix])
        if scope == "shared":
            smem += size * uses[0][1].nbytes
        elif scope == "fragment":  # a tensor-core fragment: one per warp, spread over its lanes' registers
            regs += math.ceil(size * uses[0][1].nbytes / 4 / spec.warp_size)
        else:
            regs += size * max(1, uses[0][1].nbytes // 4)

    if threads > spec.max_threads_per_block:
        return math.inf
    # The footprint bound above can exceed the block's shared memory (halos, buffers of several statements)
    # where the real allocation fits: MetaSchedule's VerifyGPUCode keeps every candidate within the limit, and an
    # H100 ran all 4 of 208 measured programs estimated at 50-103 KB. So the estimate is capped at the limit.
    smem = min(smem, spec.smem_per_block)
    regs += 16  # indices, addresses
    # TVM's CUDA kernels carry __launch_bounds__(threads): nvcc keeps the registers per thread within what lets
    # one block of that size stay resident on an SM, and spills the rest to local memory (a launch of 1024
    # threads estimated at 100 registers each runs, slower; it is not impossible)
    cap = max(1, min(spec.max_regs_per_thread, spec.regs_per_sm // max(1, threads)))
    limits = [spec.max_blocks_per_sm, spec.max_threads_per_sm // max(1, threads),
              spec.regs_per_sm // max(1, min(regs, cap) * threads)]
    if smem:
        limits.append(spec.smem_per_sm // smem)
    per_sm = max(0, min(limits))
    if per_sm == 0:
        return math.inf
    slots = spec.sms * per_sm
    occupancy = blocks / (math.ceil(blocks / slots) * slots)
    warp = (threads / spec.warp_size) / math.ceil(threads / spec.warp_size)
    reg_penalty = regs / 128.0 if regs > 128 else 1.0
    if regs > cap:
        reg_penalty *= 2.0  # spills to local memory
    peak = spec.peak_gflops * 1e9
    tensor_peak = (spec.tensor_peak() or spec.peak_gflops) * 1e9
    bw = spec.mem_gbs * 1e9

    total = KERNEL_LAUNCH_S
    for s, exts, b, fps_block, depth in per_stmt:
        inst = 1
        for e in exts:
            inst *= e
        flops = inst * s.flops
        gbytes = 0.0
        for a, fp in zip(s.accesses, fps_block):
            if a.scope.split(".")[0] != "global":
                continue
            nbytes = fp[depth] * a.nbytes * b
            x = next((i for i in range(len(s.loops) - 1, -1, -1) if s.loops[i].kind == "threadIdx.x"), None)
            if x is not None:
                step = flat_strides(a).get(x, 0)
                if step > 1:
                    nbytes *= min(step, max(1, 32 // a.nbytes))
            gbytes += nbytes
        reuse = 1.0 + flops / max(1.0, gbytes / 4.0)
        at = tensor_peak if s.tensor_core else peak
        t_comp = flops * (1.0 + 1.0 / reuse) / (at * occupancy * warp / reg_penalty) if flops else 0.0
        t_mem = gbytes / bw
        total += max(t_comp, t_mem)
    return total
