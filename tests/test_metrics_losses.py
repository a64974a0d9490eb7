"""The ranking metrics and the per-task LambdaRank loss against hand-computed examples."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from costlab.costmodels import losses, metrics

INF = np.inf

# task 0 (weight 2): a failed program predicted best, then a tie between latencies 2 and 4
# task 1 (weight 1): the model prefers the slower of two programs
TASK = np.array([0, 0, 0, 0, 1, 1])
LAT = np.array([1.0, 2.0, 4.0, INF, 3.0, 6.0])
PRED = np.array([0.1, 0.9, 0.9, 1.0, 0.2, 0.8])


def test_weighted_topk_hand_example():
    # top-1 of task 0 is the failed program -> charged the worst valid latency (4); task 1 picks 6
    assert metrics.weighted_topk(TASK, PRED, LAT, {0: 2.0, 1: 1.0}, k=1) == pytest.approx((2 * 1 + 3) / (2 * 4 + 6))
    assert metrics.weighted_topk(TASK, PRED, LAT, {0: 2.0, 1: 1.0}, k=5) == pytest.approx(1.0)
    # top-2 of task 0: failed, then the tie (0.9, 0.9) broken against the model -> latency 4, not 2
    assert metrics.weighted_topk(TASK, PRED, LAT, {0: 1.0}, k=2) == pytest.approx(1 / 4)
    assert metrics.weighted_topk(TASK, PRED, LAT, {0: 1.0}, k=3) == pytest.approx(1 / 2)
    assert metrics.topk_scores(TASK, PRED, LAT, k=1) == pytest.approx({0: 0.25, 1: 0.5})


def test_pairwise_and_ndcg_hand_example():
    # task 0: 6 ordered pairs (a failed program is slower than any valid one), only the tie earns 1/2;
    # task 1: one pair, wrong
    assert metrics.pairwise_accuracy(TASK, PRED, LAT) == pytest.approx(0.5 / 7)
    assert metrics.pairwise_accuracy(TASK, -LAT.clip(max=100), LAT) == pytest.approx(1.0)
    score = np.array([1.0, 0.5, 0.25, 0.0, 1.0, 0.5])
    assert metrics.ndcg(TASK, score, score) == pytest.approx(1.0)
    # task 1 reversed: gains [1, 0.414]; DCG = 0.414 + 1/log2(3); ideal = 1 + 0.414/log2(3)
    g = 2 ** 0.5 - 1
    t1 = (g + 1 / math.log2(3)) / (1 + g / math.log2(3))
    assert metrics.ndcg(np.array([1, 1]), np.array([0.2, 0.8]), np.array([1.0, 0.5])) == pytest.approx(t1)



def test_pairwise_counts_a_nan_prediction_as_the_worst_and_equal_infinities_as_a_tie():
    """As ``task_ranks`` and the top-k metrics count them: a NaN prediction is the worst, never a pair lost outright;
    two equal predictions, infinite or not, earn one half (a subtraction made both NaN, so 0)."""
    task, lat = np.array([0, 0]), np.array([1.0, 2.0])
    assert metrics.pairwise_accuracy(task, np.array([1.0, np.nan]), lat) == 1.0
    assert metrics.pairwise_accuracy(task, np.array([np.nan, 1.0]), lat) == 0.0
    assert metrics.pairwise_accuracy(task, np.array([np.nan, np.nan]), lat) == 0.5  # as a constant model
    assert metrics.pairwise_accuracy(task, np.array([INF, INF]), lat) == 0.5
    assert metrics.pairwise_accuracy(task, np.array([-INF, -INF]), lat) == 0.5


@pytest.mark.parametrize("block", [1, 7, 1 << 22])
def test_pairwise_compares_a_task_in_blocks_of_rows_as_it_would_all_at_once(monkeypatch, block):
    """A task is compared a block of rows against the whole task at a time (a long run's task of 20,000 records
    took 2 GB as one n x n matrix): any block gives the figure of every pair counted one by one."""
    rng = np.random.default_rng(0)
    task = rng.integers(0, 3, 60)
    lat = rng.choice([1.0, 2.0, 3.0, 5.0, INF], 60)
    pred = rng.choice([0.1, 0.5, 0.9, np.nan, INF, -INF], 60)
    monkeypatch.setattr(metrics, "PAIR_BLOCK", block)
    p = np.where(np.isnan(pred), -INF, pred)
    correct = total = 0.0
    for i in range(60):
        for j in range(60):
            if task[i] == task[j] and lat[i] < lat[j]:  # i faster (two failures: neither)
                total += 1
                correct += 1.0 if p[i] > p[j] else 0.5 if p[i] == p[j] else 0.0
    assert metrics.pairwise_accuracy(task, pred, lat) == pytest.approx(correct / total)

def test_summary_uses_networks_when_given():
    s = metrics.summary(TASK, PRED, LAT, np.zeros(6), networks={"net": [(0, 2.0), (1, 1.0)]})
    assert s["top1"] == pytest.approx(5 / 14) and s["networks"]["net"]["top5"] == pytest.approx(1.0)
    s = metrics.summary(TASK, PRED, LAT, np.zeros(6))
    assert s["top1"] == pytest.approx((0.25 + 0.5) / 2)



def test_a_network_of_tasks_none_of_whose_programs_ran_has_no_figure_and_leaves_the_mean_finite():
    """A task without a valid program is left out (``topk_scores``); a network of such tasks alone, or of weight 0,
    has nothing to score: it is left out, rather than a NaN that made the summary's top-k NaN."""
    task, lat = np.array([0, 0, 1, 1, 2, 2]), np.array([1.0, 2.0, INF, INF, 3.0, 6.0])
    nets = {"ran": [(0, 1.0)], "failed": [(1, 1.0)], "weightless": [(2, 0.0)]}
    scores = metrics.network_scores(task, PRED, lat, nets)
    assert set(scores) == {"ran"}
    s = metrics.summary(task, PRED, lat, np.zeros(6), networks=nets)
    assert s["top1"] == scores["ran"]["top1"] and np.isfinite(s["top5"])

