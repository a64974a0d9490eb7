"""MetaSchedule databases in and out: ``import_ms`` reads the JSON databases that ``tune_tir`` /
``tune_relax`` leave in their work directories, ``export_ms`` writes a platform's records back as one.

A MetaSchedule work directory holds two JSON-lines files:

- ``database_workload.json``: one workload per line, ``[shash, base64 IRModule JSON]``;
- ``database_tuning_record.json``: one record per line,
  ``[workload_index, [trace_json, run_secs, target_json, args_info]]``, the index counting lines of the
  workload file from 0. ``run_secs`` is a list of seconds, ``[1e10]`` when building or running failed,
  or ``null``.

Either file may be gzip-compressed (``database_workload.json.gz``, ``database_tuning_record.json.gz``, as
``benchmarks/results/`` archives runs): ``database_file`` finds the plain or the compressed one and
``read_workloads`` / ``read_records`` read both, for ``import_ms`` and transfer-tuning's sources alike.

Every record is kept with its raw ``run_secs``; failed ones are flagged (``ERROR_MS_FAILED`` for the
failure value, ``ERROR_MS_NO_RESULT`` when there is no result). A task is keyed by (``ms``, shash) and
stores the base64 IR exactly as in the file; a record's schedule is the trace JSON written compactly, and
its program id is ``program_id("ms", shash, schedule)``, the same that ``costlab dataset measure`` gives
the same program. Reading needs no TVM; TVM (when importable) only names and classifies the tasks.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from pathlib import Path

import numpy as np
import orjson

from costlab.common.errors import InputError, last_line
from costlab.common.files import write_atomically
from costlab.datasets import records as rec
from costlab.datasets.import_report import ImportReport
from costlab.datasets.ms_workload import describe_json, plain_json
from costlab.datasets.store import DatasetWriter, open_dataset
from costlab.datasets.targets import platform_id_for

CHUNK = 8192  # records handed to the writer at once
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


def _orjson_may_differ(out: bytes) -> bool:
    """Whether orjson's text may differ from ``json.dumps``'s: negative exponents and tiny floats (Python
    writes 1e-07 and 5e-05, orjson 1e-7 and 0.00005), DEL and non-ASCII (Python escapes them), and null
    (orjson writes NaN and infinities as null). Substring tests only: this runs once per record."""
    return b"e-" in out or b"0.0000" in out or b"null" in out or b"\x7f" in out or not out.isascii()


def compact_json(value) -> str:
    """The canonical text of a trace: ``json.dumps`` with no spaces (the form program ids hash).

    orjson writes the same bytes ~20x faster for everything but the cases ``_orjson_may_differ`` catches,
    which fall back to ``json.dumps``, so the text (and every program id) is exactly ``json.dumps``'s.
    """
    try:
        out = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):  # e.g. integers beyond 64 bits
        return json.dumps(value, separators=(",", ":"))
    if _orjson_may_differ(out):
        return json.dumps(value, separators=(",", ":"))
    return out.decode()


def database_file(work_dir, name: str) -> Path | None:
    """The file ``name`` of a MetaSchedule work dir, plain or gzip-compressed (``name.gz``), or None."""
    for path in (Path(work_dir) / name, Path(work_dir) / (name + ".gz")):
        if path.is_file():
            return path
    return None


def read_lines(path: Path):
    """``(0-based line number, line bytes)`` of a database file, plain or gzip-compressed (by its ``.gz``
    suffix). A compressed file that does not decompress is an InputError naming it (the lines before the
    damage have been read by then; an import that fails keeps nothing of them)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            yield from enumerate(fh)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(path, f"is not a readable gzip file ({last_line(exc)})") from None


