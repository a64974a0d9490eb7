"""Reading and writing costlab datasets (one HDF5 file each; layout in ``schema.py``).

Reading needs only h5py and numpy. Writing is a transaction: ``DatasetWriter`` works on a copy of the file
and renames it over the original only when the ``with`` block ends without an error, so a crash or Ctrl-C
leaves the earlier file intact. Records are deduplicated by program id per platform, so re-running an
import or a measurement adds nothing twice.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import time
from itertools import chain
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from costlab import __version__
from costlab.common.errors import CostlabError, DatasetFormatError, InputError
from costlab.common.files import signals_deferred
from costlab.common.host import describe_host, host_difference, same_host
from costlab.common.locks import take_lock
from costlab.datasets import schema
from costlab.datasets.names import check_name, check_platform_id
from costlab.datasets.records import ERROR_MAX, ERROR_MIN, RecordBatch, mean_latency, scores
from costlab.datasets.splits import Split
from costlab.metaschedule.targets import target_identity


@dataclass
class Platform:
    id: str
    target: dict
    spec: dict | None = None
    host: dict | None = None  # the machine that measured the platform's records (costlab/common/host.py), if known


@dataclass
class Task:
    index: int
    workload_hash: str
    dialect: str  # "ms" (MetaSchedule IRModule) or "ansor" (Ansor workload key)
    workload: str  # MS: base64 IRModule JSON as in database_workload.json; Ansor: the workload key
    name: str = ""
    kernel_class: str = ""
    flops: float = 0.0
    extra: dict = field(default_factory=dict)


def _open_h5(path, mode: str) -> h5py.File:
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file")
    if path.is_dir():
        raise InputError(path, "is a directory, not a costlab dataset (.h5 file)")
    try:
        f = h5py.File(path, mode)
    except OSError as exc:
        raise DatasetFormatError(path, f"not a costlab dataset (not an HDF5 file: {exc})") from None
    version = f.attrs.get(schema.FORMAT_ATTR)
    if version is None:
        f.close()
        raise DatasetFormatError(path, f"not a costlab dataset (HDF5 file without '{schema.FORMAT_ATTR}')")
    number = format_number(version)
    if number is None:
        f.close()
        raise DatasetFormatError(path, f"damaged dataset: '{schema.FORMAT_ATTR}' must be a positive integer, not "
                                       f"{_shown(version)}")
    if number > schema.FORMAT_VERSION:
        f.close()
        raise DatasetFormatError(
            path,
            f"written by a newer costlab (format {number}; this costlab {__version__} reads up to "
            f"{schema.FORMAT_VERSION}): upgrade costlab",
        )
    return f


def format_number(value) -> int | None:
    """The schema version an HDF5 attribute holds, or None when it is not one positive integer (a string,
    an array, a fraction: a file damaged or written by something else)."""
    if isinstance(value, np.ndarray):
        if value.shape != ():
            return None
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
        return None
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        return None
    return int(value) if value >= 1 else None


def _shown(value) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    text = repr(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_attr(path, g, name: str, what: str):
    """An attribute holding JSON text (a platform's target, spec, host); malformed JSON is an InputError
    naming the file and the object, not a traceback."""
    raw = g.attrs.get(name, "")
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        raise DatasetFormatError(path, f"damaged dataset: {what} {name} is not valid JSON ({_shown(raw)})") from None


def _str_list(ds, path=None) -> list[str]:
    """A string column; text that is not UTF-8 (a damaged file) is a DatasetFormatError naming the file and
    the column, not a UnicodeDecodeError's traceback."""
    try:
        return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in ds[...]]
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(path if path is not None else ds.file.filename,
                                 f"damaged dataset: column {ds.name} holds text that is not UTF-8 ({exc.reason} "
                                 f"at byte {exc.start})") from None


def _read_tasks(f: h5py.File, path) -> list[Task]:
    """The tasks of a dataset; ``path`` is the file to name in errors (a writer reads a temporary copy)."""
    if "tasks" not in f:
        return []
    g = f["tasks"]
    missing = [c for c in (*schema.TASK_STR_COLUMNS, "flops") if c not in g]
    if missing:
        raise DatasetFormatError(path, f"damaged dataset: the task table has no column {', '.join(missing)}")
    cols = {c: _str_list(g[c], path) for c in schema.TASK_STR_COLUMNS}
    flops = g["flops"][...]
    if any(len(v) != len(flops) for v in cols.values()):
        raise DatasetFormatError(path, "damaged dataset: the task table's columns differ in length")
    tasks = []
    for i in range(len(flops)):
        try:
            extra = json.loads(cols["extra"][i] or "{}")
        except json.JSONDecodeError:
            raise DatasetFormatError(path, f"damaged dataset: task {i}'s extra is not valid JSON "
                                           f"({_shown(cols['extra'][i])})") from None
        tasks.append(Task(index=i, workload_hash=cols["workload_hash"][i], dialect=cols["dialect"][i],
                          workload=cols["workload"][i], name=cols["name"][i], kernel_class=cols["kernel_class"][i],
                          flops=float(flops[i]), extra=extra))
    return tasks


