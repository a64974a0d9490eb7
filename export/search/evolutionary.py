"""MetaSchedule's evolutionary search, never measuring a program of the database again.

MetaSchedule's ``EvolutionarySearch`` marks only the programs it measured itself in this run as measured: the
best records of the database enter its initial population, and when its cost model ranks one of them among the
best, it is sent to be measured a second time. A continued run (the same work dir, a larger ``--trials``)
then spends trials on programs it has already timed. ``UnmeasuredEvolutionarySearch`` runs the same search
and drops, from every batch, the programs whose structural hash is a record of the task in the database when
the task started (failed ones included, as ``measured_hashes`` reads them). A batch left empty asks the search
again: the programs it dropped are now marked in the inner search, so the next batch holds others.
"""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from costlab.export.search.common import measured_hashes, schedule_hash

# batches in a row made only of measured programs before the task's design space counts as exhausted
MAX_MEASURED_BATCHES = 5


@derived_object
class UnmeasuredEvolutionarySearch(PySearchStrategy):
    """``EvolutionarySearch(**options)``, its batches without the programs the database holds already."""

    def __init__(self, **options):
        self.options = options
        self.context = self.inner = None
        self.measured: set = set()

    def _initialize_with_tune_context(self, context) -> None:
        from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

        self.context = context
        self.inner = EvolutionarySearch(**self.options)
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        self.measured = measured_hashes(self.context, database)
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()
        self.measured = set()

    def generate_measure_candidates(self):
        for _ in range(MAX_MEASURED_BATCHES):
            out = self.inner.generate_measure_candidates()
            if out is None or not self.measured:
                return out
            fresh = [c for c in out if schedule_hash(c.sch) not in self.measured]
            if fresh or not out:
                return fresh
        return None

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return UnmeasuredEvolutionarySearch(**self.options)
