"""Online adaptation of a learned net to the measurements of a tuning run (MoA-Pruner), in plain torch.

A tuning run measures a few dozen programs per round; after each round the net learns from all the run's
records so far, grouped per task into ranking lists, by the same recipe as ``costlab finetune``
(``recipe.py``: low learning rate with warm-up, a penalty toward the pretrained weights, early stopping on
a part of each task's programs that it never trains on, the pretrained weights kept unless the update
ranks that part better). The modes (``recipes.ADAPT_MODES``; each record says how it adapts):

- ``finetune``: the net itself is adapted by the recipe after every round;
- ``momentum``: the Siamese momentum rule (``momentum.MomentumTransfer``): every ``every``-th round the
  online net restarts from the momentum copy, is adapted by the recipe, and the momentum copy moves towards
  it by EMA (``momentum``). The pre-trained knowledge decays slowly instead of being overwritten.

Each update is reported (``rounds``): the net's pairwise ranking accuracy of the batch just measured before
the update (it chose that batch: an honest estimate on programs it had not seen) and after it, over the whole
batch and within its best quarter (``before_q25``, ``after_q25``: the programs the search decides between), and
every tail metric of the batch (``before_tail``, ``after_tail``: ``metrics.tail_metrics``).

Nothing about the features changes online: the featurizer's config (vocabulary, sequence length, any
normalisation) is the pre-trained model's and is never refitted on the run's records, so the pre-trained
net keeps seeing inputs on the scale it learned (Pruner's online update re-normalised features on the
run's data).
"""

from __future__ import annotations

import copy
import time

import numpy as np

from costlab.costmodels.metrics import pairwise_accuracy, tail_metrics
from costlab.costmodels.momentum import MomentumTransfer
from costlab.costmodels.recipe import fit_lists, list_metrics, lowers_a_guarded_metric, ranking_list, scores_of, take
from costlab.costmodels.recipes import ADAPT_MODES, Recipe, recipe
from costlab.costmodels.tensors import concat_features

# The online recipe: ``safe`` with fewer steps (it runs after every round, on a growing set), validated on
# each task's own programs: a tuning run's model is asked about the very tasks it measures
ONLINE = Recipe("online", train="head", lr=3e-4, warmup=10, steps=100, l2sp=0.0, val_fraction=0.3, val_by="program",
                eval_every=10, patience=5)


