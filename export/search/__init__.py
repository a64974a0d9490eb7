"""The search strategies of ``costlab tune``, one module each, listed once in ``STRATEGIES``.

- ``model-led`` (``model_led.py``): PSA drafts the initial pool, the learned model leads the evolution,
  small first rounds. The default with a model.
- ``draft-verify`` (``draft_verify.py``): PSA leads the evolution, the learned model re-ranks its drafts.
- ``draft-filter`` (``draft_filter.py``): MetaSchedule's evolutionary search with a cost model that drafts
  with PSA inside every call.
- ``evolutionary``: MetaSchedule's own ``EvolutionarySearch`` (the default without a model), which
  (``evolutionary.py``) never measures a program of the database again, in a continued run too.

``STRATEGIES`` maps each name to a ``Strategy``: its help line, whether it needs a model, its default
population and the factory that makes it. The command line (``--strategy`` choices and help), the option
checks of ``export/tune.py`` and ``make_strategy`` read it, so a strategy added there is offered everywhere.
The factories import TVM and the strategy's module on call: the command line reads this module without TVM.

``docs/search.md`` compares them and says why the default is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

DEFAULT_WITH_MODEL = "model-led"
DEFAULT_WITHOUT_MODEL = "evolutionary"


@dataclass(frozen=True)
class Strategy:
    """A search strategy of ``costlab tune``. ``factory(population=, verify_fraction=, first_rounds=, log=)``
    makes a fresh MetaSchedule search strategy; ``population`` is its default genetic population;
    ``cost_model(model, verify_fraction)``, when set, wraps the learned model the strategy runs with."""

    name: str
    help: str
    needs_model: bool
    population: int
    factory: Callable
    cost_model: Callable | None = None


def _evolutionary(*, population, verify_fraction, first_rounds, log):
    from costlab.export.search.evolutionary import UnmeasuredEvolutionarySearch  # lazy: pulls tvm

    return UnmeasuredEvolutionarySearch(population_size=population)


def _draft_verify(*, population, verify_fraction, first_rounds, log):
    from costlab.export.search.draft_verify import DraftVerifySearch  # lazy: pulls tvm and torch; the parser must not

    return DraftVerifySearch(verify_fraction=verify_fraction, population_size=population, log=log)


def _model_led(*, population, verify_fraction, first_rounds, log):
    from costlab.export.search.model_led import ModelLedSearch  # lazy: pulls tvm and torch; the parser must not

    return ModelLedSearch(population_size=population, first_rounds=first_rounds, log=log)


def _draft_filter_model(model, verify_fraction):
    from costlab.export.search.draft_filter import DraftFilterModel  # lazy: pulls tvm and torch; the parser must not

    return DraftFilterModel(model, verify_fraction)


# MetaSchedule's default population is 512; model-led's is 256, as its learned model scores every generation
STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("model-led", "PSA drafts the initial pool, the model scores every generation of the genetic search, "
             "first rounds small (--first-rounds)", needs_model=True, population=256, factory=_model_led),
    Strategy("draft-verify", "PSA leads the genetic search and the model re-ranks its best --verify-fraction",
             needs_model=True, population=512, factory=_draft_verify),
    Strategy("draft-filter", "MetaSchedule's evolutionary search with a cost model that drafts with PSA and "
             "verifies the best fraction of every call", needs_model=True, population=512, factory=_evolutionary,
             cost_model=_draft_filter_model),
    Strategy("evolutionary", "MetaSchedule's search with the model as its cost model", needs_model=False,
             population=512, factory=_evolutionary),
)}


def strategy_help() -> str:
    """The ``--strategy`` help: every strategy's line, with the defaults marked."""
    marks = {DEFAULT_WITH_MODEL: " (default with --model)", DEFAULT_WITHOUT_MODEL: " (default without --model)"}
    return "; ".join(f"{s.name}{marks.get(s.name, '')}: {s.help}" for s in STRATEGIES.values()) + \
        " (docs/search.md compares them)"


def make_strategy(name: str, *, population: int | None = None, verify_fraction: float = 0.1, first_rounds=(8, 16, 32),
                  log=None):
    """A fresh search strategy by name (``STRATEGIES``). ``draft-filter`` is MetaSchedule's evolutionary
    search: its drafting is in the cost model (``draft_cost_model``). ``population``: the genetic search's
    population, by default the strategy's own (``Strategy.population``)."""
    spec = STRATEGIES.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"unknown search strategy {name!r} (one of {', '.join(STRATEGIES)})")
    if population is not None and (isinstance(population, bool) or not isinstance(population, int) or population < 1):
        raise ValueError(f"population must be a positive integer, not {population!r}")  # 0 became the default
    return spec.factory(population=population if population is not None else spec.population,
                        verify_fraction=verify_fraction, first_rounds=first_rounds, log=log)


def draft_cost_model(name: str, model, verify_fraction: float = 0.1):
    """The cost model a strategy is run with: the learned model, wrapped by the strategy's ``cost_model``
    where it has one (``draft-filter``: PSA's filter)."""
    spec = STRATEGIES.get(name)
    if spec is None or spec.cost_model is None:
        return model
    return spec.cost_model(model, verify_fraction)
