"""costlab.export: trained models inside MetaSchedule tuning runs.

- ``load(MODEL)``: a MetaSchedule cost model (``PyCostModel``) of a costlab model — an artifact directory
  or archive, a training run, a shipped model's name, ``psa`` or ``random`` (``cost_model.py``);
- ``DraftVerifySearch`` and ``DraftFilterModel``: PSA drafts, the model verifies (``draft.py``);
- ``export_model``: a training run's model as a self-describing artifact (``artifact.py``);
- ``tune``: ``costlab tune`` (``tune.py``), the network's end-to-end timing (``network.py``).

Nothing here imports Lightning: a tuning run loads a model without the training machinery.
"""

from costlab.export.cost_model import CostlabCostModel, load

__all__ = ["CostlabCostModel", "load"]
