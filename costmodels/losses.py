"""Training losses: LambdaRank with every ranking list drawn from one task, and MSE.

Ranking across tasks is meaningless (a fast conv and a slow matmul are not alternatives), so the loss
takes lists of shape (lists, list length) with a mask, one task per list — not the whole mixed batch as
TLP's code does. ``group_lists`` turns flat (prediction, label, task) arrays into that shape.
"""

from __future__ import annotations

import torch


def group_lists(pred: torch.Tensor, label: torch.Tensor, group: torch.Tensor):
    """Flat per-record tensors -> (G, M) padded lists, one per distinct group id, and their mask."""
    uniq, inverse, counts = torch.unique(group, return_inverse=True, return_counts=True)
    m = int(counts.max()) if counts.numel() else 0
    order = torch.argsort(inverse, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(group.numel(), device=group.device) - starts[inverse[order]]
    out_p = pred.new_zeros((uniq.numel(), m))
    out_l = label.new_zeros((uniq.numel(), m))
    mask = torch.zeros((uniq.numel(), m), dtype=torch.bool, device=group.device)
    out_p[inverse[order], pos] = pred[order]
    out_l[inverse[order], pos] = label[order]
    mask[inverse[order], pos] = True
    return out_p, out_l, mask


def lambdarank_loss(pred: torch.Tensor, label: torch.Tensor, mask: torch.Tensor | None = None,
                    sigma: float = 1.0, gain_scale: float = 1.0) -> torch.Tensor:
    """LambdaRank over lists (G, M): for each pair with ``label_i > label_j`` in one list,
    ``|ΔNDCG_ij| · log2(1 + exp(−σ (s_i − s_j)))``, where ``|ΔNDCG_ij| = |G_i − G_j| · |1/log2(1+r_i) −
    1/log2(1+r_j)| / maxDCG`` with gains ``G = 2^(gain_scale · label) − 1`` and ranks ``r`` by the current
    prediction. Summed per list, averaged over lists that have at least one such pair.

    With labels in (0, 1] (``best / latency``), ``gain_scale`` 1 makes two near-best programs' gains nearly
    equal; a larger one (e.g. 8) makes gains grow steeply toward the task's best, so the pairs among its
    near-best programs, which a search decides between, weigh more than pairs among slow ones.
    """
    if pred.dim() == 1:
        pred, label = pred[None], label[None]
        mask = None if mask is None else mask[None]
    if mask is None:
        mask = torch.ones_like(pred, dtype=torch.bool)
    label = torch.where(mask, label, torch.zeros_like(label)).to(pred.dtype)
    neg_inf = torch.finfo(pred.dtype).min
    with torch.no_grad():
        masked = torch.where(mask, pred, torch.full_like(pred, neg_inf))
        rank = torch.empty_like(pred)
        order = torch.argsort(masked, dim=1, descending=True)
        ar = torch.arange(1, pred.shape[1] + 1, device=pred.device, dtype=pred.dtype).expand_as(pred)
        rank.scatter_(1, order, ar)
        disc = torch.where(mask, 1.0 / torch.log2(1.0 + rank), torch.zeros_like(rank))
        gains = torch.pow(2.0, gain_scale * label) - 1.0
        ideal_disc = 1.0 / torch.log2(1.0 + ar)
        ideal = (torch.sort(gains, dim=1, descending=True).values * ideal_disc).sum(1).clamp_min(1e-12)
        pair = (label[:, :, None] > label[:, None, :]) & mask[:, :, None] & mask[:, None, :]
        delta = (gains[:, :, None] - gains[:, None, :]).abs() * (disc[:, :, None] - disc[:, None, :]).abs()
        weight = torch.where(pair, delta / ideal[:, None, None], torch.zeros_like(delta))
    diff = pred[:, :, None] - pred[:, None, :]
    pair_loss = torch.nn.functional.softplus(-sigma * diff) / torch.log(torch.tensor(2.0, dtype=pred.dtype))
    per_list = (weight * pair_loss).sum((1, 2))
    has_pairs = pair.any(2).any(1)
    if not bool(has_pairs.any()):
        return (pred * 0).sum()
    return per_list[has_pairs].mean()


def mse_loss(pred: torch.Tensor, label: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    if mask is None:
        return torch.nn.functional.mse_loss(pred, label.to(pred.dtype))
    return torch.nn.functional.mse_loss(pred[mask], label[mask].to(pred.dtype))


LOSSES = {"lambdarank": lambdarank_loss, "mse": mse_loss}
