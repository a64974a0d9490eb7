"""A MetaSchedule work dir's database made readable again before a run continues it: lines cut short or
malformed are moved aside (``DatabaseScan`` finds them, ``repair_work_dir`` moves them).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from costlab.common.errors import InputError
from costlab.common.files import write_atomically
from costlab.common.import_report import ImportReport
from costlab.metaschedule.databases import RECORD_FILE, WORKLOAD_FILE, parse_record, read_workloads

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
        # blank lines at the end are dropped; one before a workload counts in MetaSchedule's line numbers and
        # makes its loader fail: a bad line like any other there
        self.wl_trailing_blanks = 0
        while wl_lines and not wl_lines[-1].strip():
            wl_lines.pop()
            self.wl_trailing_blanks += 1
        bad_wl = [i for i, line in enumerate(wl_lines) if i not in good]
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
        # a good last workload line without its end of line (a write cut just before it): the next workload a
        # run appends would join it on one line
        self.wl_eol = bool(wl_lines) and not wl_lines[-1].endswith(b"\n") and len(wl_lines) - 1 in good
        if self.wl_eol:
            wl_lines[-1] += b"\n"
        self.wl_eol = self.wl_eol or bool(self.wl_trailing_blanks)  # the file is rewritten as wl_lines
        self.wl_lines = wl_lines
        self.keep: list[bytes] = []
        tr_lines = self.tr_path.read_bytes().splitlines(keepends=True) if self.tr_path.is_file() else []
        for i, line in enumerate(tr_lines):
            if not line.strip():
                continue  # a blank line makes MetaSchedule's loader crash: the file is rewritten without it
            try:
                value = orjson.loads(line)
                parsed = parse_record(value)
                if len(value[1]) != 4:  # MetaSchedule's loader refuses the whole database for one such line
                    raise ValueError(f"a tuning record holds 4 fields (trace, run_secs, target, args_info), this "
                                     f"one {len(value[1])}")
                idx = parsed[0]
                if idx not in good:
                    raise ValueError(f"refers to workload line {idx + 1}, which is "
                                     f"{'bad' if idx < len(wl_lines) + 1 else 'missing'}")
            except (orjson.JSONDecodeError, ValueError) as exc:
                self.problems.append(f"{self.tr_path}:{i + 1}: {str(exc).splitlines()[0][:120]}")
                self.moved.append(line.rstrip(b"\n") + b"\n")
                continue
            if self.target is None:
                self.target = parsed[3]
            # a whole record without its end of line (a write cut just before it) is kept, its end restored
            self.keep.append(line if line.endswith(b"\n") else line + b"\n")
        self.tr_rewrite = self.keep != tr_lines  # a line moved, a blank line dropped, or an end of line restored

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
    if scan.wl_eol and not scan.cut_workload:
        write_atomically(scan.wl_path, scan.wl_lines)  # its end of line restored: nothing moved
    if scan.moved:
        with open(work_dir / BAD_LINES_FILE, "ab") as fh:
            fh.writelines(scan.moved)
        if scan.cut_workload:
            write_atomically(scan.wl_path, scan.wl_lines)
    if scan.tr_rewrite:
        write_atomically(scan.tr_path, scan.keep)
    return scan.problems


def moved_aside_note(work_dir, problems: list[str]) -> str:
    """The one line that says how many lines of a database were moved aside, and where to."""
    return (f"moved {len(problems)} bad line(s) of the database aside, to {Path(work_dir) / BAD_LINES_FILE}: "
            + "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else ""))