def test_lambdarank_hand_example():
    pred = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64, requires_grad=True)
    label = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    # ranks by prediction: item 1, item 2, item 0
    disc = {0: 1 / math.log2(4), 1: 1.0, 2: 1 / math.log2(3)}
    gain = {0: 1.0, 1: 2 ** 0.5 - 1, 2: 0.0}
    ideal = 1.0 + gain[1] / math.log2(3)
    expected = 0.0
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        w = abs(gain[i] - gain[j]) * abs(disc[i] - disc[j]) / ideal
        expected += w * math.log2(1 + math.exp(-(pred[i].item() - pred[j].item())))
    loss = losses.lambdarank_loss(pred, label)
    assert loss.item() == pytest.approx(expected, rel=1e-9)
    assert loss.item() == pytest.approx(0.6686, abs=1e-3)
    loss.backward()
    assert pred.grad[0] < 0 < pred.grad[1]  # push the best program up, the over-rated one down


def test_gain_scale_weighs_the_near_best_pairs():
    """Gains 2^(scale * label) - 1: scale 1 is the plain loss; a swap of the two near-best programs costs more
    than a swap of the two slowest (1.25x at scale 1, ranks' discounts alone), and far more at scale 8 (1.82x)."""
    label = torch.tensor([1.0, 0.9, 0.3, 0.2], dtype=torch.float64)
    top_swapped = torch.tensor([3.0, 4.0, 2.0, 1.0], dtype=torch.float64)
    low_swapped = torch.tensor([4.0, 3.0, 1.0, 2.0], dtype=torch.float64)

    def ratio(scale):
        return (losses.lambdarank_loss(top_swapped, label, gain_scale=scale)
                / losses.lambdarank_loss(low_swapped, label, gain_scale=scale)).item()

    pred = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)
    plain = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    assert losses.lambdarank_loss(pred, plain, gain_scale=1.0) == losses.lambdarank_loss(pred, plain)
    assert losses.lambdarank_loss(pred, plain, gain_scale=2.0) == pytest.approx(
        losses.lambdarank_loss(pred, plain * 2.0).item(), rel=1e-12)  # the scale multiplies the label in the gain
    assert ratio(1.0) == pytest.approx(1.2515, abs=1e-3) and ratio(8.0) == pytest.approx(1.8224, abs=1e-3)


def test_lambdarank_lists_never_mix_tasks():
    torch.manual_seed(0)
    pred, label = torch.randn(7, dtype=torch.float64), torch.rand(7, dtype=torch.float64)
    group = torch.tensor([5, 9, 5, 9, 9, 5, 2])
    p, l, m = losses.group_lists(pred, label, group)
    assert p.shape == (3, 3) and m.sum() == 7
    by_hand = [losses.lambdarank_loss(pred[group == g], label[group == g]) for g in (5, 9)]  # task 2: no pair
    assert losses.lambdarank_loss(p, l, m).item() == pytest.approx(float(sum(by_hand) / 2))
    mixed = losses.lambdarank_loss(pred, label)
    assert mixed.item() != pytest.approx(losses.lambdarank_loss(p, l, m).item())


def test_single_program_tasks_are_left_out():
    task = np.array([0, 0, 7])
    lat = np.array([1.0, 2.0, 5.0])
    pred = np.array([0.0, 1.0, 0.0])  # wrong on task 0; task 7 has nothing to rank
    assert metrics.topk_scores(task, pred, lat, 1) == {0: 0.5}
    assert metrics.summary(task, pred, lat, np.array([1, 0.5, 1]))["top1"] == pytest.approx(0.5)
    assert metrics.weighted_topk(task, pred, lat, {0: 1.0, 7: 100.0}, 1) == pytest.approx(0.5)