def _read_platforms(f: h5py.File, path) -> dict[str, Platform]:
    """The platforms of a dataset; ``path`` is the file to name in errors (a writer reads a temporary copy)."""
    out = {}
    for pid, g in f.get("platforms", {}).items():
        what = f"platform {pid!r}:"
        target = _json_attr(path, g, "target", what)
        if not isinstance(target, dict):
            raise DatasetFormatError(path, f"damaged dataset: {what} target must be a JSON object, not "
                                           f"{_shown(g.attrs.get('target'))}")
        out[pid] = Platform(pid, target, _json_attr(path, g, "spec", what), _json_attr(path, g, "host", what))
    return out


NETWORK_COLUMNS = ("names", "network", "task", "weight")
# A platform's record columns and the kind of number each holds (numpy's dtype.kind: integer, unsigned, float)
RECORD_COLUMNS = {"task": "iu", "program_id": "u", "error": "iu", "timestamp": "f"}
RAGGED_COLUMNS = {"costs": "f", "schedule": "u"}


def _column_problem(g, name: str, kinds: str) -> str | None:
    """What is wrong with column ``name`` of group ``g`` (absent, not a 1-D column, numbers of another kind),
    or None; from HDF5's metadata alone."""
    ds = g.get(name)
    if not isinstance(ds, h5py.Dataset):
        return f"no column {name!r}"
    if len(ds.shape) != 1 or ds.dtype.kind not in kinds:
        return f"column {name!r} is not a column of numbers of the right kind ({ds.dtype}, shape {ds.shape})"
    return None


def check_records(f: h5py.File, path) -> None:
    """Refuse (DatasetFormatError naming the file and platform) a records group without one of its columns, or
    whose columns differ in length: from HDF5's metadata alone (presence, kinds of number, lengths), so that
    opening a dataset stays cheap however many records it holds. ``path`` is the file to name."""
    recs = f.get("records")
    if recs is None:
        return
    if not isinstance(recs, h5py.Group):
        raise DatasetFormatError(path, "damaged dataset: 'records' is not a group")
    platforms = f.get("platforms", {})
    for pid, g in recs.items():
        what = f"damaged dataset: the records of platform {pid!r}"
        if not isinstance(g, h5py.Group):
            raise DatasetFormatError(path, f"{what} are not a group")
        if pid not in platforms:  # every command that reads them looks the platform's target and host up
            raise DatasetFormatError(path, f"{what} are not in the platform table (platforms: "
                                           f"{', '.join(sorted(platforms)) or 'none'})")
        for name, kinds in RECORD_COLUMNS.items():
            why = _column_problem(g, name, kinds)
            if why:
                raise DatasetFormatError(path, f"{what} have {why}")
        n = g["task"].shape[0]
        for name, kinds in RAGGED_COLUMNS.items():
            ragged = g.get(name)
            if not isinstance(ragged, h5py.Group):
                raise DatasetFormatError(path, f"{what} have no column {name!r}")
            why = _column_problem(ragged, "values", kinds) or _column_problem(ragged, "offsets", "u")
            if why:
                raise DatasetFormatError(path, f"{what} have in {name!r} {why}")
            if ragged["offsets"].shape[0] != n + 1:
                raise DatasetFormatError(path, f"{what} have {n} rows but {ragged['offsets'].shape[0]} offsets "
                                               f"of {name!r} (one more than the rows)")
        lengths = {name: g[name].shape[0] for name in RECORD_COLUMNS}
        if len(set(lengths.values())) != 1:
            raise DatasetFormatError(path, f"{what} have columns of different lengths "
                                           f"({', '.join(f'{k} {v}' for k, v in lengths.items())})")


def _read_networks(f: h5py.File, path, tasks: int) -> dict[str, list[tuple[int, float]]]:
    """The networks of a dataset of ``tasks`` tasks; ``path`` is the file to name in errors (a writer reads a
    temporary copy). The table is small and read whole, so its network and task indices are checked too."""
    if "networks" not in f:
        return {}
    g = f["networks"]
    if not isinstance(g, h5py.Group):
        raise DatasetFormatError(path, "damaged dataset: 'networks' is not a group")
    missing = [c for c in NETWORK_COLUMNS if not isinstance(g.get(c), h5py.Dataset)]
    if missing:
        raise DatasetFormatError(path, f"damaged dataset: the network table has no column {', '.join(missing)}")
    names = _str_list(g["names"], path)
    net, task, weight = g["network"][...], g["task"][...], g["weight"][...]
    if not (net.ndim == task.ndim == weight.ndim == 1 and len(net) == len(task) == len(weight)):
        raise DatasetFormatError(path, "damaged dataset: the network table's columns differ in length")
    try:
        net, task, weight = net.astype(np.int64), task.astype(np.int64), weight.astype(np.float64)
    except (TypeError, ValueError):
        raise DatasetFormatError(path, "damaged dataset: the network table's columns are not numbers") from None
    if len(net) and (net.min() < 0 or net.max() >= len(names)):
        raise DatasetFormatError(path, f"damaged dataset: the network table has weights of network "
                                       f"{int(net.max() if net.min() >= 0 else net.min())}, and names "
                                       f"{len(names)} networks")
    if len(task) and (task.min() < 0 or task.max() >= tasks):
        bad = int(task.max() if task.min() >= 0 else task.min())
        raise DatasetFormatError(path, f"damaged dataset: the network {names[int(net[list(task).index(bad)])]!r} "
                                       f"weighs task {bad}, and the dataset has {tasks} tasks")
    out: dict[str, list[tuple[int, float]]] = {n: [] for n in names}
    for n, t, w in zip(net.tolist(), task.tolist(), weight.tolist()):
        out[names[n]].append((t, w))
    return out


