"""Model kinds: the one registry of every kind of model costlab scores programs with, learned nets, baselines and
the kinds that need no weights alike (as ``featurizers/base.py`` is for featurizers, and TVM's
``CostModel.create(kind)``).

Each kind registers once, with ``@register`` on its class, and owns what differs per kind: the featurizer it is
fed by; whether it is a learned net (trained by ``train/fit.py``), a baseline (trained by its own ``fit``, which
``train/baselines.py`` feeds) or a kind that needs no weights (``trained = False``: a predictor by the kind's
name alone, never trained or exported); whether it has one head per platform; how a predictor of it is made
(``predictor``) and how a tuning run maps its scores per task (``task_scale``); and for a net how its config is
sized from a featurizer, how the net is built and which batch entries it eats. The nets register in ``nets.py``
(tlp, pacm, mtl), the baselines in ``baselines.py`` (xgb, mlp), the kinds without weights in ``untrained.py``
(psa, random). Everything else reads this registry: the ``--model`` choices and help of the commands, the
training config's check, ``predictors.load``, ``fit.train``, ``costlab models``, evaluate's comparison curves,
and a tuning run's ``--adapt auto`` and draft stage.
"""

from __future__ import annotations

from typing import ClassVar

from costlab.costmodels.task_scale import LogisticScale

_REGISTRY: dict[str, type["ModelKind"]] = {}


class ModelKind:
    name: ClassVar[str]
    #: how help texts and tables name it ("TLP", "XGBoost")
    title: ClassVar[str]
    #: the featurizer it is fed by (its default when training)
    featurizer: ClassVar[str]
    #: a net trained by ``train/fit.py``; False: a baseline, or a kind that needs no weights
    learned: ClassVar[bool] = True
    #: it has weights, trained by costlab and stored as an artifact; False: a predictor by its name alone
    trained: ClassVar[bool] = True
    #: one head per platform (the first is the target), so it needs at least two platforms
    multi_head: ClassVar[bool] = False
    #: MetaSchedule's default cost model: ``costlab models`` shows every model's held-out top-1 beside its
    reference: ClassVar[bool] = False
    #: the cheap model a search drafts with, and what ranks programs where a command is given no model
    drafts: ClassVar[bool] = False
    #: its scores are random draws: a comparison curve of it is the mean over several draws
    stochastic: ClassVar[bool] = False
    #: a program's score depends on the other programs of the same ``predict`` call (MetaSchedule's SegmentSum MLP
    #: scales features by the call's own maxima): scored one task per call, as a tuning run scores it
    scores_per_call: ClassVar[bool] = False

    def predictor(self, art=None, seed: int = 0):
        """A predictor of this kind (``predictors.Predictor``): from its artifact (an ``artifact.Artifact``, read
        with every check and its featurizer known) for a trained kind; from nothing but ``seed`` for a kind that
        needs no weights."""
        raise NotImplementedError

    def task_scale(self, raw):
        """The fixed map of one task's raw scores (its first population's) to a tuning run's positive scores,
        higher = faster: a logistic curve centred on them unless the kind has a scale of its own."""
        return LogisticScale(raw)


def register(cls: type[ModelKind]) -> type[ModelKind]:
    """Class decorator: make a model kind available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


def names() -> tuple[str, ...]:
    """Every model kind: the learned nets, the baselines, then the kinds that need no weights."""
    return trainable() + untrained()


def trainable() -> tuple[str, ...]:
    """The kinds costlab trains and stores as artifacts (``costlab train --model``): the nets, then the
    baselines, each in the order they registered."""
    return learned() + baselines()


def learned() -> tuple[str, ...]:
    return _select(lambda cls: cls.learned and cls.trained)


def baselines() -> tuple[str, ...]:
    return _select(lambda cls: not cls.learned and cls.trained)


def untrained() -> tuple[str, ...]:
    """The kinds that need no weights: a ``--model`` by their name alone (psa, random)."""
    return _select(lambda cls: not cls.trained)


def reference() -> str:
    """The kind every model's figures are shown beside (MetaSchedule's default cost model)."""
    return next(iter(_select(lambda cls: cls.reference)))


def draft() -> str:
    """The kind a search drafts with, and that ranks programs where a command is given no model."""
    return next(iter(_select(lambda cls: cls.drafts)))


def spoken(kinds) -> str:
    """Kind names as a sentence says them: ``tlp, pacm or mtl``."""
    kinds = list(kinds)
    return " or ".join(filter(None, [", ".join(kinds[:-1]), *kinds[-1:]]))


def find(name) -> ModelKind | None:
    """The model kind of ``name``, or None when there is none."""
    _load_builtins()
    cls = _REGISTRY.get(name) if isinstance(name, str) else None
    return cls() if cls is not None else None


def create(name: str) -> ModelKind:
    """The model kind of ``name``; an unknown one is a ValueError naming the known ones."""
    kind = find(name)
    if kind is None:
        raise ValueError(f"unknown model kind {name!r} (known: {', '.join(names())})")
    return kind


def _select(keep) -> tuple[str, ...]:
    _load_builtins()
    return tuple(name for name, cls in _REGISTRY.items() if keep(cls))


def _load_builtins() -> None:
    import importlib

    # nets.py registers tlp, pacm, mtl; baselines.py xgb, mlp; untrained.py psa, random
    for mod in ("nets", "baselines", "untrained"):
        importlib.import_module(f"costlab.costmodels.{mod}")
