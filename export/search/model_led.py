"""``model-led``: PSA drafts the initial pool, the learned model leads the evolution (Pruner's arrangement).

Each round:

1. **Draft.** ``draft_ratio * population`` fresh random programs of the design space (MetaSchedule's
   ``SampleInitPopulation``) are scored by PSA; its best unmeasured ones, with the fastest measured
   programs (``init_measured_ratio``), are the initial population.
2. **Verify.** MetaSchedule's genetic search (``EvolveWithCostModel``: mutations sampled in proportion to
   the scores, the best kept across ``genetic_iters`` generations) runs with the tuning run's cost model,
   the learned model, scoring every generation; adapted online when the run adapts it.
3. **Pick.** The model's best programs never measured, with an epsilon-greedy share of PSA-drafted ones.

Rounds are sized to what is known: ``first_rounds`` (8, 16, 32 by default) before the run's
``num_trials_per_iter``, so that the first measurements, and online adaptation, come early; a task whose
database holds programs already (a resumed run) passes over the first rounds those programs would have filled.
The search of a round is sized with it: the population is ``16 * round size`` (at least 64, at most ``population_size``),
since the learned model's featurizer, 1-4 ms a program here on the run's two cores, is most of a round's search
time.

Nothing is banned for having been scored: MetaSchedule's FFI marks every program ``EvolveWithCostModel``
returns as measured, so its state is started afresh every round, and what was really measured is kept
here: every program this run picked and every record of the task in the database (a resumed run never
measures a program again). Each round's stages and seconds go to the run's ``RoundLog``.
"""

from __future__ import annotations

import time

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from costlab.export.cost_model import draft_model
from costlab.export.search.common import (RoundLog, best_measured, evolution_ffi, measure_candidates, measured_hashes,
                                          pick_batch, schedule_hash)


def round_size(round_index: int, per_iter: int, first_rounds=(8, 16, 32)) -> int:
    """Candidates measured in round ``round_index`` (from 0): the first rounds small, then ``per_iter``."""
    if round_index < len(first_rounds):
        return max(1, min(int(first_rounds[round_index]), per_iter))
    return per_iter


def start_round(known: int, first_rounds=(8, 16, 32)) -> int:
    """The round a task's search starts at when ``known`` of its programs are in the database already (a resumed
    or continued run, a warm start): the small first rounds, there to bring the first measurements early, are
    passed over as far as those programs would have filled them."""
    filled = 0
    for i, size in enumerate(first_rounds):
        filled += int(size)
        if known < filled:
            return i
    return len(first_rounds)


