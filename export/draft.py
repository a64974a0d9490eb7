"""Draft-then-Verify: PSA (the static analyzer) drafts, the learned model verifies.

Two ways to put it into MetaSchedule, both here, compared in ``docs/search.md``:

- ``DraftVerifySearch`` (the default of ``costlab tune``): a search strategy. Each round the evolutionary
  search runs with PSA as its cost model (MetaSchedule's own ``EvolutionarySearch`` state, driven through
  its FFI: ``SampleInitPopulation`` and ``EvolveWithCostModel``), so PSA scores every candidate the genetic
  search proposes; the best-drafted ``verify_fraction`` of them reach the learned model, and the round's
  batch is its best, with MetaSchedule's epsilon-greedy share of random unmeasured programs kept.
  ``EvolveWithCostModel`` marks every program it returns as measured, so drafted programs the verifier
  rejects are not proposed again.
- ``DraftFilterModel``: a cost model that drafts inside ``predict``: PSA scores every candidate, the
  best-drafted fraction is scored by the learned model and ranked above the rest. It works with any
  MetaSchedule strategy, but the learned model then sees every generation of the genetic search.

Every round is logged (``RoundLog``): candidates each stage scored and seconds each stage took.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from costlab.export.cost_model import CostlabCostModel, _task_key


@derived_object
class PSAModel(PyCostModel):
    """PSA as a MetaSchedule cost model: ``1 / estimated time``, divided per task by the best estimate of
    the first population it scores (a fixed scale, so scores compare across the calls of a search)."""

    def __init__(self, config: dict | None = None):
        super().__init__()
        from costlab.featurizers import create

        self.featurizer = create("psa", config)
        self._scale: dict = {}
        self.stats = dict(calls=0, candidates=0, seconds=0.0)

    def scores(self, context, candidates) -> np.ndarray:
        t0 = time.perf_counter()
        feats = self.featurizer.featurize_candidates(context.mod, context.target, [c.sch for c in candidates])
        self.stats["calls"] += 1
        self.stats["candidates"] += len(candidates)
        self.stats["seconds"] += time.perf_counter() - t0
        return np.asarray(feats["score"], np.float64)

    def predict(self, context, candidates) -> np.ndarray:
        if not len(candidates):
            return np.zeros(0, np.float64)
        s = self.scores(context, candidates)
        key = _task_key(context)
        if key not in self._scale:
            self._scale[key] = float(s.max()) if s.size and s.max() > 0 else 1.0
        return s / self._scale[key]

    def update(self, context, candidates, results) -> None:
        pass

    def save(self, path: str) -> None:
        Path(path).write_text(json.dumps(self.featurizer.to_json()))

    def load(self, path: str) -> None:
        from costlab.featurizers import from_json

        self.featurizer = from_json(json.loads(Path(path).read_text()))


class RoundLog:
    """One JSON line per search round: what each stage scored and how long it took."""

    def __init__(self, path=None):
        self.path = Path(path) if path else None
        self.rounds: list[dict] = []

    def add(self, **row) -> None:
        self.rounds.append(row)
        if self.path is not None:
            with open(self.path, "a") as fh:
                fh.write(json.dumps(row) + "\n")


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
        self.draft = draft if draft is not None else PSAModel()
        self.log = log if log is not None else RoundLog()
        self._inner = None
        self._reset()

    def _reset(self) -> None:
        self.context = self.verify = self.database = None
        self.trials = self.max_trials = self.per_iter = 0
        self._round_start = None
        self._pending: dict | None = None
        self._picked: set = set()  # programs this run measured (hashes), never picked again

    def _make_inner(self):
        from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

        o = self.options
        return EvolutionarySearch(population_size=o["population_size"], init_measured_ratio=o["init_measured_ratio"],
                                  init_min_unmeasured=o["init_min_unmeasured"], genetic_num_iters=o["genetic_iters"],
                                  genetic_mutate_prob=o["genetic_mutate_prob"], eps_greedy=o["eps_greedy"])

    # -- the six hooks --------------------------------------------------------------------------------------
    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self._inner = self._make_inner()
        self._inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        if database is None or cost_model is None:
            raise ValueError("Draft-then-Verify needs the tuning run's database and cost model (the verifier)")
        self.verify, self.database = cost_model, database
        self.max_trials, self.per_iter, self.trials = int(max_trials), int(num_trials_per_iter), 0
        self.design_spaces = list(design_spaces)
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
        measured = self._best_measured(int(pop * o["init_measured_ratio"]))
        unmeasured = list(_ffi("SampleInitPopulation")(self._inner, pop - len(measured)))
        t_sample = time.perf_counter()
        if len(unmeasured) < o["init_min_unmeasured"]:
            return None
        draft_before = dict(self.draft.stats) if hasattr(self.draft, "stats") else {}
        scored = pop * (o["genetic_iters"] + 1)
        n_verify = max(num, int(math.ceil(o["verify_fraction"] * scored)))
        drafted = list(_ffi("EvolveWithCostModel")(self._inner, measured + unmeasured, n_verify))
        t_draft = time.perf_counter()
        picks, n_verified = self._verify_and_pick(drafted, unmeasured, num)
        t_verify = time.perf_counter()
        draft_stats = getattr(self.draft, "stats", {})
        self._pending = dict(
            task=str(self.context.task_name), trials_before=self.trials, picked=len(picks),
            draft_scored=draft_stats.get("candidates", 0) - draft_before.get("candidates", 0),
            draft_model_s=round(draft_stats.get("seconds", 0.0) - draft_before.get("seconds", 0.0), 4),
            verify_scored=n_verified, sample_s=round(t_sample - t_start, 4), draft_s=round(t_draft - t_sample, 4),
            verify_s=round(t_verify - t_draft, 4), search_s=round(t_verify - t_start, 4))
        self._round_start = t_start
        if not picks:
            return None
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

        return [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in picks]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.trials += len(results)
        self._inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return DraftVerifySearch(draft=self.draft, log=self.log, **self.options)

    # -- stages ---------------------------------------------------------------------------------------------
    def _verify_and_pick(self, drafted: list, unmeasured: list, num: int) -> tuple[list, int]:
        """The verifier's best of the drafted programs, with the epsilon-greedy share drawn from the random
        unmeasured ones (as MetaSchedule's ``PickWithEpsGreedy``)."""
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

        n_rand = int(num * self.options["eps_greedy"])
        n_best = num - n_rand
        order: list = []
        if drafted:
            cands = [MeasureCandidate(s, []) for s in drafted]
            if isinstance(self.verify, CostlabCostModel):
                scores = self.verify.raw_scores(self.context, cands)
            else:
                scores = np.asarray(self.verify.predict(self.context, cands), np.float64)
            order = [drafted[i] for i in np.argsort(-scores, kind="stable")]
        picks = order[:n_best]
        seen = self._picked | {_shash(s) for s in drafted}  # drafted ones are marked measured by the FFI call
        rng = np.random.default_rng(self.trials + 1)
        for i in rng.permutation(len(unmeasured)):
            if len(picks) >= num:
                break
            h = _shash(unmeasured[i])
            if h not in seen:
                seen.add(h)
                picks.append(unmeasured[i])
        picks += order[n_best: n_best + num - len(picks)]  # too few random ones: the next verified
        self._picked |= {_shash(s) for s in picks}
        return picks, len(drafted)

    def _best_measured(self, n: int) -> list:
        """The ``n`` best measured programs of this task, replayed with the space's postprocessors (as
        EvolutionarySearch's ``PickBestFromDatabase``)."""
        from tvm.s_tir.schedule import Schedule

        if n <= 0 or not self.database.has_workload(self.context.mod):
            return []
        workload = self.database.commit_workload(self.context.mod)
        out = []
        for rec in self.database.get_top_k(workload, n):
            try:
                sch = Schedule(self.context.mod, seed=int(self.trials) + 1)
                rec.trace.apply_to_schedule(sch, remove_postproc=True)
                # as MetaSchedule's ThreadedTraceApply: the postprocessors' instructions are marked as such,
                # so that the evolution's replays of mutated traces drop them (a layout rewrite replayed as a
                # schedule instruction changes the blocks' outputs: "old_outputs.size() == new_outputs.size()")
                sch.enter_postproc()
                for post in self.context.space_generator.postprocs:
                    if not post.apply(sch):
                        raise ValueError("postprocessor rejected the program")
                out.append(sch)
            except Exception:  # noqa: BLE001  a record that no longer replays is skipped, as MetaSchedule does
                continue
        return out

    def _close_round(self) -> None:
        if self._pending is not None and self._round_start is not None:
            row = dict(self._pending, round_s=round(time.perf_counter() - self._round_start, 4))
            row["verify_share"] = round(row["verify_s"] / row["round_s"], 4) if row["round_s"] > 0 else None
            self.log.add(**row)
        self._pending = None


def _shash(sch) -> int:
    import tvm_ffi

    return int(tvm_ffi.structural_hash(sch.mod))


def _ffi(name: str):
    import tvm

    return tvm.get_global_func(f"s_tir.meta_schedule.SearchStrategyEvolutionarySearch{name}")


@derived_object
class DraftFilterModel(PyCostModel):
    """Draft-then-Verify inside a cost model: PSA scores every candidate; the best-drafted ``fraction`` is
    scored by the learned model and ranked above the rest (scores in (0.5, 1] against PSA's (0, 0.5])."""

    def __init__(self, verify: CostlabCostModel, fraction: float = 0.1, draft: PSAModel | None = None):
        super().__init__()
        self.verify, self.fraction = verify, float(fraction)
        self.draft = draft if draft is not None else PSAModel()
        self.stats = dict(verify_scored=0, draft_scored=0, draft_s=0.0, verify_s=0.0)

    @property
    def adapter(self):
        return self.verify.adapter

    def predict(self, context, candidates) -> np.ndarray:
        n = len(candidates)
        if not n:
            return np.zeros(0, np.float64)
        t0 = time.perf_counter()
        drafted = self.draft.predict(context, candidates)  # (0, 1] against the task's first best
        out = 0.5 * np.clip(drafted, 0.0, 1.0)
        k = max(1, int(math.ceil(self.fraction * n)))
        top = np.argsort(-drafted, kind="stable")[:k]
        t1 = time.perf_counter()
        verified = self.verify.predict(context, [candidates[i] for i in top])
        out[top] = 0.5 + 0.5 * verified
        self.stats["verify_scored"] += k
        self.stats["draft_scored"] += n
        self.stats["draft_s"] += t1 - t0
        self.stats["verify_s"] += time.perf_counter() - t1
        return out.astype(np.float64)

    def update(self, context, candidates, results) -> None:
        self.verify.update(context, candidates, results)

    def save(self, path: str) -> None:
        self.verify.save(path)

    def load(self, path: str) -> None:
        self.verify.load(path)
