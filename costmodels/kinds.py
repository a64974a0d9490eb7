"""Model kinds: the one registry of every kind of model costlab trains, saves and loads, learned nets and
baselines alike (as ``featurizers/base.py`` is for featurizers, and TVM's ``CostModel.create(kind)``).

Each kind registers once, with ``@register`` on its class, and owns what differs per kind: the featurizer it is
fed by, whether it is a learned net (trained by ``train/fit.py``) or a baseline (``train/baselines.py``), whether
it has one head per platform, and for a net how its config is sized from a featurizer, how the net is built and
which batch entries it eats. The nets register in ``nets.py`` (tlp, pacm, mtl), the baselines in
``baselines.py`` (xgb, mlp). Everything else reads this registry: the ``--model`` choices of ``costlab train``,
the training config's check, ``predictors.load`` and ``fit.train``.
"""

from __future__ import annotations

from typing import ClassVar

_REGISTRY: dict[str, type["ModelKind"]] = {}


class ModelKind:
    name: ClassVar[str]
    #: the featurizer it is fed by (its default when training)
    featurizer: ClassVar[str]
    #: a net trained by ``train/fit.py``; False: a baseline, trained by ``train/baselines.py``
    learned: ClassVar[bool] = True
    #: one head per platform (the first is the target), so it needs at least two platforms
    multi_head: ClassVar[bool] = False


def register(cls: type[ModelKind]) -> type[ModelKind]:
    """Class decorator: make a model kind available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


def names() -> tuple[str, ...]:
    """Every model kind: the learned nets, then the baselines, each in the order they registered."""
    return learned() + baselines()


def learned() -> tuple[str, ...]:
    _load_builtins()
    return tuple(name for name, cls in _REGISTRY.items() if cls.learned)


def baselines() -> tuple[str, ...]:
    _load_builtins()
    return tuple(name for name, cls in _REGISTRY.items() if not cls.learned)


def create(name: str) -> ModelKind:
    """The model kind of ``name``; an unknown one is a ValueError naming the known ones."""
    _load_builtins()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown model kind {name!r} (known: {', '.join(names())})")
    return _REGISTRY[name]()


def _load_builtins() -> None:
    import importlib

    for mod in ("nets", "baselines"):  # nets.py registers tlp, pacm, mtl; baselines.py xgb, mlp
        importlib.import_module(f"costlab.costmodels.{mod}")
