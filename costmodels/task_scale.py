"""The map of one task's raw model scores to the positive scores MetaSchedule's search takes: a logistic curve
fixed by the task's first population (``kinds.ModelKind.task_scale``, every kind's unless it has its own)."""

from __future__ import annotations

import numpy as np


class LogisticScale:
    """The fixed logistic map of one task's raw scores to (0, 1): valid programs at least 1e-6, invalid ones
    (``-inf``) 0."""

    def __init__(self, scores: np.ndarray):
        finite = scores[np.isfinite(scores)]
        self.centre = float(np.median(finite)) if finite.size else 0.0
        self.spread = float(np.std(finite)) if finite.size > 1 else 1.0
        self.spread = self.spread if self.spread > 1e-9 else 1.0

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        z = np.clip((scores - self.centre) / self.spread, -30, 30)
        return np.where(np.isfinite(scores), np.maximum(1.0 / (1.0 + np.exp(-z)), 1e-6), 0.0)
