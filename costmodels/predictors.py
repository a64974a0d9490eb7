"""Predictors: one protocol for every model costlab scores programs with, and one ``load`` for all of them.

A predictor has a ``kind``, the ``featurizer`` it is fed by, the ``platforms`` of its heads, its ``config``
(the artifact's ``config.json``; empty for the kinds that need no weights) and
``predict(features) -> (N, heads)`` scores, higher = predicted faster. ``load(name_or_path)`` asks the model
kinds' registry (``kinds.py``) for it:

- a kind that needs no weights by its name (``psa``: the static analyzer's estimate, ``random``: uniform
  scores; ``untrained.py``);
- every other kind from an artifact (``artifact.py``) recording it: a learned net (``tlp``, ``pacm``, ``mtl``:
  a ``NetPredictor``), or MetaSchedule's XGBoost model and SegmentSum MLP trained by costlab (``baselines.py``).

Nothing here imports Lightning or anything of ``costlab.train``: a tuning run loads and scores models in
every worker.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from costlab.common.errors import InputError
from costlab.costmodels import kinds
from costlab.costmodels.artifact import is_artifact, read_artifact, read_config
from costlab.costmodels.nets import NetKind, net_inputs
from costlab.costmodels.shipped import aliases, shipped_path, versioned_names
from costlab.costmodels.tensors import to_tensors
from costlab.featurizers import from_json
from costlab.featurizers.hardware_vector import platform_vector, target_vector


@runtime_checkable
class Predictor(Protocol):
    kind: str
    featurizer: object
    platforms: list
    config: dict

    def predict(self, features: dict) -> np.ndarray:
        """(N, heads) scores of N programs' features; higher = predicted faster."""


def _count(features: dict) -> int:
    """Programs in a batch of features; 0 for none (a featurizer's answer for zero records may hold no array)."""
    return len(next(iter(features.values()))) if features else 0


def head_count(predictor) -> int:
    """How many heads (outputs) a predictor's net has: its built net's, else its config's, else 1."""
    built = getattr(getattr(getattr(predictor, "net", None), "config", None), "heads", None)  # the net's, checked
    return int(built or ((getattr(predictor, "config", None) or {}).get("net") or {}).get("heads") or 1)


def head_of(predictor, platform: str | None) -> int:
    """The head that scores ``platform``: its own when the model has one, else the first. A one-head model
    trained with several platforms (labelled by the first) has one head for all of them."""
    heads = head_count(predictor)
    index = predictor.platforms.index(platform) if platform in predictor.platforms else 0
    return index if index < heads else 0


class NetPredictor:
    """A learned net (TLP, PaCM, multi-task TLP), scored in batches, on the GPU when there is one.

    A net with a hardware input (``hardware_dim``) scores programs of the platform it was last told of: a
    dataset platform (``use_platform``: its stored spec, host record or ``-mcpu``, as ``evaluate`` does) or a
    live tuning target (``use_target``: the machine tuning now). Features that carry their own ``hardware``
    rows (training batches) keep them."""

    def __init__(self, net: torch.nn.Module, kind: str, featurizer: dict, platforms: list, config: dict | None = None,
                 device: str | None = None):
        self.kind, self.platforms, self.config = kind, list(platforms), config or {}
        self.featurizer = from_json(featurizer)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.net = net.to(self.device).eval()
        self.hardware_dim = int(getattr(getattr(net, "config", None), "hardware_dim", 0) or 0)
        self.hardware: np.ndarray | None = None  # the vector of the platform it scores now
        self._target_vectors: dict = {}

    def use_platform(self, platform) -> None:
        """Score records of a dataset platform: its vector from the dataset, never from this machine."""
        if not hasattr(platform, "target"):  # an id, None: never this machine's vector in its place
            raise ValueError(f"use_platform takes a dataset's Platform (ds.platforms[id]), not {platform!r}")
        if self.hardware_dim:
            self.hardware = platform_vector(platform)

    def use_target(self, target) -> None:
        """Score live candidates of a tuning target: its vector from this machine's CPU (the one measuring)."""
        if self.hardware_dim:
            key = str(target)
            if key not in self._target_vectors:
                self._target_vectors[key] = target_vector(target)
            self.hardware = self._target_vectors[key]

    def with_hardware(self, features: dict) -> dict:
        """``features`` with a ``hardware`` row per program when the net reads one and they carry none."""
        if not self.hardware_dim or "hardware" in features:
            return features
        if self.hardware is None:
            raise ValueError("this model has a hardware input: tell it the platform it scores (use_platform for "
                             "a dataset's records, use_target for a tuning target's candidates)")
        return dict(features, hardware=np.broadcast_to(self.hardware, (_count(features), self.hardware_dim)))

    @torch.no_grad()
    def predict(self, features: dict, batch_size: int = 1024) -> np.ndarray:
        features = self.with_hardware(features)
        n = _count(features)
        outs = []
        for a in range(0, n, batch_size):
            part = {k: v[a: a + batch_size] for k, v in features.items()}
            tensors = {k: v.to(self.device) for k, v in to_tensors(part).items()}
            out = self.net(*net_inputs(self.kind, tensors))
            outs.append((out[:, None] if out.dim() == 1 else out).float().cpu().numpy())
        return np.concatenate(outs) if outs else np.zeros((0, len(self.platforms) or 1), np.float32)


