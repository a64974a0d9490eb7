"""A MetaSchedule task scheduler by predicted gain (HARL's idea): trials go where they are expected to save
the most end-to-end time per second of tuning.

Every task first gets one round, in task order, those with no valid program in the database first (a continued
run's unmeasured tasks are not left the trials its measured ones leave: often none); a task an earlier part of
the run gave rounds (``history``) goes on from them and gets no second first round. After that each round goes to
the live task with the largest

    priority = weight x best latency x predicted relative improvement of its next round / seconds per round

i.e. the end-to-end seconds the next round is expected to save, per second that round costs. A task's
seconds per round are measured (the mean of its last three rounds, from the moment it was picked to the
moment its results were joined: search, build, run and the measure callbacks). Finished tasks (terminated
by MetaSchedule: design space exhausted, per-task budget reached, the run's budget or deadline cut its
round to nothing) are never chosen, and neither is a task whose budget of ``max_trials_per_task`` is spent.
A task with no valid program yet ranks below every task with one (as in MetaSchedule's gradient
scheduler); among such tasks, the one with the fewest rounds goes first.

The decision is a pure function, ``choose(states, predictor)``, over plain ``TaskState`` records; the TVM
object ``GainScheduler`` keeps those records up to date and calls it. The predicted improvement comes from a
pluggable ``GainPredictor`` (``gain(task_id, history) -> float`` in [0, 1)); the default,
``ProgressGainPredictor``, is documented on its class.

How this fits MetaSchedule 0.27 (``TaskSchedulerNode::Tune``, C++): the loop calls ``NextTaskId``, has the
task's search strategy generate a round of candidates, builds them and hands them to the runner, then calls
``NextTaskId`` again; it never joins a running task itself until the loop ends. So ``next_task_id`` must join
the rounds still running (their results update the database, the cost model and the measure callbacks)
before it returns a task, or the loop's check that the chosen task has no running round fails. Only
``next_task_id`` is overridden here: ``PyTaskScheduler.tune`` of 0.27 takes no ``num_trials_per_iter`` (the
C++ side calls it with ten arguments: a ``TypeError``), and a Python ``join_running_task`` that calls the base
method recurses (the base method dispatches back to the Python override) until the process crashes. Left
alone, both fall through to the C++ defaults; ``next_task_id`` joins rounds through the C++ join directly
and reads the runner results it returns.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule import _ffi_api
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

from costlab.datasets.records import record_latency
from costlab.export.check import fastest_records

logger = logging.getLogger("tvm.s_tir.meta_schedule.task_scheduler.gain")  # into costlab's task_scheduler.log

SECONDS_WINDOW = 3  # rounds averaged for a task's seconds per round
MIN_ROUND_SECONDS = 1e-3


@dataclass
class TaskState:
    """What the scheduler knows of one task: plain Python, so ``choose`` can be driven without TVM.

    ``bests``: the task's best latency (seconds, ``inf`` while no valid program) after each of its rounds;
    ``round_seconds``: each round's seconds; ``model_share``: with a cost model, the share of its latest
    round's candidates the model scores above its measured best program (None: no model signal);
    ``start_best``: its best latency before this call's first round (the records a continued run, a transfer or
    the library start put in the database), ``inf`` when there were none."""

    weight: float = 1.0
    bests: list = field(default_factory=list)
    round_seconds: list = field(default_factory=list)
    trials: int = 0
    finished: bool = False
    model_share: float | None = None
    start_best: float = math.inf

    @property
    def rounds(self) -> int:
        return len(self.bests)

    @property
    def best(self) -> float:
        return self.bests[-1] if self.bests else self.start_best

    @property
    def stale_rounds(self) -> int:
        """The latest rounds in a row that did not improve the best latency (0 after an improving round)."""
        n = 0
        for before, after in zip(reversed(self.bests[:-1]), reversed(self.bests)):
            if after < before:
                break
            n += 1
        return n

    @property
    def seconds_per_round(self) -> float:
        recent = self.round_seconds[-SECONDS_WINDOW:]
        return max(sum(recent) / len(recent), MIN_ROUND_SECONDS) if recent else MIN_ROUND_SECONDS


class GainPredictor(Protocol):
    """Predicts the relative improvement (in [0, 1)) of a task's best latency that its next round brings."""

    def gain(self, task_id: int, history: TaskState) -> float: ...


