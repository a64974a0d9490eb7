"""A tuning work dir is owned by one process at a time: `costlab tune` and `costlab exploit` take the same
lock (an exclusive ``flock`` on ``.costlab_tune.lock``, held by the open file and released with the process
however it ends)."""

from __future__ import annotations

from pathlib import Path

from costlab.common.errors import UsageError

LOCK_FILE = ".costlab_tune.lock"


def lock_work_dir(work: Path):
    """The work dir's lock, or a UsageError when another run holds it."""
    import fcntl

    fh = open(Path(work) / LOCK_FILE, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise UsageError(f"{work}: another costlab tune is running in this work dir; wait for it to end, or tune "
                         "in another --work-dir") from None
    return fh