def resolve(model) -> Path:
    """The artifact a name or path means: a model at that path, a training run's ``model/``, a shipped model, or
    else the path as given (loading it says what is wrong). A file or folder here that holds no model never
    hides a shipped model of its name (a tuning run's work dir named like its model, say)."""
    path = Path(model)
    if (path / "model").is_dir() and is_artifact(path / "model") and not is_artifact(path):
        return path / "model"  # a training run directory
    if not is_artifact(path):
        found = shipped_path(str(model))
        if found is not None:
            return found
    return path


def check_config(model, trust_unhashed: bool = False) -> None:
    """Refuse ``model`` (an InputError naming its file) when its config does not read, checked as ``load`` checks
    it, without reading the weights: what a command checks before it starts work. A kind that needs no weights
    passes."""
    if model and str(model) not in kinds.untrained():
        read_config(resolve(model), trust_unhashed=trust_unhashed)


def kind_of(model) -> str | None:
    """The kind a ``--model`` names, read without loading its weights: a kind that needs no weights by its own
    name, else the kind its config records (shipped names and run dirs resolved, archives read); None for no
    model, or one whose config does not read (loading it says why, with the file)."""
    if not model:
        return None
    if str(model) in kinds.untrained():
        return str(model)
    try:
        return read_config(resolve(model), trust_unhashed=True).get("kind")
    except Exception:  # noqa: BLE001  not a readable model: loading it says why
        return None


def weights_sha256(model) -> str | None:
    """The hash of a model's weights as its config records it (shipped names and run dirs resolved): what a
    benchmark records beside its figures, and what a tuning run is continued with (an archive is read too: a
    run tuned with one must refuse another archive copied over it). None for a kind that needs no weights (psa,
    random) or a model without one."""
    if not model or str(model) in kinds.untrained():
        return None
    try:
        path = resolve(model)
        if path.is_dir():
            return json.loads((path / "config.json").read_text()).get("weights_sha256")
        return read_config(path, trust_unhashed=True).get("weights_sha256")  # an archive: its config, checked
    except (OSError, ValueError, AttributeError, InputError):
        return None


def pinned_name(model, sha256: str | None = None) -> str | None:
    """The name that keeps meaning the same weights: a shipped alias as the version it stands for now
    (``x86-cpu`` -> ``x86-cpu-v2``), or, given the hash of the weights recorded with it earlier, the shipped
    version holding them (a benchmark begun when the alias stood for another version); a path or a versioned
    name as given. None when ``sha256`` is given and neither the name nor any shipped version has those weights.
    """
    if not model:
        return model
    if sha256 is None or weights_sha256(model) == sha256:
        return shipped_alias(model)
    return next((v for v in versioned_names() if weights_sha256(v) == sha256), None)


def shipped_alias(model):
    """A shipped alias as the version it stands for now, when the name means that shipped model (``resolve``: a
    model of that name here comes first, and is given as it is); anything else as given."""
    name = str(model)
    if name in aliases() and resolve(model) == shipped_path(name):
        return aliases()[name]
    return model


def load(model, seed: int = 0, trust_unhashed: bool = False, device: str | None = None) -> Predictor:
    """A predictor from the name of a kind that needs no weights (``'psa'``, ``'random'``), a shipped model's
    name, a model directory or archive, or a training run's directory, made by its kind (``kinds.py``). Every
    check of ``artifact.read_artifact`` is done before it is returned: both files regular and of a model's
    size, the config and the weights matching the hashes the config records, the net config fitting the
    weights' shapes (from the safetensors header, before any net is built).

    A model whose config records no ``weights_sha256`` / ``config_sha256`` (one made by hand, or by a costlab
    from before config hashes) is refused unless ``trust_unhashed=True`` or the environment variable
    ``COSTLAB_TRUST_UNHASHED=1`` says to trust it; a hash that is recorded is checked either way. ``device``: where
    a learned net's weights live (None: the GPU when there is one)."""
    if isinstance(model, str) and model in kinds.untrained():
        return kinds.create(model).predictor(seed=seed)
    art = read_artifact(resolve(model), trust_unhashed=trust_unhashed)
    try:
        from_json(art.config["featurizer"])
    except ValueError as exc:
        raise InputError(art.path, str(exc)) from None
    kind = kinds.find(art.kind)
    if kind is None or not kind.trained:
        raise InputError(art.path, f"unknown model kind {art.kind!r} (known: {', '.join(kinds.trainable())})")
    fed = art.config["featurizer"]["name"]
    if getattr(kind, "featurizer", fed) != fed:
        raise InputError(art.path, f"a model of kind {art.kind} is fed by the {kind.featurizer} featurizer, not {fed}")
    if device is not None and isinstance(kind, NetKind):  # costlab's own nets; a registered kind may take no device
        return kind.predictor(art, seed, device=device)
    return kind.predictor(art, seed)
