"""costlab.export: trained models inside MetaSchedule tuning runs.

- ``load(MODEL)``: a MetaSchedule cost model (``PyCostModel``) of a costlab model — an artifact directory
  or archive, a training run, a shipped model's name, ``psa`` or ``random`` (``cost_model.py``);
- ``measuring(TARGET)``: costlab's builder and runner for MetaSchedule's own tuning functions, in a ``with``
  block (``builder_runner.py``: a submodule named ``measuring`` would shadow the function once imported);
- ``search/``: the search strategies of ``costlab tune`` (``make_strategy(name)``; PSA drafts, the model
  leads or verifies);
- ``export_model``: a training run's model as a self-describing artifact (``export_model.py``);
- ``tune``: ``costlab tune`` (``tune.py``), the network's end-to-end timing (``network.py``).

Nothing here imports Lightning: a tuning run loads a model without the training machinery. TVM is imported
on first use of what needs it (the command line reads ``search.STRATEGIES`` without it).
"""

__all__ = ["CostlabCostModel", "load", "measuring"]


def __getattr__(name):
    if name == "measuring":
        from costlab.export.builder_runner import measuring  # lazy: pulls tvm

        return measuring
    if name in __all__:
        from costlab.export import cost_model  # lazy: pulls torch and tvm; the parser imports this package

        return getattr(cost_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
