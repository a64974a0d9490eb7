"""JSON text costlab writes (summaries, metrics, model configs, ``--json`` output): always valid JSON.

``json.dumps`` writes NaN and infinities as bare ``NaN`` / ``Infinity``, which no strict JSON reader accepts;
here every non-finite number becomes ``null`` (a metric that could not be computed), numpy scalars and
arrays become plain numbers and lists, and anything else unknown is written as its text.
"""

from __future__ import annotations

import json
import math


def plain(value):
    """``value`` with non-finite floats as None and numpy values as Python ones, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if type(value).__module__ == "numpy":
        if hasattr(value, "tolist"):
            return plain(value.tolist())
    return value


def dumps(value, **kwargs) -> str:
    """``json.dumps`` of ``plain(value)``: never a bare NaN (``allow_nan=False`` makes sure of it)."""
    kwargs.setdefault("default", str)
    return json.dumps(plain(value), allow_nan=False, **kwargs)
