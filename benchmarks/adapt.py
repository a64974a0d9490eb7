"""Adapting a pretrained model to a new machine with few measurements, side by side on one dataset.

For each split (tasks shuffled by seed; ``--held-out`` tasks held out, the others a pool) and each k, the
target records of the pool's first k tasks are what the new machine has measured. Held-out top-1 / top-5 /
pairwise (per task, unweighted) for:

  zero-shot      the pretrained model as shipped
  <recipe>       the pretrained model fine-tuned on the k tasks by each recipe (costmodels/recipe.py)
  xgb, mlp       MetaSchedule's XGBoost and SegmentSum MLP trained on the same k tasks alone (the MLP
                 needs 2 tasks: it validates on a held-out one)
  psa            the static analyzer, for reference

Targets (issue 23): from k = 4, the default recipe >= max(zero-shot, xgb) + 0.05 top-1; never below
zero-shot at any k. Prints the table per k (means over splits), writes results.json and a plot of top-1
against k; re-run with the same --out, finished (split, k) cells are read back, not recomputed.

    python benchmarks/adapt.py --data zen5.h5 --model x86-cpu --out benchmarks/results/adapt-zen5
    (zen5.h5: costlab dataset import-ms ../shared/data/zen5 -o zen5.h5)
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from costlab.common.errors import UsageError
from costlab.common.files import write_atomically
from costlab.common.host import describe_host, host_info, same_host
from costlab.costmodels import kinds
from costlab.costmodels.predictors import weights_sha256
from costlab.costmodels import metrics
from costlab.costmodels.recipe import fit_lists, scores_of, task_lists
from costlab.costmodels.recipes import FIT_LISTS, RECIPES, names as recipe_names
from costlab.costmodels.tensors import take_rows
from costlab.datasets import open_dataset
from costlab.datasets.records import scores
from costlab.featurizers.cache import features_of
from costlab.train.predict import load_predictor


def _metrics(task, pred, latency) -> dict:
    s = metrics.summary(task, pred, latency, scores(task, latency))
    return {k: round(float(s[k]), 4) for k in ("top1", "top5", "pairwise")}


def _baseline(kind: str, feats, task, latency, train_idx, test_idx, seed: int):
    """A baseline kind of the registry (MetaSchedule's XGBoost or SegmentSum MLP) fitted on train_idx (per-store
    features), its scores of test_idx; None when the kind cannot fit these tasks (the MLP needs two)."""
    import random

    import torch

    from costlab.costmodels.baselines import FEATURE, score_stores

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    ok = [i for i in train_idx if len(feats[FEATURE][i])]
    xs = [np.asarray(feats[FEATURE][i], np.float32) for i in ok]
    lat = np.asarray(latency, np.float64)[ok]
    cost = np.where(np.isfinite(lat), lat, 1e10).astype(np.float32)
    _, t = np.unique(np.asarray(task)[ok], return_inverse=True)
    baseline = kinds.create(kind)
    try:
        tensors = baseline.fit(xs, t, cost, epochs=50)
    except UsageError:
        return None
    return score_stores(baseline.scorer(tensors, kind), take_rows(feats, test_idx))


def run_cell(pred0, feats, psa_scores, task, latency, held, train_tasks, recipes, seed: int) -> dict:
    test_idx = np.flatnonzero(np.isin(task, held))
    train_idx = np.flatnonzero(np.isin(task, train_tasks))
    tt, tl = task[test_idx], latency[test_idx]
    kind = pred0.kind
    head = 0
    row = {"zero-shot": _metrics(tt, scores_of(pred0.net, kind, take_rows(feats, test_idx), head), tl),
           "psa": _metrics(tt, psa_scores[test_idx], tl)}
    lists = task_lists(take_rows(feats, train_idx), task[train_idx], latency[train_idx])
    for name in recipes:
        net = copy.deepcopy(pred0.net)
        t0 = time.perf_counter()
        info = fit_lists(net, kind, lists, name, head=head, seed=seed)
        row[name] = dict(_metrics(tt, scores_of(net, kind, take_rows(feats, test_idx), head), tl),
                         seconds=round(time.perf_counter() - t0, 2), steps=info["steps"],
                         kept_pretrained=info["kept_pretrained"])
    for kind_b in kinds.baselines():
        s = _baseline(kind_b, feats, task, latency, train_idx, test_idx, seed)
        row[kind_b] = _metrics(tt, s, tl) if s is not None else None
    return row


def summarise(cells: dict, ks: list, arms: list) -> dict:
    """Per k and arm: mean top-1 / top-5 / pairwise over the splits that have it."""
    out = {}
    for k in ks:
        rows = [c for key, c in cells.items() if key.endswith(f"/k{k}")]
        out[k] = {}
        for arm in arms:
            vals = [r[arm] for r in rows if r.get(arm)]
            if vals:
                out[k][arm] = {m: round(float(np.mean([v[m] for v in vals])), 4) for m in ("top1", "top5", "pairwise")}
                out[k][arm]["splits"] = len(vals)
    return out


def plot(summary: dict, arms: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    ks = sorted(int(k) for k in summary)
    for arm in arms:
        xs = [k for k in ks if arm in summary[k] or arm in summary.get(str(k), {})]
        ys = [(summary.get(k) or summary[str(k)])[arm]["top1"] for k in xs]
        if xs:
            ax.plot(xs, ys, marker="o", label=arm, linestyle="--" if arm in ("zero-shot", "psa") else "-")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("target tasks measured (k)")
    ax.set_ylabel("held-out top-1 (mean over splits)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the new machine's dataset (one platform)")
    p.add_argument("--platform")
    p.add_argument("--model", default="x86-cpu", help="the pretrained model (default: the shipped x86-cpu)")
    p.add_argument("--k", default="1,2,4,8,16", help="target tasks measured (comma-separated)")
    p.add_argument("--splits", type=int, default=3)
    p.add_argument("--held-out", type=int, default=7, help="tasks held out per split")
    lists = recipe_names(FIT_LISTS)  # the recipes fit_lists applies (not costlab train's trainer)
    p.add_argument("--recipes", default=",".join(lists), help=f"recipes to compare (of {', '.join(lists)})")
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    ks = [int(x) for x in a.k.split(",")]
    recipes = [x for x in a.recipes.split(",") if x]
    a.out.mkdir(parents=True, exist_ok=True)
    results = a.out / "results.json"
    state = json.loads(results.read_text()) if results.exists() else {}
    host = host_info()
    state.setdefault("cells", {})
    # a cell's seconds are this machine's: cells of another host are not continued (a file written before the
    # host record was kept whole holds its description only)
    old_host = state.get("host_info") or state.get("host")
    if state["cells"] and old_host is not None and not (
            same_host(old_host, host) if isinstance(old_host, dict) else old_host == describe_host(host)):
        raise SystemExit(f"{results} holds cells of another host ({state['host']}, this one is "
                         f"{describe_host(host)}): use another --out")
    state.setdefault("host", describe_host(host))
    state.setdefault("host_info", host)
    mine = dict(model_sha256=weights_sha256(a.model), held_out=a.held_out,
                recipes={r: RECIPES[r].to_dict() for r in recipes})
    # cells of another model, held-out count or recipe settings are not cells of this table: a resumed run
    # continues only its own (the data is checked below, once its records are read)
    for key in ("model_sha256", "held_out"):
        if state.get(key) is not None and state["cells"] and state[key] != mine[key]:
            raise SystemExit(f"{results} holds cells of another {key} ({state[key]}, not {mine[key]}): use another "
                             "--out")
    changed = [r for r in recipes if r in state.get("recipes", {}) and state["recipes"][r] != mine["recipes"][r]]
    if changed and state["cells"]:
        raise SystemExit(f"{results} holds cells of recipe(s) {', '.join(changed)} under other settings: use another "
                         "--out")
    state.update(model=a.model, model_sha256=mine["model_sha256"], data=str(a.data), held_out=a.held_out,
                 recipes={**state.get("recipes", {}), **mine["recipes"]})

    pred0 = load_predictor(a.model)
    psa = load_predictor("psa")
    with open_dataset(a.data) as ds:
        platform = a.platform or ds.record_platforms()[0]
        table = ds.records(platform)
        rows = np.arange(len(table))
        task = table.task.astype(np.int64)
        latency = table.latency()
        pred0.use_platform(ds.platforms[platform])  # a hardware input reads the platform's spec
        feats = pred0.with_hardware(features_of(ds, pred0.featurizer, platform, rows))
        psa_scores = psa.predict(features_of(ds, psa.featurizer, platform, rows))[:, 0]
        n_records = len(table)
    t_ids, counts = np.unique(task, return_counts=True)
    tasks = t_ids[counts >= 2]
    # what identifies the data whatever file holds it: the records' tasks, latencies and schedules, hashed
    digest = hashlib.sha256(task.tobytes() + np.nan_to_num(latency, posinf=-1.0).tobytes()).hexdigest()
    if state.get("data_records_sha256") not in (None, digest) and state["cells"]:
        raise SystemExit(f"{results} holds cells of other records (data_records_sha256 differs): use another --out")
    state.update(platform=platform, records=int(n_records), data_records_sha256=digest)
    print(f"{a.data} {platform}: {n_records} records, {len(tasks)} tasks; host {state['host']}", file=sys.stderr)
    for s in range(a.splits):
        perm = np.random.default_rng(s).permutation(tasks)
        held, pool = perm[: a.held_out], perm[a.held_out:]
        for k in ks:
            key = f"s{s}/k{k}"
            done = state["cells"].get(key)
            todo = [r for r in recipes if r not in done] if done else recipes  # a recipe added since: its cells
            if k > len(pool) or (done and not todo):
                continue
            t0 = time.perf_counter()
            cell = run_cell(pred0, feats, psa_scores, task, latency, held, pool[:k], todo, s)
            if done:  # the cell's other arms as they were computed, the added recipes beside them
                cell = {**done, **{r: cell[r] for r in todo}}
            else:
                cell["seconds"] = round(time.perf_counter() - t0, 1)
            state["cells"][key] = cell
            write_atomically(results, json.dumps(state, indent=1).encode())
            print(f"  {key}: " + "  ".join(f"{arm} {v['top1']:.3f}" for arm, v in state["cells"][key].items()
                                            if isinstance(v, dict)), file=sys.stderr, flush=True)
    arms = ["zero-shot", *recipes, *kinds.baselines(), "psa"]
    state["summary"] = summarise(state["cells"], ks, arms)
    write_atomically(results, json.dumps(state, indent=1).encode())
    plot(state["summary"], arms, a.out / "top1_vs_k.png")
    print(f"\nheld-out top-1 / pairwise, mean over splits ({a.model} on {platform}; host {state['host']})")
    print("k    " + "".join(f"{arm:>16}" for arm in arms))
    for k in ks:
        cells = state["summary"].get(k, {})
        print(f"{k:<5}" + "".join(f"{cells[arm]['top1']:>8.3f}/{cells[arm]['pairwise']:.3f}" if arm in cells
                                  else f"{'-':>16}" for arm in arms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
