"""``draft-filter``: Draft-then-Verify inside a cost model, for MetaSchedule's own evolutionary search.

PSA scores every candidate the genetic search proposes; the best-drafted fraction is scored by the learned
model and ranked above the rest, so the learned model sees every generation (unlike ``draft-verify``)."""

from __future__ import annotations

import math
import time

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from costlab.export.cost_model import CostlabCostModel, draft_model


@derived_object
class DraftFilterModel(PyCostModel):
    """Draft-then-Verify inside a cost model: PSA scores every candidate; the best-drafted ``fraction`` is
    scored by the learned model and ranked above the rest: ``0.5 + 0.5 * verified`` against PSA's
    ``0.5 * drafted`` in [0, 0.5] (a learned model's scores lie in (0, 1); PSA as the verifier, divided by the
    task's first best, may pass 1, which keeps the order)."""

    def __init__(self, verify: CostlabCostModel, fraction: float = 0.1, draft: CostlabCostModel | None = None):
        super().__init__()
        self.verify, self.fraction = verify, float(fraction)
        self.draft = draft if draft is not None else draft_model()
        self.stats = dict(verify_scored=0, draft_scored=0, draft_s=0.0, verify_s=0.0)

    @property
    def adapter(self):
        return self.verify.adapter

    @property
    def predictor(self):
        """The learned model's predictor (as its online adaptation left it): what ``tune --exploit`` screens with."""
        return self.verify.predictor

    def predict(self, context, candidates) -> np.ndarray:
        n = len(candidates)
        if not n:
            return np.zeros(0, np.float64)
        t0 = time.perf_counter()
        drafted = self.draft.predict(context, candidates)  # (0, 1] against the task's first best
        out = 0.5 * np.clip(drafted, 0.0, 1.0)
        k = max(1, int(math.ceil(self.fraction * n)))
        top = np.argsort(-drafted, kind="stable")[:k]
        t1 = time.perf_counter()
        verified = np.asarray(self.verify.predict(context, [candidates[i] for i in top]), np.float64)
        # a program the verifier cannot read (its score 0) is ranked below every other, as the verifier alone ranks it
        out[top] = np.where(verified > 0, 0.5 + 0.5 * verified, 0.0)
        self.stats["verify_scored"] += k
        self.stats["draft_scored"] += n
        self.stats["draft_s"] += t1 - t0
        self.stats["verify_s"] += time.perf_counter() - t1
        return out.astype(np.float64)

    def raw_scores(self, context, candidates) -> np.ndarray:
        """The verifier's own scores (what the gain task scheduler compares a round's programs by): ``predict``
        would fix the verifier's per-task map of scores from those few measured programs."""
        return self.verify.raw_scores(context, candidates)

    def remember(self, context, database) -> int:
        return self.verify.remember(context, database)

    def update(self, context, candidates, results) -> None:
        self.verify.update(context, candidates, results)

    def save(self, path: str) -> None:
        self.verify.save(path)

    def load(self, path: str) -> None:
        self.verify.load(path)
