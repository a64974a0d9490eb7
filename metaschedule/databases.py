"""MetaSchedule's JSON databases, read and written: the one reader (plain or gzip-compressed files, one
validation) and the one writer every part of costlab uses.

A MetaSchedule work directory holds two JSON-lines files:

- ``database_workload.json``: one workload per line, ``[shash, base64 IRModule JSON]``;
- ``database_tuning_record.json``: one record per line,
  ``[workload_index, [trace_json, run_secs, target_json, args_info]]``, the index counting lines of the
  workload file from 0. ``run_secs`` is a list of seconds, ``[1e10]`` when building or running failed,
  or ``null``.

Either file may be gzip-compressed (``database_workload.json.gz``, ``database_tuning_record.json.gz``, as
``benchmarks/results/`` archives runs): ``database_file`` finds the plain or the compressed one and
``read_workloads`` / ``read_records`` read both, ``work_dir_database`` opens them as MetaSchedule's
``JSONDatabase``. Lines are shape-checked without TVM; a bad line is counted
in the caller's report (``costlab.common.import_report.ImportReport``) as ``FILE:LINE: what`` and skipped.
Whether TVM knows a trace's instruction kinds is ``instruction_kind_problem``'s check (where TVM is importable).
``write_database`` writes a database that ``JSONDatabase`` loads.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
import tempfile
import zlib
from contextlib import contextmanager
from pathlib import Path

import orjson

from costlab.common.errors import InputError, last_line
from costlab.common.files import write_atomically, write_together
from costlab.common.import_report import ImportReport
from costlab.metaschedule import intrinsics
from costlab.metaschedule.traces import TENSORIZE_MARKERS, compact_json

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


def database_file(work_dir, name: str) -> Path | None:
    """The file ``name`` of a MetaSchedule work dir, plain or gzip-compressed (``name.gz``), or None."""
    for path in (Path(work_dir) / name, Path(work_dir) / (name + ".gz")):
        if path.is_file():
            return path
    return None


_TENSORIZING = tuple(word.encode() for word in TENSORIZE_MARKERS)
_CUDA_NAMES = tuple(word.encode() for word in intrinsics.CUDA_NAME_MARKERS)


def _registry_kind(path: Path) -> str | None:
    """The tensor intrinsics a record file (plain or gzip-compressed) needs loaded (``intrinsics.load``):
    None when no trace tensorizes, ``"cuda"`` when the file names CUDA intrinsics, else ``"all"``."""
    opener = gzip.open if path.suffix == ".gz" else open
    tail, tensorizes, cuda = b"", False, False
    try:
        with opener(path, "rb") as f:
            while chunk := f.read(1 << 20):
                block = tail + chunk
                tensorizes = tensorizes or any(word in block for word in _TENSORIZING)
                cuda = cuda or any(word in block for word in _CUDA_NAMES)
                if tensorizes and cuda:
                    break
                tail = block[-32:]
    except (OSError, EOFError, zlib.error):  # unreadable here: JSONDatabase says what is wrong
        return None
    return ("cuda" if cuda else "all") if tensorizes else None


def json_database(**kwargs):
    """MetaSchedule's ``JSONDatabase(**kwargs)``, with the tensor-intrinsic registry loaded first when its record
    file holds a tensorizing trace (a tensor-core program): loading such a record replays its trace, which
    looks the intrinsics up by name. Other databases open without the registry's import (tens of seconds); a
    database of CUDA tensor-core programs loads the CUDA intrinsics alone, and all of them only when a record
    names another (a file of several targets' programs)."""
    from tvm.s_tir import meta_schedule as ms

    work = kwargs.get("work_dir")
    rec = kwargs.get("path_tuning_record") or (Path(work) / RECORD_FILE if work else None)
    kind = _registry_kind(Path(rec)) if rec is not None and Path(rec).is_file() else None
    if kind is None:
        return ms.database.JSONDatabase(**kwargs)
    intrinsics.load(kind)
    try:
        return ms.database.JSONDatabase(**kwargs)
    except Exception as exc:  # TVM's error for an intrinsic looked up and not found
        if kind == "all" or "is not registered" not in str(exc):
            raise
    intrinsics.load("all")
    return ms.database.JSONDatabase(**kwargs)


@contextmanager
def work_dir_database(work, skipped: list | None = None):
    """A MetaSchedule work dir's database (``JSONDatabase``), opened read-only in effect: gzip-compressed files,
    as benchmarks archive them, and a database with lines MetaSchedule's loader refuses or crashes on (a line
    cut by a kill, a blank line) are read from a temporary copy of their good lines, removed when the block
    ends; each line left out is a ``FILE:LINE: what`` appended to ``skipped``, and a compressed file damaged
    part way gives the lines before the damage and one ``FILE: what`` there (without ``skipped``, an
    InputError naming it). An InputError when the folder
    holds no database, or one whose workload lines cannot be read in order."""
    from costlab.metaschedule.repair import DatabaseScan  # lazy: the repair module reads databases with this one

    work = Path(work)
    wl, rec = database_file(work, WORKLOAD_FILE), database_file(work, RECORD_FILE)
    if not work.is_dir() or wl is None or rec is None:
        raise InputError(work, f"is not a MetaSchedule work dir ({WORKLOAD_FILE} and {RECORD_FILE}, or .gz)")
    tmp = None
    try:
        if wl.suffix == ".gz" or rec.suffix == ".gz":
            tmp = Path(tempfile.mkdtemp(prefix="costlab-database-"))
            for src, name in ((wl, WORKLOAD_FILE), (rec, RECORD_FILE)):
                # a copy cut short: the lines before the damage, the damage said in skipped (an error without it)
                damage = ImportReport() if skipped is not None else None
                try:
                    with open(tmp / name, "wb") as fo:
                        fo.writelines(line for _, line in read_lines(src, damage))
                except OSError as exc:  # a full or refusing temporary folder: a write error names no file
                    if isinstance(exc, InputError):
                        raise
                    raise InputError(src, f"cannot be decompressed into the temporary folder {tmp.parent} "
                                          f"({exc.strerror or exc}; TMPDIR sets the folder)") from None
                if damage is not None:
                    skipped.extend(damage.problems)
        try:
            scan = DatabaseScan(tmp or work)
        except InputError as exc:
            raise InputError(wl, exc.message) from None
        if scan.problems or scan.tr_rewrite or scan.wl_eol:  # the good lines, in a copy: the work dir is only read
            tmp = tmp or Path(tempfile.mkdtemp(prefix="costlab-database-"))
            write_atomically(tmp / WORKLOAD_FILE, scan.wl_lines)
            write_atomically(tmp / RECORD_FILE, scan.keep)
            if skipped is not None:
                names = {str(tmp / WORKLOAD_FILE): str(wl), str(tmp / RECORD_FILE): str(rec)}
                for problem in scan.problems:
                    file, _, rest = problem.partition(":")
                    skipped.append(f"{names.get(file, file)}:{rest}")
        if tmp is not None:
            wl, rec = tmp / WORKLOAD_FILE, tmp / RECORD_FILE
        yield json_database(path_workload=str(wl), path_tuning_record=str(rec), allow_missing=False)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def read_lines(path: Path, report=None):
    """``(0-based line number, line bytes)`` of a database file, plain or gzip-compressed (by its ``.gz``
    suffix). A file that cannot be opened or read is an InputError naming it and the system's reason. A
    compressed file that does not decompress (a copy cut short) gives the lines before the damage, and the
    damage is one problem in ``report`` (``FILE: what``), so that an import keeps those lines and the other
    files it reads (it fails only when none of them held a usable line); without ``report`` it is an
    InputError naming the file."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    read = 0
    try:
        with opener(path, "rb") as fh:
            for read, line in enumerate(fh, 1):
                yield read - 1, line
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # (BadGzipFile is an OSError: caught first)
        why = f"is not a readable gzip file ({last_line(exc)})"
        if report is None:
            raise InputError(path, why) from None
        report.problem(f"{path}: {why}" + (f"; the {read} lines before the damage were read" if read else ""))
    except OSError as exc:  # a file that is no regular file, unreadable, or failing underneath
        raise InputError(path, f"cannot be read ({exc.strerror or last_line(exc)})") from None


def content_size(path: Path) -> int:
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


def work_dir_files(work_dir: Path) -> tuple[Path, Path]:
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


def read_workloads(path: Path, report) -> dict[int, tuple[str, str]]:
    """Line index (0-based, as record files count) -> (shash, base64), good lines only; bad lines are
    counted in ``report`` as ``FILE:LINE: what``. ``path`` is plain or gzip-compressed."""
    out: dict[int, tuple[str, str]] = {}
    for i, line in read_lines(path, report):
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



def read_records(path: Path, report):
    """The tuning records of a records file (plain or gzip-compressed), shape-checked without TVM: per
    line ``(0-based line number, line length in bytes, parsed)`` where ``parsed`` is ``parse_record``'s
    tuple, or None for a blank or bad line (a bad one counted in ``report`` as ``FILE:LINE: what``). A compressed
    file damaged part way gives the lines before the damage and one problem naming the file (``read_lines``)."""
    for i, line in read_lines(path, report):
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
    if not isinstance(trace, list) or len(trace) != 2 or not isinstance(trace[0], list) or not isinstance(
            trace[1], list):
        raise ValueError("trace is not [instructions, decisions]")
    check_trace_shape(trace[0], trace[1])
    if run_secs is not None:
        if not isinstance(run_secs, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in run_secs):
            raise ValueError(f"run_secs is not a list of numbers: {str(run_secs)[:80]}")
    if target is not None and not (isinstance(target, dict) and "kind" in target):
        raise ValueError(f"target is not a JSON object with a 'kind': {str(target)[:80]}")
    if args_info is not None and not _args_info_ok(args_info):
        raise ValueError(f"args_info is not a list of [\"TENSOR\", dtype, shape]: {str(args_info)[:80]}")
    return idx, trace, run_secs, target, args_info


def _args_info_ok(args_info) -> bool:
    """Whether a record's ``args_info`` is what MetaSchedule's loader takes: one ``["TENSOR", dtype, shape]`` per
    argument of the workload, the shape a list of non-negative integers (it refuses the whole database for one
    that is not, and an import would write it on every record of the task it exports)."""
    if args_info.__class__ is not list:
        return False
    for arg in args_info:
        if (arg.__class__ is not list or len(arg) != 3 or arg[0] != "TENSOR" or arg[1].__class__ is not str
                or arg[2].__class__ is not list or not all(x.__class__ is int and x >= 0 for x in arg[2])):
            return False
    return True


def check_trace_shape(insts: list, decisions: list) -> None:
    """ValueError when a trace's instructions are not each ``[kind, inputs, attrs, outputs]`` (a kind string
    and three lists) or its decisions not each ``[instruction index, value]`` with the index one of the trace's
    instructions: the shapes MetaSchedule's loader requires of every record (it refuses the whole database
    for one that is not), and each decision's value of the kind its instruction takes (``_decision_problem``: the
    loader refuses the whole database for a string where tile factors go, and crashes on a null). Whether TVM knows
    each kind is ``instruction_kind_problem``'s check (it needs TVM)."""
    lst, text = list, str
    try:  # the fast path (every record passes here): unpacking checks the length, the classes the rest
        for kind, inputs, attrs, outputs in insts:
            if (kind.__class__ is not text or inputs.__class__ is not lst or attrs.__class__ is not lst
                    or outputs.__class__ is not lst):
                raise TypeError
    except (TypeError, ValueError):
        for n, inst in enumerate(insts):  # which one, for the message
            if (type(inst) is not list or len(inst) != 4 or type(inst[0]) is not str
                    or not all(type(part) is list for part in inst[1:])):
                raise ValueError(f"trace instruction {n} is not [kind, inputs, attrs, outputs]: "
                                 f"{str(inst)[:80]}") from None
    count = len(insts)
    for n, decision in enumerate(decisions):
        # exact types: JSON gives list and int, and a bool is no instruction index
        if (type(decision) is not list or len(decision) != 2 or type(decision[0]) is not int
                or not 0 <= decision[0] < count):
            raise ValueError(f"trace decision {n} is not [instruction index, value] with the index of one of "
                             f"the trace's {count} instructions: {str(decision)[:80]}")
        inst = insts[decision[0]]
        what = _decision_problem(inst, decision[1])
        if what:
            raise ValueError(f"trace decision {n} (of instruction {decision[0]}, {inst[0]}) {what}: "
                             f"{str(decision[1])[:80]}")


