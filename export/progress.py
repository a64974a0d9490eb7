"""Progress of a tuning run: a bar of trials (done out of the budget) and the best latency of each task so
far, fed by a MetaSchedule measure callback after every measured batch."""

from __future__ import annotations

import math

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback


class TuneProgress:
    def __init__(self, names: list[str], done: list[int], budget: int, enabled: bool = True):
        from tqdm import tqdm

        self.names = names
        self.best = [math.inf] * len(names)
        self.trials = list(done)
        self.group = list(range(len(names)))
        self.bar = tqdm(total=budget, initial=min(sum(done), budget), unit="trial", desc="tune", disable=not enabled)

    def focus(self, group: list[int]) -> None:
        """The tasks tuned now (task ids in MetaSchedule's callback are positions in this group)."""
        self.group = list(group)

    def record(self, task_id: int, results) -> None:
        i = self.group[task_id]
        for r in results:
            secs = getattr(r, "run_secs", None)
            if r.error_msg is None and secs:
                vals = [float(s.value if hasattr(s, "value") else s) for s in secs]
                lat = sum(vals) / len(vals)
                if 0 < lat < 1e9:
                    self.best[i] = min(self.best[i], lat)
        self.trials[i] += len(results)
        self.bar.update(len(results))
        shown = [f"{self.names[j][:24]} {self.best[j] * 1e6:.1f}us" for j in self.group if math.isfinite(self.best[j])]
        self.bar.set_postfix_str("; ".join(shown[:3]) + (" ..." if len(shown) > 3 else ""))

    def callback(self):
        return _Callback(self)

    def close(self) -> None:
        self.bar.close()


@derived_object
class _Callback(PyMeasureCallback):
    def __init__(self, progress: TuneProgress):
        super().__init__()
        self.progress = progress

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.progress.record(int(task_id), runner_results)