class RecordTable:
    """The records of one platform, read lazily column by column."""

    def __init__(self, group: h5py.Group, platform: str, path, n_tasks: int):
        self._g = group
        self.platform = platform
        self._path = path  # the dataset's file and its number of tasks: what checked_task() checks and names
        self._n_tasks = n_tasks

    def __len__(self) -> int:
        return self._g["task"].shape[0]

    def column(self, name: str, rows=None) -> np.ndarray:
        ds = self._g[name]
        return ds[...] if rows is None else ds[np.asarray(rows, dtype=np.int64)]

    @property
    def task(self) -> np.ndarray:
        return self._g["task"][...]

    def checked_task(self) -> np.ndarray:
        """The task column, every index checked against the task table: a record of a task the table lacks (a
        damaged file) is one DatasetFormatError naming the platform and the index. Whatever counts records per
        task reads the column through this; unchecked, np.bincount fails on a negative index with a traceback and
        counts an index past the table as one more task. One min and max over the column, read anyway."""
        task = self.task
        if task.size:
            low, high = int(task.min()), int(task.max())
            if low < 0 or high >= self._n_tasks:
                raise DatasetFormatError(self._path, f"damaged dataset: records of platform {self.platform!r} belong "
                                                     f"to task {low if low < 0 else high}, and the dataset has "
                                                     f"{self._n_tasks} tasks")
        return task

    @property
    def program_id(self) -> np.ndarray:
        return self._g["program_id"][...]

    @property
    def error(self) -> np.ndarray:
        return self._g["error"][...]

    def costs(self, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Raw costs as (flat values, offsets)."""
        return schema.read_ragged(self._g["costs"], rows)

    def schedules(self, rows=None) -> list[str]:
        return schema.decode_strings(*schema.read_ragged(self._g["schedule"], rows))

    def latency(self, rows=None) -> np.ndarray:
        """Mean measured latency per record (seconds); ``inf`` for failed records."""
        values, offsets = self.costs(rows)
        error = self._g["error"][...] if rows is None else self.column("error", rows)
        return mean_latency(values, offsets, error)

    def scores(self) -> np.ndarray:
        """Labels of all records: per task ``best / latency``, failures 0."""
        return scores(self.task, self.latency())

    def rows_by_task(self, task: np.ndarray | None = None) -> dict[int, np.ndarray]:
        """Record indices per task index; ``task``: the task column when the caller has read it already."""
        task = self.task if task is None else task
        order = np.argsort(task, kind="stable")
        bounds = np.flatnonzero(np.diff(task[order])) + 1
        return {int(task[g[0]]): g for g in np.split(order, bounds) if g.size}


@dataclass
class TaskRecords:
    """All records of one task on one platform, with labels derived on read."""

    task: Task
    platform: str
    rows: np.ndarray  # record indices in the platform's table
    program_id: np.ndarray
    error: np.ndarray
    latency: np.ndarray
    score: np.ndarray
    _table: RecordTable

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def schedules(self) -> list[str]:
        return self._table.schedules(self.rows)


class Dataset:
    """A costlab dataset opened for reading. Use as a context manager, or call ``close()``."""

    def __init__(self, path):
        self.path = Path(path)
        self._f = _open_h5(self.path, "r")
        try:
            self.format_version = format_number(self._f.attrs[schema.FORMAT_ATTR])
            self.platforms: dict[str, Platform] = _read_platforms(self._f, self.path)
            self.tasks: list[Task] = _read_tasks(self._f, self.path)
            self.networks: dict[str, list[tuple[int, float]]] = _read_networks(self._f, self.path,
                                                                               len(self.tasks))
            check_records(self._f, self.path)
        except BaseException:
            self._f.close()
            raise

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
        if exc_type is not None and issubclass(exc_type, OSError) and hdf5_read_failure(exc):
            # a chunk that does not decompress (a bit flip, a bad copy): one line naming the file, not h5py's traceback
            raise DatasetFormatError(self.path, f"is damaged: HDF5 could not read its data ({str(exc).strip()}); "
                                                "restore it from a copy, or `costlab dataset unpack` its pack") from None

    def close(self) -> None:
        self._f.close()

    @property
    def h5(self) -> h5py.File:
        return self._f

    def record_platforms(self) -> list[str]:
        return sorted(self._f.get("records", {}).keys())

    def records(self, platform: str) -> RecordTable:
        check_platform_id(platform)  # a name, never a path into the file
        if platform not in self._f.get("records", {}):
            known = ", ".join(self.record_platforms()) or "none"
            raise InputError(self.path, f"no records for platform {platform!r} (platforms with records: {known})")
        return RecordTable(self._f["records"][platform], platform, self.path, len(self.tasks))

    def num_records(self, platform: str) -> int:
        return len(self.records(platform))

    def iter_tasks(self, platform: str, tasks=None):
        """Yield ``TaskRecords`` per task (in task order) without loading schedules until asked."""
        table = self.records(platform)
        task = table.checked_task()
        pids, errors = table.program_id, table.error
        latency = table.latency()
        score = scores(task, latency)
        groups = table.rows_by_task(task)
        wanted = sorted(groups) if tasks is None else [t for t in tasks if t in groups]
        for t in wanted:
            rows = groups[t]
            yield TaskRecords(self.tasks[t], platform, rows, pids[rows], errors[rows], latency[rows], score[rows],
                              table)

    def task_records(self, platform: str, task: int) -> TaskRecords:
        for tr in self.iter_tasks(platform, [task]):
            return tr
        raise InputError(self.path, f"task {task} has no records on platform {platform!r}")

    def split_names(self) -> list[str]:
        return sorted(self._f.get("splits", {}).keys())

    def split(self, name: str):
        check_name(name, "split name", "task-s0")
        if name not in self._f.get("splits", {}):
            known = ", ".join(self.split_names()) or "none"
            raise InputError(self.path, f"no split named {name!r} (splits: {known})")
        try:
            split = Split.read(self._f["splits"][name], name)
        except ValueError as exc:  # a damaged split: one line naming the file and the split
            raise DatasetFormatError(self.path, f"damaged dataset: split {name!r} {exc}") from None
        return split.widened(self.networks)


def hdf5_read_failure(exc: OSError) -> bool:
    """Whether ``exc`` is HDF5's failure to read stored data (h5py raises it as a bare OSError, no file named)."""
    text = str(exc)
    return exc.errno is None and ("synchronously read" in text or "filter returned failure" in text
                                  or "Can't read data" in text)


def open_dataset(path) -> Dataset:
    return Dataset(path)


REPACK_WASTE = 8 << 20  # repack a transaction's file when more than this many bytes are dead space


SPACE_MARGIN = 8 << 20  # room beyond a write's own bytes: chunks an append rewrites, HDF5 metadata


def ensure_room(path, folder, nbytes: int, kept: str) -> None:
    """Refuse a write of ``nbytes`` to the HDF5 file ``path`` that ``folder``'s disk has no room for (with
    ``SPACE_MARGIN``): one InputError naming the file, ``kept`` saying what is left as it was."""
    free = shutil.disk_usage(folder).free
    need = int(nbytes) + SPACE_MARGIN
    if free < need:
        raise InputError(path, f"no space left on the device for this write ({free / 1e6:.1f} MB free, "
                         f"about {need / 1e6:.1f} MB needed); {kept}")
_ABANDONED: list = []  # files HDF5 failed to write (a full disk): never closed, see DatasetWriter._discard


def check_import_host(writer: "DatasetWriter", pid: str, host: dict | None) -> None:
    """Refuse imported records for a platform whose records are another machine's, or whose machine is not
    known the same way: records of one machine (``host``) where the dataset holds the platform as another
    machine's or an unknown one's (imported without a host: the host would be stated for those records too), and
    records of an unknown machine (no ``host``: a log, a database without its run record) where a measurement
    recorded the platform's machine. Either way the labels would compare two machines' timings. A machine stated
    by ``dataset set-machine`` (for records that came without one) takes more of them."""
    known = writer.platforms[pid].host if pid in writer.platforms else None
    has_records = pid in writer.platforms and len(writer.known_program_ids(pid)) > 0
    if host and known and not same_host(known, host):
        raise InputError(writer.path, f"platform {pid!r} holds records measured on {describe_host(known)}; these "
                                      f"were measured on {describe_host(host)} ({host_difference(known, host)}): "
                                      "import them as another --platform")
    if host and not known and has_records:
        raise InputError(writer.path, f"platform {pid!r} holds records of an unknown machine (imported without "
                                      f"--host); these were measured on {describe_host(host)}: import them as "
                                      "another --platform, or state the machine of the records it holds first "
                                      "(costlab dataset set-machine)")
    if not host and known and not known.get("stated") and has_records:
        raise InputError(writer.path, f"platform {pid!r} holds records measured on {describe_host(known)}; these "
                                      "come without the machine that measured them: import them as another "
                                      "--platform, or with --host FILE where that machine measured them (a host "
                                      "record, or the costlab_run.json of a run there)")


def check_same_target(path, pid: str, platform, target: dict) -> None:
    """Refuse records of ``target`` for a dataset's ``platform`` (None: a new one) of another target
    (``target_identity``): its labels would compare two setups' timings."""
    if platform is not None and target and platform.target and target_identity(platform.target) != target_identity(target):
        raise InputError(path, f"platform {pid!r} holds records of target {target_identity(platform.target)}; these "
                               f"are of {target_identity(target)}: give them another --platform")


def _too_large(err: BaseException) -> bool:
    import errno

    return getattr(err, "errno", None) == errno.EFBIG or "File too large" in str(err) or "errno = 27" in str(err)


def _no_space(err: BaseException) -> bool:
    """A write refused for room: a full disk, a quota, or a file size limit (``ulimit -f``; HDF5 reports each as an
    OSError or a failed filter whose text holds the errno)."""
    import errno

    return (getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(err)
            or "errno = 28" in str(err) or "errno = 122" in str(err) or _too_large(err))


def _write_error(path: Path, err: BaseException) -> InputError:
    if _too_large(err):
        return InputError(path, "the file grew past this process's file size limit while writing (File too large); "
                                "the dataset is unchanged")
    if _no_space(err):
        return InputError(path, "no space left on the device while writing; the dataset is unchanged")
    reason = getattr(err, "strerror", None) or str(err).split("(")[0].strip() or type(err).__name__
    return InputError(path, f"cannot write ({reason}); the dataset is unchanged")


def abandoned_files() -> bool:
    """True when a transaction's file could not be closed (HDF5 failed to write it): the process must end
    without running HDF5's clean-up (``os._exit``), which would crash on that file."""
    return bool(_ABANDONED)


class DatasetWriter:
    """A write transaction on a dataset file (created if missing).

    Everything happens on a temporary copy beside the file; leaving the ``with`` block normally renames
    it over the original, leaving it by an exception (or Ctrl-C) deletes the copy. A path that is a symbolic
    link is written through: the copy, the rename and the lock are beside the link's target, and the link
    stays as it is.

    Not ``costlab.common.files.write_atomically``: that writes a file whole from bytes, while a transaction
    starts from a copy of the existing file that HDF5 edits in place (and may repack), holds a lock for its
    whole length and removes the copies of killed writers; only its final fsync and rename are alike.
    """

    FLUSH_ROWS = 1 << 16

    def __init__(self, path):
        path = Path(path)
        # renaming the copy over a link would replace the link and leave the dataset it points to unchanged
        self.path = Path(os.path.realpath(path)) if path.is_symlink() else path
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._f: h5py.File | None = None

    def check(self) -> None:
        """Refuse, before long work whose result this writer is to take (extracting networks, say), a dataset
        that no transaction could write: a file that is no costlab dataset, a missing or read-only folder.
        Nothing is written or locked."""
        folder = self.path.parent if str(self.path.parent) else Path(".")
        if not folder.is_dir():
            raise InputError(self.path, f"directory {folder} does not exist")
        if self.path.exists():
            with _open_h5(self.path, "r") as f:
                _read_platforms(f, self.path)
        if not os.access(folder, os.W_OK | os.X_OK):  # the transaction's copy and lock are made beside the file
            raise InputError(self.path, f"cannot write (its folder {folder} is not writable)")

    # -- transaction -------------------------------------------------------------------------------
    def _lock(self) -> None:
        """One writer at a time per dataset: an exclusive lock on ``.<name>.lock`` beside it, held for the
        whole transaction, so two commands writing the same file (a measurement and an extract) queue
        instead of one silently overwriting the other's commit."""
        import sys

        if not self.path.parent.exists():
            raise InputError(self.path, f"directory {self.path.parent} does not exist")
        began = time.perf_counter()
        self._lock_fh = take_lock(self.path.with_name(f".{self.path.name}.lock"), on_wait=lambda: print(
            f"costlab: waiting for another command writing {self.path} ...", file=sys.stderr))
        self.waited = time.perf_counter() - began  # seconds another writer held the file: not this one's cost

    def _unlock(self) -> None:
        self._lock_fh.close()  # closing releases the lock

    def __enter__(self) -> "DatasetWriter":
        try:
            self._lock()
        except OSError as exc:  # the lock file beside the dataset cannot be made (a read-only folder)
            raise _write_error(self.path, exc) from None
        self._catch_swallowed()
        try:
            self._remove_stale()
            return self._begin()
        except BaseException as exc:
            self._discard()
            self._release()
            if isinstance(exc, OSError) and not isinstance(exc, CostlabError):
                raise _write_error(self.path, exc) from None
            raise

    def _remove_stale(self) -> None:
        """Temporary copies left by writers that were killed (SIGKILL, power loss): the lock is held, so no
        other writer of this file is running and every such copy is debris."""
        for stale in self.path.parent.glob(f".{glob.escape(self.path.name)}.tmp-*"):
            try:
                stale.unlink()
            except OSError:
                pass

    def _discard(self) -> None:
        if self._f is not None:
            if self._swallowed:
                # HDF5 crashes closing a file whose writes failed: its handle is left to the process's exit
                _ABANDONED.append(self._f)
            else:
                self._f.close()
            self._f = None
        for path in (self._tmp, self._tmp.with_name(self._tmp.name + ".packed")):
            if path.exists():
                path.unlink()

    def _raise_swallowed(self) -> None:
        """HDF5 reports a failed write of a dataset it closes from a destructor, where Python only prints it
        (sys.unraisablehook); flushing the file after that crashes the interpreter. Those errors are recorded
        during the transaction and raised here, before the file is flushed."""
        if self._swallowed:
            raise self._swallowed[0]

    def _begin(self) -> "DatasetWriter":
        if self.path.exists():
            with _open_h5(self.path, "r") as f:  # validates before any copy: a readable costlab dataset
                _read_platforms(f, self.path)
                check_records(f, self.path)
            self.ensure_space(os.path.getsize(self.path))
            shutil.copyfile(self.path, self._tmp)
            shutil.copymode(self.path, self._tmp)  # a rewrite keeps the file's permissions
            self._f = h5py.File(self._tmp, "a")
        else:
            self._f = h5py.File(self._tmp, "w")
            self._f.attrs[schema.FORMAT_ATTR] = schema.FORMAT_VERSION
        self._f.attrs["costlab_version"] = __version__
        self.platforms = _read_platforms(self._f, self.path)
        self.tasks = _read_tasks(self._f, self.path)
        self._task_key = {(t.dialect, t.workload_hash): t.index for t in self.tasks}
        self.networks = _read_networks(self._f, self.path, len(self.tasks))
        self._networks_read = {n: sorted(v) for n, v in self.networks.items()}
        self._tables_read = self._table_state() if "tasks" in self._f else None
        self._known_ids: dict[str, np.ndarray] = {}
        self._pending: dict[str, list[dict]] = {}  # platform -> column chunks not yet written
        self.added: dict[str, int] = {}
        self.duplicates: dict[str, int] = {}
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt) and self._swallowed:
                # HDF5 failed to write this transaction's copy (a full disk, a file size limit): whatever the
                # block raised after that (a failed filter, read as a damaged dataset) is that write's failure
                raise self._swallowed[0]
            if exc_type is not None and issubclass(exc_type, OSError) and _no_space(exc):
                raise exc  # reported below as one line
            if exc_type is not None and issubclass(exc_type, OSError) and hdf5_read_failure(exc):
                # the dataset's stored records do not decompress: one line naming it (it is left as it was)
                raise DatasetFormatError(self.path, f"is damaged: HDF5 could not read its data ({str(exc).strip()}); "
                                                    "restore it from a copy, or `costlab dataset unpack` its pack; "
                                                    "it is unchanged") from None
            if exc_type is None:
                # Ctrl-C or SIGTERM during the commit would land inside h5py's close callbacks, where it is
                # swallowed; held back until the commit is done or undone, it is raised right after
                with signals_deferred():
                    self._commit()
        except OSError as err:
            raise _write_error(self.path, err) from None
        finally:
            self._discard()
            self._release()

    def _release(self) -> None:
        sys.unraisablehook = self._previous_hook
        self._unlock()

    def _catch_swallowed(self) -> None:
        self._swallowed: list[BaseException] = []
        self._previous_hook = previous = sys.unraisablehook

        def hook(unraisable):
            if self._tmp.name in str(unraisable.exc_value):  # a failed write of this transaction's file
                self._swallowed.append(_write_error(self.path, unraisable.exc_value))
            else:
                previous(unraisable)

        sys.unraisablehook = hook

    def _commit(self) -> None:
        for pid in list(self._pending):
            self._flush(pid)
        self._write_tables()
        self._raise_swallowed()
        self._f.flush()
        wasted = self._wasted_bytes()
        self._f.close()
        self._f = None
        if wasted > REPACK_WASTE and shutil.disk_usage(self._tmp.parent).free > os.path.getsize(self._tmp) + SPACE_MARGIN:
            self._repack()  # (skipped when the disk has no room for the compact copy: it only saves space)
        with open(self._tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(self._tmp, self.path)

    @property
    def h5(self) -> h5py.File:
        return self._f

    def ensure_space(self, nbytes: int) -> None:
        """Refuse (one clear error, nothing written) a write of ``nbytes`` that the disk has no room for.

        HDF5 cannot recover from a write that fails on a full disk (it crashes closing the file), so every
        write of the transaction checks first, with room for the chunks that an append rewrites."""
        ensure_room(self.path, self._tmp.parent, nbytes, "the dataset is unchanged")

    # -- space -------------------------------------------------------------------------------------
    def _wasted_bytes(self) -> int:
        """File size minus the bytes its datasets hold. HDF5 never reuses the space of a deleted object or
        of a rewritten compressed chunk after the file is closed, so appending small batches (one
        transaction per measured batch) would otherwise grow the file many times over its content."""
        live = [0]

        def add(_, obj):
            if isinstance(obj, h5py.Dataset):
                live[0] += obj.id.get_storage_size()

        self._f.visititems(add)
        return os.path.getsize(self._tmp) - live[0]

    def _repack(self) -> None:
        """Rewrite the transaction's file compactly: every object copied (raw chunks, no recompression)."""
        packed = self._tmp.with_name(self._tmp.name + ".packed")
        try:
            with h5py.File(self._tmp, "r") as src, h5py.File(packed, "w") as dst:
                for k, v in src.attrs.items():
                    dst.attrs[k] = v
                for name in src:
                    src.copy(src[name], dst, name=name)
            shutil.copymode(self._tmp, packed)
            os.replace(packed, self._tmp)
        finally:
            if packed.exists():
                packed.unlink()

    # -- tables ------------------------------------------------------------------------------------
    def add_platform(self, pid: str, target: dict, spec: dict | None = None, host: dict | None = None) -> str:
        """Add a platform, or update the spec / host of an existing one (a host is only ever set once; a target
        where none is). Records of another target (``target_identity``: kind, CPU, cores, model) than the platform's
        are refused: its labels would compare two setups' timings."""
        check_platform_id(pid)
        old = self.platforms.get(pid)
        check_same_target(self.path, pid, old, target)
        fill = old is not None and bool(target) and not old.target
        if old is None or spec is not None or (host is not None and old.host is None) or fill:
            self.platforms[pid] = Platform(pid, dict(target) if old is None or spec is not None or fill else old.target,
                                           spec if spec is not None else (old and old.spec),
                                           (old and old.host) or host)
        return pid

    def set_machine(self, pid: str, spec: dict | None = None, host: dict | None = None) -> None:
        """State the machine an existing platform's records were measured on: a hardware spec, replacing the one
        stored, or a host record (set where none is), which drops a stored spec, since a stored spec wins over
        the host record when features are computed."""
        old = self.platforms[pid]
        self.platforms[pid] = Platform(pid, old.target, None if host is not None else spec, old.host or host)

    def rename_platform(self, old: str, new: str, target: dict | None = None) -> None:
        """Give a platform's records (and feature caches) another id, and optionally another target: for a
        platform named after the wrong machine or measured under the wrong settings."""
        check_platform_id(new)
        if old not in self.platforms:
            raise InputError(self.path, f"no platform {old!r} (platforms: {', '.join(sorted(self.platforms)) or 'none'})")
        if new in self.platforms:
            raise InputError(self.path, f"platform {new!r} exists already")
        f = self._f
        if old in f.get("records", {}):
            f.move(f"records/{old}", f"records/{new}")
        was = self.platforms[old]
        # features may depend on the target (PaCM's cache levels, PSA's hardware): a new target drops them
        keep_features = target is None or dict(target) == was.target
        for cache in f.get("features", {}).values():
            if old in cache:
                if keep_features:
                    cache.move(old, new)
                else:
                    del cache[old]
        del self.platforms[old]
        self.platforms[new] = Platform(new, dict(target) if target is not None else was.target, was.spec, was.host)
        self._known_ids.pop(old, None)

    def find_task(self, dialect: str, workload_hash: str) -> int | None:
        return self._task_key.get((dialect, workload_hash))

    def add_task(self, workload_hash: str, dialect: str, workload: str, name: str = "",
                 kernel_class: str = "", flops: float = 0.0, extra: dict | None = None) -> int:
        """Index of the task with this workload, added if new."""
        key = (dialect, workload_hash)
        if key in self._task_key:
            return self._task_key[key]
        idx = len(self.tasks)
        self.tasks.append(Task(idx, workload_hash, dialect, workload, name, kernel_class, float(flops), extra or {}))
        self._task_key[key] = idx
        return idx

    def set_network(self, name: str, weights: list[tuple[int, float]]) -> None:
        """The tasks of a network and the weight (number of occurrences) of each; replaces an earlier entry
        (``replaced_networks`` says which the transaction changed)."""
        merged: dict[int, float] = {}
        for t, w in weights:
            if not 0 <= int(t) < len(self.tasks):  # the file would be refused as damaged when opened next
                raise ValueError(f"network {name!r}: task {int(t)} is not one of the dataset's {len(self.tasks)} tasks")
            merged[int(t)] = merged.get(int(t), 0.0) + float(w)
        self.networks[name] = sorted(merged.items())

    def replaced_networks(self) -> list[str]:
        """What this transaction did to networks the dataset held before it (another task list or other weights),
        one line each, for the command to say."""
        return [f"network {n!r} replaced: it had {len(old)} tasks, it has {len(self.networks[n])} now"
                for n, old in self._networks_read.items() if n in self.networks and self.networks[n] != old]

    def _table_state(self):
        """The tables' content, to tell whether a transaction changed them (strings compare by identity first)."""
        tasks = [(t.workload_hash, t.dialect, t.workload, t.name, t.kernel_class, t.flops,
                  json.dumps(t.extra, sort_keys=True)) for t in self.tasks]
        platforms = {p: (json.dumps(v.target, sort_keys=True), json.dumps(v.spec, sort_keys=True),
                         json.dumps(v.host, sort_keys=True))
                     for p, v in self.platforms.items()}
        return tasks, {n: list(v) for n, v in self.networks.items()}, platforms

    def _write_tables(self) -> None:
        f = self._f
        # HDF5 does not reuse the space of deleted datasets: rewriting unchanged tables (a measurement
        # batch that only appends records) would grow the file by the whole task table every time.
        if self._tables_read is not None and self._table_state() == self._tables_read:
            return
        self.ensure_space(sum(len(t.workload) + len(t.name) + 256 for t in self.tasks)
                          + 24 * sum(map(len, self.networks.values())))
        for name in ("tasks", "networks", "platforms"):
            if name in f:
                del f[name]
        g = f.create_group("tasks")
        for col in schema.TASK_STR_COLUMNS:
            vals = [json.dumps(t.extra, sort_keys=True) if col == "extra" else getattr(t, col) for t in self.tasks]
            g.create_dataset(col, data=np.array(vals, dtype=object), dtype=schema.STR)
        g.create_dataset("flops", data=np.array([t.flops for t in self.tasks], dtype=np.float64))
        g = f.create_group("networks")
        names = sorted(self.networks)
        rows = [(i, t, w) for i, n in enumerate(names) for t, w in self.networks[n]]
        g.create_dataset("names", data=np.array(names, dtype=object), dtype=schema.STR)
        g.create_dataset("network", data=np.array([r[0] for r in rows], dtype=np.int64))
        g.create_dataset("task", data=np.array([r[1] for r in rows], dtype=np.int64))
        g.create_dataset("weight", data=np.array([r[2] for r in rows], dtype=np.float64))
        g = f.create_group("platforms")
        for pid, p in self.platforms.items():
            pg = g.create_group(pid)
            pg.attrs["target"] = json.dumps(p.target, sort_keys=True)
            pg.attrs["spec"] = json.dumps(p.spec, sort_keys=True) if p.spec else ""
            pg.attrs["host"] = json.dumps(p.host, sort_keys=True) if p.host else ""

    # -- records -----------------------------------------------------------------------------------
    def _records_group(self, pid: str) -> h5py.Group:
        recs = self._f.require_group("records")
        if pid in recs:
            return recs[pid]
        g = recs.create_group(pid)
        schema.create_column(g, "task", np.int32)
        schema.create_column(g, "program_id", np.uint64)
        schema.create_column(g, "error", np.int16)
        schema.create_column(g, "timestamp", np.float64)
        schema.create_ragged(g, "costs", np.float64, schema.CHUNK_ROWS)
        schema.create_ragged(g, "schedule", np.uint8, schema.CHUNK_BYTES)
        return g

    def known_program_ids(self, pid: str) -> np.ndarray:
        """Sorted program ids already stored (or pending) for a platform."""
        if pid not in self._known_ids:
            recs = self._f.get("records", {})
            ids = recs[pid]["program_id"][...] if pid in recs else np.zeros(0, np.uint64)
            self._known_ids[pid] = np.unique(ids)
        return self._known_ids[pid]

    def add_records(self, pid: str, batch: RecordBatch) -> tuple[int, int]:
        """Append records to a platform, skipping program ids already there. Returns (added, duplicates).

        The kept rows are converted to column arrays at once (one numpy pass per column, not per record)
        and held as pending chunks until ``FLUSH_ROWS`` rows are pending; schedules may be given as ``str``
        or as UTF-8 ``bytes``.
        """
        if pid not in self.platforms:
            raise ValueError(f"platform {pid!r} must be added before its records")
        if not len(batch):
            return 0, 0
        columns = {k: len(getattr(batch, k)) for k in ("task", "schedule", "costs", "error", "timestamp", "program_id")}
        if len(set(columns.values())) > 1:
            raise ValueError(f"platform {pid!r}: the record batch's columns differ in length ({columns})")
        task = np.asarray(batch.task)
        if task.size and (task.min() < 0 or task.max() >= len(self.tasks)):  # the file would be refused as damaged
            bad = int(task[(task < 0) | (task >= len(self.tasks))][0])
            raise ValueError(f"platform {pid!r}: record of task {bad}, not one of the dataset's {len(self.tasks)} "
                             "tasks (add_task gives a task's index)")
        error = np.asarray(batch.error)
        if error.size and (error.min() < ERROR_MIN or error.max() > ERROR_MAX):
            raise ValueError(f"platform {pid!r}: error code {int(error[(error < ERROR_MIN) | (error > ERROR_MAX)][0])} "
                             f"is outside the stored range {ERROR_MIN}..{ERROR_MAX}")
        ids = np.asarray(batch.program_id, dtype=np.uint64)
        _, first = np.unique(ids, return_index=True)
        keep = np.zeros(len(ids), bool)
        keep[first] = True
        known = self.known_program_ids(pid)
        if len(known):  # membership by binary search in the sorted known ids (np.isin would re-sort them)
            pos = np.minimum(np.searchsorted(known, ids), len(known) - 1)
            keep &= known[pos] != ids
        new_ids = np.sort(ids[keep])
        self._known_ids[pid] = np.insert(known, np.searchsorted(known, new_ids), new_ids)  # stays sorted
        added, dup = len(new_ids), len(ids) - len(new_ids)
        if added:
            chunks = self._pending.setdefault(pid, [])
            chunks.append(_columns(batch, None if dup == 0 else keep))
            if sum(len(c["task"]) for c in chunks) >= self.FLUSH_ROWS:
                self._flush(pid)
        self.added[pid] = self.added.get(pid, 0) + added
        self.duplicates[pid] = self.duplicates.get(pid, 0) + dup
        return added, dup

    def _flush(self, pid: str) -> None:
        chunks = self._pending.pop(pid, None)
        if not chunks:
            return
        cols = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
        self.ensure_space(sum(v.nbytes for v in cols.values()))
        g = self._records_group(pid)
        schema.append_column(g["task"], cols["task"])
        schema.append_column(g["program_id"], cols["program_id"])
        schema.append_column(g["error"], cols["error"])
        schema.append_column(g["timestamp"], cols["timestamp"])
        schema.append_ragged(g["costs"], cols["costs"], cols["cost_len"])
        schema.append_ragged(g["schedule"], cols["schedule"], cols["schedule_len"])


def _columns(b: RecordBatch, keep: np.ndarray | None) -> dict[str, np.ndarray]:
    """The rows of a batch (those where ``keep`` is true, or all) as the arrays the records group stores."""
    n = len(b)
    cost_len = np.fromiter(map(len, b.costs), np.int64, n)
    costs = np.fromiter(chain.from_iterable(b.costs), np.float64, int(cost_len.sum()))
    try:
        raw = b"".join(b.schedule)  # schedules given as UTF-8 bytes
        sched_len = np.fromiter(map(len, b.schedule), np.int64, n)
    except TypeError:
        text = "".join(b.schedule)
        raw = text.encode("utf-8")
        if len(raw) == len(text):  # all ASCII: character counts are byte counts
            sched_len = np.fromiter(map(len, b.schedule), np.int64, n)
        else:
            encoded = [s.encode("utf-8") for s in b.schedule]
            sched_len = np.fromiter(map(len, encoded), np.int64, n)
    cols = dict(
        task=np.asarray(b.task, np.int32), program_id=np.asarray(b.program_id, np.uint64),
        error=np.asarray(b.error, np.int16), timestamp=np.asarray(b.timestamp, np.float64),
        costs=costs, cost_len=cost_len, schedule=np.frombuffer(raw, np.uint8), schedule_len=sched_len,
    )
    if keep is not None:
        for k in ("task", "program_id", "error", "timestamp", "cost_len", "schedule_len"):
            cols[k] = cols[k][keep]
        cols["costs"] = costs[np.repeat(keep, cost_len)]
        cols["schedule"] = cols["schedule"][np.repeat(keep, sched_len)]
    return cols
