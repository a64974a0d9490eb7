"""The fine-tuning recipes by name, what a recipe is, and the online adaptation modes of a tuning run:
torch-free, so that the command line lists them (``costlab finetune --recipe``, ``costlab tune --adapt``)
without importing torch. What each option guards against, and the loop that applies a recipe
(``fit_lists``), are in ``recipe.py``; the adaptation modes are run by ``adapt.py``.

Each recipe says what runs it (``runner``): ``fit_lists``, or, for the one recipe ``lightning``, the Lightning
trainer of ``costlab train`` started from the model's weights (``costlab finetune --recipe lightning``).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

TRAINABLE = ("all", "head", "last")
FIT_LISTS = "fit_lists"


@dataclass
class Recipe:
    #: what applies it: ``fit_lists`` (``recipe.py``); not an option of the recipe (``to_dict`` leaves it out)
    runner: ClassVar[str] = FIT_LISTS

    name: str = "custom"
    train: str = "all"
    lr: float = 1e-4
    warmup: int = 20  # steps of linear warm-up from 0 to lr
    steps: int = 300  # gradient steps at most
    l2sp: float = 1e-2
    val_fraction: float = 0.3  # held out for early stopping (0: no validation, no guard)
    val_by: str = "task"  # what is held out: whole tasks (from 2 tasks on), or each task's programs
    eval_every: int = 10  # steps between validations
    patience: int = 10  # validations without improvement before stopping
    min_gain: float = 0.0  # validation pairwise accuracy a step must add over the pretrained net's
    list_size: int = 32
    lists_per_step: int = 8
    interpolate: float = 1.0  # weights end at θ0 + interpolate · (θ − θ0): below 1, between pretrained and tuned

    def __post_init__(self):
        if self.val_by not in ("task", "program"):
            raise ValueError(f"recipe {self.name}: val_by must be task or program, not {self.val_by!r}")
        if self.train not in TRAINABLE:
            raise ValueError(f"recipe {self.name}: train must be one of {', '.join(TRAINABLE)}, not {self.train!r}")
        if not (self.lr > 0 and self.steps >= 0 and 0 <= self.val_fraction < 1 and self.l2sp >= 0):
            raise ValueError(f"recipe {self.name}: lr > 0, steps >= 0, 0 <= val_fraction < 1, l2sp >= 0")
        counts = dict(warmup=self.warmup, eval_every=self.eval_every, patience=self.patience,
                      list_size=self.list_size, lists_per_step=self.lists_per_step)
        low = [f"{k}={v!r}" for k, v in counts.items()
               if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "warmup" else 1)]
        if low:
            raise ValueError(f"recipe {self.name}: {', '.join(low)} (warmup >= 0; eval_every, patience, list_size "
                             "and lists_per_step >= 1, whole numbers)")
        if not (self.min_gain >= 0 and 0 <= self.interpolate <= 1):
            raise ValueError(f"recipe {self.name}: min_gain >= 0, 0 <= interpolate <= 1")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Recipe":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown recipe option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**d)


class LightningRecipe(Recipe):
    """``lightning``: not a loop of ``fit_lists`` but ``costlab train``'s Lightning trainer run from the model's
    weights, for ``--epochs`` passes over the records (``--set`` for any training option; ``--momentum``: MoA's
    Siamese momentum rule offline). None of a recipe's options applies to it."""

    runner: ClassVar[str] = "lightning"


# The recipes of ``fit_lists`` are those benchmarks/adapt.py compares (docs/training.md gives the figures).
# ``safe``, the default, trains the scoring MLP and the program branch over PSA's terms (the featurizer-facing
# encoders stay as pretrained), early-stopped on held-out tasks: on the Zen 5 data its held-out top-1 is never
# below zero-shot at any k. ``last`` trains the output layer alone; ``all-guarded`` every weight with a penalty
# toward the pretrained ones; ``plain`` is what ``costlab finetune`` did before (every weight, lr 7e-4, no
# validation); ``wise`` is plain with the weights moved half-way back to the pretrained ones. ``lightning`` is
# ``costlab train``'s trainer (``LightningRecipe``).
RECIPES = {
    "safe": Recipe("safe", train="head", lr=3e-4, warmup=20, steps=300, l2sp=0.0, patience=10),
    "last": Recipe("last", train="last", lr=1e-3, warmup=20, steps=300, l2sp=0.0, patience=20),
    "all-guarded": Recipe("all-guarded", train="all", lr=1e-4, l2sp=1e-2, min_gain=0.01),
    "plain": Recipe("plain", train="all", lr=7e-4, warmup=0, steps=300, l2sp=0.0, val_fraction=0.0),
    "wise": Recipe("wise", train="all", lr=7e-4, warmup=0, steps=300, l2sp=0.0, val_fraction=0.0, interpolate=0.5),
    "lightning": LightningRecipe("lightning"),
}
DEFAULT = "safe"  # costlab finetune's recipe
TRAINER = "lightning"  # its recipe when it is given options of costlab train's trainer (--epochs, --momentum, --set)


def names(runner: str | None = None) -> list[str]:
    """The recipes' names, of one ``runner`` only when given (``FIT_LISTS``: those ``fit_lists`` applies)."""
    return [name for name, r in RECIPES.items() if runner is None or r.runner == runner]


def recipe(spec, runner: str | None = FIT_LISTS) -> Recipe:
    """A recipe by name (``RECIPES``), dict of options, or a ``Recipe``; one that another ``runner`` applies
    (``None``: any) is a ValueError saying what runs it."""
    if isinstance(spec, dict):
        spec = Recipe.from_dict(spec)
    elif not isinstance(spec, Recipe):
        if spec not in RECIPES:
            raise ValueError(f"no fine-tuning recipe {spec!r} (recipes: {', '.join(names(runner))})")
        spec = copy.deepcopy(RECIPES[spec])
    if runner is not None and spec.runner != runner:
        raise ValueError(f"recipe {spec.name!r} is run by {spec.runner}, not {runner} (recipes it runs: "
                         f"{', '.join(names(runner))})")
    return spec


@dataclass(frozen=True)
class AdaptMode:
    """An online adaptation mode of a tuning run: its ``costlab tune --adapt`` help, whether it adapts the net at
    all, how ``adapt.OnlineAdapter`` adapts it: in place by the online recipe, or through MoA's momentum
    copy (``momentum.MomentumTransfer``), and whether ``--adapt auto`` picks it for a learned net."""

    name: str
    help: str
    adapts: bool = True
    momentum: bool = False
    default: bool = False


# The online adaptation modes of a tuning run (``adapt.OnlineAdapter`` runs those that adapt, as each record
# says); ``export/tune.py`` checks --adapt against them, and its ``auto`` picks one
ADAPT_MODES = {m.name: m for m in (
    AdaptMode("none", "the model as trained", adapts=False),
    AdaptMode("finetune", "the net adapted by the online recipe after every round"),
    AdaptMode("momentum", "the net adapted by MoA's Siamese rule, from a momentum copy that follows it slowly",
              momentum=True, default=True),
)}


def adapts(mode: str) -> bool:
    """Whether the adaptation mode ``mode`` adapts the net; a name that is no mode counts as adapting, so that
    ``adapt.OnlineAdapter`` refuses it by name."""
    return mode not in ADAPT_MODES or ADAPT_MODES[mode].adapts


def auto_adapt_mode(learned: bool) -> str:
    """The mode ``--adapt auto`` picks for a new run: the default one for a learned net, else the one that does
    not adapt."""
    return next(name for name, m in ADAPT_MODES.items() if (m.default if learned else not m.adapts))
