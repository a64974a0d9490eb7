"""PaCM net: per-statement features and data-flow pattern tokens, two branches fused.

Statement branch: an MLP over each store statement's features, summed over the program's statements
(pack-sum, as MetaSchedule's models do). Pattern branch: an MLP over each buffer-access token, a
self-attention encoder with the padding mask, summed. Program branch (``program_features > 0``): an MLP
over the program's PSA estimate and its terms (the featurizer's ``program`` output), plus a linear term of
them added to the score, so the net starts from the static analyzer's order and learns its corrections.
Hardware branch (``hardware_dim > 0``): an MLP over the platform's hardware vector
(``featurizers/hardware_vector.py``: caches, cores, clock, SIMD width), so that one net ranks the programs of
several CPUs. The branches are concatenated and scored by a residual MLP. ``heads > 1`` gives one output per
platform.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from costlab.costmodels.tlp_net import mlp


@dataclass
class PaCMNetConfig:
    stmt_features: int
    pattern_features: int
    program_features: int = 0  # 0: the program branch is left out (the featurizer's ``program`` unused)
    d_model: int = 256
    heads: int = 1
    attention_heads: int = 4
    dropout: float = 0.0
    hardware_dim: int = 0  # length of the hardware vector it reads (0: none)

    def to_dict(self) -> dict:
        return asdict(self)


class _Residual(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.body = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))

    def forward(self, x):
        return x + self.body(x)


class PaCMNet(nn.Module):
    def __init__(self, config: PaCMNetConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.stmt_mlp = nn.Sequential(mlp([config.stmt_features, d, d]), nn.ReLU())
        self.pattern_mlp = nn.Sequential(mlp([config.pattern_features, d // 4, d // 2]), nn.ReLU())
        layer = nn.TransformerEncoderLayer(d // 2, config.attention_heads, dim_feedforward=d,
                                           dropout=config.dropout, batch_first=True, norm_first=True)
        self.pattern_attn = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        fused = d + d // 2
        if config.program_features:
            self.program_mlp = nn.Sequential(mlp([config.program_features, d // 4, d // 4]), nn.ReLU())
            self.program_skip = nn.Linear(config.program_features, config.heads)
            fused += d // 4
        if config.hardware_dim:
            self.hardware_mlp = nn.Sequential(mlp([config.hardware_dim, d // 4, d // 4]), nn.ReLU())
            fused += d // 4
        self.head = nn.Sequential(nn.Linear(fused, d), _Residual(d), _Residual(d), nn.ReLU(), nn.Linear(d, config.heads))

    def forward(self, stmt: torch.Tensor, stmt_mask: torch.Tensor, pattern: torch.Tensor,
                pattern_mask: torch.Tensor, program: torch.Tensor | None = None,
                hardware: torch.Tensor | None = None) -> torch.Tensor:
        """stmt (N, S, F1) with mask (N, S); pattern (N, P, F2) with mask (N, P); program (N, F3), needed when
        the net has a program branch; hardware (N, hardware_dim), each program's platform vector, needed when it
        has a hardware input. Scores (N,) or (N, heads)."""
        s = (self.stmt_mlp(stmt) * stmt_mask[..., None]).sum(1)
        pm = pattern_mask.bool()
        # a program without pattern tokens attends to nothing: keep one dummy slot unmasked, zero it after
        empty = ~pm.any(1)
        attn_mask = pm.clone()
        attn_mask[empty, 0] = True
        p = self.pattern_attn(self.pattern_mlp(pattern), src_key_padding_mask=~attn_mask)
        p = (p * pm[..., None]).sum(1)
        parts, skip = [s, p], 0
        if self.config.program_features:
            if program is None:
                raise ValueError("this PaCM net has a program branch: it needs the featurizer's 'program' output")
            parts.append(self.program_mlp(program))
            skip = self.program_skip(program)
        if self.config.hardware_dim:
            if hardware is None:
                raise ValueError("this net has a hardware input: give each program its platform's hardware vector")
            parts.append(self.hardware_mlp(hardware.to(s.dtype)))
        out = self.head(torch.cat(parts, dim=-1)) + skip
        return out[:, 0] if self.config.heads == 1 else out
