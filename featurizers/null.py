"""The null featurizer: no features, one row per record or candidate. It feeds the models that look at
nothing (the random baseline), so that every model is called the same way."""

from __future__ import annotations

import numpy as np

from costlab.featurizers.base import Featurizer, register


@register
class NullFeaturizer(Featurizer):
    name = "null"
    version = 1

    def featurize_records(self, ds, platform: str, rows: np.ndarray) -> dict:
        return {"valid": np.ones(len(rows), bool)}

    def featurize_candidates(self, mod, target, schedules) -> dict:
        return {"valid": np.ones(len(schedules), bool)}
