"""TLP net: a schedule as a sentence of primitive tokens, scored by an attention encoder.

Token embedding (kind index + a linear map of the numeric slots + a learned position) → MLP encoder →
self-attention encoder that honours the padding mask → per-token decoder → masked sum over tokens. TLP's
published net had no normalisation, no positions and let padding rows add to the sum; this one fixes all
three. ``backbone="bert"`` swaps the attention encoder for a Hugging Face BERT encoder built from a config
(trained from scratch, nothing downloaded). ``heads > 1`` gives one output per platform (MTL-TLP); with
``head_layers > 1`` each head has its own last decoder layers over the shared trunk. ``hardware_dim > 0`` gives
the net a hardware input (``featurizers/hardware_vector.py``: the platform's caches, cores, clock, SIMD width),
projected by a small MLP and added to every token's embedding, so that one net ranks programs of several CPUs
and attention sees the program in the light of the machine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass
class TLPNetConfig:
    vocab_size: int
    num_slots: int
    max_len: int
    d_model: int = 256
    heads: int = 1  # outputs: one per platform
    backbone: str = "attention"  # "attention" | "bert" | "lstm"
    layers: int = 1
    attention_heads: int = 8
    dropout: float = 0.0
    head_layers: int = 1  # with several heads: decoder layers private to each (1: all but the last shared)
    hardware_dim: int = 0  # length of the hardware vector it reads (0: none)

    def to_dict(self) -> dict:
        return asdict(self)


def mlp(sizes, act=nn.ReLU):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), act()]
    return nn.Sequential(*layers[:-1])


class TLPNet(nn.Module):
    def __init__(self, config: TLPNetConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.kind_embed = nn.Embedding(config.vocab_size, d, padding_idx=0)
        self.slot_proj = nn.Linear(config.num_slots, d)
        self.pos_embed = nn.Embedding(config.max_len, d)
        self.hardware_proj = mlp([config.hardware_dim, d, d]) if config.hardware_dim > 0 else None
        self.norm_in = nn.LayerNorm(d)
        self.encoder_mlp = nn.Sequential(mlp([d, d, d]), nn.ReLU())
        if config.backbone == "attention":
            layer = nn.TransformerEncoderLayer(d, config.attention_heads, dim_feedforward=2 * d,
                                               dropout=config.dropout, batch_first=True, norm_first=True)
            self.backbone = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        elif config.backbone == "bert":
            from transformers import BertConfig, BertModel

            bert = BertConfig(vocab_size=2, hidden_size=d, num_hidden_layers=config.layers,
                              num_attention_heads=config.attention_heads, intermediate_size=2 * d,
                              max_position_embeddings=config.max_len, hidden_dropout_prob=config.dropout,
                              attention_probs_dropout_prob=config.dropout)
            self.backbone = BertModel(bert, add_pooling_layer=False)
        elif config.backbone == "lstm":
            self.backbone = nn.LSTM(d, d // 2, num_layers=config.layers, batch_first=True, bidirectional=True)
        else:
            raise ValueError(f"unknown TLP backbone {config.backbone!r} (attention, bert, lstm)")
        sizes = [d, d, d // 2, d // 4]
        if config.head_layers <= 1 or config.heads == 1:
            self.decoder = mlp(sizes + [config.heads])
            self.head_decoders = None
        else:
            # MTL-TLP: each platform's head has its own last layers over a shared trunk
            shared = len(sizes) - min(config.head_layers, len(sizes)) + 1
            self.decoder = nn.Sequential(mlp(sizes[:shared]), nn.ReLU()) if shared >= 2 else nn.Identity()
            self.head_decoders = nn.ModuleList(mlp(sizes[shared - 1:] + [1]) for _ in range(config.heads))

    def encode(self, kind: torch.Tensor, numeric: torch.Tensor, mask: torch.Tensor,
               hardware: torch.Tensor | None = None) -> torch.Tensor:
        """Per-token hidden states (N, L, d)."""
        pos = torch.arange(kind.shape[1], device=kind.device)
        x = self.kind_embed(kind) + self.slot_proj(numeric) + self.pos_embed(pos)[None]
        if self.hardware_proj is not None:
            if hardware is None:
                raise ValueError("this net has a hardware input: give each program its platform's hardware vector")
            x = x + self.hardware_proj(hardware.to(x.dtype))[:, None]
        x = self.encoder_mlp(self.norm_in(x))
        if self.config.backbone == "attention":
            # a program without tokens (an unreadable schedule) attends to nothing, which gives NaN in eval
            # (0 in training): one dummy slot stays unmasked, and the pooling's mask zeroes it
            attend = mask.clone()
            attend[~mask.any(1), 0] = True
            x = self.backbone(x, src_key_padding_mask=~attend)
        elif self.config.backbone == "bert":
            x = self.backbone(inputs_embeds=x, attention_mask=mask.long()).last_hidden_state
        else:
            x, _ = self.backbone(x)
        return x

    def forward(self, kind: torch.Tensor, numeric: torch.Tensor, mask: torch.Tensor,
                hardware: torch.Tensor | None = None) -> torch.Tensor:
        """Scores (N,) — or (N, heads) with several heads; higher = predicted faster. ``hardware`` (N,
        hardware_dim): each program's platform vector, for a net with a hardware input (ignored otherwise)."""
        mask = mask.bool()
        per_token = self.decoder(self.encode(kind, numeric, mask, hardware))
        if self.head_decoders is not None:
            per_token = torch.cat([h(per_token) for h in self.head_decoders], dim=-1)  # (N, L, heads)
        out = (per_token * mask[..., None]).sum(1)
        return out[:, 0] if self.config.heads == 1 else out
