"""The builders costlab compiles MetaSchedule candidates with: ``LocalBuilder`` without the tensor-intrinsic
registry import in its workers, or a pooled builder whose workers live across batches and export shared
libraries (what a tuning run, which builds batch after batch, uses).
"""

from __future__ import annotations

import functools
import os

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

    if pooled:
        return _builder_class()(timeout, workers or usable_cores(), build_without_intrinsic_registry,
                                export_shared if shared else None)
    return ms.builder.LocalBuilder(timeout_sec=timeout, f_build=build_without_intrinsic_registry, max_workers=workers)