_INT64 = 1 << 63  # decisions are 64-bit integers in TVM: a larger JSON number is refused like a string


def _decision_problem(inst: list, value) -> str | None:
    """What is wrong with ``value`` as the decision of instruction ``inst`` (shape-checked), or None: the kinds TVM's
    loader takes for MetaSchedule's sampling instructions (tile factors a list of one positive integer per output,
    a categorical choice the index of one of its candidates, a compute-at location an integer from -2), and no
    decision on an instruction that samples nothing. A ``Sample...`` kind not named here is not checked."""
    kind, cls = inst[0], value.__class__
    if kind == "SamplePerfectTile" or kind == "SamplePartitionedTile":
        n = len(inst[3])
        if cls is list and len(value) == n:
            for x in value:  # (a loop: this runs for every record read)
                if x.__class__ is not int or not 0 < x < _INT64:
                    break
            else:
                return None
        return f"is not a list of {n} positive integers (one tile factor per output)"
    if kind == "SampleCategorical":
        candidates = inst[2][0] if inst[2] and inst[2][0].__class__ is list else None
        n = len(candidates) if candidates is not None else _INT64
        if cls is not int or not 0 <= value < n:
            return "is not the index of one of its candidates" + (f" (0 to {n - 1})" if candidates is not None else "")
    elif kind == "SampleComputeLocation":
        if cls is not int or not -2 <= value < _INT64:
            return "is not a location (an integer from -2)"
    elif not kind.startswith("Sample"):
        return "is the decision of an instruction that samples nothing"
    return None


