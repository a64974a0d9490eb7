"""``draft-verify``: MetaSchedule's evolutionary search led by PSA, the learned model re-ranking its drafts.

Each round the evolutionary search runs with PSA as its cost model (MetaSchedule's own
``EvolutionarySearch`` state, driven through its FFI: ``SampleInitPopulation`` and
``EvolveWithCostModel``), so PSA scores every candidate the genetic search proposes; the best-drafted
``verify_fraction`` of them reach the learned model, and the round's batch is its best, with
MetaSchedule's epsilon-greedy share of random unmeasured programs kept. ``EvolveWithCostModel`` marks every
program it returns as measured, so the evolution state is made afresh every round (as ``model-led`` does):
a drafted program the verifier passed over may be drafted and picked in a later round; what it picked (or the
database held when the run started) is kept here (``_picked``) and never picked again; a pick the budget cut
from its batch is forgotten (``forget``), so a later round may pick it. Within a round the learned model's
recall is capped by PSA's, and the measured programs among the evolution's seeds may take some of the
verifier's places.
``model-led`` (``model_led.py``) is the search the model leads.
"""

from __future__ import annotations

import math
import time

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from costlab.export.cost_model import CostlabCostModel, draft_model
from costlab.export.search.common import (RoundLog, best_measured, evolution_ffi, measure_candidates, measured_hashes,
                                          pick_batch, schedule_hash)


