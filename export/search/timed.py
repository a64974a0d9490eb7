"""Seconds of every round, for every strategy (MetaSchedule's own included), and a wall-time budget.

``RoundClock`` collects, per measured batch and kept apart per task, the seconds the strategy searched
(``TimedSearch``), the builder built (``TimedBuilder``), the runner ran (until the batch's results are in:
``results_in``, called by the first measure callback) and the measure callbacks took (``update_s``: the
database, the cost model's update); ``TuneProgress`` writes them into each batch's line of ``progress.jsonl``,
timed when the results were in. ``TimedSearch`` ends a task's search once the run's deadline has passed:
MetaSchedule's task scheduler then finishes with every measured batch in the database.

The clock also holds the budgets every batch is cut to (``RoundClock.affordable``): the trials the run has left
(``trials_left``, shared by all tasks of a network: MetaSchedule's task scheduler checks its global budget only
before a round, so its last round would run past it), and, once a batch has been measured, the deadline: a
batch is cut to the programs that the last batch's build and run seconds per program say can be measured
before it, and no round starts when not one would fit after the task's search (its last search's seconds). A
task's first batch is also cut to its share of the trials left among the tasks not yet measured (``unreached``):
a network of many tasks whose first rounds together exceed the budget (19 tasks x 64 candidates > 1,000 trials)
still has every task measured once, each first round a little smaller, instead of the last tasks in the order
never measured at all.

With a screening runner (``metaschedule/screening.py``) the clock also carries its ``TaskTags``: ``TimedSearch`` tags
the candidates it returns with its task, ``TimedBuilder`` maps each artifact built from them to that task.
"""

from __future__ import annotations

import time

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import PyBuilder
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from costlab.export.stop import stop_requested
from costlab.metaschedule.screening import task_key


class _Batch:
    """One task's batch on its way: the seconds its search and build took, when its build ended, when its results
    came in, and how many candidates it measures."""

    def __init__(self):
        self.search_s = self.build_s = 0.0
        self.built_at: float | None = None  # time.perf_counter() its build ended
        self.results_at: tuple[float, float] | None = None  # (perf_counter, time.time) its results came in
        self.n = 0


