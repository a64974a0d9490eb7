"""A schedule library of one host platform: ``<root>/<platform>/library.json``.

The file is one JSON object: the format version, the platform id (``metaschedule.targets.platform_id_for``), the
host whose measurements rank its programs (``common.host.host_info``), and per workload (by MetaSchedule's
structural hash) its IRModule in database form, a name, its block structure (``export/transfer/match``: what
a task must share to take its schedules) and its fastest programs (trace, run seconds, target, argument info,
whether its output was checked, the work dir it came from, when it was added). A library holds one host's
timings: adding another host's run to it is refused.

Where libraries live: ``--library DIR``, else ``$COSTLAB_LIBRARY``, else ``$XDG_CACHE_HOME/costlab/library``
(``~/.cache/costlab/library``). costlab also ships a starter library (``starter/<platform>.json.gz``, built
from the trajectory corpus's tuned runs, docs/search.md), read-only, which every run consults beside the
user's own; ``$COSTLAB_STARTER_LIBRARY`` names another file, or ``none`` for no starter.

Writers take an exclusive lock on ``.library.lock`` beside the file and replace it atomically, so two runs
ending at once both land and a reader never sees half a library.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gzip
import json
import os
import time
from pathlib import Path

from costlab.common.errors import InputError, UsageError
from costlab.common.files import write_atomically
from costlab.common.host import describe_host, host_difference, same_host
from costlab.common.locks import take_lock
from costlab.metaschedule.databases import write_database
from costlab.metaschedule.traces import trace_text

FORMAT = 1
FILE = "library.json"
LOCK = ".library.lock"
STARTER_DIR = Path(__file__).resolve().parent / "starter"
PER_TASK = 4  # programs kept per workload


def default_root() -> Path:
    """Where the user's libraries live when no ``--library`` is given."""
    env = os.environ.get("COSTLAB_LIBRARY")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "costlab" / "library"


def trace_key(trace) -> str:
    """One program's identity within a workload: its trace's canonical text (``trace_text``; libraries written
    before traces were stored as ``trace_json`` hold booleans as true/false, which give the same text)."""
    return trace_text(trace)


