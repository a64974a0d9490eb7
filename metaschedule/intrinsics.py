"""TVM's tensor-intrinsic registry, loaded as far as a task needs it.

MetaSchedule looks tensor intrinsics up by name: a tensor-core design space, a tensorizing trace replayed, a
database holding one. ``import tvm.s_tir.tensor_intrin`` registers every intrinsic TVM ships (CUDA, x86, ARM,
ROCm, Hexagon, RISC-V), each parsed from TVMScript: 17 s on a 2-core Zen 5, 26 s on the GPU machine. A CUDA
task looks up only the CUDA ones (WMMA, MMA, ldmatrix): ``load("cuda")`` registers those alone, in 0.44 of that
time on the Zen 5 (``benchmarks/gpu.py registry``), by importing the package's ``cuda`` module under a stand-in
of the package that is removed again afterwards.

Only the ``cuda`` module then stays in ``sys.modules``: the first import of the package itself (``load("all")``,
or MetaSchedule's own) runs the package's ``__init__``, which takes that module as it is and registers the rest.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

PACKAGE = "tvm.s_tir.tensor_intrin"
CUDA_MODULE = PACKAGE + ".cuda"
# what the CUDA intrinsics' names hold (wmma_fill_16x16x16_f16, mma_ldmatrix_f16_a, ...) and no other target's
CUDA_NAME_MARKERS = ("wmma_", "mma_")


def loaded() -> bool:
    """Whether the CUDA intrinsics at least are registered (every load registers them)."""
    return CUDA_MODULE in sys.modules


def kind_for(text: str) -> str:
    """The registry part a tensorizing trace or record needs, from its text: ``"cuda"`` when it names CUDA
    intrinsics, else ``"all"``."""
    return "cuda" if any(m in text for m in CUDA_NAME_MARKERS) else "all"


def load(kind: str = "all") -> None:
    """Register the tensor intrinsics of ``kind``: ``"cuda"`` (tensor cores) or ``"all"`` (what importing the
    package registers). Loading twice is free."""
    if kind not in ("cuda", "all"):
        raise ValueError(f"intrinsic kind {kind!r}: expected 'cuda' or 'all'")
    if kind == "all" or PACKAGE in sys.modules:
        importlib.import_module(PACKAGE if kind == "all" else CUDA_MODULE)
        return
    if CUDA_MODULE in sys.modules:
        return
    stand_in = importlib.util.module_from_spec(importlib.util.find_spec(PACKAGE))  # find_spec imports tvm.s_tir
    sys.modules[PACKAGE] = stand_in  # the package without its __init__, which would register every target's
    try:
        importlib.import_module(CUDA_MODULE)
    finally:
        del sys.modules[PACKAGE]
