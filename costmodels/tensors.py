"""Features (named numpy arrays, some ragged) as the torch tensors the nets take: shared by training batches
and by inference, so a model scores live candidates from exactly the tensors it trained on."""

from __future__ import annotations

import numpy as np
import torch


def pad_ragged(arrays: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-record arrays (k_i, d) -> padded (N, max k, d) and mask (N, max k)."""
    k = max((a.shape[0] for a in arrays), default=0)
    k = max(k, 1)
    tail = arrays[0].shape[1:] if arrays else ()
    out = np.zeros((len(arrays), k) + tail, np.float32)
    mask = np.zeros((len(arrays), k), bool)
    for i, a in enumerate(arrays):
        out[i, : a.shape[0]] = a
        mask[i, : a.shape[0]] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def to_tensors(feats: dict) -> dict:
    out = {}
    for name, value in feats.items():
        if isinstance(value, list):
            out[name], out[f"{name}_mask"] = pad_ragged(value)
        else:
            out[name] = torch.from_numpy(np.ascontiguousarray(value))
    return out


def take_rows(feats: dict, idx) -> dict:
    """The records ``idx`` of a feature dict (arrays indexed, ragged lists picked)."""
    return {k: ([v[i] for i in idx] if isinstance(v, list) else v[idx]) for k, v in feats.items()}


def concat_features(parts: list[dict]) -> dict:
    """Feature dicts of several batches as one (arrays concatenated, ragged lists joined)."""
    out = {}
    for key in parts[0]:
        values = [p[key] for p in parts]
        out[key] = sum((list(v) for v in values), []) if isinstance(values[0], list) else np.concatenate(values)
    return out
