"""MetaSchedule workloads: their database form, and a task's name, kernel class and FLOPs computed from them
(the kernel class from the workload's structure, ``structure.py``).

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
from costlab.metaschedule.structure import UNKNOWN_CLASS, kernel_class


@dataclass
class WorkloadInfo:
    name: str
    kernel_class: str
    flops: float


def workload_json_mod(mod):
    """The IRModule MetaSchedule tunes for ``mod``: a PrimFunc normalized the way ``tune_tir`` /
    ``TuneContext`` do it (one function named ``main`` with ``tirx.noalias``), an IRModule as it is."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from tvm import tirx

    return _normalize_mod(mod) if isinstance(mod, tirx.PrimFunc) else mod


def workload_json(mod) -> tuple[str, str]:
    """``(shash, base64 IR)`` of an IRModule (or PrimFunc), exactly as MetaSchedule's database writes it.

    A PrimFunc is normalized first (``workload_json_mod``), so that a tuning run on the same function gives
    the same hash.
    """
    from tvm.s_tir.meta_schedule.database import Workload

    shash, b64 = Workload(workload_json_mod(mod)).as_json()
    return str(shash), str(b64)


def decode_workload(shash: str, b64: str):
    """The IRModule of a workload in its database form."""
    from tvm.s_tir.meta_schedule.database import Workload

    return Workload.from_json([shash, b64]).mod


def duplicate_buffer_names(mod) -> list[str]:
    """Names that two different buffers of ``mod``'s PrimFuncs share (te's unnamed placeholders are all
    ``placeholder``: a depthwise convolution's input and weight). The blocks' reads, writes and allocations
    are walked, which name every buffer of a workload before it is scheduled."""
    seen: dict = {}

    def add(buf):
        seen.setdefault(str(buf.name), set()).add(buf.__chandle__())

    def visit(node):
        kind = type(node).__name__
        if kind == "SBlockRealize":
            block = node.block
            for region in (*block.reads, *block.writes):
                add(region.source)
            for buf in block.alloc_buffers:
                add(buf)
            if block.init is not None:
                visit(block.init)
            visit(block.body)
        elif kind == "SeqStmt":
            for stmt in node.seq:
                visit(stmt)
        elif kind == "IfThenElse":
            visit(node.then_case)
            if node.else_case is not None:
                visit(node.else_case)
        elif getattr(node, "body", None) is not None:  # For, AttrStmt, Bind, LetStmt, AllocBuffer, ...
            visit(node.body)

    for _, func in mod.functions_items():
        if type(func).__name__ == "PrimFunc":
            visit(func.body)
    return sorted(name for name, datas in seen.items() if len(datas) > 1)


def unique_buffer_names(mod):
    """``mod`` with every buffer named apart (a TVMScript round trip, whose printer suffixes repeated names:
    ``placeholder``, ``placeholder_1``), or ``mod`` itself when its names already are, or when the copy is
    not structurally equal to it. Names are no part of a workload's identity (its structural hash ignores
    them), but TVM's per-store features order tied buffers by name and then by address, so two buffers of
    one name come out in either order from one process to the next; and PSA follows a buffer by its name."""
    if not duplicate_buffer_names(mod):
        return mod
    import tvm
    import tvm_ffi

    try:
        renamed = tvm.script.from_source(mod.script())
    except Exception:  # noqa: BLE001  a module TVMScript cannot round-trip keeps its names
        return mod
    return renamed if tvm_ffi.structural_equal(renamed, mod) else mod


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


def describe_json(shash: str, b64: str, strict: bool = False) -> tuple[WorkloadInfo, str | None]:
    """Describe a workload given in database form; without TVM, a fallback named after the hash, with class
    ``unknown``, and the reason. A workload TVM cannot decode gets the same fallback, or with ``strict`` raises
    ``ValueError`` saying why (no command could replay, measure or export it)."""
    try:
        mod = decode_workload(shash, b64)
    except ImportError as exc:
        reason = f"TVM not available ({exc})"
    except Exception as exc:  # noqa: BLE001  TVM reports an undecodable IR in several ways
        reason = f"workload does not decode: {last_line(exc)}"
        if strict:
            raise ValueError(reason) from None
    else:
        try:
            return describe(mod), None
        except Exception as exc:  # noqa: BLE001  a workload decoded but not described: kept, named by its hash
            reason = f"workload not described: {last_line(exc)}"
    return WorkloadInfo(f"ms-{shash[:12]}", UNKNOWN_CLASS, 0.0), reason
