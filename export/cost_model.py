"""A costlab model as a MetaSchedule cost model: pass it wherever MetaSchedule takes one (``tune_tir``,
``tune_tasks``, Relax tuning) with no other change to a tuning script.

``predict`` featurizes the live candidates with the model's own featurizer (``featurize_candidates``: the
same features as the dataset's records it trained on), scores them in batches, and returns positive
scores, higher = faster: EvolutionarySearch samples mutation parents in proportion to them and keeps the
best across its generations, so scores of one task must be comparable from call to call. The model's kind
maps its raw scores by a scale fixed per task by the first population it scores
(``kinds.ModelKind.task_scale``): a net's ranking score through a logistic curve (centre and spread of that
population), which keeps the order and the relative weights of one round's calls; PSA's by
``featurizers.psa.TaskScale`` (divided by the best of that population). Programs the model cannot read score 0, below every other. The draft stage of every search
is this cost model of the draft kind (PSA: ``draft_model``).

``update`` collects the measured candidates (in ``costlab tune``, ``callbacks.UpdateAll`` passes a failed build as
a failure, as the database records it; MetaSchedule's own ``UpdateCostModel`` leaves failed builds out; runner errors
arrive with ``run_secs`` None and are kept as failures) and, with ``adapt`` set, adapts the net after every round
(``costmodels.adapt``). ``save`` / ``load`` write and read an artifact directory (weights as adapted).
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import CostModel, PyCostModel

from costlab.common.errors import InputError, UsageError
from costlab.costmodels import kinds, predictors
from costlab.costmodels.adapt import OnlineAdapter
from costlab.costmodels.artifact import replaceable, save_artifact
from costlab.costmodels.predictors import NetPredictor, head_of
from costlab.costmodels.recipes import ADAPT_MODES, adapts
from costlab.datasets.records import record_latency
from costlab.export.search.common import task_records
from costlab.metaschedule import intrinsics


def tuning_predictor(model, seed: int = 0):
    """The predictor of a tuning command's ``--model`` (``tune``, ``exploit``, ``transfer``, the library a run
    starts from): a kind that needs no weights by its name (psa, random), a shipped model's name, a model
    directory or archive, or a training run's directory, every check of the artifact done
    (``costmodels.predictors.load``). A training checkpoint
    (``.ckpt``) is not a model here: it is refused, naming the run directory to give or export instead.
    (``costlab evaluate`` and ``finetune`` also take checkpoints: ``train.predict.load_predictor``.)

    costlab's nets (TLP, PaCM, multi-task) score and adapt on the CPU, also on a GPU machine: a round's few
    hundred programs are cheap to score there, and the GPU is what the run measures on. On an H200 lease a run's
    first online update, its net on the GPU, took 5.6-7.6 s (the CUDA libraries' start) and its later ones
    0.5-0.9 s. (The MLP baseline is MetaSchedule's trainer, which places itself; a registered kind, its own.)"""
    return predictors.load(str(model), seed, device="cpu")


# what a model's config says was measured of its weights (evaluate's figures, the held-out splits' figures)
FIGURES = ("evaluation", "held_out")


def check_model_for_target(predictor, target, strict: bool = False, where="model") -> None:
    """A model scores MetaSchedule candidates for a target: refuses an Ansor-dialect model, warns (refuses
    with ``strict``) when the target's kind is not one the model was trained for."""
    config = predictor.config or {}
    dialects = config.get("dialects")
    if dialects and "ms" not in dialects:
        raise InputError(where, f"this model learned {'/'.join(dialects)} schedules (Ansor step lists), not "
                                "MetaSchedule traces: it cannot score MetaSchedule candidates")
    kinds = sorted({str(t.get("kind")) for t in (config.get("targets") or {}).values() if isinstance(t, dict)})
    kind = str(target.kind.name if hasattr(target, "kind") else dict(target).get("kind"))
    if kinds and kind not in kinds:
        msg = f"the model was trained for {'/'.join(kinds)} targets, not {kind}"
        if strict:
            raise InputError(where, msg + " (refused with --strict)")
        warnings.warn(msg, stacklevel=2)


def _latency(result) -> float:
    """A runner result's latency: ``record_latency`` of its ``run_secs``, ``inf`` when it reports an error."""
    return math.inf if result.error_msg is not None else record_latency(getattr(result, "run_secs", None))


def task_scale(predictor, raw: np.ndarray):
    """The fixed map of one task's raw scores (its first population's) to MetaSchedule scores: the predictor's
    kind's (``kinds.ModelKind.task_scale``; a logistic curve for a predictor of no registered kind)."""
    kind = kinds.find(getattr(predictor, "kind", None)) or kinds.ModelKind()
    return kind.task_scale(raw)


@derived_object
class CostlabCostModel(PyCostModel):
    """A costlab model (artifact path, shipped name, the name of a kind that needs no weights, or a loaded
    predictor; by default the draft kind, PSA) as a MetaSchedule ``CostModel``.

    ``head`` picks the platform head of a multi-platform model (default: the first); ``adapt`` is
    ``none``, ``finetune`` or ``momentum`` (online adaptation); ``strict`` refuses a target kind the model
    was not trained for instead of warning; ``memo=False`` scores every candidate afresh (the draft stage:
    fresh samples, and no structural hash per candidate)."""

    MEMO_SIZE = 200_000  # remembered scores per task before the memo starts afresh
    MEMO_TOTAL = 1_000_000  # remembered scores of all tasks together (about 100 MB) before every memo starts afresh

    def __init__(self, model=None, head: str | None = None, adapt: str = "none", strict: bool = False,
                 batch_size: int = 1024, seed: int = 0, adapt_options: dict | None = None, memo: bool = True):
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UsageError(f"batch_size must be a positive integer, not {batch_size!r}")
        self.strict, self.batch_size, self.memo = strict, batch_size, memo
        self._options = dict(head=head, adapt=adapt, seed=seed, adapt_options=adapt_options)
        self._use(kinds.draft() if model is None else model)
        self.stats = dict(calls=0, candidates=0, cached=0, featurize_s=0.0, predict_s=0.0)

    def _use(self, model) -> None:
        """Score with ``model`` (a name, path or predictor) from now on: its head, a fresh online adapter of it,
        and nothing remembered of the model before (scores, scales, targets checked)."""
        head, adapt, seed = self._options["head"], self._options["adapt"], self._options["seed"]
        if isinstance(model, CostModel):  # a MetaSchedule cost model (this one too) has a predict, of other arguments
            raise UsageError(f"model: {type(model).__name__} is a MetaSchedule cost model already: pass it to "
                             "MetaSchedule as it is, or give a costlab model's name or path, or a predictor "
                             "(costlab.costmodels.predictors.load)")
        predictor = model if hasattr(model, "predict") else tuning_predictor(model, seed)
        source = str(model) if not hasattr(model, "predict") else getattr(model, "kind", "model")
        platforms = predictor.platforms
        if head is not None and platforms and head not in platforms:
            raise UsageError(f"model {source}: no head for platform {head!r} (heads: {', '.join(platforms)})")
        adapter = None
        if adapt not in ADAPT_MODES:  # before asking whether the model can adapt: a name that is no mode says so
            raise UsageError(f"adapt must be one of {', '.join(ADAPT_MODES)}, not {adapt!r}")
        if adapts(adapt):
            if not isinstance(predictor, NetPredictor):
                raise UsageError(f"online adaptation needs a learned net; {predictor.kind} cannot adapt")
            adapter = OnlineAdapter(predictor, adapt, head=head_of(predictor, head), seed=seed,
                                    **(self._options["adapt_options"] or {}))
        self.predictor, self.source, self.head, self.adapter = predictor, source, head_of(predictor, head), adapter
        self._scales: dict = {}
        self._memo: dict = {}  # per task: program hash -> raw score, while the model is unchanged
        self._checked: set = set()

    # -- scoring -------------------------------------------------------------------------------------------
    def raw_scores(self, context, candidates) -> np.ndarray:
        """The model's own scores of candidates of one task (higher = faster; invalid programs -inf).

        Scores are remembered per program (structural hash) until the model changes (unless ``memo`` is off):
        an evolutionary search scores its survivors again in every generation, and the model's featurizer is
        the cost."""
        import tvm_ffi

        target = context.target
        key = id(target)
        if key not in self._checked:
            check_model_for_target(self.predictor, target, self.strict, self.source)
            self._checked.add(key)
        if isinstance(self.predictor, NetPredictor):
            self.predictor.use_target(target)  # a hardware input reads the machine tuning now
        per_call = getattr(kinds.find(getattr(self.predictor, "kind", None)), "scores_per_call", False)
        if self.memo and not per_call:  # a kind that scales by each call's batch (the MLP) is scored whole per call
            memo = self._memo.setdefault(_task_key(context), {})
            if len(memo) > self.MEMO_SIZE:
                memo.clear()
            elif sum(map(len, self._memo.values())) > self.MEMO_TOTAL:  # a network's many tasks, a long run
                self._memo.clear()
                memo = self._memo.setdefault(_task_key(context), {})
            hashes = [int(tvm_ffi.structural_hash(c.sch.mod)) for c in candidates]
        else:  # every candidate scored afresh: a memo of this call alone, keyed by position
            memo, hashes = {}, list(range(len(candidates)))
        out = np.array([memo.get(h, np.nan) for h in hashes], np.float64)
        todo = [i for i, h in enumerate(hashes) if h not in memo]
        t0 = time.perf_counter()
        if todo:
            feats = self.predictor.featurizer.featurize_candidates(context.mod, target, [candidates[i].sch for i in todo])
            t1 = time.perf_counter()
            scores = (self.predictor.predict(feats, batch_size=self.batch_size) if isinstance(self.predictor, NetPredictor)
                      else self.predictor.predict(feats))
            new = scores[:, self.head].astype(np.float64)
            valid = np.asarray(feats.get("valid", np.ones(len(new), bool)), bool)
            new[~valid] = -np.inf
            for i, v in zip(todo, new):
                out[i] = memo[hashes[i]] = v
            self.stats["featurize_s"] += t1 - t0
            self.stats["predict_s"] += time.perf_counter() - t1
        self.stats["calls"] += 1
        self.stats["candidates"] += len(todo)
        self.stats["cached"] += len(candidates) - len(todo)
        return out

    def predict(self, context, candidates) -> np.ndarray:
        if not len(candidates):
            return np.zeros(0, np.float64)
        raw = self.raw_scores(context, candidates)
        task = _task_key(context)
        if task not in self._scales:
            self._scales[task] = task_scale(self.predictor, raw)
        return np.asarray(self._scales[task](raw), np.float64)

    # -- online adaptation ------------------------------------------------------------------------------------
    def update(self, context, candidates, results) -> None:
        if self.adapter is None or not len(candidates):
            return
        feats = self.predictor.featurizer.featurize_candidates(context.mod, context.target,
                                                               [c.sch for c in candidates])
        self.predictor.use_target(context.target)  # the adapter trains on the vector the net scores with
        latency = [_latency(r) for r in results]
        self.adapter.add(_task_key(context), feats, latency)
        if self.adapter.update((feats, latency)):
            self._memo.clear()
            self._scales.clear()  # the net changed: each task's map is set again from its next population

    def remember(self, context, database) -> int:
        """A continued run: the task's records already in ``database`` (failed ones as failures) join what the
        online adapter trains on, so that its updates rank "the run's records so far", not only this process's.
        Returns how many records were added (0 without an adapter)."""
        if self.adapter is None:
            return 0
        records = list(task_records(context, database))
        if not records:
            return 0
        schedules, latency = [sch for _rec, sch in records], [record_latency(rec.run_secs) for rec, _sch in records]
        feats = self.predictor.featurizer.featurize_candidates(context.mod, context.target, schedules)
        self.predictor.use_target(context.target)
        self.adapter.add(_task_key(context), feats, latency)
        return len(schedules)

    # -- persistence -----------------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the model, with its weights as adapted so far, as an artifact directory."""
        if not isinstance(self.predictor, NetPredictor):
            raise UsageError(f"only learned nets are saved by the cost model; {self.predictor.kind} has no weights")
        if Path(path).exists() and not replaceable(path):  # another tool's files (a config.json) are never replaced
            raise UsageError(f"{path}: exists and is not a costlab model directory; save the model to a new "
                             "directory, or to a model directory it may replace")
        # a model adapted before it was loaded keeps that record (and the figures of the weights before it): without
        # an adapter as it was, beside this adapter's own stats as ``earlier``
        earlier = self.predictor.config.get("adapted")
        adapted = dict(self.adapter.stats) if self.adapter else earlier
        if self.adapter and earlier:
            adapted["earlier"] = earlier
        config = dict(self.predictor.config, adapted=adapted)
        config.pop("weights_sha256", None)
        if self.adapter and self.adapter.stats.get("trained"):  # weights that learned this costlab's features
            config["featurizer"] = self.predictor.featurizer.to_json()
            # the figures measured of the weights before the adaptation are theirs, not these weights': kept as such
            before = {k: config.pop(k) for k in FIGURES if config.get(k) is not None}
            if before:
                config["adapted"] = dict(config["adapted"], figures_before=before)
        save_artifact(Path(path), self.predictor.net.state_dict(), config)

    def load(self, path: str) -> None:
        """Score with the model at ``path`` from now on, with this cost model's head and adaptation (both
        checked against it, as when it was made)."""
        self._use(path)


def _direct(name: str):
    """``CostlabCostModel``'s own ``name`` for a Python caller, without TVM's FFI in between: its errors keep their
    type (through the FFI a UsageError came back as TVM's RuntimeError, under FFI frames). MetaSchedule's C++ side
    calls the method as before."""

    def method(self, *args, **kwargs):
        return getattr(self._inst, name)(*args, **kwargs)

    method.__name__, method.__doc__ = name, getattr(CostlabCostModel._cls, name).__doc__
    return method


for _name in ("save", "load"):  # what users call themselves; predict and update are MetaSchedule's to call
    setattr(CostlabCostModel, _name, _direct(_name))


def _task_key(context) -> int:
    import tvm_ffi

    return int(tvm_ffi.structural_hash(context.mod))


def load(model=None, **options) -> CostlabCostModel:
    """``costlab.export.load(MODEL)``: a MetaSchedule cost model of a costlab model (see ``CostlabCostModel``; by
    default the draft kind, PSA), for MetaSchedule's own tuning (``tune_tir``, ``tune_tasks``, ``tune_relax``).
    Their ``TuneContext`` imports TVM's tensor-intrinsic registry first thing, an import that is slow in a
    process holding many modules (torch's): ``load`` makes it fast in this process
    (``intrinsics.frozen_frames_resolved``), at no cost of its own."""
    intrinsics.frozen_frames_resolved()
    return CostlabCostModel(model, **options)


def draft_model() -> CostlabCostModel:
    """The draft stage of every costlab search: the registry's draft kind (PSA) as a cost model, scaled per task
    as its kind says (divided by the best of the task's first population), every candidate scored afresh."""
    return CostlabCostModel(kinds.draft(), memo=False)
