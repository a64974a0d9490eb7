"""costlab.featurizers: TLP primitive tokens, PaCM data-flow patterns, the PSA static analyzer, hardware specs.

Each featurizer has a JSON config and a version (``base.Featurizer``); ``cache`` stores their outputs in the
dataset.
"""

from costlab.featurizers.base import Featurizer, available, create, from_json, register

__all__ = ["Featurizer", "available", "create", "from_json", "register"]
