"""Models shipped inside the package (``costmodels/models/<name>/``: ``config.json`` + ``model.safetensors``),
loadable by name wherever a model path is taken: ``costlab evaluate --model NAME``, ``costlab tune --model
NAME``, ``costlab.export.load(NAME)``.

Shipped models are versioned (``x86-cpu-v1``, ``x86-cpu-v2``, ...): a newer version never replaces an older
one's folder, so a result recorded with a versioned name can be reproduced later. ``models/aliases.json`` maps
the plain names users type (``x86-cpu``) to the version they stand for now."""

from __future__ import annotations

import json
from pathlib import Path

MODELS = Path(__file__).resolve().parent / "models"
ALIASES = MODELS / "aliases.json"


def aliases() -> dict[str, str]:
    """``{plain name: versioned name}`` of the shipped aliases (those whose version is shipped)."""
    try:
        table = json.loads(ALIASES.read_text())
    except (OSError, ValueError):
        return {}
    versions = set(versioned_names())
    return {str(k): str(v) for k, v in table.items() if v in versions} if isinstance(table, dict) else {}


def versioned_names() -> list[str]:
    """The shipped model folders."""
    return sorted(p.name for p in MODELS.iterdir() if (p / "config.json").exists()) if MODELS.is_dir() else []


def shipped_names() -> list[str]:
    """Every name a shipped model loads by: its versioned names and the aliases."""
    return sorted(set(versioned_names()) | set(aliases()))


def shipped_path(name: str) -> Path | None:
    name = aliases().get(name, name)
    return MODELS / name if name in versioned_names() else None
