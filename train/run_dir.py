"""The directory of a training or fine-tuning run (what goes in it: ``fit.py``, ``finetune.py``,
``baselines.py``)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from costlab.common.errors import UsageError
from costlab.common.locks import LockHeld, take_lock

LOCK = ".costlab_train.lock"
#: set (to a rank above 0) in the processes a distributed run launches besides the command's own
_RANKS = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")


def run_dir(path) -> Path:
    """The run directory ``path``, created if missing; an existing file there is refused, not overwritten."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory (a training run writes a directory)")
    out.mkdir(parents=True, exist_ok=True)
    return out


def old_checkpoints(out: Path) -> list:
    """The Lightning checkpoints a run directory holds from an earlier run."""
    folder = out / "checkpoints"
    return sorted(folder.glob("*.ckpt")) if folder.is_dir() else []


def check_fresh_start(out: Path, overwrite: bool, resumable: bool, resume: bool) -> None:
    """A run that starts afresh into a directory holding an earlier run's checkpoints would leave them beside its
    own (a later --resume could read theirs): refused unless ``overwrite``, which deletes them when the run starts
    (``resumable``: the command has --resume, named in the message; ``resume``: it was given, and found no
    checkpoints/last.ckpt)."""
    old = old_checkpoints(out)
    if old and not overwrite:
        if resume:
            raise UsageError(f"--resume: {out / 'checkpoints' / 'last.ckpt'} does not exist, though {out} holds "
                             f"checkpoints of an earlier run ({old[0]}); give another --out, or --overwrite "
                             "without --resume to train afresh into it (deleting them)")
        other = "--resume to continue that run, " if resumable else ""
        raise UsageError(f"--out {out}: holds the checkpoints of an earlier run ({old[0]}); give another --out, "
                         f"{other}or --overwrite to train afresh into it (deleting them)")


def run_lock(path, command: str = "train"):
    """The run directory's lock (an open file; closing it releases it), held for a whole training run: a second
    command training into the same directory is refused in one line (their checkpoints, config.yaml and model
    would be the two runs' mixed). Processes of rank above 0 of a distributed run take none (the first holds it)."""
    if any(os.environ.get(k, "0").strip() not in ("", "0") for k in _RANKS):
        return contextlib.nullcontext()
    out = run_dir(path)
    try:
        return take_lock(out / LOCK, wait=False, holder=command)
    except LockHeld as held:
        raise UsageError(f"{out}: another costlab {held.command} is training into this run dir; wait for it to end, or "
                         "give another --out") from None
