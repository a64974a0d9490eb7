"""Ranking metrics of a cost model, computed per task and combined: TenSet's weighted top-k score,
pairwise ranking accuracy and NDCG; and the tail metrics tuning depends on: pairwise accuracy and top-1 within
each task's best quarter and best tenth of programs (by measured latency), and the top-k score of the model's
k picks (k = 1, 8, 32) over all of a task's programs.

Inputs are plain arrays over records: ``task`` (group id), ``pred`` (higher = predicted faster) and
``latency`` (measured seconds, ``inf`` for failed programs).

Conventions, stated because they change the numbers:
- Ties in the prediction are broken *against* the model (the slower program first), so a model that
  predicts a constant earns no credit from record order.
- A task whose top-k holds only failed programs is charged its worst valid latency (as if the tuner fell
  back to a bad program), never an infinite one; tasks without any valid program are left out.
- Tasks with fewer than ``MIN_RECORDS`` evaluated records are left out: with one program there is nothing
  to rank, and every model would score 1 on them (TenSet drops tasks with few records for this reason).
"""

from __future__ import annotations

import numpy as np

MIN_RECORDS = 2
TAILS = {"q25": 0.25, "q10": 0.10}  # a task's best quarter and best tenth of valid programs
PICKS = (1, 8, 32)  # the model's k picks whose best is scored against the task's best


def _groups(task: np.ndarray):
    task = np.asarray(task)
    order = np.argsort(task, kind="stable")
    bounds = np.flatnonzero(np.diff(task[order])) + 1
    for rows in np.split(order, bounds):
        if rows.size >= MIN_RECORDS:
            yield int(task[rows[0]]), rows


