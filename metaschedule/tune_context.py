"""MetaSchedule tune contexts without the tensor-intrinsic registry where a task cannot use it.

``ms.TuneContext(...)`` imports ``tvm.s_tir.tensor_intrin`` before anything else: it parses every tensor
intrinsic TVM ships (x86, ARM, CUDA tensor cores, Hexagon, ...), 13-40 s on a 2-core machine, because the
default schedule rules of some targets name intrinsics (on an x86 CPU with AVX-512 or VNNI, the int8
dot-product rule ``MultiLevelTilingWithIntrin("dot_16x4_...")`` looks its intrinsic up when it is made).

On an x86 CPU a task without a reduction into a 32-bit integer buffer over 8-bit integer data (the shape
of an int8 dot product) can never match a dot-product intrinsic (an 8-bit attention mask beside float math
does not), and the x86
defaults are exactly the generic LLVM ones plus that rule (and the ``RewriteTensorize`` postprocessor,
which only acts on blocks the rule tagged). Such a task gets the LLVM defaults by name and a context made
without the import; every other task (int8 on a CPU, another target kind, ARM) gets MetaSchedule's own
defaults with the registry loaded, as ``ms.TuneContext`` does.

On a CUDA GPU the plain ``cuda`` rules name no intrinsic: a task gets them without the registry, unless it is a
tensor-core task (``tensor_core_task``: float16 or int8 matmuls and convolutions on sm_80 or later, where
MetaSchedule's own choice would be its tensor-core rules for every task), which gets the ``cuda-tensorcore``
rules with the registry loaded. The registry is then loaded for such tasks alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from costlab.metaschedule import intrinsics
from costlab.metaschedule.structure import module_blocks
from costlab.metaschedule.targets import arch_number

_NARROW_INT = ("int8", "uint8")

# From sm_80 on, MetaSchedule's own choice for a CUDA target is its tensor-core rule set (whose MMA groups copy
# asynchronously, which sm_80 brought); costlab keeps that threshold
_TENSOR_CORE_ARCH = 80


@dataclass
class _Func:
    """What the rule choice reads of a PrimFunc, from its IR (not its printed text, whose forms vary: a
    float32 buffer prints without its dtype, a shape of int64 extents nests parentheses)."""

    params: set  # dtypes of its parameters' buffers
    buffers: set  # dtypes of every buffer: its parameters' and those its blocks allocate
    reduction: bool  # a block with an init statement


def _prim_funcs(mod):
    """``[_Func]`` of a module's PrimFuncs; None when one cannot be read."""
    from tvm import IRModule, tirx
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    out = []
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            return None  # not a PrimFunc MetaSchedule can read
        try:
            params = {str(getattr(i, "dtype", "")) for i in ArgInfo.from_prim_func(func)}
            blocks = module_blocks(IRModule({gvar: func}), root=True)
            allocated = {str(b.dtype) for blk in blocks for b in blk.alloc_buffers}
            out.append(_Func(params, params | allocated, any(blk.init is not None for blk in blocks)))
        except Exception:  # noqa: BLE001  a function this walk cannot read: MetaSchedule's own defaults
            return None
    return out


def tensor_core_task(mod, target) -> bool:
    """Whether a task is one for NVIDIA's tensor cores: a CUDA target of sm_80 or later, and a reduction (a
    matmul, dense or convolution) of float16 data into float16, or of 8-bit integers into int32. Such a task gets
    MetaSchedule's ``cuda-tensorcore`` rules (``MultiLevelTilingTensorCore``: WMMA fragments, fed through shared
    memory), with the intrinsic registry loaded; blocks the intrinsics do not fit are tiled as the plain CUDA
    rules tile them.

    Float16 data summed into a float32 buffer (an output, or a buffer cast to a float16 output) is left to the
    plain rules: in TVM 0.27 every program tensorized with the float32 accumulator
    (``wmma_sync_16x16x16_f16f16f32``) fails to build (``LowerIntrin``: "tvm_access_ptr element type must match
    the source buffer"). The same error fails some int8 programs, not all: those stay on tensor cores."""
    if str(target.kind.name) != "cuda" or arch_number(target.attrs.get("arch")) < _TENSOR_CORE_ARCH:
        return False
    funcs = _prim_funcs(mod)
    if funcs is None:
        return False
    for f in funcs:
        if not f.reduction or not f.params:
            continue
        if f.params == {"float16"} and "float32" not in f.buffers:
            return True
        if f.params & set(_NARROW_INT) and "int32" in f.buffers:
            return True
    return False


