"""Siamese momentum transfer (MoA): a frozen momentum copy guides adaptation to a new platform.

The momentum copy starts as the pre-trained net and is never trained directly. Every ``every``-th update
the online net is re-initialised from the momentum copy, trained on the target platform's data collected
so far, and the momentum copy moves towards it by an exponential moving average:
``θ_m ← m · θ_m + (1 − m) · θ_online`` (m = 0.99). Predictions come from the online net. Feature
normalisation is part of the pre-trained artifact and is never recomputed here.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn


class MomentumTransfer(nn.Module):
    def __init__(self, net: nn.Module, momentum: float = 0.99, every: int = 4):
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), not {momentum}")
        if every < 1:
            raise ValueError(f"every must be >= 1, not {every}")
        self.online = net
        self.momentum_net = copy.deepcopy(net)
        for p in self.momentum_net.parameters():
            p.requires_grad_(False)
        self.m = momentum
        self.every = every
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))

    def forward(self, *args, **kwargs):
        return self.online(*args, **kwargs)

    @torch.no_grad()
    def reset_online(self) -> None:
        """Start the online net from the momentum copy."""
        self.online.load_state_dict(self.momentum_net.state_dict())

    @torch.no_grad()
    def ema(self) -> None:
        """``θ_m ← m · θ_m + (1 − m) · θ_online`` for every parameter and floating buffer."""
        online = dict(self.online.state_dict())
        for name, t in self.momentum_net.state_dict().items():
            if t.dtype.is_floating_point:
                t.mul_(self.m).add_(online[name].to(t.dtype), alpha=1.0 - self.m)
            else:
                t.copy_(online[name])

    def update(self, train: Callable[[nn.Module], None]) -> bool:
        """One update with new target data. Every ``every``-th call: reset the online net from the momentum
        copy, ``train(online)``, then move the momentum copy by EMA. Returns whether it trained."""
        self.updates += 1
        if int(self.updates) % self.every:
            return False
        self.reset_online()
        self.online.train()
        train(self.online)
        self.ema()
        return True
