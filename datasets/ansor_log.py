"""Import Ansor / TenSet JSON-lines measure logs into a costlab dataset (pure parsing, no TVM).

One line is one measured program::

    {"i": [[workload_key, target, hw_params, target_host, layout_opt, input_names], [[], steps]],
     "r": [costs, error_no, all_cost, timestamp], "v": "v0.6"}

Older logs (v0.5 and before) carry fewer fields after the target in ``i[0]``; fields are read by position,
so any of them may be missing. A path is a log file or a folder searched recursively for ``*.json``
(TenSet's ``measure_records/<platform>/`` holds one file per task).

Each distinct workload key is one task (dialect ``ansor``); the stored schedule is the step list serialised
compactly (``orjson.dumps(steps)``), and the program id hashes both, so re-importing adds nothing. Costs and
``error_no`` are kept as logged: failed records are stored and flagged, never dropped. Lines are parsed and
written in chunks inside one ``DatasetWriter`` transaction, so memory does not grow with the log, and a
failure or Ctrl-C leaves the output dataset as it was.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import orjson

from costlab.common.errors import CostlabError, InputError
from costlab.common.import_report import ImportReport
from costlab.datasets.ansor_keys import BadLine, parse_workload_key
from costlab.datasets.ansor_networks import load_network_info
from costlab.datasets.names import check_platform_id
from costlab.datasets.records import ERROR_MAX, ERROR_MIN, RecordBatch
from costlab.datasets.store import DatasetWriter, check_import_host
from costlab.metaschedule.targets import platform_id_for, sanitize_platform_id, target_from_string, target_problem

DIALECT = "ansor"
# Versions of auto_scheduler's record format (AUTO_SCHEDULER_LOG_VERSION); all share the layout above, later
# ones appending fields to ``i[0]``.
KNOWN_VERSIONS = frozenset({"v0.2", "v0.3", "v0.4", "v0.5", "v0.6"})
CHUNK_RECORDS = 1 << 13  # records parsed before they are handed to the writer


def kernel_class_for(compute_hash: str) -> str:
    """Kernel class of a task known only by its workload key: the compute hash (an md5) cut to 8 digits."""
    return f"ansor:{compute_hash[:8]}"


def log_files(path: Path) -> list[Path]:
    """The log files a path names: itself, or the ``*.json`` files under a folder (recursively, sorted)."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.json") if p.is_file())
        if not files:
            raise InputError(path, "folder holds no *.json log files")
        return files
    return [path]


def tenset_platform(file: Path) -> str | None:
    """The platform a TenSet layout implies: ``measure_records/<platform>/<task>.json`` -> ``<platform>``, the
    folder's name made a valid platform id as a target's machine name is (``my box`` -> ``my-box``)."""
    if file.parent.parent.name == "measure_records":
        return sanitize_platform_id(file.parent.name)
    return None