def rules_kind(mod, target) -> str | None:
    """The name of the default rule set (schedule rules, postprocessors, mutators) a task is tuned with:
    ``llvm``, ``cuda`` or ``cuda-tensorcore``; None for MetaSchedule's own choice by target (``from-target``),
    with the intrinsic registry loaded (module docstring)."""
    kind = str(target.kind.name)
    if kind == "cuda":
        return "cuda-tensorcore" if tensor_core_task(mod, target) else "cuda"
    return None if needs_intrinsics(mod, target) else "llvm"


def needs_intrinsics(mod, target) -> bool:
    """Whether MetaSchedule's default rules for this task and target may use registered tensor intrinsics."""
    if str(target.kind.name) == "cuda":
        return tensor_core_task(mod, target)  # the plain CUDA rules name no intrinsic
    if str(target.kind.name) != "llvm":
        return True
    triple = str(target.attrs.get("mtriple", "") or "")
    if triple and not any(triple.startswith(p) for p in ("x86_64", "i686", "i386")):
        return True  # ARM / other CPUs: their default rules are their own
    funcs = _prim_funcs(mod)
    if funcs is None:  # keep MetaSchedule's defaults
        return True
    for f in funcs:
        if f.reduction and f.buffers & set(_NARROW_INT) and "int32" in f.buffers:  # an int32 reduction of 8-bit data
            return True
    return False


def space_generator(mod, target):
    """The design-space generator ``post-order-apply`` would make for this task, without the intrinsic
    registry when the task cannot use it (module docstring)."""
    from tvm.s_tir.meta_schedule.space_generator import PostOrderApply

    kind = rules_kind(mod, target)  # the default rules look up intrinsics by name: loaded as far as they need
    if kind is None:  # needs_intrinsics, read off the rule set chosen (the task scanned once)
        intrinsics.load("all")
        return PostOrderApply()
    if kind == "cuda-tensorcore":
        intrinsics.load("cuda")
    return PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs=kind)


def tune_context(mod, target, search_strategy=None, *, task_name: str = "main", rand_state: int = -1,
                 num_threads: int = 1, logger=None, space="auto"):
    """``ms.TuneContext(mod, target=..., space_generator=..., ...)`` without its unconditional registry import.

    ``mod``: an IRModule with one ``main`` (or a PrimFunc); ``target``: a ``Target`` or its JSON dict;
    ``space``: ``"auto"`` for ``space_generator(mod, target)``, a space generator, or None for a context that
    only carries the module and target (what feature extraction reads)."""
    import tvm
    from tvm.s_tir.meta_schedule import _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func
    from tvm.s_tir.meta_schedule.search_strategy import SearchStrategy
    from tvm.s_tir.meta_schedule.tune_context import TuneContext, _normalize_mod

    if type(mod).__name__ == "PrimFunc":
        mod = _normalize_mod(mod)
    if not isinstance(target, tvm.target.Target):
        target = tvm.target.Target(dict(target) if isinstance(target, dict) else target)
    if search_strategy is not None and not isinstance(search_strategy, SearchStrategy):
        search_strategy = SearchStrategy.create(search_strategy)
    if isinstance(space, str) and space == "auto":
        space = space_generator(mod, target)
    ctx = TuneContext.__new__(TuneContext)
    ctx.__init_handle_by_constructor__(
        _ffi_api.TuneContext, mod, target, space, search_strategy, task_name, int(num_threads), int(rand_state),
        get_logging_func(logger if logger is not None else get_logger("tvm.s_tir.meta_schedule")))
    if space is not None or search_strategy is not None:
        _ffi_api.TuneContextInitialize(ctx)
    return ctx
