"""PSA (the static analyzer) as a MetaSchedule cost model: the draft stage of every costlab search."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from costlab.export.cost_model import _task_key


@derived_object
class PSAModel(PyCostModel):
    """PSA as a MetaSchedule cost model: ``1 / estimated time``, divided per task by the best of the first
    population it scores (``featurizers.psa.TaskScale``: a fixed scale, so scores compare across the calls
    of a search; the same scaling as ``--model psa``)."""

    def __init__(self, config: dict | None = None):
        super().__init__()
        from costlab.featurizers import create

        self.featurizer = create("psa", config)
        self._scale: dict = {}  # per task: its TaskScale
        self.stats = dict(calls=0, candidates=0, seconds=0.0)

    def scores(self, context, candidates) -> np.ndarray:
        t0 = time.perf_counter()
        feats = self.featurizer.featurize_candidates(context.mod, context.target, [c.sch for c in candidates])
        self.stats["calls"] += 1
        self.stats["candidates"] += len(candidates)
        self.stats["seconds"] += time.perf_counter() - t0
        return np.asarray(feats["score"], np.float64)

    def predict(self, context, candidates) -> np.ndarray:
        if not len(candidates):
            return np.zeros(0, np.float64)
        from costlab.featurizers.psa import TaskScale

        s = self.scores(context, candidates)
        key = _task_key(context)
        if key not in self._scale:
            self._scale[key] = TaskScale(s)
        return self._scale[key](s)

    def update(self, context, candidates, results) -> None:
        pass

    def save(self, path: str) -> None:
        Path(path).write_text(json.dumps(self.featurizer.to_json()))

    def load(self, path: str) -> None:
        from costlab.featurizers import from_json

        self.featurizer = from_json(json.loads(Path(path).read_text()))
