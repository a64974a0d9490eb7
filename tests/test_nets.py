"""The cost-model nets: shapes, padding masks that really mask, multi-task heads, the momentum rule."""

from __future__ import annotations

import pytest
import torch

from costlab.costmodels.momentum import MomentumTransfer
from costlab.costmodels.pacm_net import PaCMNet, PaCMNetConfig
from costlab.costmodels.tlp_net import TLPNet, TLPNetConfig


def _tokens(n=4, length=12, slots=6, vocab=20):
    g = torch.Generator().manual_seed(0)
    kind = torch.randint(1, vocab, (n, length), generator=g)
    numeric = torch.randn(n, length, slots, generator=g)
    mask = torch.ones(n, length, dtype=torch.bool)
    mask[0, 7:] = False
    kind[0, 7:] = 0
    return kind, numeric, mask


@pytest.mark.parametrize("backbone", ["attention", "bert", "lstm"])
def test_tlp_net_shapes_and_padding(backbone):
    torch.manual_seed(0)
    net = TLPNet(TLPNetConfig(vocab_size=20, num_slots=6, max_len=12, d_model=32, backbone=backbone,
                              attention_heads=4)).eval()
    kind, numeric, mask = _tokens()
    out = net(kind, numeric, mask)
    assert out.shape == (4,)
    if backbone != "lstm":  # attention encoders ignore what stands in padded positions
        numeric2 = numeric.clone()
        numeric2[0, 7:] = 100.0
        assert torch.allclose(net(kind, numeric2, mask)[0], out[0], atol=1e-5)
    out.sum().backward()


@pytest.mark.parametrize("backbone", ["attention", "bert", "lstm"])
def test_a_program_without_tokens_scores_zero_in_training_and_in_eval(backbone):
    """An unreadable schedule has no token: its score is the empty sum, 0, whichever mode the net is in (an
    attention encoder over nothing gives NaN in eval), and the other programs' scores are unaffected."""
    torch.manual_seed(0)
    net = TLPNet(TLPNetConfig(vocab_size=20, num_slots=6, max_len=12, d_model=32, backbone=backbone,
                              attention_heads=4))
    kind, numeric, mask = _tokens()
    empty = mask.clone()
    empty[1] = False
    for train in (True, False):
        net.train(train)
        with torch.no_grad():
            out = net(kind, numeric, empty)
        assert torch.isfinite(out).all() and out[1] == 0
    with torch.no_grad():
        assert torch.allclose(net(kind, numeric, empty)[[0, 2, 3]], net(kind, numeric, mask)[[0, 2, 3]], atol=1e-5)


def test_tlp_net_heads():
    net = TLPNet(TLPNetConfig(vocab_size=20, num_slots=6, max_len=12, d_model=32, heads=3, attention_heads=4))
    assert net(*_tokens()).shape == (4, 3)


@pytest.mark.parametrize("head_layers", [2, 3, 4])
def test_tlp_net_private_head_layers(head_layers):
    """A head's own layers learn only from its platform's loss; the shared trunk from every head's."""
    net = TLPNet(TLPNetConfig(vocab_size=20, num_slots=6, max_len=12, d_model=32, heads=2, attention_heads=4,
                              head_layers=head_layers))
    assert sum(isinstance(m, torch.nn.Linear) for m in net.head_decoders[0].modules()) == head_layers
    out = net(*_tokens())
    assert out.shape == (4, 2)
    out[:, 0].sum().backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in net.head_decoders[1].parameters())
    assert all(p.grad.abs().sum() > 0 for p in net.head_decoders[0].parameters())
    assert net.slot_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("head", [0, 1])
