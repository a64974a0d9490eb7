"""MetaSchedule workloads: their database form, and a task's name, kernel class and FLOPs computed from them.

A MetaSchedule database stores each workload as ``[shash, base64 IRModule JSON]`` (``Workload.as_json()``).
costlab stores a task's workload in exactly that form (``workload_hash`` = the shash string, ``workload`` =
the base64 text), so the same workload reached by ``import-ms``, ``extract`` or ``measure`` is the same task.

TVM is imported lazily: without TVM (or when a workload does not decode) a task still gets a fallback
description, so a pure-data import never fails for want of a compiler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from costlab.common.errors import last_line

UNKNOWN_CLASS = "unknown"


@dataclass
class WorkloadInfo:
    name: str
    kernel_class: str
    flops: float


def workload_json(mod) -> tuple[str, str]:
    """``(shash, base64 IR)`` of an IRModule (or PrimFunc), exactly as MetaSchedule's database writes it.

    A PrimFunc is normalized the way ``tune_tir`` / ``TuneContext`` do it (one function named ``main``
    with ``tirx.noalias``), so that a tuning run on the same function gives the same hash.
    """
    from tvm.s_tir.meta_schedule.database import Workload
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from tvm import tirx

    if isinstance(mod, tirx.PrimFunc):
        mod = _normalize_mod(mod)
    shash, b64 = Workload(mod).as_json()
    return str(shash), str(b64)


def decode_workload(shash: str, b64: str):
    """The IRModule of a workload in its database form."""
    from tvm.s_tir.meta_schedule.database import Workload

    return Workload.from_json([shash, b64]).mod


def plain_json(value, bools_as_ints: bool = False):
    """TVM's ``as_json()`` / ``export()`` return FFI containers and ``IntImm``/``FloatImm`` leaves; the plain
    Python value (lists, dicts, int, float, str, bool, None) that ``json.dumps`` writes.

    ``bools_as_ints`` writes booleans as 1 / 0, as MetaSchedule's database writer does in traces (a
    ``Split``'s ``preserve_unit_iters`` is ``true`` in ``Trace.as_json()`` but ``1`` in the file).
    """
    if isinstance(value, bool):
        return int(value) if bools_as_ints else value
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return str(value)
    kind = type(value).__name__
    if kind in ("IntImm", "FloatImm", "Bool"):
        return plain_json(value.value, bools_as_ints)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): plain_json(v, bools_as_ints) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or hasattr(value, "__len__"):
        return [plain_json(v, bools_as_ints) for v in value]
    raise TypeError(f"cannot write {kind} as JSON")


def trace_json(trace):
    """A schedule trace as MetaSchedule's database writes it (``database_tuning_record.json``), as a plain
    Python value: the postprocessing included, booleans as integers."""
    return plain_json(trace.as_json(remove_postproc=False), bools_as_ints=True)


def _kind(expr) -> str:
    # TIR expression classes moved between TVM releases (tirx.BufferLoad is now ir.TensorLoad), so
    # nodes are recognised by class name.
    return type(expr).__name__


def _strip_casts(expr):
    while _kind(expr) == "Cast":
        expr = expr.value
    return expr


def _loads_from(expr, buffer) -> bool:
    if _kind(expr) not in ("TensorLoad", "BufferLoad"):
        return False
    src = getattr(expr, "source", None)
    if src is None:
        src = getattr(expr, "buffer", None)
    return src is not None and src.same_as(buffer)


def _reduction_kind(block) -> str:
    """How the anchor block combines: ``mac`` (sum of products: matmul, conv, dense), ``sum``, ``max``,
    ``min`` or ``reduce`` (anything else)."""
    body = block.body
    if _kind(body) != "BufferStore":
        return "reduce"
    value = _strip_casts(body.value)
    kind = {"Add": "sum", "Max": "max", "Min": "min"}.get(_kind(value))
    if kind is None:
        return "reduce"
    a, b = _strip_casts(value.a), _strip_casts(value.b)
    other = b if _loads_from(a, body.buffer) else a
    if kind == "sum" and _kind(other) == "Mul":
        return "mac"
    return kind


def _blocks(mod):
    """The blocks of every PrimFunc of a module (root excluded), found by walking the statement tree
    (this TVM has no Python ``post_order_visit`` for TIR)."""
    from tvm import tirx

    found = []

    def visit(node):
        k = type(node).__name__
        if k == "SeqStmt":
            for s in node.seq:
                visit(s)
        elif k == "SBlockRealize":
            if node.block.name_hint != "root":
                found.append(node.block)
            visit(node.block.body)
        elif k == "IfThenElse":
            visit(node.then_case)
            if node.else_case is not None:
                visit(node.else_case)
        elif getattr(node, "body", None) is not None:
            visit(node.body)

    for _, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc):
            visit(func.body)
    return found


def kernel_class(mod) -> tuple[str, str, list[int]]:
    """``(kernel class, anchor block name, anchor iterator extents)`` of a TIR IRModule.

    The class describes the *computation form* of the anchor block (TVM's ``find_anchor_sblock``: the
    block with an init statement and the most FLOPs) and ignores names and shapes: the combiner
    (``mac`` = multiply-accumulate, ``sum``, ``max``, ...) and the number of spatial (``s``) and reduction
    (``r``) iterators, e.g. ``mac.s2r1`` for every 2-D matmul (dense, ``nn.Linear``), ``mac.s3r1`` for
    batch matmul, ``mac.s4r3`` for 2-D convolutions, ``mac.s4r2`` for depthwise ones.

    Why not names: block and function names depend on who wrote the workload (``C`` in TVM's te
    benchmarks, ``matmul`` or ``T_matmul_NT`` from Relax, ``main`` in every tuning database), so the same
    operator would fall into different classes depending on where the task came from, while tasks of one
    class must be comparable wherever they came from. The form and loop structure are what a schedule
    depends on: a trace of one class replays on another workload of the same class (transfer-tuning),
    and matmul-like tasks of different shapes share one class. Modules without a reduction are
    ``injective.s<n>`` by their largest block; modules without blocks are ``unknown``.
    """
    from tvm.s_tir.analysis import find_anchor_sblock

    try:
        anchor = find_anchor_sblock(mod)
    except Exception:  # TVM refuses modules with several anchor candidates of equal rank
        anchor = None
    if anchor is not None:
        spatial = sum(1 for iv in anchor.iter_vars if int(iv.iter_type) == 0)
        reduce_ = sum(1 for iv in anchor.iter_vars if int(iv.iter_type) == 2)
        extents = [int(iv.dom.extent) if hasattr(iv.dom.extent, "value") else -1 for iv in anchor.iter_vars]
        return f"{_reduction_kind(anchor)}.s{spatial}r{reduce_}", anchor.name_hint, extents
    blocks = _blocks(mod)
    if not blocks:
        return UNKNOWN_CLASS, "", []

    def size(b):
        n = 1
        for iv in b.iter_vars:
            n *= int(iv.dom.extent) if hasattr(iv.dom.extent, "value") else 1
        return n

    big = max(blocks, key=size)
    extents = [int(iv.dom.extent) if hasattr(iv.dom.extent, "value") else -1 for iv in big.iter_vars]
    return f"injective.s{len(big.iter_vars)}", big.name_hint, extents


def _expr_shape(expr, depth: int = 0) -> str:
    """An expression's form without names or shapes: loads are ``x``, constants ``c``, variables ``v``,
    e.g. ``Max(Add(x,x),c)`` for a bias add followed by ReLU."""
    k = _kind(expr)
    if k in ("TensorLoad", "BufferLoad"):
        return "x"
    if k in ("IntImm", "FloatImm", "StringImm"):
        return "c"
    if k in ("Var", "SizeVar"):
        return "v"
    if depth > 16:
        return "_"
    if k == "Call":
        name = str(getattr(expr.op, "name", "call")).replace("tirx.", "").replace("tir.", "")
        return f"{name}({','.join(_expr_shape(a, depth + 1) for a in expr.args)})"
    kids = [getattr(expr, f) for f in ("condition", "true_value", "false_value", "a", "b", "value")
            if getattr(expr, f, None) is not None]
    return f"{k}({','.join(_expr_shape(c, depth + 1) for c in kids)})" if kids else k


def block_signature(block) -> str:
    """A block's computation form: its iterators' kinds (``s`` spatial, ``r`` reduction) and what its store
    computes (``s2r1:Add(x,Mul(x,x))``); names and extents left out."""
    its = "".join("s" if int(iv.iter_type) == 0 else "r" if int(iv.iter_type) == 2 else "o" for iv in block.iter_vars)
    body = block.body
    what = _expr_shape(body.value) if _kind(body) == "BufferStore" else _kind(body)
    return f"{its}:{what}"


def block_structure(mod) -> tuple[list[str], list[str], int, list[int]]:
    """``(block names, block signatures, anchor position, anchor iterator extents)`` of a workload, blocks in
    program order; the anchor is the kernel-class block (``kernel_class``), position -1 when there is none."""
    blocks = _blocks(mod)
    _cls, anchor, extents = kernel_class(mod)
    names = [b.name_hint for b in blocks]
    at = names.index(anchor) if anchor in names else -1
    return names, [block_signature(b) for b in blocks], at, extents


def _clean_name(text: str) -> str:
    """``T_matmul_NT`` -> ``matmul_NT``, ``conv2d_nhwc_1`` -> ``conv2d_nhwc``."""
    text = re.sub(r"^T_", "", text)
    return re.sub(r"(_\d+)+$", "", text) or text


def describe(mod) -> WorkloadInfo:
    """Name, kernel class and FLOPs of a workload's IRModule.

    The name is the function's global symbol when it is informative, else the anchor block's name, with
    the anchor iterators' extents (``C:16x16x16``) so that tasks of one class stay tell-apart-able.
    """
    from tvm.s_tir.analysis import estimate_tir_flops

    cls, block, extents = kernel_class(mod)
    func_names = [gv.name_hint for gv, _ in mod.functions_items()]
    base = func_names[0] if len(func_names) == 1 and func_names[0] not in ("main", "default_function") else block
    name = _clean_name(base or "main")
    if extents:
        name += ":" + "x".join(str(e) for e in extents)
    try:
        flops = float(estimate_tir_flops(mod))
    except Exception:
        flops = 0.0
    return WorkloadInfo(name, cls, flops)


def describe_json(shash: str, b64: str) -> tuple[WorkloadInfo, str | None]:
    """Describe a workload given in database form; on failure (no TVM, undecodable IR) a fallback named
    after the hash, with class ``unknown``, and the reason."""
    try:
        return describe(decode_workload(shash, b64)), None
    except ImportError as exc:
        reason = f"TVM not available ({exc})"
    except Exception as exc:  # a workload TVM cannot decode: keep the record, describe it by its hash
        reason = f"workload does not decode: {last_line(exc)}"
    return WorkloadInfo(f"ms-{shash[:12]}", UNKNOWN_CLASS, 0.0), reason
