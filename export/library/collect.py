"""A run's best programs per task as library programs.

Per workload of a MetaSchedule database: its fastest successfully measured programs, the first of them that
computes the right result (``export/check.check_task``: run beside a reference build on random inputs) flagged
``checked``, the programs that computed a wrong one left out, and a task none of whose checked programs is
right left out whole. The programs after the checked one are kept unchecked (a library entry is a start: a run
measures and checks what it takes from it). Programs measured on another machine cannot be run here: they are
added unchecked.
"""

from __future__ import annotations

import json
from pathlib import Path

from costlab.datasets.records import record_latency
from costlab.export.check import check_task, check_tasks, fastest_records
from costlab.export.search.common import workload_key
from costlab.export.transfer.match import structure
from costlab.export.workdir import WorkDir
from costlab.metaschedule.databases import work_dir_database
from costlab.metaschedule.traces import plain_json, trace_json, trace_text
from costlab.metaschedule.workloads import describe


def structure_json(mod) -> dict:
    """The workload's block structure (``export/transfer/match.structure``) as JSON."""
    st = structure(mod)
    return dict(names=list(st.names), signatures=list(st.signatures), anchor=st.anchor,
                extents=[int(x) for x in st.extents])


def _program(rec, source: str, checked: bool) -> dict:
    secs = [float(x) for x in rec.run_secs]
    return dict(trace=trace_json(rec.trace), run_secs=secs, us=round(record_latency(secs) * 1e6, 3),
                target=plain_json(rec.target.export()), args_info=[plain_json(a.as_json()) for a in rec.args_info],
                checked=checked, source=source)


def task_programs(database, mod, per_task: int, source: str, check=None, target=None, seed: int = 0) -> list[dict]:
    """The library programs of ``mod``'s records in ``database``: ``check`` is ``check_task``'s answer when the
    caller has it; otherwise the task is checked here on ``target`` when one is given (the programs were
    measured on this machine), else its programs are added unchecked."""
    recs = fastest_records(database, mod, per_task + 3)
    if not recs:
        return []
    if check is None and target is not None:
        check = check_task(database, mod, target, seed=seed)
    if check is None:
        return [_program(r, source, False) for r in recs[:per_task]]
    if check.get("status") not in ("ok", "replaced"):
        return []  # none of its checked programs computes the right result: nothing to start from
    # the checked program, then the next fastest after it; those checked before it (in the check's order, which a
    # second measurement may have set) computed a wrong result, and faster ones not checked are not vouched for
    right = check["record"]
    floor = record_latency(right.run_secs)
    left_out = {trace_text(r.trace) for r in check["tried"]}
    rest = [r for r in recs if trace_text(r.trace) not in left_out and record_latency(r.run_secs) >= floor]
    return [_program(right, source, True)] + [_program(r, source, False) for r in rest[:per_task - 1]]


def _recorded_names(work) -> dict:
    """``{workload's structural hash: task name}`` as costlab's runs in the work dir named their tasks (a tuning run's
    summary, a transfer's state: ``GMM:1,16,16,16``, as a tuning run adds it to the library), so that one task has
    one name in the library whichever command added it; {} where none did (a MetaSchedule work dir of its own)."""
    names: dict = {}
    folder = WorkDir(Path(work))
    for path, rows in ((folder.summary_file, lambda d: [(r.get("workload_key"), r.get("name"))
                                                        for r in d.get("tasks", []) if isinstance(r, dict)]),
                       (folder.transfer_state, lambda d: [(k, r.get("name")) for k, r in d.get("tasks", {}).items()
                                                          if isinstance(r, dict)])):
        try:
            data = json.loads(path.read_text())
            pairs = rows(data) if isinstance(data, dict) else []
        except (OSError, ValueError, AttributeError, TypeError):  # none, or damaged: the names are a courtesy
            continue
        names.update((k, n) for k, n in pairs if isinstance(k, str) and isinstance(n, str) and n)
    return names


def work_dir_programs(work, per_task: int, may_check: bool, seed: int = 0, progress=None, skipped=None):
    """Per workload of a work dir's database: ``(shash, base64 workload, name, structure, programs, target)``,
    each task checked here when ``may_check``. ``progress(done, total, name)`` is called after each task; the
    database's lines that could not be read are appended to ``skipped``."""
    import tvm

    with work_dir_database(work, skipped) as database:
        workloads: dict = {}
        keys: dict = {}
        for rec in database.get_all_tuning_records():
            shash = workload_key(rec.workload, keys)
            if shash not in workloads:
                workloads[shash] = (rec.workload, plain_json(rec.target.export()))
        recorded = _recorded_names(work)
        names = {shash: recorded.get(shash) or describe(w.mod).name for shash, (w, _) in workloads.items()}
        checks: dict = {}
        checked = [0]

        def tick(shash):
            checked[0] += 1
            if progress is not None:
                progress(checked[0], len(workloads), names[shash])

        if may_check:  # all tasks of a target at once (export/check.check_tasks), then the programs of each
            by_target: dict = {}
            for shash, (_, tjson) in workloads.items():
                by_target.setdefault(json.dumps(tjson, sort_keys=True), []).append(shash)
            for tjson, shashes in by_target.items():
                answers = check_tasks(database, [(workloads[h][0].mod, None, None) for h in shashes],
                                      tvm.target.Target(json.loads(tjson)), seed=seed,
                                      progress=lambda i, shashes=shashes: tick(shashes[i]))
                checks.update(zip(shashes, answers))
        for shash, (workload, tjson) in workloads.items():
            programs = task_programs(database, workload.mod, per_task, str(work), check=checks.get(shash))
            if not may_check:
                tick(shash)
            if programs:
                yield shash, str(workload.as_json()[1]), names[shash], structure_json(workload.mod), programs, tjson
