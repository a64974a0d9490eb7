"""Writing a file whole or not at all: the one atomic writer of costlab.

Every file costlab writes outside an HDF5 transaction (a packed dataset's shards, a model's ``config.json``
and weights, a model archive, a MetaSchedule database it rewrites, the JSON state of a resumable command)
goes through :func:`atomic_file` / :func:`write_atomically`, which guarantee:

- a reader never sees half a file: the bytes go to a temporary file beside the target (same folder, so the
  same file system), ``.<name>.tmp-<random>``, which is flushed, ``fsync``-ed and renamed over the target;
  the folder is ``fsync``-ed after the rename (best effort) so the rename itself survives a power loss;
- no debris: an exception (or Ctrl-C) while writing deletes the temporary file and leaves the target as it was;
- permissions: a rewrite keeps the target's mode; a new file gets the mode a plain ``open`` would give it
  (``0o666`` less the umask), not ``mkstemp``'s ``0o600``;
- a path that is a symbolic link is written through: the link's target is replaced and the link stays.

HDF5 datasets have their own transaction (``costlab.datasets.store.DatasetWriter``: a copy edited in place,
a lock, debris of killed writers removed): that is not a whole-file write and does not use this.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator


def _umask() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _synced_temporary(path) -> Iterator[tuple]:
    """``(file, temporary path, final path)``: a binary file beside ``path`` (its target when a link), written in
    the block and, when the block ends normally, flushed, given the mode ``path`` has (a new file: the umask's)
    and synced to disk; removed when the block ends by an exception."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh, tmp, path
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:  # a full disk at a write or a sync names no file
            exc.filename = str(path)
        raise


@contextlib.contextmanager
def atomic_file(path) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through: what was written replaces ``path`` when the ``with`` block
    ends normally, and nothing changes when it ends by an exception (see the module's guarantees)."""
    with _synced_temporary(path) as (fh, tmp, path):
        yield fh
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def write_atomically(path, data: bytes | Iterable[bytes]) -> Path:
    """Replace ``path`` by ``data`` (bytes, or an iterable of bytes written one after the other) atomically."""
    with atomic_file(path) as fh:
        if isinstance(data, (bytes, bytearray, memoryview)):
            fh.write(data)
        else:
            fh.writelines(data)
    return Path(path)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM that arrive inside the block are handled when it ends, by the handlers they would have
    met (a process has other threads, so blocking the signals in this one would not hold them back). Outside the
    main thread, where handlers cannot be set, the block runs as it is."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) not in (signal.SIG_IGN, None):
            previous[sig] = signal.signal(sig, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


def write_together(files: dict) -> None:
    """Replace several files (path -> bytes), each as ``write_atomically`` does, with no Ctrl-C or SIGTERM between
    their renames: a model's weights and the config that names them by hash, where a stop between the two would
    leave neither model loadable. Such a signal waits until the last file is renamed (``signals_deferred``; the
    data is in memory, so that is a moment). Every file is written and synced under its temporary name before
    the first rename, so a write that fails (a full disk, a quota reported at the sync) changes nothing: the
    temporary files are removed. The renames run in the reverse order of ``files``."""
    ready = []  # (temporary path, final path), each written and synced
    with signals_deferred():
        try:
            for path, data in files.items():
                with _synced_temporary(path) as (fh, tmp, final):  # an OSError names the file
                    fh.write(data)
                ready.append((tmp, final))
            for tmp, final in reversed(ready):
                os.replace(tmp, final)
        except BaseException:
            for tmp, _final in ready:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise
    for folder in dict.fromkeys(final.parent for _tmp, final in ready):
        _fsync_dir(folder)


def home_expanded(value):
    """``value`` with a leading ``~`` or ``~/`` made the user's home, as the shell makes it of a word of its own:
    the shell leaves ``--out=~/runs`` as written, since the ``~`` does not start the word. Lists are expanded
    item by item; anything else (a number, ``~name``, a ``~`` within the text) is returned as it is."""
    if isinstance(value, list):
        return [home_expanded(item) for item in value]
    if isinstance(value, (str, Path)):
        text = str(value)
        if text == "~" or text.startswith("~/"):
            expanded = os.path.expanduser(text)
            return Path(expanded) if isinstance(value, Path) else expanded
    return value