class _Importer:
    """Parses lines into per-platform record batches and hands them to the writer in chunks."""

    def __init__(self, writer: DatasetWriter, report: ImportReport, platform: str | None):
        self.w = writer
        self.report = report
        self.platform = platform
        self.tasks: dict[str, tuple[int, bytes]] = {}  # workload key -> (task index, program id prefix)
        self.targets: dict[tuple, str] = {}  # (target, target_host, forced platform) -> platform id
        self.hw_seen: set = set()  # (task, platform) whose hardware params are recorded
        self.batches: dict[str, list[list]] = {}  # platform -> pending columns (see columns())
        self._hw = None  # hardware params of the line being read, for combo()
        self.file_tasks: set[int] = set()  # tasks seen in the current file (for --network-per-file)
        self.first_problem: tuple | None = None  # (path, line or None, message) of the first bad line

    def problem(self, path: str, line: int | None, message: str) -> None:
        if self.first_problem is None:
            self.first_problem = (path, line, message)
        where = path if line is None else f"{path}:{line}"
        self.report.problem(f"{where}: {message}")

    # -- per distinct key, cached -------------------------------------------------------------------
    def task_for(self, key) -> tuple[int, bytes]:
        hit = self.tasks.get(key)
        if hit is not None:
            return hit
        compute_hash = parse_workload_key(key)[0]
        idx = self.w.add_task(key, DIALECT, key, kernel_class=kernel_class_for(compute_hash))
        hit = self.tasks[key] = (idx, f"{DIALECT}:{key}\n".encode())
        return hit

    def platform_for(self, target, host, forced: str | None) -> str:
        cache_key = (target, host, forced)
        pid = self.targets.get(cache_key)
        if pid is not None:
            return pid
        if not isinstance(target, str):
            raise BadLine(f"target must be a string, got {type(target).__name__}")
        try:
            tdict = target_from_string(target)
            if isinstance(host, str) and host.strip():
                tdict["host"] = target_from_string(host)
        except ValueError as exc:
            raise BadLine(f"bad target: {exc}") from None
        why = target_problem(tdict)
        if why is None and "host" in tdict:
            why = target_problem(tdict["host"])
            why = why and f"target host: {why}"
        if why:  # stored, it would be the platform's target
            raise BadLine(f"bad target: {why} ({target[:80]!r})")
        pid = forced or platform_id_for(tdict)
        check_import_host(self.w, pid, None)  # a log says no machine: refused where a measurement named one
        try:
            self.w.add_platform(pid, tdict)  # an existing platform of another target is refused
        except InputError as exc:  # that line is skipped and counted, never the end of the whole import
            raise BadLine(exc.message) from None
        self.targets[cache_key] = pid
        return pid

    def note_hw_params(self, task: int, pid: str, hw) -> None:
        self.hw_seen.add((task, pid))
        if isinstance(hw, list):
            extra = self.w.tasks[task].extra
            extra.setdefault("hardware_params", {})[pid] = hw

    # -- lines -------------------------------------------------------------------------------------
    def columns(self, pid: str) -> list[list]:
        """The pending columns of a platform: task, schedule (bytes), costs, error, timestamp, program id."""
        cols = self.batches.get(pid)
        if cols is None:
            cols = self.batches[pid] = [[], [], [], [], [], []]
        return cols

    def combo(self, combos: dict, key, target, host, forced: str | None) -> tuple:
        """What the lines of one (workload key, target) share: task, id prefix, platform and its columns. The
        platform first: a line whose target is refused adds no task."""
        pid = self.platform_for(target, host, forced)
        task, prefix = self.task_for(key)
        if (task, pid) not in self.hw_seen:
            self.note_hw_params(task, pid, self._hw)
        self.file_tasks.add(task)
        cols = self.columns(pid)
        hit = combos[(key, target, host)] = (task, prefix, *(c.append for c in cols))
        return hit

    def import_file(self, path: Path, progress) -> None:
        """Parse one log, handing records to the writer every ``CHUNK_RECORDS``; bad lines are counted."""
        forced = self.platform or tenset_platform(path)
        name = str(path)
        loads, dumps, blake2b, from_bytes = orjson.loads, orjson.dumps, hashlib.blake2b, int.from_bytes
        known_versions = KNOWN_VERSIONS
        combos: dict = {}  # (workload key, target, target host) -> combo(); per file, as ``forced`` is
        nonblank = pending = 0
        done_bytes = 0
        try:
            fh = open(path, "rb")
        except OSError as exc:  # unreadable (permissions), or no file to read
            raise _unreadable(path, exc) from None
        with fh:
            lineno = 0
            for lineno, line in enumerate(_lines(fh, path), 1):
                if not lineno & 0xFFF:
                    pos = fh.tell()
                    progress.update(pos - done_bytes)
                    done_bytes = pos
                try:
                    rec = loads(line)
                except orjson.JSONDecodeError as exc:
                    if line.strip():
                        nonblank += 1
                        self.problem(name, lineno, f"truncated or corrupt JSON line ({exc})")
                    continue
                nonblank += 1
                try:
                    # the happy path: plain indexing; on failure _diagnose finds the exact cause
                    inp = rec["i"]
                    tin = inp[0]
                    steps = inp[1][1]
                    res = rec["r"]
                    costs = res[0]
                    err = res[1]
                    ts = res[3] if len(res) > 3 else 0.0
                    if rec["v"].__class__ is not str or rec["v"] not in known_versions:
                        raise BadLine(_version_problem(rec["v"]))
                    if steps.__class__ is not list or costs.__class__ is not list or err.__class__ is not int:
                        raise TypeError
                    if not ERROR_MIN <= err <= ERROR_MAX:
                        raise TypeError
                    for c in costs:
                        if c.__class__ is not float and c.__class__ is not int:
                            raise TypeError
                    if ts.__class__ is not float and ts.__class__ is not int:
                        raise TypeError
                    host = tin[3] if len(tin) > 3 else ""
                    hit = combos.get((tin[0], tin[1], host))
                    if hit is None:
                        self._hw = tin[2] if len(tin) > 2 else None
                        hit = self.combo(combos, tin[0], tin[1], host, forced)
                except BadLine as exc:
                    self.problem(name, lineno, str(exc))
                    continue
                except (KeyError, IndexError, TypeError, AttributeError):
                    self.problem(name, lineno, _diagnose(rec))
                    continue
                task, prefix, add_task, add_sched, add_costs, add_err, add_ts, add_id = hit
                sched = dumps(steps)
                add_task(task)
                add_sched(sched)
                add_costs(costs)
                add_err(err)
                add_ts(ts)
                add_id(from_bytes(blake2b(prefix + sched, digest_size=8).digest(), "little"))
                pending += 1
                if pending >= CHUNK_RECORDS:
                    self.flush()
                    pending = 0
        progress.update(path.stat().st_size - done_bytes)
        self.report.files += 1
        self.report.lines += lineno
        if nonblank == 0:
            self.problem(name, None, "empty file (no records)")

    def flush(self) -> None:
        """Hand all pending records to the writer (which dedupes them); the column lists are reused."""
        for pid, cols in self.batches.items():
            if cols[0]:
                task, schedule, costs, error, timestamp, program_id = (c.copy() for c in cols)
                self.w.add_records(pid, RecordBatch(task, schedule, costs, error, timestamp, program_id))
                for c in cols:
                    c.clear()


