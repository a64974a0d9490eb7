"""The measure callbacks of a tuning run: MetaSchedule's default ones (add to the database, remove build
artifacts, update the cost model) and the progress bar, none of which sees a result that is not a
measurement (``metaschedule.rpc.is_lost``: the RPC device stopped answering). Such a candidate is not
recorded, so it counts against no budget and a re-run measures it. Nor is a candidate that failed while the run
was being stopped because the signal that stops it reached its worker (``export.stop.recordable``).
``on_results`` is told first (with the batch's task id), the moment a batch's results are in: the cost model's
update that follows is the next round's work, not this batch's."""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback, PyMeasureCallback

from costlab.export.stop import recordable, stop_requested
from costlab.metaschedule.rpc import is_lost


def recorded(runner_results, stopping: bool) -> list[int]:
    """The results of a batch that are measurements (their index): none the RPC guard marked lost, and, while
    the run is being stopped, none that failed because the stop's signal ended its worker (not the program's
    failure; a re-run measures it)."""
    return [i for i, r in enumerate(runner_results)
            if not is_lost(r.error_msg) and recordable(r.error_msg is not None, r.error_msg, stopping)]


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


@derived_object
class UpdateAll(PyMeasureCallback):
    """MetaSchedule's ``UpdateCostModel`` for a costlab cost model (one that adapts online): a candidate whose build
    failed reaches ``update`` as a failure (a runner result of its build's error), as the database records it and as
    a continued run's ``remember`` reads it back; MetaSchedule's callback leaves such candidates out."""

    def __init__(self, cost_model):
        super().__init__()
        self.cost_model = cost_model

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        results = [r if b.error_msg is None else RunnerResult(None, b.error_msg)
                   for b, r in zip(builder_results, runner_results)]
        self.cost_model.update(task_scheduler.tasks_[int(task_id)].ctx, list(measure_candidates), results)


def run_callbacks(*extra, on_results=None, cost_model=None) -> list:
    """The run's measure callbacks; with a costlab ``cost_model`` that adapts, ``UpdateAll`` updates it in place of
    MetaSchedule's ``UpdateCostModel``."""
    callbacks = list(MeasureCallback.create("default"))
    if getattr(cost_model, "adapter", None) is not None:
        callbacks = [UpdateAll(cost_model) if type(cb).__name__ == "UpdateCostModel" else cb for cb in callbacks]
    return [MeasuredOnly(callbacks + list(extra), on_results=on_results)]
