"""TVM's tensor-intrinsic registry, loaded as far as a task needs it.

MetaSchedule looks tensor intrinsics up by name: a tensor-core design space, a tensorizing trace replayed, a
database holding one. ``import tvm.s_tir.tensor_intrin`` registers every intrinsic TVM ships (CUDA, x86, ARM,
ROCm, Hexagon, RISC-V), each parsed from TVMScript: 18 s on a 2-core Zen 5, 26 s on the GPU machine. A CUDA
task looks up only the CUDA ones (WMMA, MMA, ldmatrix), about two thirds of that time: ``load("cuda")``
registers those alone by importing the package's ``cuda`` module without the package's own ``__init__``.

After ``load("cuda")`` the package stands in ``sys.modules`` with its CUDA intrinsics only; ``load("all")``
completes it. Everything of costlab that needs the CPU intrinsics loads them through ``load``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

PACKAGE = "tvm.s_tir.tensor_intrin"
# what the package's __init__ imports besides cuda, in a build with LLVM
_LLVM_MODULES = ("arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu")
# what the CUDA intrinsics' names hold (wmma_fill_16x16x16_f16, mma_ldmatrix_f16_a, ...) and no other target's
CUDA_NAME_MARKERS = ("wmma_", "mma_")


def loaded() -> bool:
    """Whether some of the registry is loaded (``load`` ran, or something imported the package)."""
    return PACKAGE in sys.modules


def kind_for(text: str) -> str:
    """The registry part a tensorizing trace or record needs, from its text: ``"cuda"`` when it names CUDA
    intrinsics, else ``"all"``."""
    return "cuda" if any(m in text for m in CUDA_NAME_MARKERS) else "all"


def load(kind: str = "all") -> None:
    """Register the tensor intrinsics of ``kind``: ``"cuda"`` (tensor cores) or ``"all"`` (what importing the
    package registers). Loading twice is free."""
    if kind not in ("cuda", "all"):
        raise ValueError(f"intrinsic kind {kind!r}: expected 'cuda' or 'all'")
    if PACKAGE not in sys.modules:
        if kind == "all":
            importlib.import_module(PACKAGE)
            return
        spec = importlib.util.find_spec(PACKAGE)  # imports tvm.s_tir
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = package  # the package without its __init__, which would register every target's
        setattr(sys.modules[PACKAGE.rpartition(".")[0]], "tensor_intrin", package)
    importlib.import_module(PACKAGE + ".cuda")
    if kind == "all":
        from tvm.runtime import enabled

        if enabled("llvm"):
            for name in _LLVM_MODULES:
                importlib.import_module(f"{PACKAGE}.{name}")