def _lines(fh, path: Path):
    """The lines of an open log; a read that fails (an I/O error, a file that is no regular file) is an
    InputError naming the file, while errors of the writer, between lines, stay what they are."""
    try:
        yield from fh
    except OSError as exc:
        raise _unreadable(path, exc) from None


def _unreadable(path: Path, exc: OSError) -> InputError:
    return InputError(path, f"cannot be read ({exc.strerror or exc})")


def _version_problem(version) -> str:
    known = ", ".join(sorted(KNOWN_VERSIONS))
    return f"unknown Ansor log version {version!r} (this reader knows {known})"


def _diagnose(rec) -> str:
    """What is wrong with a parsed line that failed the happy path (slow; bad lines only)."""
    if not isinstance(rec, dict):
        return f"not an Ansor record (a JSON {type(rec).__name__}, expected an object with 'i', 'r' and 'v')"
    for k in ("i", "r", "v"):
        if k not in rec:
            return f"not an Ansor record: no {k!r} field"
    if not isinstance(rec["v"], str) or rec["v"] not in KNOWN_VERSIONS:
        return _version_problem(rec["v"])
    inp = rec["i"]
    if not isinstance(inp, list) or len(inp) < 2 or not isinstance(inp[0], list):
        return "'i' must be [[workload_key, target, ...], [stages, steps]]"
    if not inp[0]:
        return "record has no workload key ('i'[0] is empty)"
    try:
        parse_workload_key(inp[0][0])
    except BadLine as exc:
        return str(exc)
    if len(inp[0]) < 2:
        return "record has no target ('i'[0] has only the workload key)"
    if not isinstance(inp[0][1], str):
        return f"target ('i'[0][1]) must be a string such as \"llvm -mcpu=skylake\", got {str(inp[0][1])[:60]}"
    if len(inp[0]) > 3 and not isinstance(inp[0][3], str):
        return f"target host ('i'[0][3]) must be a string, got {str(inp[0][3])[:60]}"
    if not isinstance(inp[1], list) or len(inp[1]) < 2 or not isinstance(inp[1][1], list):
        return "'i'[1] must be [stages, steps] with a list of steps"
    res = rec["r"]
    if not isinstance(res, list) or len(res) < 2:
        return "'r' must be [costs, error_no, all_cost, timestamp]"
    costs = res[0]
    if not isinstance(costs, list) or not all(type(c) in (int, float) for c in costs):
        return f"costs ('r'[0]) must be a list of numbers, got {str(costs)[:60]}"
    if type(res[1]) is not int:
        return f"error_no ('r'[1]) must be an integer, got {res[1]!r}"
    if not ERROR_MIN <= res[1] <= ERROR_MAX:
        return f"error_no ('r'[1]) {res[1]} is out of range ({ERROR_MIN}..{ERROR_MAX})"
    if len(res) > 3 and type(res[3]) not in (int, float):
        return f"timestamp ('r'[3]) must be a number, got {res[3]!r}"
    return "malformed record"


