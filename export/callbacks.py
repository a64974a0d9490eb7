"""The measure callbacks of a tuning run: MetaSchedule's default ones (add to the database, remove build
artifacts, update the cost model) and the progress bar, none of which sees a result that is not a
measurement (``metaschedule.rpc.is_lost``: the RPC device stopped answering). Such a candidate is not
recorded, so it counts against no budget and a re-run measures it. Nor is a candidate that failed while the run
was being stopped: the signal that stops a run (Ctrl-C in a terminal, a job's time limit) reaches its whole
process group, the builder's and runner's workers too, and the batch in flight then fails for that alone.
``on_results`` is told first (with the batch's task id), the moment a batch's results are in: the cost model's
update that follows is the next round's work, not this batch's."""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback, PyMeasureCallback

from costlab.export.stop import recordable, stop_requested
from costlab.metaschedule.rpc import is_lost


def recorded(runner_results, stopping: bool) -> list[int]:
    """The results of a batch that are measurements (their index): none the RPC guard marked lost, and, while
    the run is being stopped, only those that measured (a build or a run that failed then is not the
    program's failure; a re-run measures it)."""
    return [i for i, r in enumerate(runner_results)
            if not is_lost(r.error_msg) and recordable(r.error_msg is not None, stopping)]


@derived_object
class MeasuredOnly(PyMeasureCallback):
    def __init__(self, callbacks: list, on_results=None):
        super().__init__()
        # build artifacts are removed for every candidate, measured or not
        self.cleanup = next(cb for cb in callbacks if type(cb).__name__ == "RemoveBuildArtifact")
        self.callbacks = [cb for cb in callbacks if cb is not self.cleanup]
        self.on_results = on_results

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        if self.on_results is not None:
            self.on_results(int(task_id))
        self.cleanup.apply(task_scheduler, task_id, measure_candidates, builder_results, runner_results)
        keep = recorded(runner_results, stop_requested() is not None)
        if not keep:
            return
        if len(keep) < len(runner_results):
            measure_candidates = [measure_candidates[i] for i in keep]
            builder_results = [builder_results[i] for i in keep]
            runner_results = [runner_results[i] for i in keep]
        for cb in self.callbacks:
            cb.apply(task_scheduler, task_id, measure_candidates, builder_results, runner_results)


def run_callbacks(*extra, on_results=None) -> list:
    return [MeasuredOnly(list(MeasureCallback.create("default")) + list(extra), on_results=on_results)]
