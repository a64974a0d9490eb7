"""costlab.featurizers: TLP primitive tokens, PaCM data-flow patterns, and the PSA static analyzer in its own
package (``costlab.featurizers.psa``: the formula, the loop-nest programs it reads, hardware specs).

Each featurizer has a JSON config and a version (``base.Featurizer``); ``cache`` stores their outputs in the
dataset.
"""

from costlab.featurizers.base import Featurizer, available, create, from_json, register

__all__ = ["Featurizer", "available", "create", "from_json", "register"]
