"""The networks of benchmarks/networks.py, as `costlab tune --network nets:FUNCTION` takes them (a function of
no arguments returning (torch module, example inputs)); random weights, batch 1, written out in plain torch
(torchvision is not a dependency).

  llama_layer   a Llama-style decoder layer: RMS norm, rotary q/k, causal attention, SwiGLU MLP; hidden 768,
                12 heads, intermediate 2048, sequence 128
  bert_layer    a BERT-base encoder layer: hidden 768, 12 heads, intermediate 3072, sequence 128 (post-norm, GELU)
  resnet18      ResNet-18 at 224x224 (basic blocks 2-2-2-2, 1000 classes)
  llama_small   llama_layer at hidden 512, 8 heads, intermediate 1024, sequence 32: the smoke size
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, seq: int):
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(hidden, intermediate, bias=False), nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)
        self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)
        freq = 1.0 / (10000 ** (torch.arange(0, self.dim, 2).float() / self.dim))
        angles = torch.outer(torch.arange(seq).float(), freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), diagonal=1))

    def _rope(self, x):
        half = self.dim // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos + rotated * self.sin

    def forward(self, x):
        b, s, h = x.shape
        y = self.norm1(x)
        q, k, v = (p(y).view(b, s, self.heads, self.dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        att = self._rope(q) @ self._rope(k).transpose(-1, -2) / math.sqrt(self.dim) + self.mask
        out = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.o(out)
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
        self.up, self.down = nn.Linear(hidden, intermediate), nn.Linear(intermediate, hidden)
        self.norm1, self.norm2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = (p(x).view(b, s, self.heads, self.dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        att = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dim), dim=-1)
        x = self.norm1(x + self.o((att @ v).transpose(1, 2).reshape(b, s, h)))
        return self.norm2(x + self.down(F.gelu(self.up(x))))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.short(x))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


def _seeded():
    torch.manual_seed(0)  # the same weights and inputs in every process: the output check compares like with like


def llama_layer(hidden: int = 768, heads: int = 12, intermediate: int = 2048, seq: int = 128):
    _seeded()
    return LlamaLayer(hidden, heads, intermediate, seq).eval(), (torch.randn(1, seq, hidden),)


def llama_small():
    return llama_layer(hidden=512, heads=8, intermediate=1024, seq=32)


def bert_layer(hidden: int = 768, heads: int = 12, intermediate: int = 3072, seq: int = 128):
    _seeded()
    return BertLayer(hidden, heads, intermediate).eval(), (torch.randn(1, seq, hidden),)


def resnet18(image: int = 224):
    _seeded()
    return ResNet18().eval(), (torch.randn(1, 3, image, image),)