class RoundClock:
    """The seconds of each task's batches, kept apart per task (``task``: the task's position in the run, None for
    one alone): MetaSchedule's gradient and round-robin schedulers search and build every task's first round before
    they join any, so one task's results come in after other tasks' searches and builds."""

    def __init__(self, deadline: float | None = None):
        self.deadline = deadline  # time.time() after which no new round starts
        self._batches: dict = {}  # task -> _Batch
        self.current = None  # the task whose search returned candidates last: the builder builds them next
        self._first = dict(search_s=0.0, build_s=0.0)  # all tasks' seconds until the first results came in
        self._last_built: float | None = None  # perf_counter() the last build ended
        self.first_batch_at: float | None = None  # time.time() the first batch's results came in
        self.first_batch: dict | None = None  # the seconds until then: every search and build, the run after them
        self.stopped_by_deadline = False
        self._refused = False  # the deadline refused a round of one task of the tasks tuned now (``nothing_fits``)
        self.lost: str | None = None  # why the remote device was given up (``metaschedule.rpc``)
        self.failed: str | None = None  # a file of the run that could not be written (a full disk): no new round
        self.trials_left: int | None = None  # trials the run may still measure (None: the strategy's own budget)
        self.unreached = 0  # tasks sharing trials_left that have not had a batch yet (their first batches share it)
        self.per_program_s: float | None = None  # the last batch's build and run seconds per program
        self.search_s: dict = {}  # task -> the seconds its last measured batch's search took
        self.tags = None  # a metaschedule.screening.TaskTags when the runner screens: candidates tagged with their task
        self.screening = None  # that ScreeningRunner: each batch's row says how many it screened out

    def _batch(self, task) -> _Batch:
        return self._batches.setdefault(task, _Batch())

    def lose(self, reason: str) -> None:
        """The runner's device stopped answering: no new round starts."""
        self.lost = reason

    def fail(self, reason: str) -> None:
        """A file of the run could not be written: no new round starts."""
        self.failed = self.failed or reason

    def expired(self) -> bool:
        if stop_requested() is not None or self.lost is not None or self.failed is not None:
            return True
        if self.deadline is not None and time.time() >= self.deadline:
            self.stopped_by_deadline = True
            return True
        return False

    def nothing_fits(self, task=None) -> bool:
        """No candidate could be measured after a search of ``task`` now: the trials are spent, or the last
        batch's seconds per program say none fits before the deadline once the search has taken as long as its
        last did (a task not searched before: as long as the slowest search so far). A search then would be thrown
        away (``affordable`` cuts its batch to nothing), and a network's every live task would run one before the
        run ends."""
        if self.trials_left is not None and self.trials_left <= 0:
            return True
        if self.deadline is not None and self.per_program_s:
            search_s = self.search_s.get(task, max(self.search_s.values(), default=0.0))
            if self.deadline - time.time() < search_s + self.per_program_s:
                self._refused = True  # the run's, once its other tasks are done (``end_group``)
                return True
        return False

    def end_group(self) -> None:
        """The tasks tuned together are done: a round the deadline refused one of them (``nothing_fits``: its search
        would leave no time to measure) stopped the run by ``--max-seconds``, unless the other tasks' rounds then
        measured every trial left (a task with a slow search refused, one with a fast search taking the rest)."""
        if self._refused and not (self.trials_left is not None and self.trials_left <= 0):
            self.stopped_by_deadline = True
        self._refused = False

    def affordable(self, n: int, first: bool = False, task=None) -> int:
        """How many of a batch of ``n`` candidates of ``task`` may be measured: no more than the trials left, and no
        more than fit before the deadline at the last batch's seconds per program; counted against the trials left.
        ``first``: the task's first batch, one of ``unreached``: no more than its share of the trials left, at
        least one."""
        if self.trials_left is not None:
            n = min(n, self.trials_left)
            if first and self.unreached > 1:
                n = min(n, max(1, self.trials_left // self.unreached))
        if first and self.unreached > 0:
            self.unreached -= 1
        if self.deadline is not None and self.per_program_s:
            fit = int((self.deadline - time.time()) / self.per_program_s)
            if fit < n:
                n = max(0, fit)
                if n == 0:
                    self.stopped_by_deadline = True
        if self.trials_left is not None:
            self.trials_left -= n
        self._batch(task).n = n
        return n

    def searched(self, seconds: float, task=None) -> None:
        """``task``'s search took ``seconds``; what it returned is built next."""
        self._batch(task).search_s += seconds
        self.current = task
        if self.first_batch_at is None:
            self._first["search_s"] += seconds

    def built(self, t0: float) -> None:
        """A build that began at ``t0`` (``time.perf_counter``) has just ended: that of the candidates the last
        search returned (MetaSchedule builds a task's batch as soon as its search returns it); its run starts now."""
        batch = self._batch(self.current)
        self._last_built = batch.built_at = time.perf_counter()
        batch.build_s += batch.built_at - t0
        if self.first_batch_at is None:
            self._first["build_s"] += batch.built_at - t0

    def results_in(self, task=None) -> None:
        """``task``'s batch's results have just come in (before the measure callbacks: the database, the model's
        update)."""
        self._batch(task).results_at = (time.perf_counter(), time.time())

    def batch_done(self, task=None) -> dict:
        """The seconds of ``task``'s batch whose results came in (and a fresh start for its next): searching,
        building, running and, with ``results_in`` called, the callbacks since (``update_s``); ``at``: the wall
        time (``time.time()``) the results came in, now without ``results_in``."""
        now, wall = time.perf_counter(), time.time()
        batch = self._batches.pop(task, None) or _Batch()
        results_at, at = batch.results_at if batch.results_at is not None else (now, wall)
        run_s = results_at - batch.built_at if batch.built_at is not None else None
        row = dict(search_s=round(batch.search_s, 4), build_s=round(batch.build_s, 4),
                   run_s=round(run_s, 4) if run_s is not None else None, update_s=round(now - results_at, 4))
        if self.screening is not None:
            row["screened_out"] = self.screening.last_screened
        if run_s is not None and batch.n:  # what a batch costs until the next can start
            self.per_program_s = (batch.build_s + run_s + row["update_s"]) / batch.n
            self.search_s[task] = batch.search_s
        if self.first_batch_at is None:
            # where the seconds to the first results went: every search and build until then, and the run after
            # the last build (the other tasks' first batches, searched and built before these results came in,
            # are not start-up)
            last = self._last_built if self._last_built is not None else batch.built_at
            first_run = results_at - last if last is not None else None
            self.first_batch_at = at
            self.first_batch = dict(self._first, run_s=first_run)
        return dict(row, at=at)


@derived_object
class TimedSearch(PySearchStrategy):
    """A search strategy (MetaSchedule's or costlab's) timed by a ``RoundClock`` and stopped by its deadline.
    ``reached``: the task already has measured programs (a continued run), so its next batch is not a first one;
    ``position``: the task's position in the run, which its batches' seconds are kept under."""

    def __init__(self, inner, clock: RoundClock, reached: bool = True, position=None):
        self.inner, self.clock, self.reached, self.position = inner, clock, reached, position

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)
        self.task = None
        if self.clock.tags is not None:  # a screening runner compares each candidate with its own task's best
            self.task = task_key(context.mod)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if self.clock.expired() or self.clock.nothing_fits(self.position):
            return None
        t0 = time.perf_counter()
        out = self.inner.generate_measure_candidates()
        self.clock.searched(time.perf_counter() - t0, self.position)
        if out is None:
            return None
        n = self.clock.affordable(len(out), first=not self.reached, task=self.position)
        self.reached = True
        out = list(out)
        # what was cut is not measured: a strategy that keeps its own set of picked programs (model-led,
        # draft-verify) is told, so a later round may pick them; MetaSchedule's evolutionary state (C++) keeps
        # them marked
        forget = getattr(self.inner, "forget", None)
        if forget is not None and n < len(out):
            forget([c.sch for c in out[max(n, 0):]])
        out = out[:n] if n > 0 else None
        if out and self.clock.tags is not None and getattr(self, "task", None) is not None:
            self.clock.tags.candidates(out, self.task)
        return out

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return TimedSearch(self.inner.clone(), self.clock, self.reached, self.position)


@derived_object
class TimedBuilder(PyBuilder):
    """A builder timed by a ``RoundClock``."""

    def __init__(self, inner, clock: RoundClock):
        super().__init__()
        self.inner, self.clock = inner, clock

    def build(self, build_inputs):
        t0 = time.perf_counter()
        out = self.inner.build(build_inputs)
        self.clock.built(t0)
        if self.clock.tags is not None:  # artifact -> task, for the screening runner
            self.clock.tags.built(build_inputs, out)
        return out
