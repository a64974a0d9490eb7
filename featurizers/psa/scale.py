"""PSA's score at tuning time: the one scaling of every MetaSchedule cost model that scores with PSA.

The featurizer's ``score`` is ``1 / estimate`` (0 for a program it cannot read). A MetaSchedule cost model
must return positive scores, higher = faster, that compare across the calls of one search:
EvolutionarySearch samples mutation parents in proportion to them and keeps its best across generations
(and ``export/search/draft_filter.py`` maps PSA's into (0, 0.5] below the verified ones). So per task the
scores are divided by the best of the first population scored, a scale fixed from then on; later, better
programs score above 1. The ``psa`` model kind scales this way (``costmodels/untrained.PSAKind.task_scale``),
so both the draft stage (``export/cost_model.draft_model``) and ``--model psa`` do: each is
``export/cost_model.CostlabCostModel`` of the ``psa`` kind.
"""

from __future__ import annotations

import numpy as np


class TaskScale:
    """The fixed map of one task's PSA scores to cost-model scores: ``score / best``, ``best`` the largest
    score of the first population (1 when it has none above 0). A score that is not finite and positive
    (a program PSA cannot read: 0, -1, -inf, NaN) maps to 0, below every readable program."""

    def __init__(self, scores):
        s = np.asarray(scores, np.float64)
        readable = s[np.isfinite(s) & (s > 0)]
        self.best = float(readable.max()) if readable.size else 1.0

    def __call__(self, scores) -> np.ndarray:
        s = np.asarray(scores, np.float64)
        readable = np.isfinite(s) & (s > 0)
        return np.where(readable, np.where(readable, s, 0.0) / self.best, 0.0)
