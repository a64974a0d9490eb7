"""A tuning work dir is owned by one process at a time: `costlab tune`, `costlab exploit` and `costlab
transfer` take the same lock (an exclusive ``flock`` on ``.costlab_tune.lock``, held by the open file and released with the process
however it ends). The JSON state files that let a command resume in its work dir (``exploit_state.json``,
``transfer.json``) are read and written by ``read_state`` / ``write_state``."""

from __future__ import annotations

import json
from pathlib import Path

from costlab.common.errors import InputError, UsageError
from costlab.common.files import write_atomically

LOCK_FILE = ".costlab_tune.lock"
RUN_FILE = "costlab_run.json"  # the options of the tuning run a work dir holds, and the host that measured it


def check_same_host(work: Path, command: str) -> None:
    """A work dir's records are one machine's timings: a UsageError, in one line, when its ``costlab_run.json``
    records another host than this one (a command here would mix two machines' records in one database and
    compare them). A work dir without a recorded host (made before hosts were recorded) passes."""
    from costlab.common.host import describe_host, host_difference, host_info, same_host

    try:
        there = json.loads((Path(work) / RUN_FILE).read_text()).get("host")
    except (OSError, ValueError, AttributeError):
        return
    here = host_info()
    if isinstance(there, dict) and not same_host(there, here):
        raise UsageError(f"{work} holds a run measured on {describe_host(there)}; this machine is "
                         f"{describe_host(here)} ({host_difference(there, here)}): {command} here would mix two "
                         f"machines' timings in one database; use another --work-dir (--transfer-from {work} starts "
                         "from its programs)")


def lock_work_dir(work: Path, command: str = "tune"):
    """The work dir's lock, or a UsageError when another run holds it, naming the command that holds it.
    The holder writes its command's name into the lock file (only the holder writes: the lock is taken
    first), which a refused command reads to say what is running."""
    import fcntl

    fh = open(Path(work) / LOCK_FILE, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            fh.seek(0)
            holder = fh.read(64).strip()
        except (OSError, ValueError):
            holder = ""
        fh.close()
        holder = holder if holder.isidentifier() else "command"
        raise UsageError(f"{work}: another costlab {holder} is running in this work dir; wait for it to end, or "
                         "use another --work-dir") from None
    fh.seek(0)
    fh.truncate()
    fh.write(command)
    fh.flush()
    return fh


def read_state(path: Path, afresh: str, default: dict, key: str | None = None) -> dict:
    """The JSON object of a state file, ``default`` when there is none yet. A file that is not JSON, not an
    object, or (with ``key``) has no object under ``key`` is an InputError naming it and saying how to start
    afresh: ``afresh`` completes "remove it to ...", e.g. "transfer afresh"."""
    path = Path(path)
    if not path.exists():
        return default
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(path, f"is damaged ({type(exc).__name__}); remove it to {afresh}") from None
    if key is None and not isinstance(state, dict):
        raise InputError(path, f"is damaged (not a JSON object); remove it to {afresh}")
    if key is not None and (not isinstance(state, dict) or not isinstance(state.get(key), dict)):
        raise InputError(path, f"is damaged (no {key!r} object); remove it to {afresh}")
    return state


def write_state(path: Path, state: dict) -> None:
    """Replace a state file by ``state`` atomically (a reader or a resumed run never sees half of it)."""
    write_atomically(path, json.dumps(state, indent=1).encode())