def _content_size(path: Path) -> int:
    """Bytes of a database file's lines (what the progress bar counts): a gzip file's uncompressed size,
    from its trailer (modulo 4 GiB, as gzip records it)."""
    if path.suffix != ".gz":
        return os.path.getsize(path)
    try:
        with open(path, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            return int.from_bytes(fh.read(4), "little")
    except OSError:
        return os.path.getsize(path)


def _work_dir_files(work_dir: Path) -> tuple[Path, Path]:
    work_dir = Path(work_dir)
    if not work_dir.exists():
        raise InputError(work_dir, "no such MetaSchedule work directory")
    if not work_dir.is_dir():
        raise InputError(work_dir, f"not a directory: give the MetaSchedule work directory holding "
                                   f"{WORKLOAD_FILE} and {RECORD_FILE}")
    wl, tr = database_file(work_dir, WORKLOAD_FILE), database_file(work_dir, RECORD_FILE)
    missing = [name for name, p in ((WORKLOAD_FILE, wl), (RECORD_FILE, tr)) if p is None]
    if missing:
        raise InputError(work_dir, f"not a MetaSchedule database: missing {' and '.join(missing)} "
                                   f"(a work directory of tune_tir / tune_relax holds {WORKLOAD_FILE} and {RECORD_FILE}, "
                                   "plain or .gz)")
    return wl, tr


def read_workloads(path: Path, report: ImportReport) -> dict[int, tuple[str, str]]:
    """Line index (0-based, as record files count) -> (shash, base64), good lines only; bad lines are
    counted in ``report`` as ``FILE:LINE: what``. ``path`` is plain or gzip-compressed."""
    out: dict[int, tuple[str, str]] = {}
    for i, line in read_lines(path):
        if not line.strip():
            continue
        report.lines += 1
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            report.problem(f"{path}:{i + 1}: not JSON ({exc})")
            continue
        if (not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], str)
                or not isinstance(value[1], str) or not value[0].isdigit()):
            report.problem(f"{path}:{i + 1}: not a workload ([shash string, base64 IR string])")
            continue
        why = base64_problem(value[1])
        if why:  # stored, it would make every record of the workload unreadable later
            report.problem(f"{path}:{i + 1}: workload IR is not valid base64 ({why})")
            continue
        out[i] = (value[0], value[1])
    return out


_read_workloads = read_workloads  # the name repair_work_dir and older callers use


def read_records(path: Path, report: ImportReport):
    """The tuning records of a records file (plain or gzip-compressed), shape-checked without TVM: per
    line ``(0-based line number, line length in bytes, parsed)`` where ``parsed`` is ``parse_record``'s
    tuple, or None for a blank or bad line (a bad one counted in ``report`` as ``FILE:LINE: what``)."""
    for i, line in read_lines(path):
        if not line.strip():
            yield i, len(line), None
            continue
        report.lines += 1
        try:
            parsed = parse_record(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            report.problem(f"{path}:{i + 1}: not JSON ({exc})")
            parsed = None
        except ValueError as exc:
            report.problem(f"{path}:{i + 1}: {exc}")
            parsed = None
        yield i, len(line), parsed


def base64_problem(text: str) -> str | None:
    """Why ``text`` is not the base64 of a serialized IRModule, or None. Checks the encoding only (no TVM):
    characters outside the base64 alphabet, a length that is not a multiple of 4, nothing encoded."""
    import base64
    import binascii

    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        return str(exc).rstrip(".")
    return None if raw else "empty"


def parse_record(value) -> tuple[int, list, list | None, dict | None, list | None]:
    """(workload index, trace, run_secs, target, args_info) of a line of a MetaSchedule JSON database's records
    file, parsed as JSON (``value``), its shape checked without TVM; or ValueError saying what is wrong."""
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], list):
        raise ValueError("not a tuning record ([workload_index, [trace, run_secs, target, args_info]])")
    idx, body = value
    if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
        raise ValueError(f"bad workload index {idx!r}")
    if len(body) < 2:
        raise ValueError("tuning record without trace and run_secs")
    trace, run_secs = body[0], body[1]
    target = body[2] if len(body) > 2 else None
    args_info = body[3] if len(body) > 3 else None
    if not isinstance(trace, list) or len(trace) != 2 or not isinstance(trace[0], list):
        raise ValueError("trace is not [instructions, decisions]")
    if run_secs is not None:
        if not isinstance(run_secs, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in run_secs):
            raise ValueError(f"run_secs is not a list of numbers: {str(run_secs)[:80]}")
    if target is not None and not (isinstance(target, dict) and "kind" in target):
        raise ValueError(f"target is not a JSON object with a 'kind': {str(target)[:80]}")
    return idx, trace, run_secs, target, args_info


