"""A run starts from the library, and ends by adding to it.

``library_sources``: the entries of the run's libraries (the user's, for the run's platform, and the starter)
whose anchor computation is one of the run's tasks', as transfer-tuning sources; their workloads are decoded
only when one of their programs is replayed. ``start_from_library``: ``export/transfer/run.transfer_tasks``
with them, before the search (``library_start.json`` in the work dir says what was taken from where; a re-run
skips the tasks it marks done). ``add_run``: a finished run's checked best programs into the user's library
of its platform.
"""

from __future__ import annotations

from pathlib import Path

from costlab.common.import_report import ImportReport
from costlab.export.library.collect import structure_json, task_programs
from costlab.export.library.store import PER_TASK, Library, default_root, open_library, read_library, starter_library
from costlab.export.transfer.match import Structure, structure
from costlab.export.transfer.replay import TransferError
from costlab.export.transfer.run import TransferOptions, transfer_tasks
from costlab.export.transfer.sources import SourceTask
from costlab.export.workdir import WorkDir
from costlab.metaschedule.workloads import decode_workload, workload_json

MAX_CANDIDATES = 32  # library programs replayed per task at most (the closest source tasks' first)


class LibrarySource:
    """A library entry as a transfer source (what ``transfer/run.candidates_for`` reads): the entry's programs,
    its stored structure, and its module, decoded when first asked for."""

    def __init__(self, library: Library, shash: str, entry: dict, kind: str | None = None):
        st = entry["structure"]
        self.structure = Structure(tuple(st["names"]), tuple(st["signatures"]), int(st["anchor"]),
                                   tuple(st["extents"]))
        self.task = SourceTask(f"library {library.path}", entry["name"], shash, entry["workload"],
                               [(p["trace"], p["us"] * 1e-6) for p in entry["programs"]
                                if kind is None or str((p.get("target") or {}).get("kind")) == kind])
        self._mod = None

    @property
    def mod(self):
        if self._mod is None:
            try:
                self._mod = decode_workload(self.task.shash, self.task.workload)
            except Exception as exc:  # noqa: BLE001  a workload this TVM cannot read is nothing to start from
                raise TransferError(f"the library's workload does not decode ({type(exc).__name__})") from None
        return self._mod


def run_libraries(root, platform: str, kind: str | None = None) -> list[Library]:
    """The libraries a run on ``platform`` starts from: the user's (under ``root``, default ``default_root()``)
    and the starters shipped with costlab for its target ``kind`` (``llvm``, ``cuda``, ...; None: every
    starter). A starter of another kind is no start: a CPU's schedules bind no GPU threads, and would only
    spend the run's trials on programs that fail."""
    starters = [lib for lib in starter_library() if kind is None or kind in lib.target_kinds()]
    return [read_library(root or default_root(), platform), *starters]


def library_sources(libraries: list[Library], tasks,
                    kind: str | None = None) -> tuple[list[LibrarySource], ImportReport]:
    """The entries of ``libraries`` whose anchor block computes what an anchor of ``tasks`` computes, with their
    programs of target ``kind`` only (None: every kind): a library given other programs (``library add
    --platform``) starts no task with programs of another kind, as ``--from`` sources do not."""
    wanted = {structure(t.mod).anchor_signature for t in tasks} - {None}
    report = ImportReport()
    out = []
    for lib in libraries:
        report.files += 1
        for shash, entry in lib.entries.items():
            report.lines += 1
            try:
                src = LibrarySource(lib, shash, entry, kind)
            except (KeyError, TypeError, ValueError) as exc:
                report.problem(f"{lib.path}: entry {shash} is damaged ({type(exc).__name__}: {exc})")
                continue
            if src.structure.anchor_signature in wanted and src.task.programs:
                out.append(src)
    return out, report


def start_from_library(work, tasks, target, database, builder, runner, *, libraries, model, top: int,
                       seed: int, head: str | None = None, number: int, repeat: int, progress: bool,
                       should_stop=None) -> dict:
    """Measure, per task, the ``top`` best (by ``model``) of the library's matching programs replayed on it, into
    the run's database. Returns the summary written to ``library_start.json``."""
    sources, report = library_sources(libraries, tasks, kind=target.kind.name if target is not None else None)
    summary = dict(libraries=[str(lib.path) for lib in libraries], matching_entries=len(sources))
    if not sources:
        return summary
    topts = TransferOptions(str(work), sources=[str(lib.path) for lib in libraries], model=model, head=head, top=top,
                            max_candidates=MAX_CANDIDATES, seed=seed, number=number, repeat=repeat, progress=progress)
    state = transfer_tasks(tasks, target, database, builder, runner, topts, WorkDir(work).library_state, should_stop,
                           sources=(sources, report))
    summary["tasks"] = {row["name"]: dict(best_us=row.get("best_us"), measured=len(row.get("measured", [])),
                                          replayed=row.get("replayed", 0))
                        for row in state.get("tasks", {}).values()}
    return summary


def add_run(root, platform: str, host: dict, database, tasks, checks: list, work: Path,
            per_task: int = PER_TASK) -> dict:
    """A finished run's programs into the user's library of ``platform``: per task (``export.tasks.Task``) its
    checked best and the next fastest, ``checks`` being each task's ``check_task`` answer (None: not checked,
    then added unchecked). Returns ``{"library": folder, "added": programs, "tasks": tasks with programs}``."""
    rows = []
    for task, check in zip(tasks, checks):
        programs = task_programs(database, task.mod, per_task, str(work), check=check)
        if programs:
            shash, b64 = workload_json(task.mod)
            rows.append((shash, b64, task.name, structure_json(task.mod), programs))
    root = Path(root or default_root())
    with open_library(root, platform) as lib:
        added = lib.take(host, f"the run in {work}", rows, per_task)
    return dict(library=str(root / platform), added=added, tasks=len(rows))
