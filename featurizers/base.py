"""The featurizer interface: a small object with a JSON config and a version that turns records into arrays.

The config (including what was learned from data by ``fit``, e.g. a vocabulary) and the version travel
inside every trained model, so a model can never be fed features it was not trained on. The same object
featurizes dataset records (``featurize_records``) and live MetaSchedule candidates during a tuning run
(``featurize_candidates``), so training and search see identical features.

Outputs are a dict of named arrays whose first axis is the record. A value may also be a list of arrays
(one per record, first axes of different lengths, e.g. one row per store statement): a *ragged* output,
cached as values + offsets.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

Features = dict  # name -> np.ndarray (first axis = record) or list[np.ndarray] (ragged)

_REGISTRY: dict[str, type["Featurizer"]] = {}


def register(cls: type["Featurizer"]) -> type["Featurizer"]:
    """Class decorator: make a featurizer available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


def available() -> list[str]:
    """The names of every featurizer, the built-in ones loaded first."""
    _load_builtins()
    return sorted(_REGISTRY)


def create(name_or_obj, config: dict | None = None) -> "Featurizer":
    """A featurizer from its name (with an optional config), or the object itself."""
    if isinstance(name_or_obj, Featurizer):
        if config is not None:  # never dropped silently: the object's own config is what it featurizes with
            raise ValueError(f"featurizer {name_or_obj.name}: a config is given with a featurizer object; give the "
                             "featurizer's name with the config, or the object alone")
        return name_or_obj
    _load_builtins()
    if not isinstance(name_or_obj, str) or name_or_obj not in _REGISTRY:
        raise ValueError(f"unknown featurizer {name_or_obj!r} (known: {', '.join(available())})")
    return _REGISTRY[name_or_obj](config)


def from_json(obj: dict) -> "Featurizer":
    """Rebuild a featurizer from ``to_json()`` output; refuses a version this costlab does not produce."""
    _load_builtins()
    if not isinstance(obj, dict):
        raise ValueError(f"a featurizer is a JSON object with its name, version and config, not {str(obj)[:80]}")
    name, version, config = obj.get("name"), obj.get("version"), obj.get("config") or {}
    cls = _REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown featurizer {name!r} (known: {', '.join(available())})")
    if type(version) is not int:  # exactly an integer: 3.9 or "3" is no version a featurizer writes
        raise ValueError(f"featurizer {cls.name} version {version!r} is not an integer")
    if version != cls.version:
        raise ValueError(
            f"featurizer {cls.name} version {version} does not match this costlab's version "
            f"{cls.version}: the model was trained on different features"
        )
    if not isinstance(config, dict):
        raise ValueError(f"featurizer {cls.name} config is not a JSON object: {str(config)[:80]}")
    revision = obj.get("revision")
    if revision is not None and (type(revision) is not int or revision < 0):
        raise ValueError(f"featurizer {cls.name} revision {revision!r} is not a whole number")
    featurizer = cls(config)
    # a fix since (a newer revision) changes some records' features, not what they are: the model loads, and
    # says which it learned (None: a model from before revisions were recorded)
    featurizer.trained_revision = revision
    return featurizer


def same_features(featurizer):
    """A featurizer's JSON as what a model learns compares it: its revision left out (a fix since changes some
    records' features, not what they are; a model or checkpoint from before revisions were recorded has none)."""
    return {k: v for k, v in featurizer.items() if k != "revision"} if isinstance(featurizer, dict) else featurizer


class ConfigError(ValueError):
    """A featurizer config value of the wrong type or out of range. ``key`` names the option and ``problem`` says
    what is wrong with it (``num_slots must be a positive integer, not 'x'``), for a command to report against
    where the config came from; the message names the featurizer too."""

    def __init__(self, featurizer: str, key: str, problem: str):
        self.featurizer, self.key, self.problem = featurizer, key, problem
        super().__init__(f"featurizer {featurizer}: {problem}")


