"""Progress of a tuning run: a bar of trials (done out of the budget) and the best latency of each task so
far, fed by a MetaSchedule measure callback after every measured batch, and its history (one JSON line per
batch) from which trials-to-reach and seconds-to-reach a latency are read."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from costlab.common.errors import InputError
from costlab.datasets.records import record_latency
from costlab.metaschedule.results import short_error


class TuneProgress:
    def __init__(self, names: list[str], done: list[int], budget: int, enabled: bool = True,
                 history: str | Path | None = None, clock=None, started: float | None = None, known_best=None,
                 check_written=None):
        """``known_best``: per task, the best latency its database holds already (None: none), what a start
        (transfer, library) or an exploitation measured outside the search: the best so far starts from it."""
        from tqdm import tqdm

        self.names = names
        self.best = [math.inf if b is None else b for b in (known_best or [None] * len(names))]
        self.trials = list(done)
        self.group = list(range(len(names)))
        self.history = Path(history) if history else None
        self.clock = clock  # a search.timed.RoundClock: the batch's seconds of search, build and run
        self.check_written = check_written  # raises an InputError naming a database file cut short (a full disk)
        self.write_failure: Exception | None = None  # a file of the run could not be written: the run stops
        self.offset = self._resume()  # seconds the run took before this process continued it
        self.started = started or time.time()  # elapsed_s counts from the command's start
        self.bar = tqdm(total=budget, initial=min(sum(done), budget), unit="trial", desc="tune", disable=not enabled)

    def _resume(self) -> float:
        """The best latencies and the run's seconds so far from the history of an interrupted run."""
        if self.history is None or not self.history.exists():
            return 0.0
        elapsed = 0.0
        for line in self.history.read_text().splitlines():
            try:
                row = json.loads(line)
                seconds = float(row.get("elapsed_s") or 0)
                best = float(row.get("best_us") or 0) / 1e6
            except (ValueError, TypeError, AttributeError):
                continue  # a line cut short by the interruption, or damaged: the history is a record, not the data
            if math.isfinite(seconds):
                elapsed = max(elapsed, seconds)
            if row.get("task") in self.names and best > 0:
                i = self.names.index(row["task"])
                self.best[i] = min(self.best[i], best)
        return elapsed

    def _write(self, i: int, n: int, errors: int, batch_best: float, error: str | None = None) -> None:
        if self.history is None:
            return
        timing = self.clock.batch_done(i) if self.clock is not None else {}
        at = timing.pop("at", None) or time.time()  # when the batch's results came in
        row = dict(elapsed_s=round(self.offset + at - self.started, 3), task=self.names[i],
                   task_trials=self.trials[i], trials=sum(self.trials), batch=n, errors=errors,
                   batch_best_us=round(batch_best * 1e6, 4) if math.isfinite(batch_best) else None,
                   best_us=round(self.best[i] * 1e6, 4) if math.isfinite(self.best[i]) else None)
        row.update(timing)
        if error is not None:  # why the batch's last failed candidate failed (a task of no valid program says so)
            row["error"] = error
        try:
            with open(self.history, "a") as f:
                f.write(json.dumps(row) + "\n")
        except OSError as exc:  # raised here it would cross TVM's callback as its error: the clock stops the run
            self._failed(InputError(self.history, f"could not be written ({exc.strerror or exc}); the run stopped: "
                                                  "make room and run the same command again to continue"))
        if self.check_written is not None:
            try:
                self.check_written()
            except InputError as exc:
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """A file of the run could not be written: kept to be raised once the run has stopped, which it does now."""
        self.write_failure = self.write_failure or exc
        if self.clock is not None:
            self.clock.fail(str(exc))

    def focus(self, group: list[int]) -> None:
        """The tasks tuned now (task ids in MetaSchedule's callback are positions in this group)."""
        self.group = list(group)

    def results_in(self, task_id: int) -> None:
        """The results of the batch of the group's ``task_id`` have just come in: its clock's run ends now."""
        if self.clock is not None:
            self.clock.results_in(self.group[task_id])

    def record(self, task_id: int, results, builds=None) -> None:
        """``results``: the batch's runner results; ``builds``: its builder results (a failed build's reason)."""
        i = self.group[task_id]
        batch_best, errors, error = math.inf, 0, None
        for k, r in enumerate(results):
            lat = math.inf if r.error_msg is not None else record_latency(getattr(r, "run_secs", None))
            if lat < math.inf:
                batch_best = min(batch_best, lat)
            else:
                errors += 1
                built = builds[k] if builds is not None and k < len(builds) else None
                msg = (built.error_msg if built is not None and built.error_msg is not None else r.error_msg)
                error = short_error(msg) if msg is not None else "no latency measured"
        self.best[i] = min(self.best[i], batch_best)
        self.trials[i] += len(results)
        self._write(i, len(results), errors, batch_best, error)
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
        self.progress.record(int(task_id), runner_results, builder_results)


def plot_history(history: str | Path, out: str | Path) -> Path | None:
    """The run's best latency per task against its wall seconds and against its trials (PNG)."""
    rows = []
    for line in Path(history).read_text().splitlines() if Path(history).exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    rows = [r for r in rows if r.get("best_us")]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_s, ax_t) = plt.subplots(1, 2, figsize=(10, 3.8))
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        label = task if len(task) <= 40 else task[:37] + "..."
        ax_s.step([r["elapsed_s"] for r in mine], [r["best_us"] for r in mine], where="post", label=label)
        ax_t.step([r["task_trials"] for r in mine], [r["best_us"] for r in mine], where="post", label=label)
    ax_s.set_xlabel("wall seconds since the command started")
    ax_t.set_xlabel("trials (measured programs)")
    for ax in (ax_s, ax_t):
        ax.set_ylabel("best latency (µs)")
        ax.grid(alpha=0.3)
    ax_t.legend(fontsize=7)
    fig.suptitle("costlab tune: best latency so far")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
