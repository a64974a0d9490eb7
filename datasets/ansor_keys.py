"""Workload keys of Ansor / TenSet logs (JSON text ``["<compute hash>", args...]``), checked without TVM.

Shared by the log importer (``ansor_log.py``) and the reader of networks and task weights
(``ansor_networks.py``); ``BadLine`` is what both raise and catch for an unusable line or key.
"""

from __future__ import annotations

import orjson


class BadLine(Exception):
    """A line that is not a usable record; the message says what is wrong with it."""


def parse_workload_key(key) -> list:
    """The workload key as a list ``[compute_hash, args...]``; raises ``BadLine`` when it is malformed."""
    if not isinstance(key, str):
        raise BadLine(f"workload key must be a string, got {type(key).__name__}")
    try:
        value = orjson.loads(key)
    except orjson.JSONDecodeError:
        raise BadLine(f"workload key is not JSON: {key[:80]!r}") from None
    if not isinstance(value, list) or not value or not isinstance(value[0], str) or not value[0]:
        raise BadLine(f"workload key is not a JSON list starting with the compute hash: {key[:80]!r}")
    return value
