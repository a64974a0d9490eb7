"""The model artifact: ``config.json`` + ``model.safetensors`` in a directory, or both in one tar archive.

``config.json`` holds the model kind, the net config, the featurizer (name, version and config, vocabulary
included), the platforms of the heads, the SHA-256 of the weights file, and whatever metadata the writer
adds (training data, evaluation figures, versions). ``model.safetensors`` holds every tensor of the model:
a net's state dict, or a baseline's (the XGBoost booster as the bytes of its JSON model, the SegmentSum MLP
as its state dict). Reading parses JSON and tensors only; nothing in an artifact is ever executed or
unpickled, and an archive is read in memory, never extracted.

Everything that can be wrong with an artifact is found here, before it scores anything: a missing or
incomplete artifact, a config that is not JSON, a newer format, a weights file that is damaged, tampered
with (its hash differs from the recorded one) or holds non-finite values.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import torch

from costlab.datasets import jsontext
from costlab.datasets.errors import InputError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
FORMAT = "costlab-model"
FORMAT_VERSION = 1
ARCHIVE_SUFFIXES = (".tar", ".costlab")


@dataclass
class Artifact:
    """A read artifact: where it came from, its config, and its tensors (on the CPU)."""

    path: Path
    config: dict
    tensors: dict

    @property
    def kind(self) -> str:
        return self.config["kind"]


def save_artifact(directory, tensors: dict, config: dict) -> Path:
    """Write ``tensors`` and ``config`` (kind, net, featurizer, platforms, metadata) as an artifact directory.

    The weights file is written first and its hash recorded in the config; each file goes through a
    temporary name and a rename, so a reader never sees half a file."""
    from safetensors.torch import save

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(directory, "exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    blob = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()})
    config = dict(config, format=FORMAT, format_version=FORMAT_VERSION,
                  weights_sha256=hashlib.sha256(blob).hexdigest())
    _atomic_write(directory / WEIGHTS, blob)
    _atomic_write(directory / CONFIG, jsontext.dumps(config, indent=2, sort_keys=True).encode())
    return directory


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def pack_archive(directory, archive) -> Path:
    """One file holding an artifact directory's ``config.json`` and ``model.safetensors`` (an uncompressed tar:
    safetensors do not compress, and members are read in place)."""
    directory, archive = Path(directory), Path(archive)
    tmp = archive.with_name(f".{archive.name}.tmp-{os.getpid()}")
    try:
        with tarfile.open(tmp, "w") as tar:
            for name in (CONFIG, WEIGHTS):
                tar.add(directory / name, arcname=name)
        os.replace(tmp, archive)
    finally:
        if tmp.exists():
            tmp.unlink()
    return archive


def is_artifact(path) -> bool:
    path = Path(path)
    return (path.is_dir() and (path / CONFIG).exists()) or (path.is_file() and tarfile.is_tarfile(path))


def read_config(path) -> dict:
    """The checked config of an artifact (directory or archive), without reading its weights."""
    return _read(Path(path), weights=False).config


def read_artifact(path) -> Artifact:
    """Config and tensors of an artifact (directory or archive), every check done."""
    return _read(Path(path), weights=True)


def _read(path: Path, weights: bool) -> Artifact:
    if not path.exists():
        raise InputError(path, "no such model (give a model directory or archive, or a shipped model's name)")
    if path.is_dir():
        files = {name: path / name for name in (CONFIG, WEIGHTS)}
        if not files[CONFIG].exists():
            what = "a training run without a model yet" if (path / "checkpoints").is_dir() else "not a costlab model"
            raise InputError(path, f"{what} (no {CONFIG})")
        config = _parse_config(files[CONFIG].read_bytes(), files[CONFIG])
        if not weights:
            return Artifact(path, config, {})
        if not files[WEIGHTS].exists():
            raise InputError(path, f"incomplete model: {CONFIG} but no {WEIGHTS}")
        blob = files[WEIGHTS].read_bytes()
    elif path.suffix == ".ckpt":
        raise InputError(path, "a training checkpoint, not a model: give its run directory (costlab export "
                               "RUN_DIR -o MODEL_DIR exports the run's best model)")
    else:
        config, blob = _read_archive(path, weights)
        if not weights:
            return Artifact(path, config, {})
    return Artifact(path, config, _tensors(blob, config, path))


def _read_archive(path: Path, weights: bool) -> tuple[dict, bytes]:
    try:
        tar = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError):
        raise InputError(path, "not a costlab model (neither a model directory nor a model archive)") from None
    with tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        if CONFIG not in members:
            raise InputError(path, f"incomplete model archive: no {CONFIG}")
        config = _parse_config(tar.extractfile(members[CONFIG]).read(), f"{path}:{CONFIG}")
        if not weights:
            return config, b""
        if WEIGHTS not in members:
            raise InputError(path, f"incomplete model archive: {CONFIG} but no {WEIGHTS}")
        return config, tar.extractfile(members[WEIGHTS]).read()


def _parse_config(raw: bytes, where) -> dict:
    try:
        config = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        reason = "empty" if not raw.strip() else f"not valid JSON ({getattr(exc, 'msg', exc)})"
        raise InputError(where, f"model config is {reason}") from None
    if not isinstance(config, dict):
        raise InputError(where, f"model config must be a JSON object, not {type(config).__name__}")
    if config.get("format") != FORMAT:
        raise InputError(where, f"not a costlab model config (format {config.get('format')!r})")
    version = config.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(where, f"model format_version must be an integer, not {version!r}")
    if version > FORMAT_VERSION:
        raise InputError(where, f"written by a newer costlab (model format {version}; this costlab reads up to "
                                f"{FORMAT_VERSION}): upgrade costlab")
    for key, kind in (("kind", str), ("featurizer", dict), ("platforms", list), ("net", dict)):
        if not isinstance(config.get(key), kind):
            raise InputError(where, f"model config has no valid {key!r} (a JSON {kind.__name__} is required)")
    return config


def _tensors(blob: bytes, config: dict, path: Path) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load

    recorded = config.get("weights_sha256")
    if recorded and hashlib.sha256(blob).hexdigest() != recorded:
        raise InputError(path, f"{WEIGHTS} does not match the hash recorded in {CONFIG}: the weights were changed "
                               "or damaged after the model was written")
    try:
        tensors = load(blob)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise InputError(path, f"{WEIGHTS} is damaged ({str(exc).strip().splitlines()[0][:160]})") from None
    return check_finite(tensors, path, WEIGHTS)


def check_finite(tensors: dict, path, what: str) -> dict:
    """``tensors`` if every floating-point value is finite; a NaN or inf (a diverged training run) is an
    InputError naming the file and the tensor, since such a model would score every program NaN."""
    for name, t in tensors.items():
        if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
            raise InputError(path, f"{what}: tensor {name!r} holds non-finite values (NaN or inf): the training "
                                   "run diverged")
    return tensors


def load_state(net: torch.nn.Module, tensors: dict, path) -> torch.nn.Module:
    """``net`` with the artifact's weights; a net config that does not fit the weights is a clear error."""
    missing = sorted(set(net.state_dict()) - set(tensors))
    unexpected = sorted(set(tensors) - set(net.state_dict()))
    if missing or unexpected:
        raise InputError(path, f"the net config does not fit the weights (missing {_few(missing)}, unexpected "
                               f"{_few(unexpected)})")
    for name, t in net.state_dict().items():
        if tuple(t.shape) != tuple(tensors[name].shape):
            raise InputError(path, f"the net config does not fit the weights ({name}: the config makes "
                                   f"{tuple(t.shape)}, the weights are {tuple(tensors[name].shape)})")
    net.load_state_dict(tensors)
    return net.eval()


def _few(names: list) -> str:
    return "none" if not names else ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def finite(x: float) -> float | None:
    """A metric for JSON: None instead of NaN or inf (bare ``NaN`` is not JSON)."""
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
