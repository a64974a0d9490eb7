"""The directory of a training or fine-tuning run (what goes in it: ``fit.py``, ``finetune.py``,
``baselines.py``)."""

from __future__ import annotations

from pathlib import Path

from costlab.common.errors import UsageError


def run_dir(path) -> Path:
    """The run directory ``path``, created if missing; an existing file there is refused, not overwritten."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory (a training run writes a directory)")
    out.mkdir(parents=True, exist_ok=True)
    return out