def costs_and_error(run_secs) -> tuple[list[float], int]:
    """Raw costs and error code of a record's ``run_secs`` (MetaSchedule writes ``[1e10]`` for failures)."""
    if not run_secs:
        return [], rec.ERROR_MS_NO_RESULT
    costs = [float(x) for x in run_secs]
    if any(not math.isfinite(x) or x >= rec.MS_FAILURE_SECS or x < 0 for x in costs):
        return costs, rec.ERROR_MS_FAILED
    return costs, rec.ERROR_NONE


def _check_host(writer, pid: str, host: dict | None) -> None:
    """Refuse records of one machine for a platform the dataset holds as another machine's."""
    from costlab.common.host import describe_host, host_difference, same_host

    known = writer.platforms[pid].host if pid in writer.platforms else None
    if host and known and not same_host(known, host):
        raise InputError(writer.path, f"platform {pid!r} holds records measured on {describe_host(known)}; these "
                                      f"were measured on {describe_host(host)} ({host_difference(known, host)}): "
                                      "import them as another --platform")


def import_ms(work_dirs, out, platform: str | None = None, network: str | None = None,
              progress: bool = True, host: dict | None = None) -> ImportReport:
    """Import MetaSchedule databases (one per work directory) into the dataset ``out`` (created if missing).

    ``platform`` names the platform of all records; by default it is derived from each record's target
    (``targets.platform_id_for``). ``network`` records all tasks read as one network, each with weight 1.
    ``host`` is the machine that measured the records (``costlab.common.host``), recorded with their platform
    (a platform already recorded as another machine's is refused). Bad lines are skipped and counted in the report; a work directory without both files is an error
    raised before anything is written. Re-importing adds nothing twice (records dedupe by program id).
    """
    dirs = [Path(d) for d in work_dirs]
    pairs = [_work_dir_files(d) for d in dirs]  # all checked before any work
    report = ImportReport()
    task_info: dict[str, tuple] = {}  # shash -> (WorkloadInfo) computed once per workload
    decode_problems: set[str] = set()
    bar = None
    if progress:
        from tqdm import tqdm

        total = sum(_content_size(tr) for _, tr in pairs)
        bar = tqdm(total=total, unit="B", unit_scale=True, desc="import-ms", leave=False, delay=1.0)
    hosted: set = set()
    with DatasetWriter(out) as writer:
        network_tasks: dict[int, float] = {}
        for wl_path, tr_path in pairs:
            report.files += 2
            workloads = read_workloads(wl_path, report)
            mtime = tr_path.stat().st_mtime
            batches: dict[str, rec.RecordBatch] = {}
            task_of: dict[int, int] = {}
            last_target, last_pid, pending, read = None, None, 0, 0
            for i, size, parsed in read_records(tr_path, report):
                read += size
                if pending >= CHUNK:  # bounded memory: hand full chunks to the writer as they fill
                    for pid_, batch in batches.items():
                        writer.add_records(pid_, batch)
                    batches, pending = {}, 0
                    if bar is not None:
                        bar.update(read)
                        read = 0
                if parsed is None:
                    continue
                where = f"{tr_path}:{i + 1}"
                idx, trace, run_secs, target, args_info = parsed
                if idx not in workloads:
                    report.problem(f"{where}: workload index {idx} is not a good line of {wl_path.name}")
                    continue
                if platform:
                    pid = platform
                elif target is not None:
                    if target != last_target:  # records of one database mostly share one target
                        last_target, last_pid = target, platform_id_for(target)
                    pid = last_pid
                else:
                    report.problem(f"{where}: record without a target (pass --platform to name one)")
                    continue
                if pid not in writer.platforms:
                    writer.add_platform(pid, target or {}, host=host)
                elif not writer.platforms[pid].target and target:
                    writer.add_platform(pid, target)
                if host and pid not in hosted:  # once per platform: the records' machine is the platform's
                    _check_host(writer, pid, host)
                    writer.add_platform(pid, writer.platforms[pid].target, host=host)
                    hosted.add(pid)
                shash, b64 = workloads[idx]
                if idx not in task_of:
                    if shash not in task_info:
                        info, why = describe_json(shash, b64)
                        task_info[shash] = info
                        if why:
                            decode_problems.add(why)
                    info = task_info[shash]
                    extra = {"args_info": args_info} if args_info is not None else {}
                    t = writer.add_task(shash, "ms", b64, name=info.name, kernel_class=info.kernel_class,
                                        flops=info.flops, extra=extra)
                    if args_info is not None and "args_info" not in writer.tasks[t].extra:
                        writer.tasks[t].extra["args_info"] = args_info
                    task_of[idx] = t
                t = task_of[idx]
                network_tasks[t] = 1.0
                schedule = compact_json(trace)
                costs, error = costs_and_error(run_secs)
                batch = batches.get(pid)
                if batch is None:  # (setdefault would build a batch for every record)
                    batch = batches[pid] = rec.RecordBatch()
                batch.append(t, schedule, costs, error, mtime, rec.program_id("ms", shash, schedule))
                pending += 1
            for pid, batch in batches.items():
                writer.add_records(pid, batch)
            if bar is not None:
                bar.update(read)
        if network:
            writer.set_network(network, sorted(network_tasks.items()))
        report.added = dict(writer.added)
        report.duplicates = dict(writer.duplicates)
        report.tasks = len(writer.tasks)
        if not report.usable:
            # nothing to keep: fail the transaction (an existing output stays as it was, a new one is not made)
            if bar is not None:
                bar.close()
            raise _nothing_usable(report, dirs, pairs)
    if bar is not None:
        bar.close()
    for why in sorted(decode_problems):
        report.problems.append(f"(note) tasks named by hash: {why}")
    return report