def workload_problem(shash: str, b64: str) -> str | None:
    """Why TVM cannot decode a workload line's IRModule (base64 of something else: MetaSchedule's loader then
    refuses the whole database with TVM's error), or None; None without TVM (reading a database needs none)."""
    from costlab.metaschedule.workloads import decode_workload  # lazy: it imports TVM when called

    try:
        decode_workload(shash, b64)
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001  TVM says it in several ways (a JSON error, std::bad_alloc, ...)
        return f"workload IR does not decode as an IRModule ({last_line(exc)[:120]})"
    return None


_REGISTERED_KINDS: set[str] = set()  # instruction kinds TVM said it has registered (the fast path of every record)


def instruction_kind_problem(insts: list) -> str | None:
    """Why a trace's instructions (shape-checked by ``parse_record``) cannot load in TVM: one names an instruction
    kind TVM has not registered (MetaSchedule's loader then refuses the whole database, ``Instruction kind ... is
    not registered``); or None. TVM is asked once per kind; without TVM no kind is refused (reading a database
    needs no TVM)."""
    registered = _REGISTERED_KINDS
    for kind, _inputs, _attrs, _outputs in insts:
        if kind not in registered and not _kind_registered(kind):
            return f"trace instruction {kind!r} is no instruction kind TVM knows"
    return None


