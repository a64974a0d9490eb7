"""The PSA formula: a run-time estimate of a scheduled program from its loop nests and a hardware spec.

Per statement, ``max(compute time, memory time)``, summed over the program (Pruner's PSA, extended to CPUs):

CPU (``CPUSpec``)
  compute = FLOPs / (peak per core x cores used x SIMD lane use), times a register-spill penalty when the
  accumulator tile of a reduction does not fit the vector registers, and (1 + 1/reuse) for low data reuse
  (reuse = 1 + FLOPs / elements brought into L1). Cores used: the parallel loop's extent against the cores,
  with wave quantisation (``P / (ceil(P / cores) * cores)``). Lane use: the vectorised loop's extent against
  the SIMD lanes (``V / (ceil(V / lanes) * lanes)``), halved for strided (gathered) vector accesses; a
  scalar loop gets half its lanes when the innermost loop is unit-stride (LLVM's own vectoriser), else 1.
  Loop overhead (one cycle per iteration of every loop not unrolled) is added.
  memory = the largest of the traffic between each pair of levels over that level's bandwidth. Traffic into
  a level: the outermost loop whose working set (all accesses' footprints below it) fits the level's
  capacity keeps its data there; everything it touches is re-fetched once per iteration of the loops
  outside it. Levels: vector registers, L1, L2 (per core), LLC (shared), DRAM.
  Each entry into a parallel region costs a fork-join.

GPU (``GPUSpec``)
  compute = FLOPs x (1 + 1/reuse) / (peak x occupancy x warp use / register penalty), with occupancy the
  wave quantisation of thread blocks over (SMs x resident blocks per SM, limited by threads, shared memory
  and registers), warp use ``(T/32) / ceil(T/32)``, register penalty ``regs / 128`` above 128.
  memory = global bytes per thread block x thread blocks / bandwidth, uncoalesced accesses (stride > 1
  along ``threadIdx.x``) costing up to a sector (8 floats) per element. A launch that does not fit the
  block limits (threads, shared memory) is invalid: its estimate is infinite.

Only the order within a task matters; the numbers are in seconds to stay interpretable.
"""

from __future__ import annotations

import math

from costlab.featurizers.loopnest import Program, Stmt, flat_strides, footprints, reduction_positions

FORK_JOIN_S = 2e-6  # one entry into a TVM parallel region (thread-pool fork + join)
KERNEL_LAUNCH_S = 3e-6


def estimate(program: Program, spec) -> float:
    """Estimated run time in seconds (lower is better); ``inf`` for a launch the GPU cannot run."""
    if getattr(spec, "kind", "cpu") == "gpu":
        return _gpu(program, spec)
    return _cpu(program, spec)


def _elem_bytes(stmt: Stmt) -> int:
    for a in stmt.accesses:
        if a.write:
            return a.nbytes
    return stmt.accesses[0].nbytes if stmt.accesses else 4


# -- CPU ---------------------------------------------------------------------------------------------------

