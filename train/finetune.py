"""``costlab finetune`` by a recipe (``costmodels/recipe.py``): a pretrained model adapted to a platform's
records, safe with the few a new machine has measured.

    RUN_DIR/model/         the adapted net (config.json + model.safetensors), kind and featurizer unchanged
    RUN_DIR/summary.json   the recipe, records used, validation pairwise before / after, whether the
                           pretrained weights were kept

The records are the split's training part (all records without a split), grouped per task into ranking
lists; the model's own featurizer (config and vocabulary) turns them into features, as at inference.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

from costlab.common import jsontext
from costlab.common.errors import UsageError
from costlab.common.files import write_atomically
from costlab.costmodels import kinds
from costlab.costmodels.artifact import save_artifact
from costlab.costmodels.predictors import NetPredictor, head_of, pinned_name, resolve
from costlab.costmodels.recipe import fit_lists, task_lists
from costlab.costmodels.recipes import DEFAULT, recipe
from costlab.costmodels.tensors import take_rows
from costlab.datasets import open_dataset
from costlab.datasets.summary import dataset_tasks
from costlab.featurizers.cache import features_of
from costlab.train.evaluate import checkpoint_lineage, lineage_of, select_rows
from costlab.train.predict import load_predictor
from costlab.train.run_dir import run_dir


def finetune(source, data, platform: str, out, spec=DEFAULT, split: str | None = None, seed: int = 0) -> dict:
    r = recipe(spec)
    pred = load_predictor(source)
    if not isinstance(pred, NetPredictor):
        raise UsageError(f"{source}: a {pred.kind} model has no net to fine-tune (fine-tune a "
                         f"{kinds.spoken(kinds.learned())} model)")
    if len(pred.platforms) > 1 and platform not in pred.platforms:  # before its records are featurized
        raise UsageError(f"{source}: a model of several heads ({', '.join(pred.platforms)}) has none for {platform!r}; "
                         "fine-tune a single-platform model, or give one of its platforms")
    with open_dataset(data) as ds:
        if platform not in ds.record_platforms():
            raise UsageError(f"{data}: no records of platform {platform!r} (platforms: "
                             f"{', '.join(ds.record_platforms()) or 'none'})")
        rows = select_rows(ds, platform, split, "train")
        table = ds.records(platform)
        task = table.task[rows].astype(np.int64)
        latency = table.latency()[rows]
        pred.use_platform(ds.platforms[platform])  # a hardware input reads the platform's spec
        feats = pred.with_hardware(features_of(ds, pred.featurizer, platform, rows))
        dialects = sorted({ds.tasks[int(t)].dialect for t in np.unique(task)})
        target = ds.platforms[platform].target
        digest = ds.split(split).digest if split else None
        tasks = dataset_tasks(ds)
    readable = np.asarray(feats.get("valid", np.ones(len(rows), bool)), bool)
    if len(rows) and not readable.any():  # a net fitted on empty features would be written as a model
        raise UsageError(f"{data}: the {pred.featurizer.name} featurizer of {source} could read none of the "
                         f"{len(rows)} training records of {platform!r} (`costlab featurize` counts them as "
                         "unreadable): nothing to fine-tune on")
    if not readable.all():  # empty features teach the net nothing true of a program: left out, as training does
        print(f"costlab: note: {len(rows) - int(readable.sum())} of the {len(rows)} training records have no "
              f"{pred.featurizer.name} features (unreadable by the featurizer); they are left out of fine-tuning",
              file=sys.stderr)
        keep = np.flatnonzero(readable)
        feats, task, latency = take_rows(feats, keep), task[keep], latency[keep]
    lists = task_lists(feats, task, latency)
    if not lists:
        raise UsageError(f"{data}: platform {platform!r} has no task with two measured records"
                         + (f" in the training part of split {split!r}" if split else "") + ": nothing to rank")
    head = head_of(pred, platform)
    t0 = time.perf_counter()
    info = fit_lists(pred.net, pred.kind, lists, r, head=head, seed=seed)
    out = run_dir(out)
    summary = dict(model=pred.kind, finetuned_from=pinned_name(str(source)),  # a shipped alias as its version
                   platform=platform, recipe=r.to_dict(),
                   tasks=len(lists), records=int(sum(len(s) for _, s in lists)), wall_seconds=time.perf_counter() - t0,
                   **{k: v for k, v in info.items() if k != "recipe"})
    config = {k: v for k, v in pred.config.items() if k not in ("weights_sha256", "config_sha256")}
    targets = dict(config.get("targets") or {}) if len(pred.platforms) > 1 else {}
    targets[platform] = target
    # the splits of every training before this one: evaluate tells which evaluated records they trained on (a
    # checkpoint's are its run's)
    source_path = resolve(source)
    lineage = checkpoint_lineage(source_path) if source_path.suffix == ".ckpt" else lineage_of(config)
    config.update(training=summary, split=split, split_digest=digest, dataset=os.path.abspath(data),
                  dataset_tasks=tasks, dialects=dialects, targets=targets)
    if not info.get("kept_pretrained"):  # weights that learned this costlab's features (their revision)
        config["featurizer"] = pred.featurizer.to_json()
    if lineage:
        config["lineage"] = lineage
    if len(pred.platforms) <= 1:
        config["platforms"] = [platform]  # one head: it now scores the target platform
    save_artifact(Path(out) / "model", pred.net.state_dict(), config)
    write_atomically(Path(out) / "summary.json", jsontext.dumps(summary, indent=2).encode())
    return summary