class Library:
    """The programs of one host platform's library, read from and written to ``path`` (a ``library.json``, or
    a ``.json.gz`` file read-only)."""

    def __init__(self, path: Path, platform: str, host: dict | None = None, entries: dict | None = None,
                 read_only: bool = False):
        self.path, self.platform, self.host = Path(path), platform, host
        self.entries: dict = entries if entries is not None else {}
        self.read_only = read_only

    # reading and writing ---------------------------------------------------------------------------------
    @classmethod
    def load(cls, path, platform: str | None = None) -> "Library":
        """The library in ``path`` (a library folder, its ``library.json``, or a ``.json.gz`` file); an empty one
        of ``platform`` when the folder holds none yet. A damaged file is an InputError naming it."""
        path = Path(path)
        file = path / FILE if path.is_dir() or not path.suffix else path
        if not file.exists():
            if platform is None:
                raise InputError(path, f"holds no schedule library ({FILE})")
            return cls(file, platform)
        try:
            raw = gzip.decompress(file.read_bytes()) if file.suffix == ".gz" else file.read_bytes()
            data = json.loads(raw)
        except (OSError, ValueError, EOFError) as exc:
            raise InputError(file, f"is not a readable schedule library ({type(exc).__name__}: {exc})") from None
        if not isinstance(data, dict) or data.get("costlab_library") != FORMAT or not isinstance(data.get("entries"), dict):
            raise InputError(file, f"is not a costlab schedule library of format {FORMAT} (no 'costlab_library': "
                                   f"{FORMAT} and 'entries' object)")
        if platform is not None and data.get("platform") != platform:
            raise InputError(file, f"is the library of platform {data.get('platform')!r}, not {platform!r}")
        return cls(file, str(data.get("platform")), data.get("host"), data["entries"], read_only=file.suffix == ".gz")

    def to_json(self) -> dict:
        return {"costlab_library": FORMAT, "platform": self.platform, "host": self.host, "entries": self.entries}

    def save(self, path=None) -> Path:
        """Write the library (``path``: elsewhere, e.g. ``.json.gz`` compressed) atomically; returns the file."""
        out = Path(path) if path is not None else self.path
        if path is None and self.read_only:
            raise UsageError(f"{self.path} is a read-only library (the starter shipped with costlab)")
        out.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.to_json(), separators=(",", ":")).encode()
        write_atomically(out, gzip.compress(data, mtime=0) if out.suffix == ".gz" else data)
        return out

    # what it holds ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    def programs(self) -> int:
        return sum(len(e["programs"]) for e in self.entries.values())

    def target_kinds(self) -> set[str]:
        """The target kinds (``llvm``, ``cuda``, ...) its programs were measured for: what its platform's id
        cannot always say (an id named by a machine model, ``platinum-8358``, names no kind)."""
        return {str((p.get("target") or {}).get("kind")) for e in self.entries.values() for p in e["programs"]}

    def rows(self) -> list[dict]:
        """One row per workload: name, kernel class (anchor block signature), programs, best and checked."""
        out = []
        for shash, e in self.entries.items():
            progs = e["programs"]
            st = e["structure"]
            anchor = st["signatures"][st["anchor"]] if st["anchor"] >= 0 else None
            out.append(dict(workload=shash, name=e["name"], anchor=anchor, programs=len(progs),
                            best_us=min((p["us"] for p in progs), default=None),
                            checked=sum(1 for p in progs if p.get("checked")), added=e.get("added")))
        return sorted(out, key=lambda r: r["name"])

    # changing it -----------------------------------------------------------------------------------------
    def check_host(self, host: dict | None, what: str) -> None:
        """A library ranks programs by one machine's timings: refuse another host's (UsageError, one line)."""
        if self.host and host and not same_host(self.host, host):
            raise UsageError(f"{what} was measured on {describe_host(host)}; the library {self.path.parent} holds "
                             f"{describe_host(self.host)}'s programs ({host_difference(self.host, host)}); add it to "
                             "that host's library with --library DIR")

    def add(self, shash: str, workload: str, name: str, structure: dict, programs: list[dict],
            per_task: int = PER_TASK) -> int:
        """Merge ``programs`` (dicts with trace, run_secs, us, target, args_info, checked, source) into the
        workload's entry, keeping its ``per_task`` fastest; returns how many of them are now in it that were not."""
        now = round(time.time())
        entry = self.entries.setdefault(shash, dict(name=name, workload=workload, structure=structure, programs=[]))
        have = {trace_key(p["trace"]) for p in entry["programs"]}
        fresh = []
        for p in programs:
            k = trace_key(p["trace"])
            if k not in have:
                have.add(k)
                fresh.append(dict(p, added=now))
        merged = sorted(entry["programs"] + fresh, key=lambda p: p["us"])[:per_task]
        kept = {id(p) for p in merged}
        entry["programs"], entry["added"] = merged, now if fresh else entry.get("added", now)
        if not entry["programs"]:
            del self.entries[shash]
        return sum(1 for p in fresh if id(p) in kept)

    def take(self, host: dict | None, what: str, items, per_task: int = PER_TASK) -> int:
        """A run's programs, measured on ``host``, into the library (``items``: ``(shash, workload, name, structure,
        programs)`` per workload, as ``add`` takes them); another host's run refused (``check_host``). Returns
        how many programs are new in it."""
        self.check_host(host, what)
        self.host = self.host or host
        return sum(self.add(*item, per_task=per_task) for item in items)

    def prune(self, per_task: int | None = None, max_tasks: int | None = None, names=()) -> dict:
        """Drop programs beyond ``per_task`` per workload, the workloads beyond the ``max_tasks`` most recently
        added, and the workloads whose name matches a shell pattern of ``names``; returns what went."""
        gone = dict(programs=0, workloads=0)
        for shash in list(self.entries):
            e = self.entries[shash]
            if any(fnmatch.fnmatchcase(e["name"], p) for p in names):
                gone["workloads"] += 1
                gone["programs"] += len(e["programs"])
                del self.entries[shash]
            elif per_task is not None and len(e["programs"]) > per_task:
                gone["programs"] += len(e["programs"]) - per_task
                e["programs"] = sorted(e["programs"], key=lambda p: p["us"])[:per_task]
        if max_tasks is not None and len(self.entries) > max_tasks:
            order = sorted(self.entries, key=lambda s: self.entries[s].get("added", 0), reverse=True)
            for shash in order[max_tasks:]:
                gone["workloads"] += 1
                gone["programs"] += len(self.entries.pop(shash)["programs"])
        return gone

    def export_database(self, out_dir) -> Path:
        """The library as a MetaSchedule JSON database (``database_workload.json`` and
        ``database_tuning_record.json``; ``tune_tir``, ``--transfer-from`` and ``dataset import-ms`` read it),
        with ``library.json`` beside it (``costlab library add`` merges it into another library)."""
        workloads, records = [], []
        for i, (shash, e) in enumerate(self.entries.items()):
            workloads.append((shash, e["workload"]))
            records.extend((i, p["trace"], p["run_secs"], p["target"], p["args_info"]) for p in e["programs"])
        out = write_database(out_dir, workloads, records, replace=True)
        self.save(out / FILE)
        return out


@contextlib.contextmanager
def open_library(root, platform: str):
    """The library of ``platform`` under ``root``, locked for writing while the ``with`` block runs; saved when
    it ends normally."""
    folder = Path(root) / platform
    if folder.exists() and not folder.is_dir():
        raise InputError(folder, "exists and is not a directory (a schedule library folder)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fh = take_lock(folder / LOCK)
    except OSError as exc:
        raise InputError(folder, f"cannot hold a schedule library: {exc.strerror or exc}") from None
    try:
        lib = Library.load(folder, platform)
        yield lib
        lib.save()
    finally:
        fh.close()


def read_library(root, platform: str) -> Library:
    """The library of ``platform`` under ``root`` for reading (empty when there is none)."""
    return Library.load(Path(root) / platform, platform)


def starter_library() -> list[Library]:
    """The starter libraries shipped with costlab (or ``$COSTLAB_STARTER_LIBRARY``'s file; none for ``none``)."""
    env = os.environ.get("COSTLAB_STARTER_LIBRARY")
    if env is not None:
        return [] if env.strip().lower() in ("", "none") else [Library.load(Path(env))]
    files = sorted(STARTER_DIR.glob("*.json.gz")) if STARTER_DIR.is_dir() else []
    return [Library.load(f) for f in files]
