"""Training configuration: one YAML file (or none, with defaults), every option overridable from the
command line as ``--set section.key=value``.

    model: tlp                  # tlp | pacm | mtl (TLP with one head per platform)
    data: data.h5
    split: task-s0              # a split stored in the dataset; none = train on everything
    platforms: [llvm-2c]        # label columns; the first is the target; mtl wants several
    out: runs/tlp
    seed: 0
    loss: lambdarank            # or mse
    lr: 0.0007
    lr_schedule: constant       # or cosine (decays to 1% of lr over max_epochs)
    weight_decay: 1.0e-6
    net: {d_model: 256}         # net options (see costmodels/*_net.py)
    data_options: {list_size: 32, lists_per_batch: 16, val_fraction: 0.1, keep_fraction: {}}
    trainer: {max_epochs: 50, gradient_clip_val: 0.5, accelerator: auto, devices: auto, strategy: auto}
    momentum: null              # MoA fine-tuning: EMA factor (0.99) of the momentum copy
    momentum_every: 1           # epochs per momentum round
    init_from: null             # checkpoint or pretrained model to start from (fine-tuning)
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from costlab.datasets.errors import UsageError

LR_SCHEDULES = ("constant", "cosine")

DEFAULTS = {
    "model": "tlp",
    "data": None,
    "split": None,
    "platforms": [],
    "out": "runs/model",
    "seed": 0,
    "loss": "lambdarank",
    "lr": 7e-4,
    "lr_schedule": "constant",
    "weight_decay": 1e-6,
    "net": {},
    "data_options": {"list_size": 32, "lists_per_batch": 16, "val_fraction": 0.1, "keep_fraction": {},
                     "num_workers": 0},
    "trainer": {"max_epochs": 50, "gradient_clip_val": 0.5, "accelerator": "auto", "devices": "auto",
                "strategy": "auto", "num_nodes": 1, "log_every_n_steps": 10},
    "momentum": None,
    "momentum_every": 1,
    "init_from": None,
}


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def parse_override(text: str) -> tuple[list[str], object]:
    """``trainer.max_epochs=5`` -> (["trainer", "max_epochs"], 5); values are read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"override must look like section.key=value, not {text!r}")
    return key.split("."), yaml.safe_load(value)


def load_config(path=None, overrides=(), **named) -> dict:
    cfg = copy.deepcopy(DEFAULTS)
    if path:
        text = Path(path).read_text()
        loaded = yaml.safe_load(text) or {}
        if not isinstance(loaded, dict):
            raise UsageError(f"{path}: a training config must be a YAML mapping")
        unknown = set(loaded) - set(DEFAULTS)
        if unknown:
            raise UsageError(f"{path}: unknown config keys {sorted(unknown)} (known: {sorted(DEFAULTS)})")
        cfg = _merge(cfg, loaded)
    for key, value in named.items():
        if value is not None:
            cfg[key] = value
    for text in overrides:
        keys, value = parse_override(text)
        if keys[0] not in DEFAULTS:
            raise UsageError(f"unknown config key {keys[0]!r} in override {text!r}")
        node = cfg
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    if not cfg["data"]:
        raise UsageError("no dataset: give --data DATA.h5 or `data:` in the config")
    if isinstance(cfg["platforms"], str):
        cfg["platforms"] = [p for p in cfg["platforms"].split(",") if p]
    if cfg["lr_schedule"] not in LR_SCHEDULES:
        raise UsageError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, not {cfg['lr_schedule']!r}")
    return cfg
