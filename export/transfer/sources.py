"""The measured programs transfer-tuning starts from: costlab datasets and MetaSchedule work dirs.

A source is a costlab dataset (``.h5``; its MetaSchedule-dialect tasks, every platform), a MetaSchedule
work dir (``database_workload.json`` + ``database_tuning_record.json``, as ``costlab tune`` and
``tune_tir`` write them, or gzipped as ``benchmarks/`` archives them: read by ``datasets.ms_database``'s
reader, the one ``costlab dataset import-ms`` uses), or a folder holding such work dirs at any depth. Each source task contributes its ``per_task`` fastest successfully measured programs, best
first. Bad lines and records are skipped and counted (``report``), never the end of a transfer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from costlab.common.errors import InputError
from costlab.common.import_report import ImportReport
from costlab.datasets.store import open_dataset
from costlab.export.workdir import WorkDir
from costlab.metaschedule.databases import RECORD_FILE, WORKLOAD_FILE, database_file, read_records, read_workloads
from costlab.metaschedule.results import ERROR_NONE, costs_and_error


@dataclass
class SourceTask:
    source: str  # the dataset or work dir
    name: str  # the task's name there (a dataset's task name, else the workload hash)
    shash: str
    workload: str  # base64 IRModule JSON, as MetaSchedule databases hold it
    programs: list = field(default_factory=list)  # (trace JSON, mean latency in seconds), fastest first


def _another_kind(kind: str | None, found) -> bool:
    """Whether programs of target kind ``found`` are no start for a task of ``kind`` (None: any kind is)."""
    return kind is not None and found is not None and str(found) != kind


def _left_out(report: ImportReport, where, n: int, found, kind: str) -> None:
    # a note, not a bad line: the source is sound, only not for this target
    report.notes.append(f"{where}: {n} program(s) of target kind {found!r} left out: no start for a {kind!r} task")


def _work_dir(work: Path, per_task: int, report: ImportReport, kind: str | None = None) -> list[SourceTask]:
    wl_path, rec_path = database_file(work, WORKLOAD_FILE), database_file(work, RECORD_FILE)
    report.files += 1
    workloads = read_workloads(wl_path, report)
    best: dict[int, list] = {}
    other: dict = {}  # target kind -> programs left out
    for i, _size, parsed in read_records(rec_path, report):
        if parsed is None:
            continue
        idx, trace, run_secs, target, _args = parsed
        if idx not in workloads:
            report.problem(f"{rec_path}:{i + 1}: workload index {idx} is not in {wl_path.name}")
            continue
        found = (target or {}).get("kind")
        if _another_kind(kind, found):  # a GPU's programs bind threads a CPU task has not (and back)
            other[found] = other.get(found, 0) + 1
            continue
        costs, error = costs_and_error(run_secs)
        if error != ERROR_NONE or not costs:
            continue  # a failed program is nothing to start from
        best.setdefault(idx, []).append((trace, sum(costs) / len(costs)))
    for found, n in other.items():
        _left_out(report, rec_path, n, found, kind)
    out = []
    for idx, progs in best.items():
        progs.sort(key=lambda p: p[1])
        shash, b64 = workloads[idx]
        out.append(SourceTask(str(work), shash, shash, b64, progs[:per_task]))
    return out


def _dataset(path: Path, per_task: int, report: ImportReport, kind: str | None = None) -> list[SourceTask]:
    import json

    import numpy as np

    report.files += 1
    out = []
    with open_dataset(path) as ds:
        for platform in ds.record_platforms():
            found = ds.platforms[platform].target.get("kind")
            if _another_kind(kind, found):
                _left_out(report, f"{path}#{platform}", ds.num_records(platform), found, kind)
                continue
            table = ds.records(platform)
            for tr in ds.iter_tasks(platform):
                if tr.task.dialect != "ms":
                    report.problem(f"{path}: task {tr.task.name or tr.task.index} is an Ansor task (its steps do not "
                                   "replay on MetaSchedule)")
                    continue
                order = [int(i) for i in np.argsort(tr.latency, kind="stable") if math.isfinite(tr.latency[i])][:per_task]
                if not order:
                    continue
                report.lines += len(order)
                scheds = table.schedules(tr.rows[order])
                progs = []
                for i, text in zip(order, scheds):
                    try:
                        progs.append((json.loads(text), float(tr.latency[i])))
                    except ValueError:
                        report.problem(f"{path}: task {tr.task.name}, record {int(tr.rows[i])}: schedule is not JSON")
                if progs:
                    out.append(SourceTask(f"{path}#{platform}", tr.task.name or tr.task.workload_hash,
                                          tr.task.workload_hash, tr.task.workload, progs))
    return out


def _work_dirs_under(folder: Path) -> list[Path]:
    """The MetaSchedule work dirs at any depth under ``folder``; a tuning run's ``result/`` (its chosen programs,
    which its own database holds too) is none: it would count them twice."""
    found = {p.parent for p in folder.rglob(WORKLOAD_FILE + "*")
             if p.name in (WORKLOAD_FILE, WORKLOAD_FILE + ".gz") and database_file(p.parent, RECORD_FILE)}
    return sorted(d for d in found if not (d.name == WorkDir.RESULT and d.parent in found))


def read_sources(paths, per_task: int = 4, exclude=(),
                 kind: str | None = None) -> tuple[list[SourceTask], ImportReport]:
    """The source tasks of ``paths`` (datasets, work dirs, folders of work dirs), each with its ``per_task``
    fastest programs; ``exclude``: paths to leave out (the work dir being tuned); ``kind``: the target kind of
    the tasks they start (``llvm``, ``cuda``, ...): programs measured on another kind are left out and said in
    the report (None: every kind). Raises ``InputError`` for a path that is none of these."""
    report = ImportReport()
    skip = {Path(p).resolve() for p in exclude}
    out: list[SourceTask] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise InputError(path, "no such dataset or work dir (--from)")
        if path.resolve() in skip:  # (a folder holding it is a source of its other work dirs)
            raise InputError(path, "is the work dir the programs are transferred into (--work-dir): it is no source of "
                                   "its own (--from)")
        if path.is_file():
            if path.suffix not in (".h5", ".hdf5"):
                raise InputError(path, "is neither a costlab dataset (.h5) nor a MetaSchedule work dir (--from)")
            out += _dataset(path, per_task, report, kind)
            continue
        dirs = [path] if database_file(path, WORKLOAD_FILE) and database_file(path, RECORD_FILE) else _work_dirs_under(path)
        if not dirs:
            raise InputError(path, f"holds no MetaSchedule database ({WORKLOAD_FILE} and {RECORD_FILE}, "
                                   "or .gz) at any depth (--from)")
        dirs = [d for d in dirs if d.resolve() not in skip]
        if not dirs:
            raise InputError(path, "holds no work dir but the one the programs are transferred into (--work-dir), "
                                   "which is no source of its own (--from)")
        for d in dirs:
            out += _work_dir(d, per_task, report, kind)
    return out, report
