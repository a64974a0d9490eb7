"""A runner that measures in full only the candidates that may be their task's best.

Most of a tuning round's seconds are the runner's: MetaSchedule's evaluator repeats every kernel until a run
takes ``min_repeat_ms`` (100 ms), however slow the program is. ``ScreeningRunner`` runs every candidate of a
batch once first (phase 1: one warm-up call and one timed call, ``SCREEN_CONFIG``); a candidate whose phase-1
time is at least ``ratio`` x the best known time of *its own task* keeps that time as its cost and is not run
again; the others are measured in full (phase 2, the run's evaluator). A task's best known time is the best full
measurement of its earlier batches in this run (seeded from a work dir's database with ``seed``) and this
batch's best phase-1 time (a single run, so it tightens only its own batch's screening). A batch's fastest
candidate by phase 1 is measured in full unless the task's best of earlier batches already puts it ``ratio`` x
behind (a batch of slow programs alone costs one run each). Failures stay MetaSchedule's failures (an error
message, no cost).

The task of a candidate is exact, never guessed from argument shapes (two tasks can share them): the search
tags its candidates' modules with the task's structural hash (``TaskTags.candidates``), the builder maps each
artifact it built from a tagged module to that hash (``TaskTags.built``), and the runner looks the artifact
up. An artifact of no known task (e.g. built outside the tuning loop) is measured in full.

``sized``: phase 2's ``min_repeat_ms`` sized to the kernel's phase-1 time (``sized_min_repeat_ms``) rather
than the same 100 ms for a 10 µs and a 5 ms kernel.
"""

from __future__ import annotations

import math

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, PyRunner
from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture, _worker_func

RATIO = 1.5  # costlab tune's default --screen
# phase 1: one timed call (the evaluator makes one untimed call before it), no repeating until a minimum time
SCREEN_CONFIG = dict(number=1, repeat=1, min_repeat_ms=0)
SIZED_RUNS = 20  # sized phase 2: runs a kernel gets, at least
SIZED_FLOOR_MS = 10  # ... and at least this many milliseconds of runs (timer resolution, short-kernel noise)


