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

An entry, or a program of one, that lacks a field or holds one of the wrong type is skipped when the library is
read (every reader would fail on it), and said in one line naming the file and the entry; the library's other
entries are used. Nothing is lost: when the library is rewritten, what was skipped is first appended, as it was,
to ``library.bad-entries.jsonl`` beside it (as a run's bad database lines go to ``*.bad-lines.jsonl``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import gzip
import json
import logging
import math
import os
import time
import zlib
from pathlib import Path

from costlab.common.errors import InputError, UsageError
from costlab.common.files import write_atomically
from costlab.common.host import describe_host, host_difference, same_host
from costlab.common.locks import take_lock
from costlab.datasets.names import check_platform_id
from costlab.metaschedule.databases import RECORD_FILE, WORKLOAD_FILE, write_database
from costlab.metaschedule.traces import trace_text

FORMAT = 1
FILE = "library.json"
LOCK = ".library.lock"
BAD_FILE = "library.bad-entries.jsonl"  # beside the library: its entries and programs that could not be read
STARTER_DIR = Path(__file__).resolve().parent / "starter"
PER_TASK = 4  # programs kept per workload
SHOWN = 3  # bad entries named in the one line that says they were skipped

logger = logging.getLogger(__name__)


def default_root() -> Path:
    """Where the user's libraries live when no ``--library`` is given."""
    env = os.environ.get("COSTLAB_LIBRARY")
    if env:  # `~` as written where no shell expanded it (a service's environment, a quoted assignment)
        return Path(env).expanduser()
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
                 read_only: bool = False, bad: list | None = None):
        self.path, self.platform, self.host = Path(path), platform, host
        self.entries: dict = entries if entries is not None else {}
        self.read_only = read_only
        # what was skipped when it was read (``bad_parts``): one dict per bad entry or program, with its value as
        # it was, kept to be moved aside, never dropped, when the library is rewritten
        self.bad: list[dict] = bad if bad is not None else []

    # reading and writing ---------------------------------------------------------------------------------
    @classmethod
    def load(cls, path, platform: str | None = None, say: bool = True) -> "Library":
        """The library in ``path`` (a library folder, its ``library.json``, or a ``.json.gz`` file); an empty one
        of ``platform`` when the folder holds none yet. A damaged file is an InputError naming it; its bad entries
        and programs (``bad_parts``) are left out of ``entries``, kept in ``bad``, and said in one line (a
        warning, unless ``say`` is False: a writer says where they were moved when it saves)."""
        path = Path(path)
        file = path / FILE if path.is_dir() or not path.suffix else path
        if not file.exists():
            if platform is None:
                raise InputError(path, f"holds no schedule library ({FILE})")
            return cls(file, platform)
        try:
            raw = gzip.decompress(file.read_bytes()) if file.suffix == ".gz" else file.read_bytes()
            data = json.loads(raw)
        # zlib.error: a .json.gz damaged inside; RecursionError: JSON nested too deep
        except (OSError, ValueError, EOFError, zlib.error, RecursionError) as exc:
            raise InputError(file, f"is not a readable schedule library ({type(exc).__name__}: {exc})") from None
        if (not isinstance(data, dict) or data.get("costlab_library") != FORMAT
                or not isinstance(data.get("entries"), dict)):
            raise InputError(file, f"is not a costlab schedule library of format {FORMAT} (no 'costlab_library': "
                                   f"{FORMAT} and 'entries' object)")
        if platform is not None and data.get("platform") != platform:
            raise InputError(file, f"is the library of platform {data.get('platform')!r}, not {platform!r}")
        if data.get("host") is not None and not isinstance(data["host"], dict):
            raise InputError(file, "is a schedule library whose 'host' is not an object")
        entries, bad = bad_parts(data["entries"])
        lib = cls(file, str(data.get("platform")), data.get("host"), entries, read_only=file.suffix == ".gz", bad=bad)
        if bad and say:
            logger.warning("%s", lib.bad_note(f"skipped {_bad_count(bad)} (not used)"))
        return lib

    def bad_note(self, what: str) -> str:
        """One line: the file, ``what`` was done with its bad entries, and the first ``SHOWN`` of them."""
        named = "; ".join(b["why"] for b in self.bad[:SHOWN]) + (" ..." if len(self.bad) > SHOWN else "")
        return f"{self.path}: {what}: {named}"

    def to_json(self) -> dict:
        return {"costlab_library": FORMAT, "platform": self.platform, "host": self.host, "entries": self.entries}

    def save(self, path=None) -> Path:
        """Write the library (``path``: elsewhere, e.g. ``.json.gz`` compressed) atomically; returns the file. The
        bad entries and programs it was read with are appended to ``BAD_FILE`` first when it replaces its own
        file, so that they are never lost: a copy written elsewhere leaves them in the file they are in."""
        out = Path(path) if path is not None else self.path
        if path is None and self.read_only:
            raise UsageError(f"{self.path} is a read-only library (the starter shipped with costlab)")
        out.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.to_json(), separators=(",", ":")).encode()
        aside = self.path.parent / BAD_FILE if self.bad and out == self.path else None
        if aside is not None:
            # appended (and synced) before the library is replaced: a crash between the two leaves them in both
            # files, never in neither
            with open(aside, "a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(dict(b, library=str(self.path)), separators=(",", ":")) + "\n"
                              for b in self.bad)
                fh.flush()
                os.fsync(fh.fileno())
        write_atomically(out, gzip.compress(data, mtime=0) if out.suffix == ".gz" else data)
        if aside is not None:
            logger.warning("%s", self.bad_note(f"moved {_bad_count(self.bad)} aside, to {aside}"))
            self.bad = []
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
        workload's entry, keeping its ``per_task`` fastest, or as many as it held (an entry grown by ``library add
        --per-task 8`` keeps its 8 when a run adds with the default: only ``prune`` makes an entry smaller);
        returns how many of them are now in it that were not."""
        now = round(time.time())
        entry = self.entries.setdefault(shash, dict(name=name, workload=workload, structure=structure, programs=[]))
        kept_before = {trace_key(p["trace"]): p for p in entry["programs"]}
        have = set(kept_before)
        fresh = []
        for p in programs:
            k = trace_key(p["trace"])
            if k in kept_before and p.get("checked") and not kept_before[k].get("checked"):
                kept_before[k]["checked"] = True  # a program added unchecked that this run checked
            if k not in have:
                have.add(k)
                fresh.append(dict(p, added=now))
        merged = sorted(entry["programs"] + fresh, key=lambda p: p["us"])[:max(per_task, len(entry["programs"]))]
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
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise InputError(out, "exists and is not a directory")
        if (out / LOCK).exists() or (out / FILE).resolve() == self.path.resolve():
            # a library's own folder: its library.json would be replaced by this one (another platform's library
            # lost, or this one read as a database)
            raise InputError(out, "is a schedule library's folder, not an export: export into another folder")
        workloads, records = [], []
        for i, (shash, e) in enumerate(self.entries.items()):
            workloads.append((shash, e["workload"]))
            records.extend((i, p["trace"], p["run_secs"], p["target"], p["args_info"]) for p in e["programs"])
        # a previous export (its library.json, with or without the database beside it) is replaced; any other
        # database (a tuning work dir's) is refused, never overwritten
        replace = (out / FILE).is_file()
        held = [n + gz for n in (WORKLOAD_FILE, RECORD_FILE) for gz in ("", ".gz") if (out / (n + gz)).exists()]
        if held and not replace:
            raise InputError(out, f"already holds a MetaSchedule database ({', '.join(held)}); choose an empty "
                                  "directory (costlab never overwrites one)")
        # library.json first: a write that fails half-way (a full disk) leaves an export a re-run replaces, never a
        # database without its library.json, which a re-run would refuse as a tuning run's
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file on the way, a folder of no permission or a read-only file system
            raise InputError(out, f"cannot be created ({exc.strerror or exc})") from None
        try:
            self.save(out / FILE)
        except OSError as exc:
            raise InputError(out / FILE, f"cannot be written ({exc.strerror or exc})") from None
        return write_database(out, workloads, records, replace=True)


@contextlib.contextmanager
def open_library(root, platform: str):
    """The library of ``platform`` under ``root``, locked for writing while the ``with`` block runs; saved when
    it ends normally."""
    folder = Path(root) / _platform_folder(platform)
    if folder.exists() and not folder.is_dir():
        raise InputError(folder, "exists and is not a directory (a schedule library folder)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fh = take_lock(folder / LOCK)
    except OSError as exc:
        raise InputError(folder, f"cannot hold a schedule library: {exc.strerror or exc}") from None
    try:
        lib = Library.load(folder, platform, say=False)  # its bad entries are said when save moves them aside
        yield lib
        try:
            lib.save()
        except OSError as exc:  # a full disk, a read-only folder: the library stays as it was (written atomically)
            raise InputError(lib.path, f"cannot be written ({exc.strerror or exc}); the library is as it "
                                       "was") from None
    finally:
        fh.close()


def read_library(root, platform: str, say: bool = True) -> Library:
    """The library of ``platform`` under ``root`` for reading (empty when there is none); ``say``: as
    ``Library.load`` takes it."""
    return Library.load(Path(root) / _platform_folder(platform), platform, say=say)


def _platform_folder(platform) -> str:
    """``platform`` as the name of its folder under the libraries' root: a platform id (``llvm-znver5-2c``), never a
    path (``..``, ``a/b``: a library written outside the root, which ``costlab library list`` never shows)."""
    try:
        return check_platform_id(platform)
    except UsageError as exc:
        raise UsageError(f"{exc} (--platform, or a library file's 'platform')") from None


def starter_library() -> list[Library]:
    """The starter libraries shipped with costlab (or ``$COSTLAB_STARTER_LIBRARY``'s file; none for ``none``)."""
    env = os.environ.get("COSTLAB_STARTER_LIBRARY")
    if env is not None:
        return [] if env.strip().lower() in ("", "none") else [Library.load(Path(env))]
    files = sorted(STARTER_DIR.glob("*.json.gz")) if STARTER_DIR.is_dir() else []
    return [Library.load(f) for f in files]


def _bad_count(bad: list[dict]) -> str:
    """How many bad entries and programs ``bad`` holds, in words."""
    programs = sum(1 for b in bad if "program" in b)
    entries = len(bad) - programs
    parts = [f"{entries} bad entr{'y' if entries == 1 else 'ies'}" if entries else "",
             f"{programs} bad program{'' if programs == 1 else 's'}" if programs else ""]
    return " and ".join(p for p in parts if p)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _latency(value) -> bool:
    """A measured latency: a finite number above 0 (a program ranked by ``inf`` or 0 would sort first or last)."""
    return _number(value) and math.isfinite(value) and value > 0


def _fields(value, types: dict, optional: dict) -> str | None:
    """What is wrong with the JSON object ``value`` (None: nothing): ``types`` maps the fields it must hold,
    ``optional`` those it may hold, to the test their values must pass and what the test asks."""
    if not isinstance(value, dict):
        return f"is {type(value).__name__}, not an object"
    for name, (test, what) in types.items():
        if name not in value:
            return f"has no {name!r}"
        if not test(value[name]):
            return f"has a {name!r} that is not {what}"
    for name, (test, what) in optional.items():
        if name in value and not test(value[name]):
            return f"has a {name!r} that is not {what}"
    return None


def _list_of(test):
    return lambda v: isinstance(v, list) and all(test(x) for x in v)


def _of(kind):
    return lambda v: isinstance(v, kind)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# the fields the library's readers use (rows, add, prune, export_database, start.LibrarySource) and the test of
# their values, with what the test asks for the line that names a bad one
ENTRY_FIELDS = dict(name=(_of(str), "a string"), workload=(_of(str), "a string"), structure=(_of(dict), "an object"),
                    programs=(_of(list), "a list"))
OPTIONAL_ENTRY_FIELDS = dict(added=(_number, "a number"))
STRUCTURE_FIELDS = dict(names=(_list_of(_of(str)), "a list of strings"),
                        signatures=(_list_of(_of(str)), "a list of strings"), anchor=(_is_int, "an integer"),
                        extents=(_list_of(_is_int), "a list of integers"))
PROGRAM_FIELDS = dict(trace=(_of(list), "a list"), run_secs=(_list_of(_number), "a list of numbers"),
                      us=(_latency, "a finite latency above 0"), target=(_of(dict), "an object"),
                      args_info=(_of(list), "a list"))
OPTIONAL_PROGRAM_FIELDS = dict(checked=(_of(bool), "true or false"), source=(_of(str), "a string"),
                               added=(_number, "a number"))


def bad_parts(entries: dict) -> tuple[dict, list[dict]]:
    """A library file's ``entries`` split into the readable ones and what is not: per bad entry ``{"entry": its
    key, "why": ..., "value": the entry}``, per bad program of a readable entry ``{"entry", "program": its
    position, "why", "value": the program}``. An entry none of whose programs is readable is a bad entry whole
    (its structure is kept with them)."""
    good, bad = {}, []
    for shash, entry in entries.items():
        why = _fields(entry, ENTRY_FIELDS, OPTIONAL_ENTRY_FIELDS)
        why = f"entry {shash} {why}" if why else None
        if why is None:
            st = entry["structure"]
            why = _fields(st, STRUCTURE_FIELDS, {})
            why = f"entry {shash}: its structure {why}" if why else None
            if why is None and not -1 <= st["anchor"] < len(st["signatures"]):
                why = f"entry {shash}: its anchor {st['anchor']} is not one of its {len(st['signatures'])} blocks"
            if why is None and len(st["names"]) != len(st["signatures"]):
                why = (f"entry {shash}: its structure names {len(st['names'])} blocks but has "
                       f"{len(st['signatures'])} signatures")
        if why is not None:
            bad.append(dict(entry=shash, why=why, value=entry))
            continue
        if not entry["programs"]:  # a task with no program: nothing to start from, nothing to export
            bad.append(dict(entry=shash, why=f"entry {shash} has no programs", value=entry))
            continue
        programs, wrong = [], []
        for i, prog in enumerate(entry["programs"]):
            why = _fields(prog, PROGRAM_FIELDS, OPTIONAL_PROGRAM_FIELDS)
            if why is None:
                programs.append(prog)
            else:
                wrong.append(dict(entry=shash, program=i, why=f"entry {shash}: program {i} {why}", value=prog))
        if wrong and not programs:
            bad.append(dict(entry=shash, why=f"entry {shash}: none of its programs is readable ({wrong[0]['why']})",
                            value=entry))
            continue
        bad.extend(wrong)
        good[shash] = dict(entry, programs=programs) if wrong else entry
    return good, bad