def _nothing_usable(report: ImportReport, dirs: list, pairs: list) -> InputError:
    """The error of an import that read no usable record: the first bad line (``file:line: what``) with the
    count of bad lines, or, when every file is empty, which files are."""
    files = len(pairs) * 2
    if report.problems:
        where, _, what = report.problems[0].partition(": ")
        path, _, line = where.rpartition(":")
        message = what + (f"; no usable records ({report.bad} bad lines in {files} file(s))" if report.bad > 1
                          else "; no usable records")
        return InputError(path, message, line=int(line)) if line.isdigit() else InputError(where, message)
    if report.lines == 0:
        where = dirs[0] if len(dirs) == 1 else ", ".join(map(str, dirs))
        return InputError(where, f"empty MetaSchedule database ({WORKLOAD_FILE} and {RECORD_FILE} hold no lines)")
    return InputError(pairs[0][1] if len(pairs) == 1 else ", ".join(str(tr) for _, tr in pairs),
                      "no tuning records (the workload file has lines, the record file none)")


def _args_info(task) -> list:
    """``args_info`` of a task: kept from its database, else derived from the workload with TVM."""
    if task.extra.get("args_info") is not None:
        return task.extra["args_info"]
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from costlab.datasets.ms_workload import decode_workload

    mod = decode_workload(task.workload_hash, task.workload)
    return [a.as_json() for a in ArgInfo.from_entry_func(mod, remove_preproc=True)]