@dataclass
class ProgressGainPredictor:
    """The default predictor: the task's own progress, and the cost model's opinion when there is one.

    - Progress: each round after the first improved the best latency by ``r = (before - after) / before``
      (0 when it did not). The estimate is a weighted mean of the last ``window`` such r, the newest with
      weight 1 and each older one ``decay`` times less, together with a ``prior`` improvement (what a round
      is assumed to bring before there is evidence) weighted ``decay ** n`` for n rounds of evidence: one
      round only gives the prior; a task that stopped improving fades towards 0, but never reaches it.
    - Model: when the scheduler has a cost model's ``model_share`` for the task (the share of its latest
      round's candidates the model scores above its measured best program: is the search still producing
      programs the model believes are faster?), the estimate is ``(1 - model_weight) x progress +
      model_weight x model_share x prior``. Only the order of the model's scores is used, so it works for
      any score scale (costlab's logistic scores, PSA's, XGBoost's); scores all alike give no signal, and
      neither do scores drawn at random (XGBoost before it has trained, a random model).
      The model's view counts as much as it has come true: its term is multiplied by ``decay ** s`` for the
      s latest rounds of the task that did not improve its best. Without this, a model that keeps scoring
      a stalled task's candidates above its best holds that task's gain near ``model_weight x prior`` for
      ever (a BERT layer's weight-1 matmul took 627 of 966 trials, six rounds in a row without gain, while
      its weight-4 matmul, the larger share of the network's time, got 120).

    The result is clipped to [0, ``cap``]."""

    prior: float = 0.25
    decay: float = 0.5
    window: int = 4
    model_weight: float = 0.5
    cap: float = 0.95

    def progress(self, history: TaskState) -> float:
        bests = history.bests[-(self.window + 1):]
        num, den = 0.0, 0.0
        for age, (before, after) in enumerate(reversed(list(zip(bests, bests[1:])))):
            if math.isinf(before):  # the round that found the first valid program: no ratio to take
                r = self.prior if math.isfinite(after) else 0.0
            else:
                r = max(0.0, (before - after) / before)
            w = self.decay ** age
            num, den = num + w * r, den + w
        n = max(history.rounds - 1, 0)  # all its rounds of evidence, not the window's: a stalled task fades to 0
        w0 = self.decay ** n
        return (num + w0 * self.prior) / (den + w0)

    def gain(self, task_id: int, history: TaskState) -> float:
        g = self.progress(history)
        if history.model_share is not None:
            trust = self.decay ** history.stale_rounds
            g = (1 - self.model_weight) * g + self.model_weight * history.model_share * self.prior * trust
        return min(max(g, 0.0), self.cap)


def continue_from(state: TaskState, rounds) -> None:
    """``state`` (its ``start_best`` the task's best in the database now) goes on from the rounds an earlier part of
    the run gave the task (``[(best s after the round, the round's seconds), ...]``). A faster program measured
    since, outside any round (exploitation, a transfer, the library), is no round's progress: the rounds keep
    their own relative improvements, their bests scaled to end at it (the last round took it for its own gain,
    and a task whose search had stalled looked as if it had just improved)."""
    for best_s, seconds in rounds:
        state.bests.append(min(best_s, state.bests[-1]) if state.bests else best_s)
        if seconds > 0:
            state.round_seconds.append(seconds)
    if state.bests and state.start_best < state.bests[-1]:
        if math.isfinite(state.bests[-1]):
            state.bests = [b * (state.start_best / state.bests[-1]) for b in state.bests]
        else:  # the rounds measured no valid program: nothing to scale
            state.bests[-1] = state.start_best


def priority(state: TaskState, gain: float) -> float:
    """End-to-end seconds the task's next round is expected to save, per second of tuning it costs."""
    return state.weight * state.best * gain / state.seconds_per_round


def choose(states: Sequence[TaskState], predictor: GainPredictor) -> int:
    """The task of the next round, or -1 when every task is finished: the first (lowest id) live task without a
    round (one whose ``start_best`` is inf first: no earlier run measured it); else the live task of largest
    ``priority`` (ties: the lowest id); tasks with no valid program yet only when no live task has one (the one with
    the fewest rounds)."""
    alive = [i for i, s in enumerate(states) if not s.finished]
    if not alive:
        return -1
    fresh = [i for i in alive if states[i].rounds == 0]
    if fresh:  # a continued run's never-measured tasks first: its measured ones' first rounds could spend the budget
        return min(fresh, key=lambda i: (math.isfinite(states[i].start_best), i))
    valid = [i for i in alive if math.isfinite(states[i].best)]
    if not valid:
        return min(alive, key=lambda i: (states[i].rounds, i))
    scores = {i: priority(states[i], predictor.gain(i, states[i])) for i in valid}
    return max(valid, key=lambda i: (scores[i], -i))


