"""Models shipped inside the package (``costmodels/models/<name>/``: ``config.json`` + ``model.safetensors``),
loadable by name wherever a model path is taken: ``costlab evaluate --model NAME``, ``costlab tune --model
NAME``, ``costlab.export.load(NAME)``."""

from __future__ import annotations

from pathlib import Path

MODELS = Path(__file__).resolve().parent / "models"


def shipped_names() -> list[str]:
    return sorted(p.name for p in MODELS.iterdir() if (p / "config.json").exists()) if MODELS.is_dir() else []


def shipped_path(name: str) -> Path | None:
    path = MODELS / name
    return path if name in shipped_names() else None
