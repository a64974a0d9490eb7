"""MetaSchedule task schedulers of ``costlab tune`` (which task of a network gets the next round).

- ``gain`` (``gain.py``): after every task's first round, each round goes to the task expected to save the
  most end-to-end time per second of tuning (weight x best latency x predicted improvement / seconds per
  round). The default for a network.
- ``gradient``, ``round-robin``: MetaSchedule's own, by name.

``make_task_scheduler(name)`` gives what ``ms.tune_tasks(task_scheduler=...)`` takes. TVM is imported only
when a ``gain`` scheduler is made.
"""

from __future__ import annotations

TASK_SCHEDULERS = ("gain", "gradient", "round-robin")
DEFAULT_FOR_NETWORK = "gain"
DEFAULT_FOR_WORKLOADS = "gradient"  # one task per tune_tasks call: every scheduler picks it alike


def make_task_scheduler(name: str, **options):
    """The task scheduler ``name`` (``TASK_SCHEDULERS``) for one ``tune_tasks`` call: a fresh
    ``GainScheduler`` (``options`` are its constructor's), or MetaSchedule's name, which ``tune_tasks``
    turns into its own scheduler."""
    if name == "gain":
        from costlab.export.schedulers.gain import GainScheduler  # lazy: pulls tvm; the parser must not

        return GainScheduler(**options)
    if name in ("gradient", "round-robin"):
        return name
    raise ValueError(f"unknown task scheduler {name!r} (one of {', '.join(TASK_SCHEDULERS)})")
