"""PaCM: per-statement features and data-flow pattern tokens, the inputs of Pruner's verify model.

Each record's trace is replayed on its workload (``Schedule`` + ``Trace.apply_json_to_schedule``) and
then gives two ragged outputs:

- ``stmt``: TVM's per-store features (``PerStoreFeature``: 164 numbers per store statement, computed on
  the schedule lowered by MetaSchedule's feature passes), one row per statement;
- ``pattern``: one token per buffer access along the producer -> consumer chain (statements in execution
  order, each statement's reads before its write), ``PATTERN_FEATURES`` numbers each (see
  ``PATTERN_NAMES``): memory level, access type, bytes and unique bytes, reuse distance and count,
  stride, vectorisation and parallel context.

And one fixed-size output, ``program`` (``PROGRAM_FEATURES`` numbers per record, see ``PROGRAM_NAMES``):
the PSA formula's estimate of the same scheduled program and its terms (compute, load/store issue,
memory, loop overhead, fork-join; the cores and SIMD lanes in use, the register-spill penalty and the
data reuse, each weighted by its statement's share of the estimate), so the verify model can learn how
far to trust the static analyzer instead of a fixed blend of the two (``psa.formula``; on GPU only the
estimate and the FLOPs are filled).

The memory level of an access is where its data lives between two uses. On GPU it is the storage scope
(``local`` -> registers, ``shared``, ``wmma.*`` and ``m16n8k8.*`` -> a tensor-core fragment, ``global``; global
data that fits the L2 counts as L2). On CPU it is
derived from footprints: the access is reused across the innermost loop whose index it does not depend
on; everything the statement touches below that loop must stay cached in between, so the level is the
smallest of (vector registers, L1, L2, LLC, DRAM) of the platform's ``HardwareSpec`` that holds it. An
access never reused is served from the smallest level holding everything it ever touches. So on CPU the
tokens follow the tiling: a matmul whose tiles fit in L1 reads its operands from L1, an untiled one
streams them from L2 or DRAM.

``valid`` is False for a record whose trace does not replay (or whose task is not a MetaSchedule
workload); its ragged outputs are empty.
"""

from __future__ import annotations

import math

import numpy as np

from costlab.common.errors import last_line
from costlab.common.host import usable_cores
from costlab.featurizers.base import Featurizer, register
from costlab.featurizers.ms_records import feature_context, named_apart, record_batch, task_module
from costlab.featurizers.psa import Program, estimate, flat_strides, footprints, program_of, target_dict
from costlab.featurizers.psa.formula import block_threads, gpu_kernels
from costlab.featurizers.psa.hardware import PlatformSpecs
from costlab.featurizers.psa.loopnest import is_fragment
from costlab.metaschedule.targets import is_gpu
from costlab.metaschedule.traces import ReplayError, replay

LEVELS = ("reg", "L1", "L2", "LLC", "DRAM")  # GPU: local, shared, tensor-core fragment (wmma.*), L2, global
PATTERN_NAMES = (
    "level_reg", "level_l1", "level_l2", "level_llc", "level_dram",
    "read", "write", "read_write",
    "log_bytes", "log_unique_bytes", "log_reuse_dis_bytes", "log_reuse_dis_iter", "log_reuse_ct",
    "log_total_reuse", "log_stride", "unit_stride",
    "log_vector_lanes", "log_parallel", "log_threads", "log_access_footprint", "log_stmt_flops",
    "log_alloc_bytes", "chain_position", "init", "level_depth",
)
PATTERN_FEATURES = len(PATTERN_NAMES)
LEVEL_COLUMNS = PATTERN_NAMES[:len(LEVELS)]
STMT_FEATURES = 164
PROGRAM_NAMES = (
    "log_estimate_ns", "log_flops", "log_comp_ns", "log_load_ns", "log_mem_ns", "log_overhead_ns", "log_fork_ns",
    "cores_used", "lanes_used", "log_spill", "log_reuse",
)
PROGRAM_FEATURES = len(PROGRAM_NAMES)


