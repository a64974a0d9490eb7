"""What a MetaSchedule measurement says: its ``run_secs`` (seconds per run; ``[1e10]`` when building or running
failed, as MetaSchedule writes failures; none at all when there is no result) as raw costs and an error code.

The codes are the ones a dataset stores with every MetaSchedule record (Ansor / TenSet logs keep their own
``error_no``), so a program measured by costlab and one read from a tuning database are flagged alike.
"""

from __future__ import annotations

import math

ERROR_NONE = 0
ERROR_MS_FAILED = 1  # run_secs holds MetaSchedule's failure value (>= 1e10): build or run failed / timed out
ERROR_MS_NO_RESULT = 2  # the record has no run_secs at all
MS_FAILURE_SECS = 1e10


def costs_and_error(run_secs) -> tuple[list[float], int]:
    """Raw costs and error code of a record's ``run_secs`` (MetaSchedule writes ``[1e10]`` for failures)."""
    if not run_secs:
        return [], ERROR_MS_NO_RESULT
    costs = [float(x) for x in run_secs]
    if any(not math.isfinite(x) or x >= MS_FAILURE_SECS or x < 0 for x in costs):
        return costs, ERROR_MS_FAILED
    return costs, ERROR_NONE


def short_error(msg) -> str:
    """The gist of a builder/runner error: its first line and its last non-empty line."""
    lines = [x.strip() for x in str(msg).strip().splitlines() if x.strip()]
    if not lines:
        return "unknown error"
    return lines[0][:100] if len(lines) == 1 else f"{lines[0][:60]} ... {lines[-1][:120]}"
