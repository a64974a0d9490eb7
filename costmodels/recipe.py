"""Adapting a pretrained net to a new machine's few measurements without losing what the corpus taught it.

A recipe (``Recipe``, and the named ones ``RECIPES``, in ``recipes.py``: torch-free, for the command line)
is a few choices, each a guard against over-fitting a handful of tasks:

- ``train``: which parameters learn: ``all``, or ``head`` (the scoring MLP and, for PaCM, the program
  branch over PSA's terms), the featurizer-facing encoders kept as pretrained;
- ``lr`` with a linear ``warmup``, for at most ``steps`` gradient steps;
- ``l2sp``: a penalty ``l2sp · Σ (θ − θ_pretrained)²`` toward the pretrained weights (L2-SP);
- early stopping on a within-target validation part never trained on: ``val_fraction`` of the tasks
  (``val_by="task"``, from two tasks on: what is asked of the model is to rank tasks it has not seen) or of
  each task's programs. The guard (``GUARDED``: pairwise accuracy, top-1 and top-5 over the validation part)
  keeps the weights of the best validation pairwise accuracy among the steps that lower none of the guarded
  metrics below the pretrained net's, and the pretrained weights unless some step beats their pairwise
  accuracy by ``min_gain``. So on its validation part an adapted net is never worse than zero-shot by any
  metric it reports; how that carries to tasks it has not seen is a training outcome, which
  ``benchmarks/adapt.py`` measures over splits and seeds.
- ``interpolate``: the adapted weights moved back toward the pretrained ones, ``θ0 + α (θ − θ0)``
  (weight-space ensembling, as WiSE-FT: the tuned net's gains on the target with the pretrained net's
  breadth on tasks it has not seen);
- ``momentum`` (MoA's Siamese rule, applied by ``OnlineAdapter`` between updates, not here).

``fit_lists`` is the loop: ranking lists in (one per task: features and scores), the net adapted in
place. It is plain torch: a few hundred steps over a few hundred records, where a Lightning Trainer costs
more to set up than to run, and a tuning run must not import the training machinery.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from costlab.costmodels.losses import group_lists, lambdarank_loss
from costlab.costmodels.metrics import mean_topk, pairwise_accuracy
from costlab.costmodels.nets import net_inputs
from costlab.costmodels.recipes import recipe
from costlab.costmodels.tensors import concat_features, take_rows, to_tensors
from costlab.datasets.records import scores

GUARDED = ("pairwise", "top1", "top5")  # what the guard keeps from getting worse on the validation part
HEAD_PREFIXES = ("head.", "program_mlp.", "program_skip.", "decoder.", "head_decoders.")


def trainable(net: torch.nn.Module, which: str, head: int = 0) -> list:
    """The parameters a recipe trains; the rest are frozen (``requires_grad`` off). ``head``: the platform head
    being adapted, whose output layer ``last`` is (a net with a decoder per head)."""
    out = []
    last = _last_layer(net, head)
    for name, p in net.named_parameters():
        p.requires_grad_(which == "all" or (which == "head" and name.startswith(HEAD_PREFIXES))
                         or (which == "last" and (name.startswith(last) or name.startswith("program_skip."))))
        if p.requires_grad:
            out.append(p)
    return out


def _last_layer(net: torch.nn.Module, head: int = 0) -> str:
    """The name prefix of the net's output layer (the last Linear module; of the ``head``-th decoder in a net with
    one per head, the others' give the other platforms' scores)."""
    own = f"head_decoders.{head}."
    name = ""
    for n, m in net.named_modules():
        if (isinstance(m, torch.nn.Linear) and not n.startswith("program_skip")
                and (not n.startswith("head_decoders.") or n.startswith(own))):
            name = n
    return name + "."


def split_lists(lists: list, fraction: float, rng, by: str = "program") -> tuple[list, list]:
    """Ranking lists cut into a training and a validation part: ``fraction`` of the tasks (at least one, when
    there are two or more), or of each task's programs (a task of fewer than 4 programs stays whole in
    training)."""
    if by == "task" and len(lists) >= 2:
        order = rng.permutation(len(lists))
        n_val = min(len(lists) - 1, max(1, int(round(fraction * len(lists)))))
        return [lists[i] for i in order[n_val:]], [lists[i] for i in order[:n_val]]
    train, val = [], []
    for feats, score in lists:
        n = len(score)
        n_val = int(round(fraction * n)) if n >= 4 else 0
        if n_val < 2:
            train.append((feats, score))
            continue
        order = rng.permutation(n)
        val.append(take(feats, score, order[:n_val]))
        train.append(take(feats, score, order[n_val:]))
    return train, val


def take(feats: dict, score, idx) -> tuple[dict, np.ndarray]:
    """The records ``idx`` of one ranking list, scored within themselves (best / latency over these records): a
    list cut into training and validation records never labels the training ones by a validation record's latency."""
    part = np.asarray(score, np.float64)[idx]
    best = part.max() if len(part) else 0.0
    return take_rows(feats, idx), (part / best if best > 0 else part)