def task_key(mod) -> str:
    """A task's key: the structural hash of its workload module (MetaSchedule's workload hash)."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(mod))


def sized_min_repeat_ms(seconds: float, ceiling_ms: int) -> int:
    """``min_repeat_ms`` for a kernel that ran ``seconds`` once: ``SIZED_RUNS`` runs of it, at least
    ``SIZED_FLOOR_MS``, at most ``ceiling_ms`` (the run's own setting)."""
    if not (seconds > 0 and math.isfinite(seconds)):
        return ceiling_ms
    return int(min(ceiling_ms, max(SIZED_FLOOR_MS, math.ceil(SIZED_RUNS * seconds * 1e3))))


class TaskTags:
    """Which task each built artifact belongs to (see the module's docstring)."""

    def __init__(self):
        self._mods: dict = {}  # handle of a candidate's module -> (module, task key)
        self._artifacts: dict[str, str] = {}

    def candidates(self, candidates, key: str) -> None:
        for c in candidates:
            mod = c.sch.mod
            self._mods[hash(mod)] = (mod, key)  # the module is held, so its handle is not reused meanwhile

    def built(self, build_inputs, build_results) -> None:
        for bi, br in zip(build_inputs, build_results):
            entry = self._mods.pop(hash(bi.mod), None)
            if entry is not None and entry[0].same_as(bi.mod) and br.artifact_path is not None:
                self._artifacts[str(br.artifact_path)] = entry[1]

    def task_of(self, artifact_path) -> str | None:
        return self._artifacts.pop(str(artifact_path), None)

    def clear(self) -> None:
        """Forget tagged modules never built (candidates the budget cut)."""
        self._mods.clear()


def _submit(local, config: EvaluatorConfig, runner_input) -> tuple[list[float] | None, str | None]:
    """One candidate run by a ``LocalRunner``'s worker with ``config``: exactly ``LocalRunner.run``'s call, its
    results and error messages."""
    fut = local.pool.submit(_worker_func, local.f_alloc_argument, local.f_run_evaluator, local.f_cleanup, config,
                            local.alloc_repeat, str(runner_input.artifact_path), str(runner_input.device_type),
                            tuple(a.as_json() for a in runner_input.args_info))
    try:
        return [float(x) for x in fut.result()], None
    except TimeoutError:
        return None, f"LocalRunner: Timeout, killed after {local.timeout_sec} seconds\n"
    except Exception as exc:  # noqa: BLE001  as LocalRunner reports it
        return None, "LocalRunner: An exception occurred\n" + str(exc)


@derived_object
class ScreeningRunner(PyRunner):
    """Phase 1 for every candidate, phase 2 for those within ``ratio`` of their task's best (module docstring).

    ``inner`` is the run's ``LocalRunner`` (``runners.make_runner``: its worker runs kernels on the target's
    threads); both phases run in its worker, phase 2 with its evaluator config (``sized``: its
    ``min_repeat_ms`` sized to the kernel). ``stats`` counts candidates, those screened out, phase-2 runs, failures, and
    candidates of no known task (measured in full)."""

    def __init__(self, inner, ratio: float = RATIO, tags: TaskTags | None = None, sized: bool = False):
        super().__init__()
        self.inner, self.ratio, self.sized = inner, float(ratio), bool(sized)
        self.tags = tags if tags is not None else TaskTags()
        full = inner.evaluator_config
        self.full = EvaluatorConfig(number=full.number, repeat=full.repeat, min_repeat_ms=full.min_repeat_ms,
                                    enable_cpu_cache_flush=full.enable_cpu_cache_flush)
        self.screen = EvaluatorConfig(enable_cpu_cache_flush=full.enable_cpu_cache_flush, **SCREEN_CONFIG)
        self.best: dict[str, float] = {}
        self.stats = dict(candidates=0, screened_out=0, full=0, failed=0, untagged=0)
        self.last_screened = 0  # candidates screened out of the last batch

    def seed(self, key: str, seconds: float | None) -> None:
        """A task's best time known before this run (e.g. the work dir's database)."""
        if seconds is not None and 0 < seconds < math.inf:
            self.best[key] = min(self.best.get(key, math.inf), float(seconds))

    def _phase2_config(self, seconds: float | None) -> EvaluatorConfig:
        if not self.sized or seconds is None:
            return self.full
        ms_ = sized_min_repeat_ms(seconds, int(self.full.min_repeat_ms))
        return EvaluatorConfig(number=self.full.number, repeat=self.full.repeat, min_repeat_ms=ms_,
                               enable_cpu_cache_flush=self.full.enable_cpu_cache_flush)

    def run(self, runner_inputs):
        if hasattr(self.inner, "ready"):  # costlab's runner: its worker started in the background
            self.inner.ready()
        keys = [self.tags.task_of(x.artifact_path) for x in runner_inputs]
        first: list = [None] * len(runner_inputs)  # phase 1: (costs, error) of a candidate of a known task
        batch_best: dict[str, float] = {}
        for i, (x, key) in enumerate(zip(runner_inputs, keys)):
            if key is None:
                self.stats["untagged"] += 1
                continue
            first[i] = _submit(self.inner, self.screen, x)
            if first[i][1] is None:
                t = min(first[i][0])
                batch_best[key] = min(batch_best.get(key, math.inf), t)
        out: list = [None] * len(runner_inputs)
        screened = 0
        for i, (x, key) in enumerate(zip(runner_inputs, keys)):
            seconds = None
            if first[i] is not None:
                costs, error = first[i]
                if error is not None:  # a failure stays a failure, with its message
                    out[i] = LocalRunnerFuture(res=None, error_message=error)
                    self.stats["failed"] += 1
                    continue
                seconds = min(costs)
                best = min(self.best.get(key, math.inf), batch_best[key])
                if seconds >= self.ratio * best:  # far slower than its task's best: its one run is its cost
                    out[i] = LocalRunnerFuture(res=costs, error_message=None)
                    screened += 1
                    continue
            costs, error = _submit(self.inner, self._phase2_config(seconds), x)
            self.stats["full"] += 1
            self.stats["failed"] += error is not None
            out[i] = LocalRunnerFuture(res=costs, error_message=error)
            if error is None and key is not None:
                self.best[key] = min(self.best.get(key, math.inf), sum(costs) / len(costs))
        self.tags.clear()
        self.stats["candidates"] += len(runner_inputs)
        self.stats["screened_out"] += screened
        self.last_screened = screened
        return out
