"""``costlab export``: a trained model written as an artifact for tuning runs."""

from __future__ import annotations

import sys


def register(sub) -> None:
    q = sub.add_parser("export", help="export a trained model as an artifact for tuning runs",
                       description="Write a training run's model (or a model directory) as config.json + "
                       "model.safetensors, with the targets, training data, evaluation figures and versions; "
                       "--archive packs both into one file.")
    q.add_argument("source", metavar="RUN_DIR", help="a training run directory, or a model directory or archive")
    q.add_argument("-o", "--output", required=True, metavar="MODEL_DIR")
    q.add_argument("--archive", action="store_true", help="write one .tar file instead of a directory")
    q.add_argument("--force", action="store_true", help="replace a model already at MODEL_DIR")
    q.set_defaults(func=_export)


def _export(args) -> int:
    from costlab.export.export_model import export_model  # lazy: pulls torch; the parser must not

    print(f"exported: {export_model(args.source, args.output, archive=args.archive, force=args.force)}", file=sys.stderr)
    return 0