def _database_best(database, mod) -> tuple[float, object]:
    """The task's best latency in ``database`` before this call's rounds (``inf``: none) and that program as a
    measure candidate (None where it does not replay)."""
    try:
        top = fastest_records(database, mod, 1) if database is not None else []
    except Exception:  # noqa: BLE001  a database that cannot say gives no start: the task's rounds alone count
        return math.inf, None
    if not top:
        return math.inf, None
    try:
        candidate = top[0].as_measure_candidate()
    except Exception:  # noqa: BLE001
        candidate = None
    return record_latency(top[0].run_secs), candidate


def _scores_at_random(model) -> bool | None:
    """Whether ``model``'s scores say nothing of the programs: MetaSchedule's XGBoost before it has trained (its
    ``predict`` draws uniform random numbers until ``num_warmup_samples`` records), its random model, and a
    costlab model of a stochastic kind (``--model random``); None where the Python object does not tell (a model
    seen through TVM only)."""
    from tvm.s_tir.meta_schedule.cost_model import RandomModel, XGBModel

    if isinstance(model, RandomModel):
        return True
    if isinstance(model, XGBModel):
        return model.booster is None or model.data_size < model.num_warmup_samples
    predictor = getattr(getattr(model, "verify", model), "predictor", None)
    if predictor is not None:
        from costlab.costmodels import kinds  # lazy: pulls torch

        if getattr(kinds.find(getattr(predictor, "kind", None)), "stochastic", False):
            return True
    return False if hasattr(model, "raw_scores") else None


def _round_best(results) -> tuple[float, int | None]:
    """The best latency (seconds) of a round's runner results and its index (None when none is valid)."""
    lat = [math.inf if r.error_msg is not None else record_latency(r.run_secs) for r in results]
    if not lat or not any(math.isfinite(x) for x in lat):
        return math.inf, None
    j = int(np.argmin(lat))
    return lat[j], j


