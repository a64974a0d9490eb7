"""TVM's tensor-intrinsic registry, loaded as far as a task needs it, and fast.

MetaSchedule looks tensor intrinsics up by name: a tensor-core design space, a tensorizing trace replayed, a
database holding one. ``import tvm.s_tir.tensor_intrin`` registers every intrinsic TVM ships (CUDA, x86, ARM,
ROCm, Hexagon, RISC-V), each parsed from TVMScript. A CUDA task looks up only the CUDA ones (WMMA, MMA,
ldmatrix): ``load("cuda")`` registers those alone, by importing the package's ``cuda`` module under a stand-in
of the package that is removed again afterwards.

Most of that import's seconds are not the parsing: TVMScript's ``T.prim_func`` takes ``inspect.stack()`` for
every intrinsic, which finds the module of every frame on the stack, and a frame of Python's import machinery
(``<frozen importlib._bootstrap>``) is in no module's file, so ``inspect.getmodule`` scans all of
``sys.modules`` for each such frame, every time (4,700 modules in a process that has imported torch).
``load`` first tells ``inspect`` which modules those frozen files are (``frozen_frames_resolved``), then
imports as before. ``benchmarks/gpu.py registry`` compares it with the import as MetaSchedule does it
(docs/gpu.md has the figures). Once resolved, MetaSchedule's own import in the same process is as fast.

Only the ``cuda`` module then stays in ``sys.modules``: the first import of the package itself (``load("all")``,
or MetaSchedule's own) runs the package's ``__init__``, which takes that module as it is and registers the rest.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys

PACKAGE = "tvm.s_tir.tensor_intrin"
CUDA_MODULE = PACKAGE + ".cuda"
# what the CUDA intrinsics' names hold (wmma_fill_16x16x16_f16, mma_ldmatrix_f16_a, ...) and no other target's
CUDA_NAME_MARKERS = ("wmma_", "mma_")
# the modules of Python's import machinery, whose frames are on the stack of every import
FROZEN_IMPORT_MODULES = ("importlib._bootstrap", "importlib._bootstrap_external")


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
    frozen_frames_resolved()
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


def frozen_frames_resolved() -> None:
    """Tell ``inspect`` the modules of the import machinery's frozen files, which it otherwise looks for by
    scanning every loaded module (its file-to-module cache never learns them: they are no module's file). The
    answer is what they are (``importlib._bootstrap``, ...); what ``inspect`` says of such a frame's source is
    unchanged (none). Where Python keeps no such cache, nothing is done and imports are as slow as before."""
    cache = getattr(inspect, "modulesbyfile", None)
    if isinstance(cache, dict):
        for name in FROZEN_IMPORT_MODULES:
            if name in sys.modules:
                cache.setdefault(f"<frozen {name}>", name)