@functools.lru_cache(maxsize=None)
def _kind_registered(kind: str) -> bool:
    """Whether TVM has registered the instruction kind ``kind`` (True without TVM: nothing to check against);
    cached, so that TVM is asked once per kind, a kind it knows is added to ``_REGISTERED_KINDS``."""
    try:
        from tvm.s_tir.schedule import InstructionKind
    except ImportError:
        return True
    try:
        InstructionKind.get(kind)
    except Exception:  # noqa: BLE001  TVM says "not registered" with an AttributeError or its own error
        return False
    _REGISTERED_KINDS.add(kind)
    return True


def write_database(out_dir, workloads, records, replace: bool = False) -> Path:
    """Write a MetaSchedule database in ``out_dir`` (created if missing); returns ``out_dir``.

    ``workloads``: ``(shash, base64 IR)`` per line; ``records``: ``(workload line index, trace, run_secs,
    target, args_info)`` per line, the trace as its JSON text (written as it is) or value (written by
    ``compact_json``). Each file is written under a temporary name and renamed when complete; when the second
    cannot be written, the first is removed again (a new database is both files or none). An existing database
    is an InputError unless ``replace``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(out_dir, "exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    # a gzip-compressed database too: plain files written beside it would hide it from every reader (database_file)
    existing = [n + gz for n in (WORKLOAD_FILE, RECORD_FILE) for gz in ("", ".gz") if (out_dir / (n + gz)).exists()]
    if existing and not replace:
        raise InputError(out_dir, f"already holds a MetaSchedule database ({', '.join(existing)}); "
                                  "choose an empty directory (costlab never overwrites one)")
    wl_lines = [json.dumps([shash, b64]) for shash, b64 in workloads]
    rec_lines = ["[%d,[%s,%s,%s,%s]]" % (
        index, trace if isinstance(trace, str) else compact_json(trace), json.dumps(run_secs),
        json.dumps(target, sort_keys=True), json.dumps(args_info)) for index, trace, run_secs, target, args_info in records]
    # both files or neither (a full disk at either): workloads without their records, or the records of other
    # workloads, would be a database that refuses the next try or holds wrong pairs
    files = {out_dir / WORKLOAD_FILE: "".join(line + "\n" for line in wl_lines).encode(),
             out_dir / RECORD_FILE: "".join(line + "\n" for line in rec_lines).encode()}
    try:
        write_together(files)
    except OSError as exc:
        # the file by its own name, not the temporary one it was being written under
        name = next((n for n in (WORKLOAD_FILE, RECORD_FILE) if exc.filename and n in Path(exc.filename).name), None)
        raise InputError(out_dir / name if name else out_dir,
                         f"cannot write ({exc.strerror or exc}); nothing was written") from None
    return out_dir
