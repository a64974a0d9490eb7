"""The one file lock of costlab: an exclusive ``flock`` on a file, held by the open file and released when
it is closed or the process ends, however it ends (no stale lock after a kill).

Its users: a tuning work dir (``export/workdir.py``: one command at a time, a second one refused with the
name of the one running), a schedule library's folder and an HDF5 dataset (writers queue), and the machine
while a job measures (``cpu_lock.py``: jobs queue).
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO, Callable


class LockHeld(OSError):
    """Another process holds the lock; ``holder`` is the name it wrote into the file ("" when none)."""

    def __init__(self, path, holder: str):
        super().__init__(f"{path} is locked by {holder or 'another process'}")
        self.holder = holder

    @property
    def command(self) -> str:
        """The holder's command as a message names it ("another costlab tune"): its name, or "command" when the
        file holds none (or anything but a name)."""
        return self.holder if self.holder.isidentifier() else "command"


def take_lock(path, *, wait: bool = True, holder: str | None = None,
              on_wait: Callable[[], None] | None = None) -> IO:
    """An exclusive lock on ``path`` (created when missing); the returned open file holds it until closed.

    ``wait=False``: a ``LockHeld`` at once when another process holds it, carrying the name that process
    wrote. ``wait=True``: ``on_wait()`` is called when the lock is held elsewhere, then the call blocks until
    it is free. ``holder``: written into the file once the lock is taken (only the holder writes), for a
    refused process to read. Opening the file may raise ``OSError``."""
    fh = open(Path(path), "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        if not wait:
            try:
                fh.seek(0)
                name = fh.read(64).strip()
            except (OSError, ValueError):
                name = ""
            fh.close()
            raise LockHeld(path, name) from None
        if on_wait is not None:
            on_wait()
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except BaseException:
            fh.close()
            raise
    if holder is not None:
        fh.seek(0)
        fh.truncate()
        fh.write(holder)
        fh.flush()
    return fh