def ranking_list(feats: dict, latency) -> tuple[dict, np.ndarray] | None:
    """One task's ranking list: its features and scores (best / latency, 0 for a failed program), or None
    when it has fewer than two records or none that ran."""
    lat = np.asarray(latency, np.float64)
    if len(lat) < 2 or not np.isfinite(lat).any():
        return None
    return feats, scores(np.zeros(len(lat), np.int64), lat)


def task_lists(feats: dict, task: np.ndarray, latency: np.ndarray) -> list:
    """The ranking lists of records of several tasks, one per task that has one (``ranking_list``)."""
    out = []
    for t in np.unique(task):
        idx = np.flatnonzero(task == t)
        lst = ranking_list(take_rows(feats, idx), latency[idx])
        if lst is not None:
            out.append(lst)
    return out


def scores_of(net, kind: str, feats: dict, head: int = 0, batch: int = 512) -> np.ndarray:
    device = next(net.parameters()).device
    n = len(next(iter(feats.values())))
    out = []
    with torch.no_grad():
        for s in range(0, n, batch):
            part = {k: (v[s:s + batch]) for k, v in feats.items()}
            t = {k: v.to(device) for k, v in to_tensors(part).items()}
            y = net(*net_inputs(kind, t))
            out.append((y if y.dim() == 1 else y[:, head]).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def list_metrics(net, kind: str, lists: list, head: int = 0) -> dict:
    """The guarded metrics (``GUARDED``) of the net over ranking lists: pairwise accuracy, and the mean over
    lists of top-1 / top-5 (best latency over the best among the net's k picks)."""
    if not lists:
        return {m: float("nan") for m in GUARDED}
    tasks, preds, lats = [], [], []
    for g, (feats, score) in enumerate(lists):
        preds.append(scores_of(net, kind, feats, head))
        lats.append(np.where(score > 0, 1.0 / np.maximum(score, 1e-30), np.inf))
        tasks.append(np.full(len(score), g))
    task, pred, lat = np.concatenate(tasks), np.concatenate(preds), np.concatenate(lats)
    return {"pairwise": float(pairwise_accuracy(task, pred, lat)), "top1": mean_topk(task, pred, lat, 1),
            "top5": mean_topk(task, pred, lat, 5)}


def lowers_a_guarded_metric(after: dict, before: dict) -> bool:
    """Whether any guarded metric (``GUARDED``) is lower ``after`` than ``before``; a metric that is NaN before
    (nothing to rank) guards nothing."""
    return any(after[m] < before[m] for m in GUARDED if np.isfinite(before[m]))


def guard_accepts(before: dict, candidate: dict, best: dict, min_gain: float = 0.0) -> bool:
    """Whether the guard keeps a candidate's weights over the best kept so far: its validation pairwise accuracy
    beats the best's (and the pretrained net's by ``min_gain``), and no guarded metric is below the pretrained
    net's (``before``)."""
    if not candidate["pairwise"] > max(best["pairwise"], before["pairwise"] + min_gain):
        return False
    return not lowers_a_guarded_metric(candidate, before)


def _batch(lists: list, size: int, rng) -> tuple[dict, np.ndarray, np.ndarray]:
    feats, labels, groups = [], [], []
    for g, (f, score) in enumerate(lists):
        rows = rng.permutation(len(score))[:size]
        feats.append(take_rows(f, rows))
        labels.append(score[rows])
        groups.append(np.full(len(rows), g))
    return concat_features(feats), np.concatenate(labels), np.concatenate(groups)


def fit_lists(net: torch.nn.Module, kind: str, lists: list, spec="safe", head: int = 0, seed: int = 0,
              val_lists: list | None = None) -> dict:
    """Adapt ``net`` in place to ranking lists ``[(features, scores), ...]`` (one per task, scores = best /
    latency, 0 for a failed program) by the recipe; returns what happened (steps, validation before and after,
    whether the pretrained weights were kept). ``val_lists`` overrides the recipe's own validation cut."""
    r = recipe(spec)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    lists = [(f, np.asarray(s, np.float64)) for f, s in lists if len(s) >= 2 and np.any(np.asarray(s) > 0)]
    if val_lists is None:
        train_lists, val_lists = split_lists(lists, r.val_fraction, rng, r.val_by) if r.val_fraction > 0 else (lists, [])
    else:
        train_lists = lists
    info = dict(recipe=r.name, steps=0, train_records=int(sum(len(s) for _, s in train_lists)),
                val_records=int(sum(len(s) for _, s in val_lists)), kept_pretrained=False)
    if not train_lists or r.steps == 0:
        info["kept_pretrained"] = True
        return info
    if r.val_fraction > 0 and not val_lists:  # a guarded recipe whose cut held out nothing it could rank
        info.update(kept_pretrained=True, note="no validation part to guard an update with (too few programs to "
                                               "hold any out): the pretrained weights are kept")
        return info
    device = next(net.parameters()).device
    start = {n: t.detach().clone() for n, t in net.state_dict().items()} if r.interpolate != 1.0 else None
    anchor = {n: p.detach().clone() for n, p in net.named_parameters()} if r.l2sp > 0 else None
    params = trainable(net, r.train, head)
    if not params:  # nothing of this net is what the recipe trains (a net without such layers)
        for p in net.parameters():
            p.requires_grad_(True)
        info.update(kept_pretrained=True, note=f"no parameter to train with train={r.train!r}")
        return info
    opt = torch.optim.Adam(params, lr=r.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, r.warmup)))
    guard = bool(val_lists)
    pretrained = copy.deepcopy(net.state_dict()) if guard else None
    net.eval()  # validated as it scores (a caller may hand it over in training mode: dropout would lower `before`)
    before = list_metrics(net, kind, val_lists, head) if guard else None
    best, best_state = before, pretrained
    info["val_before"] = before["pairwise"] if guard else None
    info["guarded"] = list(GUARDED) if guard else []
    stale = 0
    per_step = max(1, r.lists_per_step)
    for step in range(r.steps):
        net.train()
        pick = [train_lists[i] for i in rng.permutation(len(train_lists))[:per_step]]
        feats, label, group = _batch(pick, r.list_size, rng)
        t = {k: v.to(device) for k, v in to_tensors(feats).items()}
        out = net(*net_inputs(kind, t))
        pred = out if out.dim() == 1 else out[:, head]
        p, y, m = group_lists(pred, torch.as_tensor(label, dtype=pred.dtype, device=device),
                              torch.as_tensor(group, device=device))
        loss = lambdarank_loss(p, y, m)
        if anchor is not None:
            loss = loss + r.l2sp * sum(((q - anchor[n]) ** 2).sum() for n, q in net.named_parameters() if q.requires_grad)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        sched.step()
        info["steps"] = step + 1
        if guard and (step + 1) % r.eval_every == 0:
            net.eval()
            now = list_metrics(net, kind, val_lists, head)
            if guard_accepts(before, now, best, r.min_gain):
                best, best_state, stale = now, copy.deepcopy(net.state_dict()), 0
                info["best_step"] = step + 1
            else:
                stale += 1
                if stale >= r.patience:
                    break
    for p in net.parameters():
        p.requires_grad_(True)
    if guard:
        net.load_state_dict(best_state)
        info["kept_pretrained"] = "best_step" not in info
    if start is not None:
        with torch.no_grad():
            for n, t in net.state_dict().items():
                if t.dtype.is_floating_point:
                    t.copy_(start[n] + r.interpolate * (t - start[n]))
    if guard:
        net.eval()
        after = list_metrics(net, kind, val_lists, head)
        if lowers_a_guarded_metric(after, before):  # interpolation lost ground
            net.load_state_dict(pretrained)
            info["kept_pretrained"] = True
            after = before
        info.update(val_after=after["pairwise"], val_metrics_before=before, val_metrics_after=after)
    net.eval()
    return info
