"""``costlab export``: a training run's model as a self-describing artifact for tuning runs.

The exported ``config.json`` holds, beside the model (kind, net, featurizer with its vocabulary, heads):
the platforms' targets, the training data's summary and split, the evaluation figures of the run, and the
costlab / torch / TVM versions that made it; ``model.safetensors`` the weights, whose SHA-256 the config
records. ``archive=True`` packs both into one ``.tar`` file, read in place by every loader.
"""

from __future__ import annotations

import json
from pathlib import Path

from costlab.costmodels.artifact import pack_archive, read_artifact, save_artifact
from costlab.costmodels.predictors import resolve
from costlab.datasets.errors import InputError


def _versions() -> dict:
    import torch

    from costlab import __version__

    out = dict(costlab=__version__, torch=torch.__version__)
    try:
        import tvm

        out["tvm"] = tvm.__version__
    except ImportError:
        out["tvm"] = None
    return out


def _dataset_info(config: dict) -> dict:
    """Targets and a summary of the dataset the model trained on, when the dataset is still at hand."""
    path = config.get("dataset")
    if not path or not Path(path).exists():
        return {}
    from costlab.datasets import open_dataset

    try:
        with open_dataset(path) as ds:
            return dict(targets={p: ds.platforms[p].target for p in config.get("platforms", []) if p in ds.platforms},
                        hosts={p: ds.platforms[p].host for p in config.get("platforms", [])
                               if p in ds.platforms and ds.platforms[p].host},
                        data=dict(path=str(path), tasks=len(ds.tasks),
                                  records={p: ds.num_records(p) for p in ds.record_platforms()}))
    except InputError:
        return {}


def export_model(source, out, archive: bool = False) -> Path:
    """Export a run directory (or a model directory / archive) to ``out``; returns what was written."""
    src = resolve(source)
    art = read_artifact(src)  # every check of a model, before anything is written
    config = dict(art.config)
    run = src.parent if src.name == "model" else None
    if run is not None and (run / "summary.json").exists():
        config.setdefault("training", json.loads((run / "summary.json").read_text()))
    if run is not None and (run / "report" / "metrics.json").exists():
        config["evaluation"] = json.loads((run / "report" / "metrics.json").read_text())
    for key, value in _dataset_info(config).items():
        config.setdefault(key, value)
    config["versions"] = _versions()
    config.pop("weights_sha256", None)
    out = Path(out)
    if archive:
        import tempfile

        with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None) as tmp:
            save_artifact(Path(tmp) / "model", art.tensors, config)
            return pack_archive(Path(tmp) / "model", out)
    return save_artifact(out, art.tensors, config)