@derived_object
class DraftVerifySearch(PySearchStrategy):
    """MetaSchedule's evolutionary search drafted by PSA and verified by the tuning run's cost model.

    ``verify_fraction``: the share of PSA-scored candidates (about ``population * (genetic_iters + 1)`` a
    round) that the learned model scores, at least one round's batch. The cost model given to the tuning
    run (``tune_tir(cost_model=...)``) is the verifier."""

    def __init__(self, verify_fraction: float = 0.1, population_size: int = 512, genetic_iters: int = 4,
                 init_measured_ratio: float = 0.2, init_min_unmeasured: int = 50, genetic_mutate_prob: float = 0.85,
                 eps_greedy: float = 0.05, draft: PyCostModel | None = None, log: RoundLog | None = None):
        if not 0 < verify_fraction <= 1:
            raise ValueError(f"verify_fraction must be in (0, 1], not {verify_fraction}")
        self.options = dict(verify_fraction=verify_fraction, population_size=population_size,
                            genetic_iters=genetic_iters, init_measured_ratio=init_measured_ratio,
                            init_min_unmeasured=init_min_unmeasured, genetic_mutate_prob=genetic_mutate_prob,
                            eps_greedy=eps_greedy)
        self.draft = draft if draft is not None else draft_model()
        self.log = log if log is not None else RoundLog()
        self._inner = None
        self._reset()

    def _reset(self) -> None:
        self.context = self.verify = self.database = None
        self.trials = self.max_trials = self.per_iter = 0
        self.earlier = 0  # the task's programs the database held when the search began (a continued run's)
        self._round_start = None
        self._pending: dict | None = None
        self._picked: set = set()  # programs this run measured (hashes), never picked again

    def _make_inner(self):
        """MetaSchedule's evolutionary search over this task, with PSA as its cost model: a fresh state."""
        from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

        o = self.options
        inner = EvolutionarySearch(population_size=o["population_size"], init_measured_ratio=o["init_measured_ratio"],
                                   init_min_unmeasured=o["init_min_unmeasured"], genetic_num_iters=o["genetic_iters"],
                                   genetic_mutate_prob=o["genetic_mutate_prob"], eps_greedy=o["eps_greedy"])
        inner._initialize_with_tune_context(self.context)
        return inner

    # -- the six hooks --------------------------------------------------------------------------------------
    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self._inner = self._make_inner()

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        if database is None or cost_model is None:
            raise ValueError("Draft-then-Verify needs the tuning run's database and cost model (the verifier)")
        self.verify, self.database = cost_model, database
        self.max_trials, self.per_iter, self.trials = int(max_trials), int(num_trials_per_iter), 0
        self.design_spaces = list(design_spaces)
        self._picked = measured_hashes(self.context, database)  # a resumed run never measures a program again
        self.earlier = len(self._picked)
        self._inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, self.draft)

    def post_tuning(self) -> None:
        self._close_round()
        self._inner.post_tuning()
        self._reset()

    def generate_measure_candidates(self):
        self._close_round()
        if self.trials >= self.max_trials:
            return None
        num = min(self.per_iter, self.max_trials - self.trials)
        t_start = time.perf_counter()
        o = self.options
        pop = o["population_size"]
        if self.trials:  # a fresh evolution state: the FFI's marks of the last round's drafts are not measurements
            self._inner.post_tuning()
            self._inner = self._make_inner()
            self._inner.pre_tuning(self.max_trials, self.per_iter, self.design_spaces, self.database, self.draft)
        measured = best_measured(self.context, self.database, int(pop * o["init_measured_ratio"]), self.trials + 1)
        unmeasured = list(evolution_ffi("SampleInitPopulation")(self._inner, pop - len(measured)))
        t_sample = time.perf_counter()
        if len(unmeasured) < o["init_min_unmeasured"]:
            return None
        draft_before = dict(self.draft.stats) if hasattr(self.draft, "stats") else {}
        scored = pop * (o["genetic_iters"] + 1)
        n_verify = max(num, int(math.ceil(o["verify_fraction"] * scored)))
        drafted = list(evolution_ffi("EvolveWithCostModel")(self._inner, measured + unmeasured, n_verify))
        t_draft = time.perf_counter()
        picks, n_verified = self._verify_and_pick(drafted, unmeasured, num)
        t_verify = time.perf_counter()
        draft_stats = getattr(self.draft, "stats", {})
        self._pending = dict(
            task=str(self.context.task_name), trials_before=self.earlier + self.trials, picked=len(picks),
            draft_scored=draft_stats.get("candidates", 0) - draft_before.get("candidates", 0),
            draft_model_s=round(_seconds(draft_stats) - _seconds(draft_before), 4),
            verify_scored=n_verified, sample_s=round(t_sample - t_start, 4), draft_s=round(t_draft - t_sample, 4),
            verify_s=round(t_verify - t_draft, 4), search_s=round(t_verify - t_start, 4))
        self._round_start = t_start
        if not picks:
            return None
        return measure_candidates(picks)

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.trials += len(results)
        self._close_round()  # the round ends when its results are in, not when this task's next round starts
        self._inner.notify_runner_results(measure_candidates, results)

    def forget(self, schedules: list) -> None:
        """Picked programs that will not be measured (a batch cut to the run's budget or deadline): a later
        round may pick them again."""
        self._picked -= {schedule_hash(s) for s in schedules}

    def clone(self):
        return DraftVerifySearch(draft=self.draft, log=self.log, **self.options)

    # -- stages ---------------------------------------------------------------------------------------------
    def _verify_and_pick(self, drafted: list, unmeasured: list, num: int) -> tuple[list, int]:
        """The verifier's best of the drafted programs, with the epsilon-greedy share drawn from the random
        unmeasured ones (as MetaSchedule's ``PickWithEpsGreedy``)."""
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

        n_rand = int(num * self.options["eps_greedy"])
        order: list = []
        if drafted:
            cands = [MeasureCandidate(s, []) for s in drafted]
            if isinstance(self.verify, CostlabCostModel):
                scores = self.verify.raw_scores(self.context, cands)
            else:
                scores = np.asarray(self.verify.predict(self.context, cands), np.float64)
            order = [drafted[i] for i in np.argsort(-scores, kind="stable")]
        picks = pick_batch(order, unmeasured, num, n_rand, self._picked, schedule_hash, self.trials + 1)
        self._picked |= {schedule_hash(s) for s in picks}
        return picks, len(drafted)

    def _close_round(self) -> None:
        self.log.close_round(self._pending, self._round_start)
        self._pending = None


def _seconds(stats: dict) -> float:
    """The seconds a cost model's stats record it spent scoring (featurizing and predicting)."""
    return stats.get("featurize_s", 0.0) + stats.get("predict_s", 0.0)
