"""Evaluation of any predictor on a dataset split, with the same metrics for every model and baseline.

Per held-out network: TenSet's weighted top-k score (k = 1, 5); without networks, per-task top-k
unweighted; pairwise ranking accuracy and NDCG over the evaluated records.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import yaml

from costlab.common.errors import UsageError
from costlab.costmodels import kinds, metrics
from costlab.costmodels.artifact import read_config
from costlab.datasets import open_dataset
from costlab.datasets.records import scores
from costlab.datasets.summary import dataset_tasks, tasks_sha256
from costlab.featurizers.cache import features_of
from costlab.featurizers.psa.hardware import spec_for
from costlab.costmodels.predictors import head_count, head_of
from costlab.train.predict import load_predictor

def check_training_split(ds, meta: dict, split: str | None) -> None:
    """Refuse to evaluate a model on a split stored under its training split's name but holding out other
    tasks or programs than when it trained: its "test" records would include its training records."""
    if split is None or split != meta.get("split") or not meta.get("split_digest"):
        return
    stored = ds.split(split)
    if stored.digest != meta["split_digest"]:
        raise UsageError(
            f"{ds.path}: split {split!r} was replaced since this model trained on it (it now holds out other "
            f"records: {stored.describe()}); its test part would include the model's training records. "
            "Evaluate on another split, or --split none to score all records")


def lineage_of(config: dict) -> list[dict]:
    """The splits a model (its config) was trained on, earliest first: what a model fine-tuned from it keeps
    (``lineage``) so that ``pretrained_on`` can tell which evaluated records its pretraining saw."""
    lineage = list(config.get("lineage") or [])
    tasks = {"dataset_tasks": config["dataset_tasks"]} if config.get("dataset_tasks") else {}
    if config.get("split") and config.get("split_digest"):
        lineage.append(dict(split=config["split"], split_digest=config["split_digest"], dataset=config.get("dataset"),
                            **tasks))
    elif not config.get("split") and config.get("dataset") and config.get("training"):  # every record of it
        lineage.append(dict(split=None, split_digest=None, dataset=config["dataset"], **tasks))
    out, seen = [], set()
    for step in lineage:  # one entry per split (a model fine-tuned twice on one split names it once)
        key = (step.get("split"), step.get("split_digest"), None if step.get("split") else step.get("dataset"))
        if key not in seen:
            seen.add(key)
            out.append(step)
    return out


def checkpoint_lineage(ckpt: Path) -> list[dict]:
    """The splits the run of a checkpoint (``RUN_DIR/checkpoints/X.ckpt``) trained on, as ``lineage_of`` gives
    them for a model: its model's config where the run wrote one, else its config.yaml's split (its digest read
    from the dataset, where that still holds the split) or every record of its dataset. [] for a checkpoint
    outside a run dir."""
    run = ckpt.parent.parent
    try:
        return lineage_of(read_config(run / "model"))
    except Exception:  # noqa: BLE001  no model written (an interrupted run), or one that does not read
        pass
    try:
        cfg = yaml.safe_load((run / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return []
    if not isinstance(cfg, dict) or not cfg.get("data"):
        return []
    digest, tasks = None, None
    try:
        with open_dataset(cfg["data"]) as ds:
            tasks = dataset_tasks(ds)
            if cfg.get("split"):
                digest = ds.split(cfg["split"]).digest
    except Exception:  # noqa: BLE001  the dataset moved, or its split is gone: nothing to tell it by
        if cfg.get("split"):
            return []
    return lineage_of(dict(split=cfg.get("split"), split_digest=digest, dataset=str(cfg["data"]), training=True,
                           dataset_tasks=tasks))


def pretrained_on(ds, meta: dict, split: str | None, platform: str, rows: np.ndarray) -> list[str]:
    """Notes on evaluated records an earlier training of the model saw: a fine-tuned model keeps the splits its
    pretraining used (``lineage``); one of them stored in this dataset unchanged (its digest), other than the
    evaluated split, whose training part holds some of the evaluated records (its tasks, or programs), or a
    pretraining on every record of this dataset (no split)."""
    notes = []
    for step in meta.get("lineage") or []:
        seen = _seen(ds, step, split, platform, rows)
        if seen:
            notes.append(f"{seen} of the {len(rows)} evaluated records are among those the model was pretrained on "
                         f"before fine-tuning ({_where(ds, step)}): its scores of them are not held-out scores")
    return notes


def trained_on(ds, meta: dict, split: str | None, platform: str, rows: np.ndarray) -> list[str]:
    """The note on evaluated records the model's own training saw, when it is scored on a split's part: another
    split of this dataset than it trained on (stored unchanged), whose test part holds records of its training
    part, or any split where it trained on every record of this dataset. Nothing for a model that names no
    dataset, or when the records scored are all of them (``--split none`` says so)."""
    if split is None or not meta.get("dataset") or not meta.get("training"):
        return []
    step = dict(split=meta.get("split"), split_digest=meta.get("split_digest"), dataset=meta["dataset"],
                dataset_tasks=meta.get("dataset_tasks"))
    seen = _seen(ds, step, split, platform, rows)
    if not seen:
        return []
    return [f"{seen} of the {len(rows)} evaluated records are among those the model trained on ({_where(ds, step)}): "
            "its scores of them are not held-out scores"]


def _where(ds, step: dict) -> str:
    return f"the training part of split {step['split']!r}" if step.get("split") else \
        f"every record of {step.get('dataset') or ds.path}: it trained without a split"


def _seen(ds, step: dict, split: str | None, platform: str, rows: np.ndarray) -> int:
    """How many of the evaluated ``rows`` a training ``step`` (a split of this dataset, stored unchanged and not
    the evaluated one, or every record of this dataset) trained on."""
    tasks = step.get("dataset_tasks")
    if not _same_dataset(step.get("dataset"), ds.path, tasks, ds):
        return 0
    table = ds.records(platform)
    # a dataset grown since (or a copy that holds more): the tasks added after the training are none it saw
    known = (table.task[rows] < tasks["count"] if isinstance(tasks, dict) and isinstance(tasks.get("count"), int)
             else np.ones(len(rows), bool))
    name = step.get("split")
    if not name:
        return int(np.count_nonzero(known)) if step.get("dataset") else 0
    if name not in ds.split_names():
        return 0
    earlier = ds.split(name)
    evaluated = ds.split(split).digest if split else None
    if earlier.digest != step.get("split_digest") or (name == split and earlier.digest == evaluated):
        return 0
    return int(np.count_nonzero(known & ~earlier.is_test(table.task[rows], table.program_id[rows])))


def _same_dataset(recorded, path, tasks=None, ds=None) -> bool:
    """Whether a dataset a model's config names (its path as given then) is the file at ``path``: where the model
    recorded its dataset's tasks (``dataset_tasks``), one whose first tasks are those (a copy of it anywhere, under
    any name); else the same file where it still exists here, else one of the same name (a split's digest holds
    task indices only: another dataset's split of the same name and seed can have the same one)."""
    if isinstance(tasks, dict) and ds is not None and isinstance(tasks.get("count"), int):
        return tasks["count"] <= len(ds.tasks) and tasks_sha256(ds, tasks["count"]) == tasks.get("sha256")
    if not recorded:
        return True
    recorded, path = Path(recorded), Path(path)
    try:
        return os.path.samefile(recorded, path)
    except OSError:
        return recorded.name == path.name


DIALECTS = {"ms": "MetaSchedule", "ansor": "Ansor"}


def mismatches(meta: dict, ds, platform: str, task: np.ndarray) -> list[str]:
    """What differs between the data a model trained on (its config's ``dialects`` and ``targets``) and the
    records it is about to score: schedules of another dialect, or a platform of another target kind (a CPU
    model scoring GPU programs). Such scores are rarely meaningful; the model still scores them, and this
    says so. Models that record neither (checkpoints, the builtin ones) get no warning."""
    out = []
    trained = set(meta.get("dialects") or [])
    here = {ds.tasks[int(t)].dialect for t in np.unique(task)}
    if trained and here and not here <= trained:
        name = lambda ds_: ", ".join(DIALECTS.get(d, d) for d in sorted(ds_))  # noqa: E731
        out.append(f"the model was trained on {name(trained)} schedules; {ds.path} platform {platform!r} holds "
                   f"{name(here - trained)} schedules: its scores of them may mean nothing")
    kinds = {str(t.get("kind")) for t in (meta.get("targets") or {}).values() if isinstance(t, dict)}
    kind = ds.platforms[platform].target.get("kind") if platform in ds.platforms else None
    if kinds and kind and kind not in kinds:
        out.append(f"the model was trained for {', '.join(sorted(kinds))} targets; platform {platform!r} of "
                   f"{ds.path} is a {kind} target: its scores may mean nothing")
    return out


def select_rows(ds, platform: str, split: str | None, part: str) -> np.ndarray:
    table = ds.records(platform)
    n = len(table)
    if split is None or part == "all":
        return np.arange(n)
    s = ds.split(split)
    test = s.is_test(table.checked_task(), table.program_id)  # a damaged file: one error
    if part == "test":
        return np.flatnonzero(test)
    if part == "train":
        return np.flatnonzero(~test)
    raise ValueError(f"part must be test, train or all, not {part!r}")


def _with_records(ds, platforms: list, split: str | None, part: str) -> list:
    """The ``platforms`` with records in the split's part."""
    return [p for p in platforms if len(select_rows(ds, p, split, part))]


def _predict(pred_obj, feats: dict, task: np.ndarray) -> np.ndarray:
    """The predictor's scores of the records. A kind whose scores depend on the rest of the call (``scores_per_call``)
    is asked one task at a time, as a tuning run asks for them."""
    kind = kinds.find(getattr(pred_obj, "kind", None))
    if kind is None or not kind.scores_per_call or not len(task):
        return pred_obj.predict(feats)
    from costlab.costmodels.tensors import take_rows  # lazy: pulls torch, which scoring a baseline need not

    out = None
    for t in np.unique(task):
        idx = np.flatnonzero(task == t)
        scored = pred_obj.predict(take_rows(feats, idx))
        out = np.zeros((len(task), scored.shape[1]), scored.dtype) if out is None else out
        out[idx] = scored
    return out


EVAL_ROWS = 1 << 16  # records whose features are read and scored at once (whole tasks)


def _scores(pred_obj, ds, platform: str, rows: np.ndarray, task: np.ndarray) -> np.ndarray:
    """The predictor's scores of ``rows`` (``task``: their tasks), their features read and scored a few whole tasks at
    a time, about ``EVAL_ROWS`` records, so that memory stays flat in the number of records evaluated (all of them at
    once took ~4 KB a record: gigabytes for a TenSet-size test part)."""
    if len(rows) <= EVAL_ROWS:
        return _predict(pred_obj, features_of(ds, pred_obj.featurizer, platform, rows), task)
    order = np.argsort(task, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(task[order])) + 1)
    out, part, size = None, [], 0
    for i, g in enumerate(groups):
        part.append(g)
        size += len(g)
        if size >= EVAL_ROWS or i == len(groups) - 1:
            idx = np.sort(np.concatenate(part))
            scored = _predict(pred_obj, features_of(ds, pred_obj.featurizer, platform, rows[idx]), task[idx])
            out = np.zeros((len(rows), scored.shape[1]), scored.dtype) if out is None else out
            out[idx] = scored
            part, size = [], 0
    return out


