"""Saving and loading a trained net without pickle: ``config.json`` + ``model.safetensors``.

``config.json`` holds the model kind, the net config, the featurizer (name, version and config, vocabulary
included), the platforms of the heads, and whatever metadata the caller adds (training metrics, versions).
Loading reads JSON and tensors only; no code from the directory ever runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from costlab.datasets.errors import UsageError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
FORMAT = "costlab-model"
FORMAT_VERSION = 1


def save_pretrained(directory, net: torch.nn.Module, kind: str, net_config: dict, featurizer: dict,
                    platforms: list, **meta) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    tmp = directory / f".{WEIGHTS}.tmp"
    save_file(state, str(tmp))
    os.replace(tmp, directory / WEIGHTS)
    config = dict(format=FORMAT, format_version=FORMAT_VERSION, kind=kind, net=net_config,
                  featurizer=featurizer, platforms=list(platforms), **meta)
    tmp = directory / f".{CONFIG}.tmp"
    tmp.write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    os.replace(tmp, directory / CONFIG)
    return directory


def read_config(directory) -> dict:
    path = Path(directory) / CONFIG
    if not path.exists():
        raise UsageError(f"{directory}: not a costlab model (no {CONFIG})")
    config = json.loads(path.read_text())
    if config.get("format") != FORMAT:
        raise UsageError(f"{path}: not a costlab model config (format {config.get('format')!r})")
    if int(config.get("format_version", 0)) > FORMAT_VERSION:
        raise UsageError(f"{path}: written by a newer costlab (model format {config['format_version']})")
    return config


def load_pretrained(directory, build_net) -> tuple[torch.nn.Module, dict]:
    """(net, config) from a directory; ``build_net(kind, net_config)`` makes the empty net."""
    config = read_config(directory)
    net = build_net(config["kind"], config["net"])
    net.load_state_dict(load_file(str(Path(directory) / WEIGHTS)))
    net.eval()
    return net, config
