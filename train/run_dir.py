"""The directory of a training or fine-tuning run (what goes in it: ``fit.py``, ``finetune.py``,
``baselines.py``)."""

from __future__ import annotations

from pathlib import Path

from costlab.common.errors import UsageError


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