class OnlineAdapter:
    """Collects a run's measured candidates per task and adapts a ``NetPredictor``'s net to them."""

    def __init__(self, predictor, mode: str = "momentum", momentum: float = 0.9, every: int = 1, head: int = 0,
                 seed: int = 0, recipe_spec=None, **recipe_options):
        adapting = [name for name, m in ADAPT_MODES.items() if m.adapts]
        if mode not in adapting:
            raise ValueError(f"adaptation mode must be one of {', '.join(adapting)}, not {mode!r}")
        self.predictor, self.mode, self.head, self.seed = predictor, mode, head, seed
        base = recipe(recipe_spec) if recipe_spec is not None else ONLINE
        self.recipe = Recipe.from_dict(dict(base.to_dict(), **recipe_options))
        # as the mode's record says: through MoA's momentum copy, or the net itself adapted in place
        self.wrapper = MomentumTransfer(predictor.net, momentum, every) if ADAPT_MODES[mode].momentum else None
        self._feats: dict = {}  # task key -> list of feature dicts
        self._lat: dict = {}  # task key -> list of latency arrays
        self._val: dict = {}  # task key -> list of bool arrays: held out for validation, once and for good
        self._read: dict = {}  # task key -> list of bool arrays: the featurizer could read the record
        self._rng = np.random.default_rng(seed)
        self.stats = dict(updates=0, trained=0, kept_pretrained=0, records=0, seconds=0.0)
        self.rounds: list[dict] = []  # per update: the new batch's pairwise before and after

    def add(self, task_key, features: dict, latency) -> None:
        """Measured candidates of one task: their features and mean latencies (``inf`` = failed). A net with a
        hardware input trains on the vector it scores with (the platform the predictor was told of)."""
        latency = np.asarray(latency, np.float64)
        if not len(latency):
            return
        self._feats.setdefault(task_key, []).append(self.predictor.with_hardware(features))
        self._lat.setdefault(task_key, []).append(latency)
        # a candidate the featurizer could not read has no features to learn from (a tuning run scores it last
        # without the net): in no list
        self._read.setdefault(task_key, []).append(np.asarray(features.get("valid", np.ones(len(latency))), bool))
        # each record is a training or a validation record for the whole run: a net adapted by earlier updates
        # has never trained on what validates it now
        self._val.setdefault(task_key, []).append(self._rng.random(len(latency)) < self.recipe.val_fraction)
        self.stats["records"] += len(latency)

    def _lists(self) -> tuple[list, list]:
        """Per task with at least two records, one of which ran: (features, scores = best / latency, 0 failed),
        cut into the training lists and the validation lists (the records held out in ``add``), the records the
        featurizer could not read in neither."""
        train, val = [], []
        for key, parts in self._feats.items():
            lst = ranking_list(concat_features(parts), np.concatenate(self._lat[key]))
            if lst is None:
                continue
            feats, score = lst
            held, read = np.concatenate(self._val[key]), np.concatenate(self._read[key])
            fit, check = np.flatnonzero(~held & read), np.flatnonzero(held & read)
            if len(fit) >= 2:  # a record held out is never trained on, even before it can validate
                train.append(take(feats, score, fit))
                if len(check) >= 2:
                    val.append(take(feats, score, check))
        return train, val

    def batch_pairwise(self, features: dict, latency) -> float:
        """The net's pairwise ranking accuracy of one measured batch (NaN when it holds no ordered pair)."""
        return self.batch_metrics(features, latency)["pairwise"]

    def batch_metrics(self, features: dict, latency) -> dict:
        """The net's pairwise ranking accuracy of one measured batch (``pairwise``) and its tail metrics
        (``metrics.tail_metrics``: pairwise and top-1 within the batch's best quarter and tenth, the programs the
        search decides between, and the top-k score of its 1/8/32 picks); NaN where there is no ordered pair."""
        latency = np.asarray(latency, np.float64)
        task = np.zeros(len(latency), np.int64)
        pred = scores_of(self.predictor.net, self.predictor.kind, self.predictor.with_hardware(features), self.head)
        return dict(pairwise=float(pairwise_accuracy(task, pred, latency)), **tail_metrics(task, pred, latency))

    def update(self, batch: tuple | None = None) -> bool:
        """One round's update; returns whether the net changed. ``batch`` (features, latencies) is the round's
        new measurements, reported before and after."""
        self.stats["updates"] += 1
        row = dict(update=self.stats["updates"], records=self.stats["records"])
        if batch is not None:
            row["batch"] = len(batch[1])
            m = self.batch_metrics(*batch)
            row["before"], row["before_q25"] = m["pairwise"], m["pairwise_q25"]
            row["before_tail"] = _rounded({k: v for k, v in m.items() if k != "pairwise"})
        lists, val_lists = self._lists()
        trained = False
        # nothing held out to check an update against yet: the net is left as it is (a recipe of no validation part,
        # val_fraction 0, asked for unguarded updates)
        unchecked = bool(lists) and not val_lists and self.recipe.val_fraction > 0
        if unchecked:
            row["note"] = "no held-out records to validate an update yet"
        if lists and not unchecked:
            t0 = time.perf_counter()
            seed = self.seed + self.stats["updates"]
            info: dict = {}

            def adapt(net):
                info.update(fit_lists(net, self.predictor.kind, lists, self.recipe, head=self.head, seed=seed,
                                      val_lists=val_lists))

            if self.wrapper is None:
                adapt(self.predictor.net)
                trained = not info.get("kept_pretrained", False)
            else:
                # the online net restarts from the momentum copy, so the recipe's guard compares the update with
                # that copy, not with the net that scored until now: the net before the update is kept unless the
                # update ranks the validation part no worse by every guarded metric
                net = self.predictor.net
                previous = copy.deepcopy(net.state_dict())
                # the momentum copy as it was: an update undone here is not kept in it either (its EMA step took a
                # part of it, and the next update would restart from that)
                momentum = copy.deepcopy(self.wrapper.momentum_net.state_dict())
                before = list_metrics(net.eval(), self.predictor.kind, val_lists, self.head) if val_lists else None
                trained = self.wrapper.update(adapt)
                after = (list_metrics(net.eval(), self.predictor.kind, val_lists, self.head)
                         if trained and before is not None and not info.get("kept_pretrained") else None)
                if after is not None:  # the comparison that decides, beside the recipe's with the momentum copy
                    row["vs_scoring"] = dict(before=_rounded(before), after=_rounded(after))
                if trained and (info.get("kept_pretrained") or after is not None and lowers_a_guarded_metric(after,
                                                                                                           before)):
                    net.load_state_dict(previous)
                    self.wrapper.momentum_net.load_state_dict(momentum)
                    info["kept_pretrained"], trained = True, False
            self.predictor.net.eval()
            self.stats["trained"] += int(trained)
            self.stats["kept_pretrained"] += int(bool(info.get("kept_pretrained")))
            self.stats["seconds"] += time.perf_counter() - t0
            row.update(steps=info.get("steps", 0), kept_pretrained=info.get("kept_pretrained"),
                       val_before=info.get("val_before"), val_after=info.get("val_after"))
        if batch is not None:
            m = self.batch_metrics(*batch)
            row["after"], row["after_q25"] = m["pairwise"], m["pairwise_q25"]
            row["after_tail"] = _rounded({k: v for k, v in m.items() if k != "pairwise"})
        row["trained"] = trained
        self.rounds.append(_rounded(row))
        return trained


def _rounded(row: dict) -> dict:
    """A record's floats to 4 decimals, NaN (no ordered pair) as None, for the adaptation record (strict JSON)."""
    return {k: ((None if v != v else round(v, 4)) if isinstance(v, float) else v) for k, v in row.items()}