def _rank(pred: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Indices by prediction, best first; ties broken against the model (slowest first)."""
    lat = np.where(np.isfinite(latency), latency, np.finfo(np.float64).max)
    return np.lexsort((-lat, -np.asarray(pred, np.float64)))


def task_ranks(task: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Each record's prediction as its rank within its task, scaled to [0, 1] (1 = predicted best; ties
    share their mean rank; a NaN prediction is the worst, as ``_rank`` has it): scores of different models made
    comparable for fusing them."""
    pred = np.asarray(pred, np.float64)
    pred = np.where(np.isnan(pred), -np.inf, pred)  # np.unique sorts NaN last: it would rank best
    out = np.zeros(len(pred))
    for _, rows in _groups(task):  # tasks of one record stay 0: nothing to rank
        _, inverse, counts = np.unique(pred[rows], return_inverse=True, return_counts=True)
        first = np.cumsum(counts) - counts  # lowest rank of each distinct value
        out[rows] = (first + (counts - 1) / 2)[inverse] / (rows.size - 1)
    return out


def best_of_top_k(pred, latency, k: int) -> tuple[float, float]:
    """(best latency of the task, best latency among the model's top k) for one task."""
    latency = np.asarray(latency, np.float64)
    valid = latency[np.isfinite(latency)]
    if valid.size == 0:
        return np.inf, np.inf
    picked = latency[_rank(pred, latency)[:k]]
    picked = picked[np.isfinite(picked)]
    return float(valid.min()), float(picked.min()) if picked.size else float(valid.max())


def topk_scores(task, pred, latency, k: int) -> dict[int, float]:
    """Per task: ``best latency / best latency among the top k`` in (0, 1]."""
    out = {}
    for t, rows in _groups(task):
        best, got = best_of_top_k(np.asarray(pred)[rows], np.asarray(latency)[rows], k)
        if np.isfinite(best):
            out[t] = best / got
    return out


def mean_topk(task, pred, latency, k: int) -> float:
    """The mean over tasks of ``topk_scores``; NaN when no task has enough records."""
    per = topk_scores(task, pred, latency, k)
    return float(np.mean(list(per.values()))) if per else float("nan")


def weighted_topk(task, pred, latency, weights: dict[int, float], k: int) -> float:
    """TenSet's top-k score of one network: ``Σ_t w_t · L*_t / Σ_t w_t · min_{i≤k} L_{t,π(i)}``.

    ``weights`` maps each of the network's tasks to its weight; tasks without records are skipped.
    """
    num = den = 0.0
    groups = dict(_groups(task))
    for t, w in weights.items():
        if t not in groups:
            continue
        rows = groups[t]
        best, got = best_of_top_k(np.asarray(pred)[rows], np.asarray(latency)[rows], k)
        if np.isfinite(best):
            num += w * best
            den += w * got
    return num / den if den > 0 else float("nan")


PAIR_BLOCK = 1 << 22  # pairs of one task that pairwise_accuracy compares at once


def pairwise_accuracy(task, pred, latency) -> float:
    """Fraction of same-task pairs with different measured latency that the prediction orders correctly
    (a failed program is slower than any valid one; equal predictions count one half; a NaN prediction is the
    worst, as in every other metric here)."""
    correct = total = 0.0
    pred = np.asarray(pred, np.float64)
    pred = np.where(np.isnan(pred), -np.inf, pred)  # a NaN prediction is the worst, as ``_rank`` has it
    latency = np.asarray(latency, np.float64)
    for _, rows in _groups(task):
        p = pred[rows]
        lat = np.where(np.isfinite(latency[rows]), latency[rows], np.inf)
        # a block of rows against the whole task at a time: a task of n records costs PAIR_BLOCK comparisons of
        # memory, not n x n (a long tuning run's task of 20,000 records took 2 GB, 50,000 over 12 GB)
        step = max(1, PAIR_BLOCK // len(rows))
        for a in range(0, len(rows), step):
            li, pi = lat[a:a + step, None], p[a:a + step, None]
            faster = (li < lat[None, :]) & np.isfinite(li)  # i strictly faster than j (two failed: neither)
            above, tied = pi > p[None, :], pi == p[None, :]  # compared, not subtracted: inf - inf is NaN
            correct += np.count_nonzero(faster & above) + 0.5 * np.count_nonzero(faster & tied)
            total += np.count_nonzero(faster)
    return correct / total if total else float("nan")


def ndcg(task, pred, score, k: int | None = None) -> float:
    """Mean over tasks of NDCG@k with gains ``2^score − 1`` (score = best / latency, failures 0)."""
    vals = []
    for _, rows in _groups(task):
        s = np.asarray(score, np.float64)[rows]
        gains = np.power(2.0, s) - 1.0
        ideal = np.sort(gains)[::-1][:k]
        if ideal.sum() <= 0:
            continue
        order = np.lexsort((s, -np.asarray(pred, np.float64)[rows]))[:k]  # ties against the model
        disc = 1.0 / np.log2(np.arange(2, len(order) + 2))
        vals.append(float((gains[order] * disc).sum() / (ideal * disc[: len(ideal)]).sum()))
    return float(np.mean(vals)) if vals else float("nan")


def network_scores(task, pred, latency, networks: dict[str, list[tuple[int, float]]], ks=(1, 5)) -> dict:
    """``{network: {"top1": .., "top5": ..}}`` for each network with at least one task in the records that has a
    valid program and a positive weight (a task without any valid program is left out, as in ``topk_scores``:
    a network of such tasks alone has no figure, rather than one of NaN that would make every mean NaN)."""
    latency = np.asarray(latency, np.float64)
    present = {t for t, rows in _groups(task) if np.isfinite(latency[rows]).any()}
    out = {}
    for name, pairs in networks.items():
        weights = {t: w for t, w in pairs if t in present}
        if weights and sum(weights.values()) > 0:
            out[name] = {f"top{k}": weighted_topk(task, pred, latency, weights, k) for k in ks}
    return out


def best_part(task, latency, fraction: float) -> np.ndarray:
    """Indices of the records in each task's best ``fraction`` of valid programs by measured latency (at least
    ``MIN_RECORDS`` of them, so that there is something to rank; a task with fewer valid programs is left out)."""
    latency = np.asarray(latency, np.float64)
    keep = []
    for _, rows in _groups(task):
        valid = rows[np.isfinite(latency[rows])]
        n = max(MIN_RECORDS, int(np.ceil(fraction * valid.size)))
        if valid.size >= MIN_RECORDS:
            keep.append(valid[np.argsort(latency[valid], kind="stable")[:n]])
    return np.sort(np.concatenate(keep)) if keep else np.zeros(0, np.int64)


def tail_metrics(task, pred, latency) -> dict:
    """Pairwise accuracy and top-1 (mean over tasks) within each task's best quarter and best tenth
    (``pairwise_q25``, ``top1_q25``, ``pairwise_q10``, ``top1_q10``), and the mean over tasks of the top-k score
    of the model's k picks among all programs (``pick1``, ``pick8``, ``pick32``). NaN where no task has enough."""
    task, pred, latency = np.asarray(task), np.asarray(pred, np.float64), np.asarray(latency, np.float64)
    out = {}
    for name, fraction in TAILS.items():
        rows = best_part(task, latency, fraction)
        out[f"pairwise_{name}"] = float(pairwise_accuracy(task[rows], pred[rows], latency[rows]))
        out[f"top1_{name}"] = mean_topk(task[rows], pred[rows], latency[rows], 1)
    for k in PICKS:
        out[f"pick{k}"] = mean_topk(task, pred, latency, k)
    return out


def summary(task, pred, latency, score, networks=None, ks=(1, 5)) -> dict:
    """All metrics in one dict: ``top1``/``top5`` (mean over held-out networks when given, otherwise the
    unweighted mean over tasks), ``pairwise``, ``ndcg``, the tail metrics (``tail_metrics``), and the
    per-network / per-task breakdowns."""
    out: dict = {}
    per_task = {k: topk_scores(task, pred, latency, k) for k in ks}
    nets = network_scores(task, pred, latency, networks or {}, ks)
    for k in ks:
        if nets:
            out[f"top{k}"] = float(np.mean([v[f"top{k}"] for v in nets.values()]))
        else:
            out[f"top{k}"] = float(np.mean(list(per_task[k].values()))) if per_task[k] else float("nan")
    out["pairwise"] = pairwise_accuracy(task, pred, latency)
    out["ndcg"] = ndcg(task, pred, score)
    out.update(tail_metrics(task, pred, latency))
    out["networks"] = nets
    out["tasks"] = {str(t): {f"top{k}": per_task[k][t] for k in ks} for t in per_task[ks[0]]}
    return out