def _lg(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def pattern_tokens(program: Program, spec) -> np.ndarray:
    """The data-flow pattern tokens of a program: ``(accesses, PATTERN_FEATURES)`` float32."""
    gpu = program.gpu
    if gpu:
        caps = None
    else:
        caps = [spec.vector_registers * spec.simd_bits // 8, spec.l1_bytes, spec.l2_bytes, spec.llc_bytes]
    rows = []
    n_stmts = max(1, len(program.stmts))
    # on GPU a statement's threads are its kernel's threads per block (a tensor-core statement sits under
    # threadIdx.y alone, its warp's lanes implied), as PSA counts them
    kernel_threads = {id(st): block_threads(stmts, spec.warp_size) for stmts in gpu_kernels(program)
                      for st in stmts} if gpu else {}
    for k, s in enumerate(program.stmts):
        loops = s.loops
        n = len(loops)
        exts = [lp.extent for lp in loops]
        inst = s.instances()
        fps = footprints(s)
        ws = [sum(fp[d] * a.nbytes for a, fp in zip(s.accesses, fps)) for d in range(n + 1)]
        par = 1
        for lp in loops:
            if lp.kind == "parallel" or lp.kind.startswith("blockIdx"):
                par *= lp.extent
        threads = kernel_threads.get(id(s), 1)
        vec = next((i for i in range(n - 1, -1, -1) if loops[i].kind == "vectorized"), None)
        written = {a.buffer for a in s.accesses if a.write}
        read = {a.buffer for a in s.accesses if not a.write}
        order = [a for a in s.accesses if not a.write] + [a for a in s.accesses if a.write]
        index = {id(a): i for i, a in enumerate(s.accesses)}
        for a in order:
            if not a.write and a.buffer in written:
                continue  # the read half of a read-modify-write: one token, typed read_write
            fp = fps[index[id(a)]]
            used = {pos for terms in a.dims for pos, coef, span in terms if coef and span > 1}
            r = next((i for i in range(n - 1, -1, -1) if i not in used and exts[i] > 1), None)
            if r is not None:
                reuse_bytes = ws[r + 1]
                reuse_iter = 1
                for e in exts[r + 1:]:
                    reuse_iter *= e
                reuse_ct = exts[r]
                depth = r + 1
            else:
                reuse_bytes, reuse_iter, reuse_ct, depth = fp[0] * a.nbytes, 0, 0, 0
            level = _level(a, reuse_bytes, caps, spec, gpu)
            kind = "read_write" if (a.write and a.buffer in read) else ("write" if a.write else "read")
            touched = inst
            for terms in a.dims:
                for pos, coef, span in terms:
                    if pos >= n and span > 1:
                        touched *= span
            strides = flat_strides(a)
            inner = max(strides) if strides else None
            stride = strides[inner] if inner is not None and inner < n else 0
            alloc = a.nbytes
            for dim in a.shape:
                alloc *= max(1, int(dim))
            # this access's own footprint between two uses (the reuse distance counts every access's)
            own_bytes = fp[r + 1] * a.nbytes if r is not None else fp[0] * a.nbytes
            row = dict.fromkeys(PATTERN_NAMES, 0.0)
            row[LEVEL_COLUMNS[level]] = 1.0
            row[kind] = 1.0
            row.update(
                log_bytes=_lg(touched * a.nbytes),
                log_unique_bytes=_lg(fp[0] * a.nbytes),
                log_reuse_dis_bytes=_lg(reuse_bytes),
                log_reuse_dis_iter=_lg(reuse_iter),
                log_reuse_ct=_lg(reuse_ct),
                log_total_reuse=_lg(touched / max(1, fp[0])),
                log_stride=_lg(stride),
                unit_stride=1.0 if stride == 1 else 0.0,
                log_vector_lanes=_lg(exts[vec]) if vec is not None and vec in strides else 0.0,
                log_parallel=math.log2(par),  # 0: serial
                log_threads=math.log2(threads),
                log_access_footprint=_lg(own_bytes),
                log_stmt_flops=_lg(inst * s.flops),
                log_alloc_bytes=_lg(alloc),
                chain_position=k / n_stmts,
                init=1.0 if s.init else 0.0,
                level_depth=depth / max(1, n),
            )
            assert len(row) == PATTERN_FEATURES, sorted(set(row) - set(PATTERN_NAMES))
            rows.append([row[name] for name in PATTERN_NAMES])
    return np.asarray(rows, dtype=np.float32).reshape(-1, PATTERN_FEATURES)


def program_features(program: Program, spec) -> np.ndarray:
    """The PSA estimate of a program and its terms: ``(PROGRAM_FEATURES,)`` float32 (see ``PROGRAM_NAMES``)."""
    detail: list = []
    est = estimate(program, spec, detail)
    row = dict.fromkeys(PROGRAM_NAMES, 0.0)
    row["log_estimate_ns"] = _lg(min(est, 1e3) * 1e9)  # an infinite estimate (a launch the GPU cannot run)
    row["log_flops"] = _lg(sum(s.instances() * s.flops for s in program.stmts))
    for name, term in (("log_comp_ns", "comp"), ("log_load_ns", "load"), ("log_mem_ns", "mem"),
                       ("log_overhead_ns", "over"), ("log_fork_ns", "fork")):
        row[name] = _lg(sum(d[term] for d in detail) * 1e9)
    whole = sum(d["time"] for d in detail)
    if whole > 0:  # CPU: the formula's terms per statement, each weighted by its share of the estimate
        lanes, cores = max(1, spec.lanes(4)), max(1, spec.cores)
        share = [d["time"] / whole for d in detail]
        row["cores_used"] = sum(w * d["used"] / cores for w, d in zip(share, detail))
        row["lanes_used"] = sum(w * min(1.0, d["lanes"] / lanes) for w, d in zip(share, detail))
        row["log_spill"] = sum(w * math.log2(d["reg"]) for w, d in zip(share, detail))
        row["log_reuse"] = sum(w * math.log2(d["reuse"]) for w, d in zip(share, detail))
    return np.asarray([row[name] for name in PROGRAM_NAMES], dtype=np.float32)


def _level(access, reuse_bytes: float, caps, spec, gpu: bool) -> int:
    if gpu:
        if is_fragment(access.scope):  # a tensor-core fragment, in the registers of a warp
            return 2
        scope = access.scope.split(".")[0]
        if scope == "local":
            return 0
        if scope == "shared":
            return 1
        return 3 if reuse_bytes <= spec.l2_bytes else 4
    for i, cap in enumerate(caps):
        if reuse_bytes <= cap:
            return i
    return 4


@register
class PaCM(PlatformSpecs, Featurizer):
    name = "pacm"
    # 2: the tokens' column 19 is the access's own footprint (1 repeated the reuse distance); 3: ``program``
    version = 3
    # 1: a workload's buffers that share a name are told apart (ms_records.named_apart); 2: on GPU, tensor-core
    # fragments are a level of their own (wmma.* scopes were global before) and the program terms are PSA
    # version 3's; 3: the TIR walk bounds the loops of a block by its predicate (PSA's revision 2); 4: on GPU,
    # ``log_threads`` is the kernel's threads per block (it was the statement's largest thread loop: 4 for a
    # tensor-core statement of a 4 x 32 block)
    revision = 4
    default_config = {"spec": None, "num_threads": 1}
    config_bounds = {"num_threads": (1, None)}  # TVM's extraction threads

    def __init__(self, config=None):
        super().__init__(config)
        self._contexts: dict = {}
        self.stats = {"ok": 0, "invalid": 0}
        self.errors: list = []  # (record row, reason) of records that could not be featurized

    def _context(self, key, mod, target_dict, threads: int | None = None):
        if key not in self._contexts:
            from tvm.s_tir import meta_schedule as ms

            ctx = feature_context(mod, target_dict, threads or int(self.config["num_threads"]))
            args = ms.arg_info.ArgInfo.from_prim_func(_main(mod))
            self._contexts[key] = (ctx, args, ms.feature_extractor.PerStoreFeature())
            if len(self._contexts) > 64:
                self._contexts.pop(next(iter(self._contexts)))
        return self._contexts[key]

    def _features(self, key, mod, target_dict, schedules, spec, gpu, threads: int | None = None):
        """(stmt rows, pattern tokens, program features, error or None) per schedule; a schedule TVM's extractor
        or the TIR walk cannot handle gets an error instead of failing the batch. ``threads``: TVM's
        extraction threads (default: the config's)."""
        from tvm.s_tir import meta_schedule as ms

        ctx, args, extractor = self._context(key, mod, target_dict, threads)
        cands = [ms.MeasureCandidate(s, args) for s in schedules]
        try:
            stmt = [f.numpy().astype(np.float32) for f in extractor.extract_from(ctx, cands)] if cands else []
        except Exception:  # noqa: BLE001  one bad candidate fails the batch: extract one by one
            stmt = []
            for c in cands:
                try:
                    stmt.append(extractor.extract_from(ctx, [c])[0].numpy().astype(np.float32))
                except Exception as exc:  # noqa: BLE001
                    stmt.append(f"per-store features failed ({last_line(exc)})")
        out = []
        for s, st in zip(schedules, stmt):
            if isinstance(st, str):
                out.append((None, None, None, st))
                continue
            try:
                program = program_of(s.mod, gpu=gpu)
                out.append((st, pattern_tokens(program, spec), program_features(program, spec), None))
            except Exception as exc:  # noqa: BLE001
                out.append((None, None, None, f"scheduled TIR not understood ({type(exc).__name__}: {exc})"))
        return out

    def featurize_records(self, ds, platform: str, rows: np.ndarray) -> dict:
        rows, plat, gpu, task_ids, schedules = record_batch(ds, platform, rows)
        spec = self.spec_for(plat)
        stmt = [np.zeros((0, STMT_FEATURES), np.float32)] * rows.size
        pattern = [np.zeros((0, PATTERN_FEATURES), np.float32)] * rows.size
        program = np.zeros((rows.size, PROGRAM_FEATURES), np.float32)
        valid = np.zeros(rows.size, bool)
        by_task: dict = {}
        for i, t in enumerate(task_ids.tolist()):
            by_task.setdefault(t, []).append(i)
        for t, idx in by_task.items():
            task = ds.tasks[t]
            try:
                mod = task_module(task)
            except ReplayError as exc:
                self._fail([rows[i] for i in idx], str(exc))
                continue
            ok_idx, schs = [], []
            for i in idx:
                try:
                    schs.append(replay(mod, schedules[i]))
                    ok_idx.append(i)
                except ReplayError as exc:
                    self._fail([rows[i]], str(exc))
            if not schs:
                continue
            key = (task.workload_hash, task.index, platform)
            for i, (sf, pf, gf, err) in zip(ok_idx, self._features(key, mod, plat.target, schs, spec, gpu)):
                if err is not None:
                    self._fail([rows[i]], err)
                    continue
                stmt[i], pattern[i], program[i], valid[i] = sf, pf, gf, True
                self.stats["ok"] += 1
        return {"stmt": stmt, "pattern": pattern, "program": program, "valid": valid}

    def _fail(self, rows, reason: str) -> None:
        self.stats["invalid"] += len(rows)
        for r in rows:
            if len(self.errors) < 1000:
                self.errors.append((int(r), reason))

    def featurize_candidates(self, mod, target, schedules) -> dict:
        """Features of a tuning run's live candidates. TVM's per-store extraction (most of the cost) runs on
        ``live_threads(target)`` threads: during a run's search nothing else runs, and the features of a
        program do not depend on how many threads extracted them."""

        tdict = target_dict(target)
        spec = self.spec_for(target=tdict)
        import tvm_ffi

        threads = live_threads(tdict, int(self.config["num_threads"]))
        key = ("live", int(tvm_ffi.structural_hash(mod)), repr(sorted(tdict.items(), key=str)), threads)
        mod, schedules = named_apart(mod, list(schedules))
        return candidate_arrays(self._features(key, mod, tdict, schedules, spec, is_gpu(tdict), threads))


def candidate_arrays(feats: list) -> dict:
    """``PaCM._features``' per-program tuples as the featurizer's arrays (an unreadable program: empty, invalid)."""
    empty_s, empty_p = np.zeros((0, STMT_FEATURES), np.float32), np.zeros((0, PATTERN_FEATURES), np.float32)
    program = [np.zeros(PROGRAM_FEATURES, np.float32) if err else gf for _, _, gf, err in feats]
    return {"stmt": [empty_s if err else sf for sf, _, _, err in feats],
            "pattern": [empty_p if err else pf for _, pf, _, err in feats],
            "program": np.array(program, np.float32).reshape(-1, PROGRAM_FEATURES),
            "valid": np.array([err is None for _, _, _, err in feats], bool)}


def live_threads(target: dict, least: int = 1) -> int:
    """Threads to extract a tuning run's candidate features with: the cores the run tunes for (the target's
    ``num-cores``; a GPU or core-less target: this machine's), no more than this process may use, and at
    least ``least`` (the featurizer's configured threads)."""
    have = usable_cores()
    cores = 0 if is_gpu(target) else int(target.get("num-cores", 0) or 0)
    return max(1, int(least), min(cores or have, have))


def _main(mod):
    for gv, func in mod.functions_items():
        if type(func).__name__ == "PrimFunc":
            return func
    raise ValueError("module has no PrimFunc")
