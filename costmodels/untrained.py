"""The model kinds that need no weights (registered in ``kinds.py``, ``trained = False``): PSA, the static
analyzer's estimate, and random scores. A ``--model psa`` or ``--model random`` is a predictor by the name alone;
neither is trained, exported or adapted. PSA is also the draft kind: the model every search drafts with.

Importing it imports neither torch nor TVM: the kinds' registry (and with it the command line) loads it.
"""

from __future__ import annotations

import numpy as np

from costlab.costmodels.kinds import ModelKind, register
from costlab.featurizers import create
from costlab.featurizers.psa import TaskScale


def _count(features: dict) -> int:
    return len(next(iter(features.values()), ()))


class PSAPredictor:
    """PSA alone: the static analyzer's score (1 / estimated time; 0 for a program it cannot read, -1 for a
    score that is not finite), below every readable program. The score is raw (it ranks within a task); a
    tuning run scales it per task with ``featurizers.psa.TaskScale`` (``PSAKind.task_scale``)."""

    kind = "psa"

    def __init__(self, config: dict | None = None):
        self.featurizer = create("psa", config)
        self.platforms: list = []
        self.config: dict = {}

    def predict(self, features: dict) -> np.ndarray:
        score = np.asarray(features["score"], np.float64)
        return np.where(np.isfinite(score), score, -1.0)[:, None]


class RandomPredictor:
    """Uniform random scores (seeded): the floor every model is compared with."""

    kind = "random"

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.featurizer = create("null")
        self.platforms: list = []
        self.config: dict = {}

    def predict(self, features: dict) -> np.ndarray:
        return self.rng.random((_count(features), 1))


@register
class PSAKind(ModelKind):
    """The static analyzer, scaled per task in a tuning run as the draft stage scales it: divided by the best of
    the task's first population (``TaskScale``)."""

    name = featurizer = "psa"
    title = "PSA"
    learned = trained = False
    drafts = True

    def predictor(self, art=None, seed: int = 0) -> PSAPredictor:
        return PSAPredictor()

    def task_scale(self, raw):
        return TaskScale(raw)


@register
class RandomKind(ModelKind):
    name = title = "random"
    featurizer = "null"
    learned = trained = False
    stochastic = True

    def predictor(self, art=None, seed: int = 0) -> RandomPredictor:
        return RandomPredictor(seed)
