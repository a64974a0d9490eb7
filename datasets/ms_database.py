"""MetaSchedule databases and datasets: ``import_ms`` reads the JSON databases that ``tune_tir`` /
``tune_relax`` leave in their work directories (plain or gzip-compressed, through
``costlab.metaschedule.databases``, which describes the files) into a dataset, ``export_ms`` writes a
platform's records back as one.

Every record is kept with its raw ``run_secs``; failed ones are flagged (``ERROR_MS_FAILED`` for the
failure value, ``ERROR_MS_NO_RESULT`` when there is no result). A task is keyed by (``ms``, shash) and
stores the base64 IR exactly as in the file; a record's schedule is the trace JSON written compactly, and
its program id is ``program_id("ms", shash, schedule)``, the same that ``costlab dataset measure`` gives
the same program. Reading needs no TVM; TVM (when importable) only names and classifies the tasks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from costlab.common.errors import CostlabError, InputError
from costlab.common.import_report import ImportReport
from costlab.datasets import records as rec
from costlab.datasets.names import check_platform_id
from costlab.datasets.store import DatasetWriter, check_import_host, open_dataset
from costlab.metaschedule.databases import (RECORD_FILE, WORKLOAD_FILE, content_size, instruction_kind_problem,
                                            read_records, read_workloads, work_dir_files, write_database)
from costlab.metaschedule.results import ERROR_MS_NO_RESULT, ERROR_NONE, MS_FAILURE_SECS, costs_and_error
from costlab.metaschedule.targets import platform_id_for, target_problem, tvm_target_problem
from costlab.metaschedule.traces import compact_json, plain_json
from costlab.metaschedule.workloads import decode_workload, describe_json

CHUNK = 8192  # records handed to the writer at once


def import_ms(work_dirs, out, platform: str | None = None, network: str | None = None,
              progress: bool = True, host: dict | None = None) -> ImportReport:
    """Import MetaSchedule databases (one per work directory) into the dataset ``out`` (created if missing).

    ``platform`` names the platform of all records; by default it is derived from each record's target
    (``targets.platform_id_for``). ``network`` records all tasks read as one network, each with weight 1.
    ``host`` is the machine that measured the records (``costlab.common.host``), recorded with their platform
    (a platform already recorded as another machine's is refused, and so are records without ``host`` for a
    platform whose machine a measurement recorded: ``store.check_import_host``). Bad lines are skipped and
    counted in the report: lines ``parse_record`` refuses, records of a bad target (``targets.target_problem``;
    where TVM is installed, one it refuses), and, where TVM is installed, traces of an instruction kind it does
    not know; a work directory without both files is an error raised before anything is written. Re-importing
    adds nothing twice (records dedupe by program id).
    """
    if platform is not None:  # a bad id is said before anything is read (one like /tasks names another group)
        try:
            check_platform_id(platform)
        except CostlabError as exc:
            raise CostlabError(f"--platform: {exc}") from None
    dirs = [Path(d) for d in work_dirs]
    pairs = [work_dir_files(d) for d in dirs]  # all checked before any work
    report = ImportReport()
    task_info: dict[str, tuple] = {}  # shash -> (WorkloadInfo) computed once per workload
    decode_problems: set[str] = set()
    undecodable: dict[str, str] = {}  # workload hash -> why TVM could not decode it
    bar = None
    if progress:
        from tqdm import tqdm

        total = sum(content_size(tr) for _, tr in pairs)
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
            last_target, last_pid, last_why, last_added, pending, read = None, None, None, None, 0, 0
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
                if target is not None and target != last_target:  # records of one database mostly share one
                    last_target, last_why = target, target_problem(target) or tvm_target_problem(target)
                    last_pid = None if last_why else platform_id_for(target)
                if target is not None and last_why:  # stored, it would be the platform's target
                    report.problem(f"{where}: bad target: {last_why}")
                    continue
                why = instruction_kind_problem(trace[0])  # one unknown kind: MetaSchedule would load none of an export
                if why:
                    report.problem(f"{where}: {why}")
                    continue
                if platform:
                    pid = platform
                elif target is not None:
                    pid = last_pid
                else:
                    report.problem(f"{where}: record without a target (pass --platform to name one)")
                    continue
                if pid not in hosted:  # before the platform is added with the host (which states it)
                    check_import_host(writer, pid, host)
                    if not host:
                        hosted.add(pid)  # (checked once; a platform the host is given for is added it below)
                if pid not in writer.platforms or (target and target != last_added):
                    try:
                        writer.add_platform(pid, target or {}, host=host)  # a platform of another target: refused
                    except InputError as exc:  # that record is skipped and counted, never the end of the import
                        report.problem(f"{where}: {exc.message}")
                        continue
                    last_added = target
                if host and pid not in hosted:  # once per platform: the records' machine is the platform's
                    writer.add_platform(pid, writer.platforms[pid].target, host=host)
                    hosted.add(pid)
                shash, b64 = workloads[idx]
                if idx not in task_of:
                    if shash not in task_info:
                        try:
                            task_info[shash], why = describe_json(shash, b64, strict=True)
                        except ValueError as exc:  # TVM is here, and it cannot decode the IR: its records skipped
                            task_info[shash], why = None, None
                            undecodable[shash] = str(exc)
                        if why:
                            decode_problems.add(why)
                    info = task_info[shash]
                    if info is None:
                        report.problem(f"{where}: {undecodable[shash]} (workload {shash} of {wl_path.name})")
                        continue
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
            report.notes += writer.replaced_networks()
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
        report.notes.append(f"tasks named by hash: {why}")
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
        task_col = table.checked_task()  # a damaged file: one error, not another task's workload
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
        workloads = [(ds.tasks[t].workload_hash, ds.tasks[t].workload) for t in wl_index]
        args = {t: plain_json(_args_info(ds.tasks[t])) for t in wl_index}
        records = []
        for r, schedule in zip(rows.tolist(), schedules):
            t = int(task_col[r])
            costs = values[int(offsets[r]):int(offsets[r + 1])].tolist()
            if int(errors[r]) == ERROR_MS_NO_RESULT or (not costs and int(errors[r]) == ERROR_NONE):
                run_secs = None
            elif int(errors[r]) != ERROR_NONE and not costs:
                run_secs = [MS_FAILURE_SECS]
            else:
                run_secs = costs
            records.append((wl_index[t], schedule, run_secs, target, args[t]))
    write_database(out_dir, workloads, records)
    skipped = len(task_col) - len(rows)
    text = f"{out_dir}: {len(workloads)} workloads, {len(records)} records of platform {platform!r}"
    if skipped:
        text += f" ({skipped} failed records left out; --include-failed writes them)"
    return text