def export_ms(data, platform: str, out_dir, include_failed: bool = False) -> str:
    """Write the records of ``platform`` as a MetaSchedule database in ``out_dir`` (created if missing),
    loadable by ``JSONDatabase(work_dir=out_dir)``. Returns a one-line summary.

    Only MetaSchedule tasks can be written: records of Ansor-dialect tasks make it refuse. Failed records
    are left out unless ``include_failed`` (they are then written as MetaSchedule writes them:
    ``run_secs`` ``[1e10]``, or ``null`` for no result). An existing database in ``out_dir`` is never
    overwritten; the files are written under temporary names and renamed when complete.
    """
    out_dir = Path(out_dir)
    with open_dataset(data) as ds:
        if platform not in ds.record_platforms():
            known = ", ".join(ds.record_platforms()) or "none"
            raise InputError(data, f"no records for platform {platform!r} (platforms with records: {known})")
        table = ds.records(platform)
        task_col = table.task
        used = np.unique(task_col)
        ansor = [int(t) for t in used if ds.tasks[int(t)].dialect != "ms"]
        if ansor:
            names = ", ".join(ds.tasks[t].name or ds.tasks[t].workload_hash for t in ansor[:3])
            raise InputError(
                data, f"platform {platform!r} has records of {len(ansor)} Ansor-dialect task(s) ({names}"
                f"{', ...' if len(ansor) > 3 else ''}): a MetaSchedule database holds only MetaSchedule "
                "('ms') tasks; Ansor logs cannot be converted to MetaSchedule traces")
        target = ds.platforms[platform].target
        if not target.get("kind"):
            raise InputError(data, f"platform {platform!r} has no target (its records came without one); "
                                   "MetaSchedule records need one")
        values, offsets = table.costs()
        errors = table.error
        keep = np.ones(len(task_col), bool) if include_failed else np.isfinite(table.latency())
        rows = np.flatnonzero(keep)
        schedules = table.schedules(rows) if rows.size else []
        wl_index = {int(t): i for i, t in enumerate(sorted(set(task_col[rows].tolist())))}
        wl_lines = []
        for t in wl_index:
            task = ds.tasks[t]
            wl_lines.append(json.dumps([task.workload_hash, task.workload]))
        args = {t: plain_json(_args_info(ds.tasks[t])) for t in wl_index}
        rec_lines = []
        for r, schedule in zip(rows.tolist(), schedules):
            t = int(task_col[r])
            costs = values[int(offsets[r]):int(offsets[r + 1])].tolist()
            if int(errors[r]) == rec.ERROR_MS_NO_RESULT or (not costs and int(errors[r]) == rec.ERROR_NONE):
                run_secs = None
            elif int(errors[r]) != rec.ERROR_NONE and not costs:
                run_secs = [rec.MS_FAILURE_SECS]
            else:
                run_secs = costs
            rec_lines.append("[%d,[%s,%s,%s,%s]]" % (
                wl_index[t], schedule, json.dumps(run_secs), json.dumps(target, sort_keys=True),
                json.dumps(args[t])))
    out_dir.mkdir(parents=True, exist_ok=True)
    existing = [n for n in (WORKLOAD_FILE, RECORD_FILE) if (out_dir / n).exists()]
    if existing:
        raise InputError(out_dir, f"already holds a MetaSchedule database ({', '.join(existing)}); "
                                  "choose an empty directory (costlab never overwrites one)")
    for name, lines in ((WORKLOAD_FILE, wl_lines), (RECORD_FILE, rec_lines)):
        write_atomically(out_dir / name, [(line + "\n").encode() for line in lines])
    skipped = len(task_col) - len(rows)
    text = f"{out_dir}: {len(wl_lines)} workloads, {len(rec_lines)} records of platform {platform!r}"
    if skipped:
        text += f" ({skipped} failed records left out; --include-failed writes them)"
    return text


BAD_LINES_FILE = "database_tuning_record.bad-lines.jsonl"


