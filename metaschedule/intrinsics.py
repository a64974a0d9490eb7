"""TVM's tensor-intrinsic registry, loaded as far as a task needs it, and fast.

MetaSchedule looks tensor intrinsics up by name: a tensor-core design space, a tensorizing trace replayed, a
database holding one. ``import tvm.s_tir.tensor_intrin`` registers every intrinsic TVM ships (CUDA, x86, ARM,
ROCm, Hexagon, RISC-V), each parsed from TVMScript. A CUDA task looks up only the CUDA ones (WMMA, MMA,
ldmatrix): ``load("cuda")`` registers those alone, by running the package's ``cuda`` module under a stand-in of
the package that is removed again afterwards.

Most of that import's seconds are not the parsing: TVMScript's ``T.prim_func`` takes ``inspect.stack()`` for
every intrinsic, which finds the module of every frame on the stack, and a frame of Python's import machinery
is in no module's file, so each one scans all of ``sys.modules``. ``load`` runs the modules itself (``_execute``),
with no import frames on the stack: ``benchmarks/gpu.py registry`` on a 2-core Zen 4, medians of 3 fresh
processes: the package import 36.6 s after ``import tvm`` and 127.8 s after torch, Lightning and transformers
(a tuning command's process); ``load("all")`` 0.21 and 0.15 of those, ``load("cuda")`` 0.16 and 0.09.

Only the ``cuda`` module then stays in ``sys.modules``: the first import of the package itself (``load("all")``,
or MetaSchedule's own) runs the package's ``__init__``, which takes that module as it is and registers the rest.
A script that runs MetaSchedule's ``tune_tir`` (whose ``TuneContext`` imports the package) can call
``load("all")`` first and pay the fraction.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

PACKAGE = "tvm.s_tir.tensor_intrin"
CUDA_MODULE = PACKAGE + ".cuda"
# what the CUDA intrinsics' names hold (wmma_fill_16x16x16_f16, mma_ldmatrix_f16_a, ...) and no other target's
CUDA_NAME_MARKERS = ("wmma_", "mma_")
# what the package's __init__ imports beside ``cuda`` where TVM is built with LLVM
LLVM_MODULES = ("arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu")
_LOADING = threading.Lock()


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
    with _LOADING:  # (the import lock that an import would hold: two threads never register a name twice)
        _load(kind)


def _load(kind: str) -> None:
    if PACKAGE in sys.modules:  # the package (and so all of it) is loaded, or being loaded by its own import
        return
    if kind == "cuda":
        if CUDA_MODULE not in sys.modules:
            # the package without its __init__, which would register every target's
            sys.modules[PACKAGE] = importlib.util.module_from_spec(importlib.util.find_spec(PACKAGE))
            try:
                _execute(CUDA_MODULE)
            finally:
                del sys.modules[PACKAGE]
        return
    package = importlib.util.module_from_spec(importlib.util.find_spec(PACKAGE))  # imports tvm.s_tir
    sys.modules[PACKAGE] = package
    try:
        from tvm.runtime import enabled

        # the modules the package's __init__ imports, run from here first; its own run then takes them as
        # they are (and imports, the slow way, any module a later TVM adds to that list)
        for name in ("cuda",) + (LLVM_MODULES if enabled("llvm") else ()):
            if f"{PACKAGE}.{name}" not in sys.modules:
                _execute(f"{PACKAGE}.{name}")
        _execute(PACKAGE, package)
    except BaseException:
        sys.modules.pop(PACKAGE, None)
        raise


def _execute(name: str, module=None) -> None:
    """Run module ``name`` (made from its spec unless given) as its import would, but called from here: in
    ``sys.modules`` while it runs, an attribute of its package after. Every ``T.prim_func`` of an intrinsic
    module takes ``inspect.stack()``, which looks up the module of each frame; a frame of the import machinery
    (``<frozen importlib._bootstrap>``) is in no module's file, and each such lookup scans all of ``sys.modules``
    (4,700 modules in a process that has imported torch). Run from here, the stack holds none of them."""
    if module is None:
        module = importlib.util.module_from_spec(importlib.util.find_spec(name))
        sys.modules[name] = module
    try:
        exec(module.__spec__.loader.get_code(name), module.__dict__)  # noqa: S102 (TVM's own installed module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
