"""``costlab export``: a training run's model as a self-describing artifact for tuning runs.

The exported ``config.json`` holds, beside the model (kind, net, featurizer with its vocabulary, heads):
the platforms' targets, the training data's summary and split, the evaluation figures of the run (its
``report/metrics.json``, when that scored these weights), and the
costlab / torch / TVM versions that made it; ``model.safetensors`` the weights. The config records the
SHA-256 of the weights and of itself (``costmodels/artifact.py`` writes both). ``archive=True`` packs both
files into one ``.tar`` file, read in place by every loader. The output is checked before anything is read
or written; another model there is replaced only with ``force``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from costlab import __version__
from costlab.common.errors import InputError, UsageError
from costlab.costmodels.artifact import pack_archive, read_artifact, replaceable, save_artifact
from costlab.costmodels.predictors import resolve
from costlab.datasets import open_dataset


def _versions() -> dict:
    import torch

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

    try:
        with open_dataset(path) as ds:
            return dict(targets={p: ds.platforms[p].target for p in config.get("platforms", []) if p in ds.platforms},
                        hosts={p: ds.platforms[p].host for p in config.get("platforms", [])
                               if p in ds.platforms and ds.platforms[p].host},
                        data=dict(path=str(path), tasks=len(ds.tasks),
                                  records={p: ds.num_records(p) for p in ds.record_platforms()}))
    except InputError:
        return {}


def _check_output(out: str, archive: bool, force: bool) -> Path:
    """Where the export goes, refused before anything is read or written if it cannot or should not be
    written there: another model is replaced only with ``force``; a folder that holds anything else, a file
    where a directory goes (or the other way round), a missing or unwritable parent are errors."""
    import os

    if not str(out).strip():
        raise UsageError("-o must name the model directory (or, with --archive, the archive file) to write")
    path = Path(out)
    if path.suffix == ".ckpt":  # every loader reads a .ckpt path as a training checkpoint: no command would load it
        raise UsageError(f"-o {out}: a .ckpt name is a training checkpoint's; name the model otherwise (a directory, "
                         "or with --archive a .tar or .costlab file)")
    if archive and path.suffix.lower() in (".gz", ".tgz", ".bz2", ".xz", ".zst"):  # written as a plain tar
        raise UsageError(f"-o {out}: --archive writes an uncompressed tar (safetensors do not compress); name it "
                         f".tar or .costlab, not {path.suffix}")
    # missing folders on the way are made when the model is written: the nearest one that exists must take them
    parent = path.parent if str(path.parent) else Path(".")
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(path, f"cannot be written: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(path, f"cannot be written: its folder {parent} is not writable")
    if archive:
        if path.is_dir():
            raise InputError(path, "is a directory; --archive writes one file")
        if path.exists() and not force:
            raise InputError(path, "exists; give --force to replace it")
        if path.exists() and not replaceable(path):
            raise InputError(path, "exists and is not a costlab model archive: --force replaces only a model")
    elif path.exists() or path.is_symlink():
        if not path.is_dir():
            raise InputError(path, "exists and is not a directory (without --archive, a model is a directory)")
        if not replaceable(path):
            raise InputError(path, "is a folder that holds other files, not a model (or files besides one): export "
                                   "into a new or empty one (--force replaces only a costlab model's two files)")
        if (path / "config.json").exists() and not force:
            raise InputError(path, "holds a model already; give --force to replace it")
    return path


def _run_json(path: Path):
    """A run's summary or metrics file, or one error naming it (before anything is written)."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(path, f"is not readable JSON ({str(exc).splitlines()[0][:120]}); fix or remove it "
                               "to export the model without it") from None


def _evaluated(evaluation, config: dict, run: Path, src: Path) -> bool:
    """Whether a run's ``report/metrics.json`` scored the model whose config is ``config``: the weights it names
    are the model's. A report that names no weights (costlab wrote none before) counts when the model it names
    is that run or its ``model/`` folder."""
    if not isinstance(evaluation, dict):
        return False
    if "weights_sha256" in evaluation:
        return evaluation["weights_sha256"] == config.get("weights_sha256")
    named = evaluation.get("model")
    return isinstance(named, str) and bool(named) and Path(named).resolve() in (run.resolve(), src.resolve())


def export_model(source, out, archive: bool = False, force: bool = False) -> Path:
    """Export a run directory (or a model directory / archive) to ``out``; returns what was written. An
    existing model at ``out`` is replaced only with ``force``."""
    out = _check_output(out, archive, force)
    src = resolve(source)
    art = read_artifact(src)  # every check of a model, before anything is written
    config = dict(art.config)
    run = src.parent if src.name == "model" else None
    if run is not None and "training" not in config and (run / "summary.json").exists():
        config["training"] = _run_json(run / "summary.json")  # a model costlab trained records it already
    if run is not None and (run / "report" / "metrics.json").exists():
        evaluation = _run_json(run / "report" / "metrics.json")
        if _evaluated(evaluation, art.config, run, src):
            config["evaluation"] = evaluation
        else:
            print(f"costlab: note: {run / 'report' / 'metrics.json'} scored another model than {src}; "
                  "not recorded as its evaluation", file=sys.stderr)
    for key, value in _dataset_info(config).items():
        config.setdefault(key, value)
    config["versions"] = _versions()
    config.pop("weights_sha256", None)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # every check passed: the folders on the way
        if archive:
            import tempfile

            with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
                save_artifact(Path(tmp) / "model", art.tensors, config)
                return pack_archive(Path(tmp) / "model", out)
        return save_artifact(out, art.tensors, config)
    except OSError as exc:  # a full disk, a folder that refuses the write: one line, naming where
        raise InputError(out, f"cannot be written: {exc.strerror or exc}") from None