def shown(value, limit: int = 60) -> str:
    """A config value as an error message quotes it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number_kind(integer: bool, low, high) -> str:
    """What a number within bounds is called in an error: "a positive integer", "a number from 0 to 100", ..."""
    noun = "integer" if integer else "number"
    if low is not None and high is not None:
        return f"{'an' if integer else 'a'} {noun} from {low:g} to {high:g}"
    if low is not None:
        if integer and low == 1:
            return "a positive integer"
        if low == 0:
            return f"a non-negative {noun}"
        return f"{'an' if integer else 'a'} {noun} of at least {low:g}"
    if high is not None:
        return f"{'an' if integer else 'a'} {noun} of at most {high:g}"
    return "an integer" if integer else "a number"


def _load_builtins() -> None:
    import importlib

    for mod in ("tlp", "pacm", "psa", "null"):
        try:
            importlib.import_module(f"costlab.featurizers.{mod}")
        except ModuleNotFoundError as exc:  # a featurizer not written yet
            if exc.name != f"costlab.featurizers.{mod}":
                raise


class Featurizer(ABC):
    name: ClassVar[str]
    version: ClassVar[int]
    default_config: ClassVar[dict] = {}

    def __init__(self, config: dict | None = None):
        if config is not None and not isinstance(config, dict):
            raise ValueError(f"featurizer {self.name}: its config is a JSON object of options, not {shown(config)}")
        unknown = set(config or {}) - set(self.default_config) - set(self.learned_keys)
        if unknown:
            raise ValueError(f"featurizer {self.name}: unknown config keys {sorted(unknown)}")
        self.config = {**self.default_config, **(config or {})}
        # checked here, where every config comes in (a user's --config, a model's or a cache's JSON), so a value
        # of the wrong type is one clear error instead of a traceback deep inside featurizing
        self.check_config()

    #: per config key, the bounds (lowest, highest; None: unbounded) a number must lie within
    config_bounds: ClassVar[dict] = {}

    def check_config(self) -> None:
        """Raise ``ConfigError`` for a value of ``self.config`` that is not of its default's type or lies outside
        its ``config_bounds``. The values are only checked, never converted, so a valid config serialises as it
        was given. A featurizer extends this for keys whose default says nothing of their type (``None``) and for
        its learned keys."""
        for key, default in self.default_config.items():
            self.check_value(key, self.config[key], default, self.config_bounds.get(key))

    def check_value(self, key: str, value, like, bounds: tuple | None = None) -> None:
        """Raise ``ConfigError`` unless ``value`` is of the JSON type of ``like`` (an integer, a number, a string,
        true/false, a list of strings, a list, an object; ``None`` accepts anything) and within ``bounds``.
        An integer may be written as a whole number with a fraction of zero (``16.0``): JSON does not tell the
        two apart, and configs written so have always worked."""
        low, high = bounds or (None, None)
        if like is None:
            return
        if isinstance(like, bool):
            ok, what = isinstance(value, bool), "true or false"
        elif isinstance(like, (int, float)):
            integer = isinstance(like, int)
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            ok = number and (not integer or float(value).is_integer())
            ok = ok and (low is None or value >= low) and (high is None or value <= high)
            what = _number_kind(integer, low, high)
        elif isinstance(like, str):
            ok, what = isinstance(value, str), "a string"
        elif isinstance(like, list) and like and all(isinstance(x, str) for x in like):
            ok, what = isinstance(value, list) and all(isinstance(x, str) for x in value), "a list of strings"
        elif isinstance(like, list):
            ok, what = isinstance(value, list), "a list"
        elif isinstance(like, dict):
            ok, what = isinstance(value, dict), "a JSON object"
        else:
            return
        if not ok:
            raise ConfigError(self.name, key, f"{key} must be {what}, not {shown(value)}")

    #: config keys filled in by ``fit`` (e.g. vocabulary, sequence length)
    learned_keys: ClassVar[tuple] = ()
    #: a fix that changes some records' features without changing what the features are: caches made before it
    #: are rebuilt (it is part of the cache fingerprint), models trained before it still load (the version holds)
    revision: ClassVar[int] = 0
    #: the revision a model's features were computed at when it was trained (``from_json``); None for a featurizer
    #: made here, or a model that does not record it
    trained_revision: int | None = None

    @property
    def key(self) -> str:
        """Name of this featurizer's cache group: ``<name>@<version>``."""
        return f"{self.name}@{self.version}"

    def canonical(self, config: dict) -> dict:
        """``config`` as its fingerprint reads it: a whole number written with a fraction of zero (``16.0``) for an
        integer option is that integer, so ``16`` and ``16.0`` (equal values, which JSON does not tell apart) make
        the same cache."""
        ints = {k for k, v in self.default_config.items() if isinstance(v, int) and not isinstance(v, bool)}
        return {k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v for k, v in config.items()}

    @property
    def fingerprint(self) -> str:
        """Hash of the config (and the revision, once there is one); a cache made under another is rebuilt."""
        text = json.dumps(self.canonical(self.config), sort_keys=True, default=str)
        if self.revision:
            text += f"@r{self.revision}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def platform_fingerprint(self, ds, platform: str) -> str:
        """What a cache of one dataset platform was made under: the config, and for a featurizer whose features
        depend on the platform's hardware, the spec it resolved (a cache made under another spec is rebuilt)."""
        return self.fingerprint

    def to_json(self) -> dict:
        """Name, version, config, and the revision the features are computed at (what a model trained on them
        records; ``from_json`` keeps a model's as ``trained_revision``)."""
        return {"name": self.name, "version": self.version, "revision": self.revision, "config": self.config}

    @property
    def is_fitted(self) -> bool:
        return all(k in self.config for k in self.learned_keys)

    def fit(self, ds, platforms=None) -> "Featurizer":
        """Learn the data-derived part of the config from a dataset (default: nothing to learn)."""
        return self

    def cut_sequences(self, feats: Features) -> tuple[int, int] | None:
        """For a featurizer with a fixed sequence length: (records longer than it, the longest record's length) in
        some features; None for one without."""
        return None

    def unknown_tokens(self, feats: Features) -> tuple[int, int] | None:
        """For a featurizer with a learned vocabulary: (tokens it did not know, tokens) in some features;
        None for one without a vocabulary."""
        return None

    @abstractmethod
    def featurize_records(self, ds, platform: str, rows: np.ndarray) -> Features:
        """Features of the given records (indices into the platform's record table)."""

    def featurize_candidates(self, mod, target, schedules) -> Features:
        """Features of live MetaSchedule candidates (``tvm.s_tir.Schedule`` objects of one workload)."""
        raise NotImplementedError(f"featurizer {self.name} does not featurize live candidates")