@derived_object
class GainScheduler(PyTaskScheduler):
    """The task scheduler by predicted gain, for ``ms.tune_tasks(..., task_scheduler=GainScheduler())`` and
    MetaSchedule's Relax tuning (its ``task_scheduler``). One object per ``tune_tasks`` call (a second call
    starts its records afresh).

    ``predictor``: a ``GainPredictor`` (default ``ProgressGainPredictor()``). ``use_model``: score each task's
    latest round with the run's cost model against its best program for ``TaskState.model_share`` (a model
    that fails to score gives no signal, never a failed run). ``cost_model``: that model as the Python object
    (costlab's ``CostlabCostModel``), whose raw scores are read: its ``predict`` would fix the task's score map from
    this handful of measured programs instead of the next search population; None: the ``tune_tasks`` call's
    cost model, through MetaSchedule. ``max_trials_per_task``: a task with this many trials is finished
    (MetaSchedule's own per-task budget is enforced by its loop in any case)."""

    def __init__(self, predictor: GainPredictor | None = None, use_model: bool = True,
                 max_trials_per_task: int | None = None, cost_model=None, history=None):
        super().__init__()
        self.history = history  # per task (the tune call's order): its earlier rounds, [(best s, seconds), ...]
        self.predictor = predictor if predictor is not None else ProgressGainPredictor()
        self.use_model = use_model
        self.cost_model = cost_model
        self.max_trials_per_task = max_trials_per_task
        self.states: list[TaskState] = []
        self.decisions: list[dict] = []  # per pick: the task and the priorities it was chosen by
        self._first_record = None  # tasks_[0] of the tune call the states belong to
        self._picked_at: dict[int, float] = {}
        self._best_candidate: dict = {}

    # --- the TVM side ---------------------------------------------------------------------------------
    def next_task_id(self) -> int:
        outer = self._outer()
        records = list(outer.tasks_)
        if self._first_record is None or not records[0].same_as(self._first_record):
            self._start(records, outer.database_)
        for i, rec in enumerate(records):
            if rec.runner_futures is not None:
                self._join(outer, i, rec)
            self._picked_at.pop(i, None)  # picked but never run (terminated by the loop): no round
        for i, rec in enumerate(records):
            s = self.states[i]
            s.finished = bool(rec.is_terminated) or (
                self.max_trials_per_task is not None and s.trials >= self.max_trials_per_task)
        task_id = choose(self.states, self.predictor)
        self._log(task_id)
        if task_id >= 0:
            self._picked_at[task_id] = time.perf_counter()
        return task_id

    def _start(self, records, database=None) -> None:
        self._first_record = records[0]
        self.states = [TaskState(weight=float(r.task_weight)) for r in records]
        self.decisions, self._picked_at, self._best_candidate = [], {}, {}
        for i, rec in enumerate(records):  # what the database holds of each task already is its best so far
            self.states[i].start_best, best = _database_best(database, rec.ctx.mod)
            if best is not None:
                self._best_candidate[i] = best
            # a continued run's tasks go on from the rounds an earlier part gave them: no second first round, and
            # their progress (and seconds per round) as that part left it, not the prior again
            rounds = list(self.history[i]) if self.history is not None and i < len(self.history) else []
            continue_from(self.states[i], rounds)

    def _join(self, outer, i: int, rec) -> None:
        """Join task i's running round (the C++ join: database, cost model update, measure callbacks) and
        record its best latency, seconds and, with a model, the model's view of it."""
        candidates = list(rec.measure_candidates or [])  # cleared by the join
        results = list(_ffi_api.TaskSchedulerJoinRunningTask(outer, i))
        picked = self._picked_at.pop(i, None)
        s = self.states[i]
        s.trials += len(results)
        best, j = _round_best(results)
        if best < s.best and j is not None and j < len(candidates):
            self._best_candidate[i] = candidates[j]
        s.bests.append(min(best, s.best))
        if picked is not None:
            s.round_seconds.append(time.perf_counter() - picked)
        if self.use_model:
            s.model_share = self._model_share(outer, i, rec, candidates)

    def _model_share(self, outer, i: int, rec, candidates) -> float | None:
        """The share of the round's candidates that the run's cost model scores above the task's best
        program (itself excluded); None without a model, a best program or other candidates, or when the
        model scores them all alike."""
        model = self.cost_model if self.cost_model is not None else outer.cost_model_
        best = self._best_candidate.get(i)
        others = [c for c in candidates if best is None or not c.same_as(best)]
        if model is None or best is None or not others:
            return None
        at_random = _scores_at_random(model)
        if at_random:
            return None
        score = getattr(model, "raw_scores", None) or model.predict  # the order is all that counts here
        try:
            scores = np.asarray(score(rec.ctx, [best, *others]), dtype=np.float64)
            if at_random is None:
                # a model seen through TVM only (MetaSchedule's Relax tuning gives its own XGBoost so): one that
                # scores the same programs otherwise a second time scores at random (XGBoost before it trains)
                again = np.asarray(score(rec.ctx, [best, *others]), dtype=np.float64)
                if again.shape != scores.shape or not np.array_equal(again, scores):
                    return None
        except Exception as exc:  # noqa: BLE001  a model that cannot score gives no signal; tuning goes on
            logger.warning("task %d: the cost model did not score its round (%s); progress alone is used", i, exc)
            return None
        if scores.shape != (len(others) + 1,) or not np.all(np.isfinite(scores)) or np.ptp(scores) == 0:
            return None  # no scores, or all alike (e.g. a model not trained yet): no signal
        return float(np.mean(scores[1:] > scores[0]))

    def _log(self, task_id: int) -> None:
        rows = []
        for i, s in enumerate(self.states):
            g = self.predictor.gain(i, s) if s.rounds and math.isfinite(s.best) else None
            rows.append(dict(task=i, rounds=s.rounds, trials=s.trials, finished=s.finished, best_us=s.best * 1e6,
                             s_per_round=s.seconds_per_round, gain=g,
                             priority=None if g is None else priority(s, g)))
        self.decisions.append(dict(task=task_id, tasks=rows))
        logger.info("gain scheduler picks task %d: %s", task_id, "; ".join(_describe(r) for r in rows))


def _describe(row: dict) -> str:
    if row["finished"]:
        return f"#{row['task']} finished"
    if row["rounds"] == 0:
        return f"#{row['task']} no round yet"
    if row["gain"] is None:
        return f"#{row['task']} rounds={row['rounds']} no valid program"
    return (f"#{row['task']} rounds={row['rounds']} best={row['best_us']:.2f}us gain={row['gain']:.4f} "
            f"s/round={row['s_per_round']:.2f} priority={row['priority']:.3g}")