@derived_object
class ModelLedSearch(PySearchStrategy):
    """PSA drafts, the learned model (the tuning run's cost model) leads the genetic search; see the module."""

    def __init__(self, population_size: int = 256, genetic_iters: int = 3, draft_ratio: float = 2.0,
                 init_measured_ratio: float = 0.2, eps_greedy: float = 0.05, genetic_mutate_prob: float = 0.85,
                 first_rounds=(8, 16, 32), draft=None, log: RoundLog | None = None):
        if population_size < 2 or genetic_iters < 0 or draft_ratio < 1:
            raise ValueError("population_size >= 2, genetic_iters >= 0 and draft_ratio >= 1 are needed")
        self.options = dict(population_size=int(population_size), genetic_iters=int(genetic_iters),
                            draft_ratio=float(draft_ratio), init_measured_ratio=float(init_measured_ratio),
                            eps_greedy=float(eps_greedy), genetic_mutate_prob=float(genetic_mutate_prob),
                            first_rounds=tuple(int(x) for x in first_rounds))
        self.draft = draft if draft is not None else draft_model()
        self.log = log if log is not None else RoundLog()
        self.context = self._inner = None
        self._reset()

    def _reset(self) -> None:
        self.verify = self.database = None
        self.trials = self.max_trials = self.per_iter = self.round = 0
        self.earlier = 0  # the task's programs the database held when the search began (a continued run's)
        self.design_spaces: list = []
        self.measured: set = set()
        self._pending: dict | None = None
        self._round_start: float | None = None

    # -- the six hooks --------------------------------------------------------------------------------------
    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self._inner = self._make_inner(self.options["population_size"])

    def _make_inner(self, population: int):
        """MetaSchedule's evolutionary search over this task, used for its sampling and its genetic search."""
        from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

        o = self.options
        inner = EvolutionarySearch(population_size=population, init_measured_ratio=0.0, init_min_unmeasured=1,
                                   genetic_num_iters=o["genetic_iters"], genetic_mutate_prob=o["genetic_mutate_prob"],
                                   eps_greedy=0.0)
        inner._initialize_with_tune_context(self.context)
        return inner

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        if database is None or cost_model is None:
            raise ValueError("the model-led search needs the tuning run's database and cost model (the model)")
        self.verify, self.database = cost_model, database
        self.max_trials, self.per_iter, self.trials = int(max_trials), int(num_trials_per_iter), 0
        self.design_spaces = list(design_spaces)
        self.measured = measured_hashes(self.context, database)
        self.earlier = len(self.measured)
        self.round = start_round(len(self.measured), self.options["first_rounds"])
        self._inner.pre_tuning(max_trials, num_trials_per_iter, self.design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self._close_round()
        self._inner.post_tuning()
        self._reset()

    def generate_measure_candidates(self):
        self._close_round()
        if self.trials >= self.max_trials:
            return None
        o = self.options
        num = min(round_size(self.round, self.per_iter, o["first_rounds"]), self.max_trials - self.trials)
        pop = min(o["population_size"], max(64, 16 * num))
        t0 = time.perf_counter()
        # a fresh evolution state: the FFI's marks of the last round's results are not measurements
        self._inner.post_tuning()
        self._inner = self._make_inner(pop)
        self._inner.pre_tuning(self.max_trials, self.per_iter, self.design_spaces, self.database, self.verify)
        seeds = best_measured(self.context, self.database, int(pop * o["init_measured_ratio"]), self.trials + 1)
        sampled = list(evolution_ffi("SampleInitPopulation")(self._inner, int(pop * o["draft_ratio"])))
        t_sample = time.perf_counter()
        drafted = self._draft(sampled, pop - len(seeds))
        t_draft = time.perf_counter()
        if not drafted and not seeds:
            return None  # the design space yields nothing new
        evolved = list(evolution_ffi("EvolveWithCostModel")(self._inner, seeds + drafted, 4 * num))
        t_verify = time.perf_counter()
        picks = self._pick(evolved, drafted, num)
        self._pending = dict(
            task=str(self.context.task_name), strategy="model-led", round=self.round,
            trials_before=self.earlier + self.trials, picked=len(picks), population=pop, sampled=len(sampled),
            drafted=len(drafted), seeds=len(seeds),
            sample_s=round(t_sample - t0, 4), draft_s=round(t_draft - t_sample, 4),
            verify_s=round(t_verify - t_draft, 4), search_s=round(time.perf_counter() - t0, 4))
        self._round_start = t0
        self.round += 1
        return measure_candidates(picks) if picks else None

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.trials += len(results)
        self._close_round()  # the round ends when its results are in, not when this task's next round starts

    def forget(self, schedules: list) -> None:
        """Picked programs that will not be measured (a batch cut to the run's budget or deadline): a later
        round may pick them again."""
        self.measured -= {schedule_hash(s) for s in schedules}

    def clone(self):
        return ModelLedSearch(draft=self.draft, log=self.log, **self.options)

    # -- stages ---------------------------------------------------------------------------------------------
    def _draft(self, sampled: list, keep: int) -> list:
        """PSA's best ``keep`` of the sampled programs never measured."""
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

        fresh = [s for s in sampled if schedule_hash(s) not in self.measured]
        if not fresh or keep <= 0:
            return []
        scores = np.asarray(self.draft.predict(self.context, [MeasureCandidate(s, []) for s in fresh]), np.float64)
        return [fresh[i] for i in np.argsort(-scores, kind="stable")[:keep]]

    def _pick(self, evolved: list, drafted: list, num: int) -> list:
        """The model's best never-measured programs (``evolved`` comes best first), with the epsilon-greedy
        share drawn at random from PSA's drafts."""
        picks = pick_batch(evolved, drafted, num, int(num * self.options["eps_greedy"]), self.measured, schedule_hash,
                           self.trials + 1, rest=evolved + drafted)
        self.measured |= {schedule_hash(s) for s in picks}
        return picks

    def _close_round(self) -> None:
        self.log.close_round(self._pending, self._round_start)
        self._pending = None
