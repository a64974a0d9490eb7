"""The builders costlab compiles MetaSchedule candidates with: ``LocalBuilder`` without the tensor-intrinsic
registry import in its workers, or a pooled builder whose workers live across batches and export shared
libraries (what a tuning run, which builds batch after batch, uses).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

from costlab.common.errors import InputError
from costlab.common.host import usable_cores
from costlab.metaschedule.pools import shutdown_pool, start_workers, worker_pool


def build_without_intrinsic_registry(mod, target, _params):
    """MetaSchedule's ``default_build`` without its ``import tvm.s_tir.tensor_intrin``.

    That import only registers tensor intrinsics for *scheduling* (``tensorize``); an already scheduled
    module never consults the registry when it is compiled. In a fresh builder worker it takes 10-25 s
    here, counted against the build timeout, so with MetaSchedule's default most builds of each batch
    (the builder starts fresh workers per batch) failed as timeouts although they compile in well under
    a second. Used as ``LocalBuilder(f_build=...)``; the worker imports this module by name.
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


# free space a batch's builds need in the temporary folder they are linked in, at the least: LLVM ends a worker
# whose object file cannot be written ("LLVM ERROR: IO failure on output stream"), and the candidate would be
# recorded as a program that fails to build, never measured again
BUILD_ROOM = 64 << 20


def check_build_room(loaded_here: bool = True) -> None:
    """An InputError naming the temporary folder when it has less free space than a batch's builds need
    (``BUILD_ROOM``) or is mounted noexec: the command stops instead of recording every candidate built there as
    a program that fails, never measured again. ``loaded_here``: the built libraries are loaded on this machine
    (not an RPC device's), so a noexec folder is refused too."""
    folder = tempfile.gettempdir()
    try:
        free, flags = shutil.disk_usage(folder).free, os.statvfs(folder).f_flag
    except OSError:
        return
    if loaded_here and flags & os.ST_NOEXEC:  # no built library would load: every candidate recorded as failing
        raise InputError(folder, "is on a file system mounted noexec: the shared libraries built there cannot be "
                                 "loaded to run; set TMPDIR to a folder on another file system")
    if free < BUILD_ROOM:
        raise InputError(folder, f"{free >> 20} MB free, too little to build candidates in (about "
                                 f"{BUILD_ROOM >> 20} MB needed); free some space, or set TMPDIR to another folder")


def export_shared(rt_mod) -> str:
    """The builder's export: a shared library, linked in the (parallel) builder worker, so the runner loads
    it with a plain ``dlopen``. MetaSchedule's default exports a tar of object files that the runner, one
    candidate at a time, must first link into a shared library."""
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
    rt_mod.export_library(path)
    return path


@functools.lru_cache(maxsize=None)
def _builder_class():
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
    from tvm.support.popen_pool import StatusKind

    @derived_object
    class PooledBuilder(PyBuilder):
        """MetaSchedule's ``LocalBuilder`` with worker processes that live across batches. ``LocalBuilder``
        starts fresh workers for every batch (each imports TVM again, 1.5 s here, before its first build);
        these are replaced every ``recycle`` batches, which bounds the memory a worker can leak."""

        def __init__(self, timeout_sec: float, workers: int, f_build, f_export, recycle: int = 16):
            super().__init__()
            self.timeout_sec, self.workers, self.recycle = float(timeout_sec), int(workers), max(1, int(recycle))
            self.functions = (f_build, f_export)
            self._pool, self._uses = None, 0
            # the temporary folder's problem found in a build: raised through MetaSchedule's C++ loop (tune_tasks),
            # the InputError reaches the command as a RuntimeError and its traceback; the command raises this one
            self.room_failure = None

        def _executor(self):
            if self._pool is None or self._uses >= self.recycle:
                self.close()
                self._pool = worker_pool(max_workers=self.workers, timeout=self.timeout_sec)
            return self._pool

        def warm_up(self) -> None:
            """Start the workers now (each imports TVM) while the caller goes on, e.g. with its first search."""
            pool = self._executor()
            start_workers(pool, self.workers)

        def build(self, build_inputs):
            try:
                check_build_room(self.functions[1] is not None)
            except InputError as exc:
                self.room_failure = exc
                raise
            self._executor()
            self._uses += 1
            f_build, f_export = self.functions
            results = []
            for res in self._pool.map_with_error_catching(
                    lambda x: _worker_func(*x),
                    [(f_build, f_export, b.mod, b.target, _serialize_params(b.params)) for b in build_inputs]):
                if res.status == StatusKind.COMPLETE:
                    results.append(BuilderResult(res.value, None))
                elif res.status == StatusKind.TIMEOUT:
                    results.append(BuilderResult(None, f"LocalBuilder: Timeout, killed after {self.timeout_sec} seconds"))
                else:
                    results.append(BuilderResult(None, "LocalBuilder: An exception occurred\n" + str(res.value)))
            return results

        def close(self) -> None:
            if self._pool is not None:
                shutdown_pool(self._pool)
            self._pool, self._uses = None, 0

    return PooledBuilder


def make_builder(timeout: float = 30.0, workers: int | None = None, pooled: bool = False, shared: bool = True):
    """The builder costlab measures with: MetaSchedule's ``LocalBuilder`` without the intrinsic-registry
    import in every fresh worker (``build_without_intrinsic_registry``). ``pooled``: one set of workers for
    many batches and (``shared``) shared-library artifacts (``PooledBuilder``, ``export_shared``): what a tuning
    run, which builds batch after batch, uses. ``shared=False`` keeps MetaSchedule's tar of object files, which
    a remote (RPC) device links itself: this machine's linker cannot link another architecture's objects."""
    from tvm.s_tir import meta_schedule as ms

    # before a run starts, as costlab's own error (raised in a build, TVM's FFI makes it a RuntimeError)
    check_build_room(shared or not pooled)
    if pooled:
        return _builder_class()(timeout, workers or usable_cores(), build_without_intrinsic_registry,
                                export_shared if shared else None)
    return ms.builder.LocalBuilder(timeout_sec=timeout, f_build=build_without_intrinsic_registry, max_workers=workers)