def evaluate(model, data, split: str | None = "auto", part: str = "test", platform: str | None = None,
             head: int | str | None = None, seed: int = 0, baselines: bool = False) -> dict:
    """Metrics of ``model`` (a path, the name of a kind that needs no weights, 'random' / 'psa', or a loaded
    predictor) on a dataset split.

    ``head``: the head that scores (its index, or its platform's id); by default the evaluated platform's own, the
    first for a one-head model, and a model of several heads none of which is the platform's is refused.
    ``split="auto"`` takes the split the model was trained with when the dataset has it, else all records.
    ``baselines``: the scores of the same records by the kinds that need no weights too (PSA's and random's;
    ``_arrays["baselines"]``, for the report's plot): random as ``RANDOM_DRAWS`` seeded draws, so its curve
    is the expected one.
    """
    pred_obj = load_predictor(model, seed) if isinstance(model, str) or hasattr(model, "__fspath__") else model
    with open_dataset(data) as ds:
        platforms = ds.record_platforms()
        meta = pred_obj.config
        if split == "auto":
            trained = meta.get("split")
            split = trained if trained in ds.split_names() else None
            if split is None and part != "all":
                part = "all"
                why = (f"{data} has no split {trained!r} (the model's training split)" if trained else
                       f"{model} records no training split")
                print(f"costlab: note: {why}; scoring all records, training records included", file=sys.stderr)
        if split is None:
            part = "all"
        check_training_split(ds, meta, split)
        if platform is None:
            # the model's own platform, else the dataset's first: one with records in the part where there is one (a
            # kind that names none, psa or random, on a dataset whose first platform has none of the held-out part)
            having = _with_records(ds, platforms, split, part) if split is not None else platforms
            platform = next((p for p in pred_obj.platforms if p in having), None) or next(
                (p for p in pred_obj.platforms if p in platforms), None) or next(iter(having + platforms), None)
        heads = list(pred_obj.platforms)[:head_count(pred_obj)]
        if isinstance(head, str):  # a head by its platform: scores another platform's records zero-shot
            if head not in heads:
                raise UsageError(f"{model}: no head for platform {head!r} (heads: {', '.join(heads) or 'none'})")
            head = heads.index(head)
        elif head is None and len(heads) > 1 and platform not in heads:
            # the first head would score them with nothing said: which one is the user's choice
            raise UsageError(f"{model}: a model of several heads ({', '.join(heads)}) has none for platform "
                             f"{platform!r}; give --head PLATFORM to score its records with one of them")
        rows = select_rows(ds, platform, split, part)
        table = ds.records(platform)
        task = table.task[rows].astype(np.int64)
        latency = table.latency()[rows] if len(rows) else np.zeros(0)
        score = scores(task, latency)
        for warning in mismatches(meta, ds, platform, task):
            print(f"costlab: warning: {warning}", file=sys.stderr)
        seen_before = pretrained_on(ds, meta, split, platform, rows) if part != "all" else []
        trained_before = trained_on(ds, meta, split, platform, rows) if part == "test" else []
        for warning in seen_before + trained_before:
            print(f"costlab: warning: {warning}", file=sys.stderr)
        if hasattr(pred_obj, "use_platform"):  # a net with a hardware input reads the dataset platform's spec
            pred_obj.use_platform(ds.platforms[platform])
        out = _scores(pred_obj, ds, platform, rows, task)
        if head is None:
            head = head_of(pred_obj, platform)
        pred = out[:, head]
        networks = _scored_networks(ds, split, task, latency)
        # TenSet's per-task score: the best of each task is its best among the evaluated records
        result = metrics.summary(task, pred, latency, score, networks=networks)
        result.update(model=str(model) if not hasattr(model, "predict") else getattr(model, "kind", "model"),
                      data=str(data), platform=platform, split=split, part=part, records=int(len(rows)),
                      tasks=result["tasks"], head=head)
        # what the headline top-k is a mean of: the report and the command's line name it
        held = bool(split is not None and ds.split(split).held_out_networks)
        result["topk_over"] = (("held-out networks" if held else "whole networks") if result["networks"] else "tasks")
        if not len(rows):
            having = _with_records(ds, platforms, split, part)
            print(f"costlab: warning: platform {platform!r} of {data} has no records"
                  f"{'' if split is None else f' in split {split!r} ({part} part)'}: every figure is NaN"
                  + (f" (platforms with records there: {', '.join(having)}; give --platform)" if having else ""),
                  file=sys.stderr)
        elif not result["tasks"]:  # records, but no task of two of them one of which ran: nothing is ranked
            failed = int(np.count_nonzero(~np.isfinite(latency)))
            print(f"costlab: warning: none of the {len(rows)} records' tasks on {platform!r} has two records one of "
                  f"which ran ({failed} of them failed, the rest are alone in their tasks): every figure is NaN",
                  file=sys.stderr)
        if meta.get("weights_sha256"):  # which weights were scored: export records a run's report only for them
            result["weights_sha256"] = meta["weights_sha256"]
        if seen_before:
            result["pretrained_on"] = seen_before
        if trained_before:
            result["trained_on"] = trained_before
        if hasattr(pred_obj.featurizer, "spec_for"):  # features that depend on the platform's hardware: whose
            result["hardware_spec"] = pred_obj.featurizer.spec_for(ds.platforms[platform]).name
        elif getattr(pred_obj, "hardware_dim", 0):  # a net fed the platform's hardware vector: whose
            result["hardware_spec"] = spec_for(ds.platforms[platform]).name
        result["_arrays"] = dict(task=task, pred=pred, latency=latency, score=score, networks=networks)
        if baselines:
            result["_arrays"]["baselines"] = _baseline_scores(ds, platform, rows, seed)
    return result