def _cpu(program: Program, spec) -> float:
    total = 0.0
    freq = spec.freq_ghz * 1e9
    levels = [spec.vector_registers * spec.simd_bits // 8, spec.l1_bytes, spec.l2_bytes, spec.llc_bytes]
    for s in program.stmts:
        total += _cpu_stmt(s, spec, freq, levels)
    return total


def _cpu_stmt(s: Stmt, spec, freq: float, levels: list) -> float:
    loops = s.loops
    n = len(loops)
    exts = [lp.extent for lp in loops]
    inst = 1
    for e in exts:
        inst *= e
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

    # SIMD lane use
    vec_pos = next((i for i in range(n - 1, -1, -1) if loops[i].kind == "vectorized"), None)
    if vec_pos is not None:
        v = exts[vec_pos]
        simd = v / (math.ceil(v / lanes) * lanes)
        if any(st.get(vec_pos, 0) > 1 for st in strides):
            simd *= 0.5  # gathers / scatters
    else:
        inner = n - 1
        while inner >= 0 and exts[inner] == 1:
            inner -= 1
        if inner >= 0 and exts[inner] >= lanes and all(st.get(inner, 0) <= 1 for st in strides):
            simd = 0.5
        else:
            simd = 1.0 / lanes

    # register tile of a reduction: accumulators (and one vector per operand) live across the innermost
    # reduction loop
    reg_penalty = 1.0
    red = reduction_positions(s)
    if red:
        r = max(red) + 1
        regs = 0
        for a, fp in zip(s.accesses, fps):
            vecs = math.ceil(fp[r] / lanes) if vec_pos is not None else fp[r]
            regs += vecs if a.write else min(vecs, 2)
        if regs > spec.vector_registers:
            reg_penalty = regs / spec.vector_registers

    # memory traffic between levels
    traffic = []
    for cap in levels:
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
    t_mem = max(
        traffic[0] / (spec.l1_bw * freq * act),
        traffic[1] / (spec.l2_bw * freq * act),
        traffic[2] / (spec.llc_bw * freq * act),
        traffic[3] / (spec.dram_gbs * 1e9),
    )

    flops = inst * s.flops
    peak_core = freq * max(1, spec.fma_units) * 2 * lanes
    elems_in = max(1.0, traffic[1] / nbytes)
    reuse = 1.0 + flops / elems_in
    t_comp = flops / (peak_core * used * simd) * reg_penalty * (1.0 + 1.0 / reuse) if flops else 0.0

    # loop overhead: one cycle per iteration of each loop that is not unrolled or vectorised
    unroll_limit = max((lp.unroll for lp in loops), default=0)
    overhead = 0.0
    iters = 1
    inner_prod = [1] * (n + 1)
    for i in range(n - 1, -1, -1):
        inner_prod[i] = inner_prod[i + 1] * exts[i]
    for i, lp in enumerate(loops):
        iters *= exts[i]
        if lp.kind in ("vectorized", "unrolled") or exts[i] == 1:
            continue
        if unroll_limit and inner_prod[i] <= unroll_limit:
            continue
        overhead += iters
    t_over = overhead / (freq * used)
    return max(t_comp, t_mem) + t_over + launches * FORK_JOIN_S


# -- GPU ---------------------------------------------------------------------------------------------------

def _common_prefix(loop_lists: list) -> int:
    n = min(len(x) for x in loop_lists)
    for i in range(n):
        first = loop_lists[0][i]
        if any(x[i] is not first for x in loop_lists[1:]):
            return i
    return n


def _gpu(program: Program, spec) -> float:
    # statements under the same outermost blockIdx loop form one kernel
    kernels: dict = {}
    for s in program.stmts:
        first = next((lp for lp in s.loops if lp.kind.startswith("blockIdx")), None)
        kernels.setdefault(id(first) if first is not None else id(s), []).append(s)
    total = 0.0
    for stmts in kernels.values():
        total += _gpu_kernel(stmts, spec)
    return total


def _gpu_kernel(stmts: list, spec) -> float:
    threads = 1
    blocks = 1
    per_stmt = []
    users: dict = {}  # shared / local buffer -> [(stmt, access)]
    for s in stmts:
        exts = [lp.extent for lp in s.loops]
        b = 1
        last_block = -1
        t_outer = 1
        for i, lp in enumerate(s.loops):
            if lp.kind.startswith("blockIdx"):
                b *= exts[i]
                last_block = i
            elif lp.kind.startswith("threadIdx"):
                # a cooperative fetch binds an inner loop to threadIdx again: the block's size is the largest
                t_outer = max(t_outer, exts[i])
        threads = max(threads, t_outer)
        blocks = max(blocks, b)
        thread_pos = {i for i, lp in enumerate(s.loops) if lp.kind.startswith(("threadIdx", "vthread"))}
        fps_block = footprints(s, relaxed=thread_pos)  # what one thread block touches below depth d
        per_stmt.append((s, exts, b, fps_block, last_block + 1))
        for a in s.accesses:
            scope = a.scope.split(".")[0]
            if scope in ("shared", "local"):
                users.setdefault((a.buffer, scope), []).append((s, a))

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
        else:
            regs += size * max(1, uses[0][1].nbytes // 4)

    if threads > spec.max_threads_per_block or smem > spec.smem_per_block:
        return math.inf
    regs += 16  # indices, addresses
    limits = [spec.max_blocks_per_sm, spec.max_threads_per_sm // max(1, threads),
              spec.regs_per_sm // max(1, min(regs, spec.max_regs_per_thread) * threads)]
    if smem:
        limits.append(spec.smem_per_sm // smem)
    per_sm = max(0, min(limits))
    if per_sm == 0:
        return math.inf
    slots = spec.sms * per_sm
    occupancy = blocks / (math.ceil(blocks / slots) * slots)
    warp = (threads / spec.warp_size) / math.ceil(threads / spec.warp_size)
    reg_penalty = regs / 128.0 if regs > 128 else 1.0
    if regs > spec.max_regs_per_thread:
        reg_penalty *= 2.0  # spills to local memory
    peak = spec.peak_gflops * 1e9
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
        t_comp = flops * (1.0 + 1.0 / reuse) / (peak * occupancy * warp / reg_penalty) if flops else 0.0
        t_mem = gbytes / bw
        total += max(t_comp, t_mem)
    return total
