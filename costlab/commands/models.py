"""``costlab models``: the models shipped with costlab, usable by name as ``--model NAME``."""

from __future__ import annotations

import json


def register(sub) -> None:
    q = sub.add_parser("models", help="list the models shipped with costlab",
                       description="The pre-trained models inside the package, usable by name as --model NAME.")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_models)


def _models(args) -> int:
    from costlab.costmodels.listing import models_table, shipped_models  # lazy: pulls torch; the parser must not

    rows = shipped_models()
    print(json.dumps(rows, default=str) if args.json else models_table(rows))
    return 0
