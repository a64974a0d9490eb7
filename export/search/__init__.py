"""The search strategies of ``costlab tune``, one module each, made by one factory.

- ``model-led`` (``model_led.py``): PSA drafts the initial pool, the learned model leads the evolution,
  small first rounds. The default with a model.
- ``draft-verify`` (``draft_verify.py``): PSA leads the evolution, the learned model re-ranks its drafts.
- ``draft-filter`` (``draft_filter.py``): MetaSchedule's evolutionary search with a cost model that drafts
  with PSA inside every call.
- ``evolutionary``: MetaSchedule's own ``EvolutionarySearch`` (the default without a model).

``docs/search.md`` compares them and says why the default is what it is.
"""

from __future__ import annotations

STRATEGIES = ("model-led", "draft-verify", "draft-filter", "evolutionary")
DEFAULT_WITH_MODEL = "model-led"
DEFAULT_WITHOUT_MODEL = "evolutionary"
NEEDS_MODEL = ("model-led", "draft-verify", "draft-filter")


def make_strategy(name: str, *, population: int | None = None, verify_fraction: float = 0.1, first_rounds=(8, 16, 32),
                  log=None):
    """A fresh search strategy by name (``STRATEGIES``). ``draft-filter`` is MetaSchedule's evolutionary
    search: its drafting is in the cost model (``draft_cost_model``). ``population``: the genetic search's
    population, by default MetaSchedule's 512, and 256 for ``model-led``, where the learned model scores
    every generation."""
    if name in ("evolutionary", "draft-filter"):
        from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

        return EvolutionarySearch(population_size=population or 512)
    if name == "draft-verify":
        from costlab.export.search.draft_verify import DraftVerifySearch

        return DraftVerifySearch(verify_fraction=verify_fraction, population_size=population or 512, log=log)
    if name == "model-led":
        from costlab.export.search.model_led import ModelLedSearch

        return ModelLedSearch(population_size=population or 256, first_rounds=first_rounds, log=log)
    raise ValueError(f"unknown search strategy {name!r} (one of {', '.join(STRATEGIES)})")


def draft_cost_model(name: str, model, verify_fraction: float = 0.1):
    """The cost model a strategy is run with: ``draft-filter`` wraps the learned model in PSA's filter."""
    if name == "draft-filter":
        from costlab.export.search.draft_filter import DraftFilterModel

        return DraftFilterModel(model, verify_fraction)
    return model