def test_the_last_layer_recipe_trains_the_output_layer_of_the_head_it_adapts(head):
    """``train: last`` on a net with a decoder per platform head trains that head's output layer (the last
    Linear of the net is the last head's: adapting head 0 through it would change nothing)."""
    from costlab.costmodels.recipe import trainable

    net = TLPNet(TLPNetConfig(vocab_size=20, num_slots=6, max_len=12, d_model=32, heads=2, attention_heads=4,
                              head_layers=2))
    params = {id(p) for p in trainable(net, "last", head)}
    last = [m for m in net.head_decoders[head].modules() if isinstance(m, torch.nn.Linear)][-1]
    assert params == {id(last.weight), id(last.bias)}
    out = net(*_tokens())
    out[:, head].sum().backward()
    assert last.weight.grad.abs().sum() > 0


def test_pacm_net_shapes_and_empty_patterns():
    torch.manual_seed(0)
    net = PaCMNet(PaCMNetConfig(stmt_features=10, pattern_features=5, d_model=32, heads=2)).eval()
    stmt, sm = torch.randn(3, 4, 10), torch.ones(3, 4, dtype=torch.bool)
    pat, pm = torch.randn(3, 6, 5), torch.ones(3, 6, dtype=torch.bool)
    pm[1] = False  # a program without pattern tokens
    sm[2, 2:] = False
    out = net(stmt, sm, pat, pm)
    assert out.shape == (3, 2) and torch.isfinite(out).all()
    stmt2 = stmt.clone()
    stmt2[2, 2:] = 50.0
    assert torch.allclose(net(stmt2, sm, pat, pm)[2], out[2], atol=1e-5)


def test_pacm_net_program_branch():
    """With a program branch the score depends on the program features (through the MLP and the linear term
    beside it, both trained); without the features such a net refuses to score."""
    torch.manual_seed(0)
    net = PaCMNet(PaCMNetConfig(stmt_features=10, pattern_features=5, program_features=3, d_model=32))
    stmt, sm = torch.randn(4, 2, 10), torch.ones(4, 2, dtype=torch.bool)
    pat, pm = torch.randn(4, 3, 5), torch.ones(4, 3, dtype=torch.bool)
    program = torch.randn(4, 3)
    out = net(stmt, sm, pat, pm, program)
    assert out.shape == (4,)
    assert not torch.allclose(net(stmt, sm, pat, pm, program + 1.0), out)
    out.sum().backward()
    assert net.program_skip.weight.grad.abs().sum() > 0
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.program_mlp.parameters())
    with pytest.raises(ValueError, match="program"):
        net(stmt, sm, pat, pm)
    plain = PaCMNet(PaCMNetConfig(stmt_features=10, pattern_features=5, d_model=32)).eval()
    assert not hasattr(plain, "program_skip")
    assert torch.equal(plain(stmt, sm, pat, pm, program), plain(stmt, sm, pat, pm))


def test_momentum_update_rule():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    start = {k: v.clone() for k, v in net.state_dict().items()}
    moa = MomentumTransfer(net, momentum=0.9, every=2)
    trained_to = {}

    def train(online):
        with torch.no_grad():
            for p in online.parameters():
                p.add_(1.0)
        trained_to.update({k: v.clone() for k, v in online.state_dict().items()})

    assert moa.update(train) is False  # 1st update: collects only
    assert not trained_to
    assert moa.update(train) is True  # 2nd: reset from momentum, train, EMA
    for k in start:
        assert torch.allclose(trained_to[k], start[k] + 1.0)
        assert torch.allclose(moa.momentum_net.state_dict()[k], 0.9 * start[k] + 0.1 * (start[k] + 1.0))
    assert all(not p.requires_grad for p in moa.momentum_net.parameters())
    # the next training round starts from the momentum copy, not from the online net
    moa.update(train)
    moa.update(train)
    for k in start:
        m1 = start[k] + 0.1
        assert torch.allclose(trained_to[k], m1 + 1.0)
        assert torch.allclose(moa.momentum_net.state_dict()[k], 0.9 * m1 + 0.1 * (m1 + 1.0))
    x = torch.randn(5, 3)
    assert torch.allclose(moa(x), net(x))  # predictions come from the online net