def _progress_bar(total: int, enabled: bool):
    from tqdm import tqdm

    # delay: short imports print nothing; long ones show a bar on stderr, counted in bytes read
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="import-ansor",
                disable=not enabled, delay=1.0, leave=False)


def import_ansor(paths, out, platform: str | None = None, network_info=None, network_per_file: bool = False,
                 progress: bool = True) -> ImportReport:
    """Import Ansor / TenSet logs into the dataset ``out`` (created if missing); returns what was done.

    ``platform`` overrides where records go; by default a file under ``measure_records/<platform>/`` goes to
    that TenSet platform, anything else to the platform id of its target (``-model=`` when present), so
    records of several targets land on several platforms. ``network_info`` (a JSON file
    ``{network: {workload_key: weight}}`` or TenSet's ``network_info/`` folder) records networks and task
    weights; ``network_per_file`` instead makes each log file one network with weight 1 per distinct task.
    Bad lines are skipped and counted in the report; when nothing usable was read an ``InputError`` is
    raised and the output is left untouched.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if platform is not None:
        try:
            check_platform_id(platform)
        except CostlabError as exc:
            raise CostlabError(f"--platform: {exc}") from None
    files: list[Path] = []
    for p in map(Path, paths):
        files += log_files(p)
    networks = load_network_info(Path(network_info)) if network_info is not None else None

    report = ImportReport()
    total = sum(f.stat().st_size for f in files)
    with DatasetWriter(out) as w, _progress_bar(total, progress) as bar:
        imp = _Importer(w, report, platform)
        per_file: dict[str, set[int]] = {}  # files of one name in several folders: one network
        for f in files:
            imp.file_tasks = set()
            imp.import_file(f, bar)
            if network_per_file and imp.file_tasks:
                per_file.setdefault(f.stem, set()).update(imp.file_tasks)
        imp.flush()
        report.added = dict(w.added)
        report.duplicates = dict(w.duplicates)
        if not report.usable:
            # nothing to keep: fail the transaction (the output stays as it was) with the first problem
            path, line, message = imp.first_problem
            if report.bad > 1:
                message += f"; no usable records ({report.bad} bad lines in {len(files)} file(s))"
            raise InputError(path, message, line=line)
        for name, tasks in per_file.items():
            w.set_network(name, [(t, 1.0) for t in sorted(tasks)])
        if networks:
            _add_networks(w, networks)
        report.notes += w.replaced_networks()
        report.tasks = len(w.tasks)
    return report


def _add_networks(w: DatasetWriter, networks: dict) -> None:
    """Record networks as {name: [(workload key, weight, description or None)]}; tasks are added if new."""
    # a key written with other spacing than the log's (a hand-made or re-serialised network info) is the same
    # workload: matched by its parsed value, not added as a task of no records beside the logged one
    by_value = {_canonical_key(t.workload_hash): t.index for t in w.tasks if t.dialect == DIALECT}
    by_value.pop(None, None)
    for name, entries in networks.items():
        weights = []
        for key, weight, desc in entries:
            canonical = _canonical_key(key)  # None for no workload key: matches nothing (None was popped)
            idx = w.find_task(DIALECT, key)
            if idx is None:
                idx = by_value.get(canonical)
            if idx is None:
                compute_hash = parse_workload_key(key)[0]
                idx = w.add_task(key, DIALECT, key, kernel_class=kernel_class_for(compute_hash))
                by_value[canonical] = idx
            task = w.tasks[idx]
            if desc and not task.name:
                task.name = desc
                task.kernel_class = kernel_class_from_desc(desc)
            weights.append((idx, weight))
        w.set_network(name, weights)


def _canonical_key(key: str) -> bytes | None:
    """A workload key's value written one way (None for a key that is no workload key)."""
    try:
        return orjson.dumps(parse_workload_key(key))
    except BadLine:
        return None


def kernel_class_from_desc(desc: str) -> str:
    """Kernel class from a task description such as ``vm_mod_fused_nn_conv2d_add_nn_relu``: the fused-operator
    name without the module prefix."""
    for prefix in ("vm_mod_", "tvmgen_default_", "default_"):
        if desc.startswith(prefix):
            desc = desc[len(prefix):]
            break
    return desc