class DatabaseScan:
    """What ``repair_work_dir`` would do to a work dir's database, found by reading only: ``problems`` (one
    ``FILE:LINE: what`` per line to move aside), ``records`` (the record lines that stay), ``target`` (the
    first of those records' target JSON, or None), and the lines themselves for the repair to write."""

    def __init__(self, work_dir):
        work_dir = Path(work_dir)
        self.wl_path, self.tr_path = work_dir / WORKLOAD_FILE, work_dir / RECORD_FILE
        self.problems: list[str] = []
        self.target = None
        wl_lines = self.wl_path.read_bytes().splitlines(keepends=True) if self.wl_path.is_file() else []
        good = read_workloads(self.wl_path, ImportReport()) if self.wl_path.is_file() else {}
        bad_wl = [i for i, line in enumerate(wl_lines) if line.strip() and i not in good]
        for i in bad_wl:
            if i != len(wl_lines) - 1:
                raise InputError(self.wl_path, f"line {i + 1} is not a workload, and records after it refer to "
                                               "workloads by line number, so it cannot be skipped: tune in another "
                                               "--work-dir, or import what is readable with `costlab dataset "
                                               "import-ms`")
        self.moved: list[bytes] = []
        self.cut_workload = bool(bad_wl)
        if bad_wl:
            self.problems.append(f"{self.wl_path}:{bad_wl[0] + 1}: not a workload (cut short?)")
            self.moved.append(wl_lines[-1].rstrip(b"\n") + b"\n")
            wl_lines = wl_lines[:-1]
        self.wl_lines = wl_lines
        self.keep: list[bytes] = []
        tr_lines = self.tr_path.read_bytes().splitlines(keepends=True) if self.tr_path.is_file() else []
        self.tr_count = len([x for x in tr_lines if x.strip()])
        for i, line in enumerate(tr_lines):
            if not line.strip():
                continue
            try:
                parsed = parse_record(orjson.loads(line))
                idx = parsed[0]
                if idx not in good:
                    raise ValueError(f"refers to workload line {idx + 1}, which is "
                                     f"{'bad' if idx < len(wl_lines) + 1 else 'missing'}")
                if not line.endswith(b"\n"):
                    raise ValueError("cut short (no end of line)")
            except (orjson.JSONDecodeError, ValueError) as exc:
                self.problems.append(f"{self.tr_path}:{i + 1}: {str(exc).splitlines()[0][:120]}")
                self.moved.append(line.rstrip(b"\n") + b"\n")
                continue
            if self.target is None:
                self.target = parsed[3]
            self.keep.append(line)

    @property
    def records(self) -> int:
        return len(self.keep)


def repair_work_dir(work_dir, scan: DatabaseScan | None = None) -> list[str]:
    """Make a MetaSchedule work dir's database readable by MetaSchedule again before a run continues it.

    A line cut short (what a kill during a write leaves) or malformed makes ``JSONDatabase`` fail with a
    traceback or TVM crash outright. Bad record lines, and records of a workload line that is bad, are moved
    to ``database_tuning_record.bad-lines.jsonl`` beside the database (nothing is lost) and the database is
    rewritten without them; a bad last workload line (cut short) is moved the same way. A bad workload line
    before others cannot be removed (records refer to workloads by line number): that is an error naming
    it. Returns one ``FILE:LINE: what`` per line moved out; nothing is written when every line is good.
    ``scan``: the ``DatabaseScan`` of the work dir, when the caller has read it already."""
    work_dir = Path(work_dir)
    scan = scan if scan is not None else DatabaseScan(work_dir)
    if scan.moved:
        with open(work_dir / BAD_LINES_FILE, "ab") as fh:
            fh.writelines(scan.moved)
        if scan.cut_workload:
            write_atomically(scan.wl_path, scan.wl_lines)
        if len(scan.keep) != scan.tr_count:
            write_atomically(scan.tr_path, scan.keep)
    return scan.problems


def moved_aside_note(work_dir, problems: list[str]) -> str:
    """The one line that says how many lines of a database were moved aside, and where to."""
    return (f"moved {len(problems)} bad line(s) of the database aside, to {Path(work_dir) / BAD_LINES_FILE}: "
            + "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else ""))