def _scored_networks(ds, split: str | None, task: np.ndarray, latency: np.ndarray) -> dict:
    """The networks the headline top-k weighs (TenSet's score is a whole network's), or {} for the per-task
    mean. Only tasks with a measured program count (a task whose every record failed has no best). A network
    split's held-out networks, each over its tasks with records (one never measured here is skipped); otherwise
    the networks whose every task is evaluated (a task split's partial networks would each weigh as much as a
    whole one). Weighted only when those networks hold every evaluated task: the headline never leaves out a
    test task that no scored network holds."""
    evaluated = set(task[np.isfinite(latency)].tolist())
    held_out = ds.split(split).held_out_networks if split is not None else None
    if held_out:
        networks = {n: ds.networks[n] for n in held_out if any(t in evaluated for t, _ in ds.networks[n])}
    else:
        networks = {n: w for n, w in ds.networks.items() if w and all(t in evaluated for t, _ in w)}
    covered = {t for w in networks.values() for t, _ in w}
    return networks if evaluated and evaluated <= covered else {}


RANDOM_DRAWS = 20  # draws of a kind whose scores are random (``stochastic``): its curve is the expected one


def _baseline_scores(ds, platform: str, rows, seed: int) -> dict:
    """Scores of the same records by each kind that needs no weights (PSA, random; the registry's
    ``kinds.untrained``), by its title: one draw each, ``RANDOM_DRAWS`` of a stochastic kind. A kind whose
    features these records do not have (PSA's analysis of another dialect) is left out, with a note."""
    out = {}
    for name in kinds.untrained():
        kind = kinds.create(name)
        predictor = kind.predictor(seed=seed)
        try:
            feats = features_of(ds, predictor.featurizer, platform, rows)
            valid = np.asarray(feats.get("valid", np.ones(len(rows), bool)), bool)
            if len(rows) and not valid.any():  # a constant score of no record it read: a curve of nothing
                print(f"costlab: note: no {kind.title} curve in the report (its featurizer reads none of the "
                      f"{len(rows)} records: {predictor.featurizer.name} of another schedule dialect)", file=sys.stderr)
                continue
            out[kind.title] = [predictor.predict(feats)[:, 0] for _ in range(RANDOM_DRAWS if kind.stochastic else 1)]
        except Exception as exc:  # records a kind cannot score (another dialect): the report says so
            print(f"costlab: note: no {kind.title} curve in the report "
                  f"({str(exc).strip().splitlines()[-1][:160]})", file=sys.stderr)
    return out
