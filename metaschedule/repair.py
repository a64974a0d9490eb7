"""A MetaSchedule work dir's database made readable again before a run continues it: lines cut short or
malformed are moved aside (``DatabaseScan`` finds them, ``repair_work_dir`` moves them).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from costlab.common.errors import InputError
from costlab.common.files import write_atomically
from costlab.common.import_report import ImportReport
from costlab.metaschedule.databases import (RECORD_FILE, WORKLOAD_FILE, instruction_kind_problem, parse_record,
                                            read_workloads, workload_problem)

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
        wl_report = ImportReport()
        good = read_workloads(self.wl_path, wl_report) if self.wl_path.is_file() else {}
        undecodable = {}  # where TVM is here: lines whose IR MetaSchedule's loader cannot decode (it loads none)
        for i, (shash, b64) in list(good.items()):
            why = workload_problem(shash, b64)
            if why:
                undecodable[i] = why
                del good[i]
        # blank lines at the end are dropped; one before a workload counts in MetaSchedule's line numbers and
        # makes its loader fail: a bad line like any other there
        self.wl_trailing_blanks = 0
        while wl_lines and not wl_lines[-1].strip():
            wl_lines.pop()
            self.wl_trailing_blanks += 1
        bad_wl = [i for i, line in enumerate(wl_lines) if i not in good]
        # only a bad last line without its end of line is what a kill during a write leaves (moved aside below,
        # with its records); a whole bad line, the last one too, is damage or an edit: records refer to workloads
        # by line number, and a run that dropped its workload would tune that task again from nothing
        cut = len(wl_lines) - 1 if wl_lines and not wl_lines[-1].endswith(b"\n") else None
        for i in bad_wl:
            if i != cut:
                raise InputError(self.wl_path, f"line {i + 1} is not a workload "
                                               f"({undecodable.get(i) or _why(wl_report, self.wl_path, i)}); "
                                               "a whole line, not one a write cut short, and records refer to "
                                               "workloads by line number, so it is neither skipped nor moved aside: "
                                               "restore the file, tune in another --work-dir, or import what is "
                                               "readable with `costlab dataset import-ms`")
        self.moved: list[bytes] = []
        self.cut_workload = bool(bad_wl)
        if bad_wl:
            self.problems.append(f"{self.wl_path}:{bad_wl[0] + 1}: not a workload, cut short (no end of line)")
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
                why = instruction_kind_problem(parsed[1][0])  # one such record: MetaSchedule's loader loads none
                if why:
                    raise ValueError(why)
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


def _why(report: ImportReport, path: Path, i: int) -> str:
    """What ``read_workloads`` said of line ``i`` (0-based) of ``path``, the first bad line it met (it says nothing
    of a blank line)."""
    prefix = f"{path}:{i + 1}: "
    said = report.problems[0] if report.problems else ""
    return said[len(prefix):] if said.startswith(prefix) else "a blank line"


def repair_work_dir(work_dir, scan: DatabaseScan | None = None) -> list[str]:
    """Make a MetaSchedule work dir's database readable by MetaSchedule again before a run continues it.

    A line cut short (what a kill during a write leaves) or malformed makes ``JSONDatabase`` fail with a
    traceback or TVM crash outright. Bad record lines, and records of a workload line that is bad, are moved
    to ``database_tuning_record.bad-lines.jsonl`` beside the database (nothing is lost) and the database is
    rewritten without them; a bad last workload line without its end of line (a write cut short) is moved the
    same way. A whole bad workload line, the last one too, is not removed (records refer to workloads by line
    number, and it is no interrupted write): that is an error naming it. Returns one ``FILE:LINE: what`` per
    line moved out; nothing is written when every line is good.
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