def test_task_ranks_scale_within_each_task_and_share_ties():
    task = np.array([0, 0, 0, 1, 1, 1, 1, 2])
    pred = np.array([5.0, -1.0, 2.0, 0.3, 0.3, 0.1, 0.9, 7.0])
    ranks = metrics.task_ranks(task, pred)
    np.testing.assert_allclose(ranks[:3], [1.0, 0.0, 0.5])
    np.testing.assert_allclose(ranks[3:7], [0.5, 0.5, 0.0, 1.0])  # the tie shares ranks 1 and 2 of 0..3
    assert ranks[7] == 0.0  # a task of one record has nothing to rank
    # only the order within a task counts: any increasing map of the scores gives the same ranks
    np.testing.assert_allclose(metrics.task_ranks(task, np.exp(pred) * 3 + 1), ranks)
    # a NaN prediction is the worst, as every other metric counts it, never the best
    np.testing.assert_allclose(metrics.task_ranks(task[:3], np.array([5.0, np.nan, 2.0])), [1.0, 0.0, 0.5])


def test_tail_metrics_hand_example():
    """Task 0 (8 programs): the model ranks its two best programs the wrong way round. Task 1 (20 valid programs
    and a failed one): perfect order among the valid ones, but its top pick is the failed program. Task 2 has one
    valid program and a failed one: nothing to rank in its tail, left out there; its picks count (a failed
    pick is charged the task's worst valid latency)."""
    from costlab.costmodels.metrics import best_part, summary, tail_metrics

    lat0 = np.arange(1.0, 9.0)
    pred0 = np.array([2.0, 3.0, 1.0, 0.0, -1.0, -2.0, -3.0, -4.0])
    lat1 = np.append(np.arange(1.0, 21.0), np.inf)
    pred1 = np.append(-np.arange(1.0, 21.0), 100.0)
    task = np.concatenate([np.zeros(8), np.ones(21), [2, 2]]).astype(np.int64)
    lat = np.concatenate([lat0, lat1, [3.0, np.inf]])
    pred = np.concatenate([pred0, pred1, [0.0, 1.0]])
    # best quarter: 2 of task 0's 8 (at least 2), 5 of task 1's 20 valid; best tenth: 2 and 2
    assert best_part(task, lat, 0.25).tolist() == [0, 1, 8, 9, 10, 11, 12]
    assert best_part(task, lat, 0.10).tolist() == [0, 1, 8, 9]
    m = tail_metrics(task, pred, lat)
    assert m["pairwise_q25"] == pytest.approx(10 / 11)  # task 0's one pair wrong, task 1's ten right
    assert m["top1_q25"] == pytest.approx((0.5 + 1.0) / 2)
    assert m["pairwise_q10"] == pytest.approx(0.5) and m["top1_q10"] == pytest.approx(0.75)
    # the model's first pick: task 0's second best (1/2), task 1's failed program (charged its worst, 1/20),
    # task 2's failed one (charged its only valid latency, 1)
    assert m["pick1"] == pytest.approx((0.5 + 0.05 + 1.0) / 3)
    assert m["pick8"] == pytest.approx(1.0) and m["pick32"] == pytest.approx(1.0)
    full = summary(task, pred, lat, np.where(np.isfinite(lat), 1.0 / lat, 0.0))
    assert all(full[k] == pytest.approx(v) for k, v in m.items())


def test_tail_lists_are_drawn_from_each_tasks_best_programs():
    """``data_options.tail_lists``: per task and epoch, that many more lists, each of the task's best quarter
    of programs by score (unlabelled ones never in them); evaluation batches get none."""
    from costlab.train.data import ListSampler

    task = np.repeat(np.arange(3), 20)
    score = np.tile(np.linspace(0.05, 1.0, 20), 3)
    score[19] = np.nan  # task 0's best-scored slot unlabelled: not in its tail
    plain = ListSampler(task, np.arange(60), list_size=8, lists_per_batch=1, shuffle=True, seed=0)
    tail = ListSampler(task, np.arange(60), list_size=8, lists_per_batch=1, shuffle=True, seed=0, score=score,
                       tail_lists=2, tail_fraction=0.25)
    extra = [b[0] for b in tail if len(b[0]) == 5]  # the whole lists are 8, 8 and 4 long
    assert len(list(tail)) == len(list(plain)) + 6 and len(extra) == 6
    for rows in extra:
        t = task[rows[0]]
        best = {r for r in range(20 * t, 20 * t + 20) if np.isfinite(score[r])}
        top = sorted(best, key=lambda r: -score[r])[:5]
        assert (task[rows] == t).all() and set(rows.tolist()) == set(top)
    evaluation = ListSampler(task, np.arange(60), 8, 1, shuffle=False, seed=0, score=score, tail_lists=2)
    assert len(list(evaluation)) == len(list(plain))
