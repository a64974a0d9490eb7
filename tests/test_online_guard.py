"""The online update's guard (``costmodels.adapt.OnlineAdapter``), on a small TLP net and synthetic programs whose
latency follows their numeric slots: in every mode the net that scores after an update ranks the held-out part no
worse than the net that scored before it; the guard measures with dropout off; no update runs unguarded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from costlab.costmodels.adapt import OnlineAdapter
from costlab.costmodels.nets import build_net
from costlab.costmodels.predictors import NetPredictor
from costlab.costmodels.recipe import GUARDED, list_metrics
from costlab.costmodels.recipes import Recipe
from costlab.featurizers import create

LEN = 8


def _predictor(dropout: float = 0.1) -> NetPredictor:
    feat = create("tlp")
    feat.config.update(vocabulary=["<pad>", "<unk>"] + [f"P{i}" for i in range(10)], seq_len=LEN)
    slots = int(feat.config["num_slots"])
    torch.manual_seed(0)
    net = build_net("tlp", dict(vocab_size=12, num_slots=slots, max_len=LEN, d_model=16, attention_heads=2,
                                dropout=dropout))
    return NetPredictor(net, "tlp", feat.to_json(), ["x"], {}, device="cpu")


def _batches(slots: int, n: int, count: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=slots)
    for _ in range(count):
        numeric = rng.normal(size=(n, LEN, slots)).astype(np.float32)
        feats = dict(kind=rng.integers(2, 12, size=(n, LEN)).astype(np.int32), numeric=numeric,
                     mask=np.ones((n, LEN), bool), length=np.full(n, LEN))
        yield feats, np.exp(0.3 * (numeric.sum(1) @ w)) * 1e-3


@pytest.mark.parametrize("mode", ["momentum", "finetune"])
def test_an_update_never_leaves_the_scoring_net_worse_on_the_held_out_part(mode):
    """In momentum mode the online net restarts from the momentum copy before each update, so the recipe's own guard
    compares the update with that copy; what scores the next round must still be no worse than what scored this
    one, and an update undone is reported as kept."""
    pred = _predictor()
    adapter = OnlineAdapter(pred, mode, momentum=0.9, every=1, seed=0)
    for feats, lat in _batches(pred.net.config.num_slots, 24, 8):
        adapter.add("t", feats, lat)
        _, val = adapter._lists()
        before = list_metrics(pred.net.eval(), "tlp", val)
        trained = adapter.update((feats, lat))
        after = list_metrics(pred.net.eval(), "tlp", val)
        assert all(after[m] >= before[m] for m in GUARDED if np.isfinite(before[m])), (mode, before, after)
        if not trained:
            assert after == before
        vs = adapter.rounds[-1].get("vs_scoring")  # the adapter's own comparison is reported beside the recipe's
        if vs is not None and trained:
            assert all(vs["after"][m] >= vs["before"][m] for m in GUARDED if vs["before"][m] is not None), vs
    assert adapter.stats["updates"] == 8
    assert (mode == "momentum") == any("vs_scoring" in r for r in adapter.rounds)


def test_the_guard_measures_the_net_with_dropout_off():
    """The net is handed to the recipe in training mode (momentum mode sets it): the guard's baseline is what the
    net scores in use, dropout off, as in fine-tuning mode."""
    seen = {}
    for mode in ("momentum", "finetune"):
        pred = _predictor(dropout=0.5)
        adapter = OnlineAdapter(pred, mode, momentum=0.9, every=1, seed=0)
        feats, lat = next(_batches(pred.net.config.num_slots, 40, 1))
        adapter.add("t", feats, lat)
        _, val = adapter._lists()
        expected = list_metrics(pred.net.eval(), "tlp", val)["pairwise"]
        adapter.update()
        seen[mode] = adapter.rounds[-1]["val_before"]
        assert seen[mode] == pytest.approx(expected, abs=1e-4), mode


def test_no_update_runs_before_there_is_a_held_out_part_to_check_it():
    """Too few records held out to validate (fewer than two of a task): the net is left as it was, and the round
    says why, rather than 100 steps trained and kept unchecked."""
    pred = _predictor()
    adapter = OnlineAdapter(pred, "finetune", seed=0)
    feats, lat = next(_batches(pred.net.config.num_slots, 8, 1))
    adapter.add("t", feats, lat)
    adapter._val["t"] = [np.array([True] + [False] * 7)]  # one record held out: nothing to validate with
    state = {k: v.clone() for k, v in pred.net.state_dict().items()}
    assert not adapter.update((feats, lat))
    row = adapter.rounds[-1]
    assert not row["trained"] and "no held-out records" in row["note"]
    assert all(torch.equal(state[k], v) for k, v in pred.net.state_dict().items())


@pytest.mark.parametrize("option", [dict(eval_every=0), dict(list_size=0), dict(patience=0), dict(warmup=-1),
                                    dict(lists_per_step=1.5), dict(interpolate=2.0), dict(min_gain=-0.1)])
def test_a_recipe_refuses_counts_that_would_fail_mid_run(option):
    """Checked when the recipe is made (``CostModel(adapt_options=...)`` makes one at the start of a tuning run),
    not a ZeroDivisionError or a reshape error after the first round's measurements."""
    base = Recipe("online", train="head", lr=3e-4, warmup=10, steps=100)
    with pytest.raises(ValueError, match="recipe online: .*" + "|".join(option)):
        Recipe.from_dict(dict(base.to_dict(), **option))
    with pytest.raises(ValueError):
        OnlineAdapter(_predictor(), "finetune", **option)


def test_an_update_undone_by_the_guard_leaves_the_momentum_copy_as_it_was(monkeypatch):
    """The momentum copy takes its EMA step from the trained online net; when the adapter's guard then undoes the
    update, the copy is put back too: it kept a tenth of the rejected update, and the next update restarted from it."""
    import costlab.costmodels.adapt as adapt_module

    pred = _predictor()
    adapter = OnlineAdapter(pred, "momentum", momentum=0.9, every=1, seed=0)
    monkeypatch.setattr(adapt_module, "lowers_a_guarded_metric", lambda after, before: True)  # every update undone
    for feats, lat in _batches(pred.net.config.num_slots, 24, 3):
        adapter.add("t", feats, lat)
        momentum = {k: v.clone() for k, v in adapter.wrapper.momentum_net.state_dict().items()}
        scoring = {k: v.clone() for k, v in pred.net.state_dict().items()}
        assert adapter.update((feats, lat)) is False
        assert all(torch.equal(v, momentum[k]) for k, v in adapter.wrapper.momentum_net.state_dict().items())
        assert all(torch.equal(v, scoring[k]) for k, v in pred.net.state_dict().items())
    assert adapter.stats["kept_pretrained"] >= 1
