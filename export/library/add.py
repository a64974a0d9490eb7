"""``costlab library add``: work dirs (or exported libraries) into the library of their platform.

A work dir's platform is its records' target's (``metaschedule.targets.platform_id_for``) and its host the one its
``costlab_run.json`` records (a work dir of MetaSchedule's own ``tune_tir`` records none: it is taken as this
machine's, and said so). Its tasks are checked here when it was measured on this machine; another machine's
programs are added unchecked (they cannot run here), and only into a library named with ``--library``: the
default libraries are this machine's. An exported library (``costlab library export``) is merged
as it is, into the library of its own platform and host.
"""

from __future__ import annotations

from pathlib import Path

from costlab.common.errors import CostlabError, InputError, UsageError, last_line
from costlab.common.host import describe_host, host_info, same_host
from costlab.common.import_report import ImportReport
from costlab.export.library.collect import work_dir_programs
from costlab.export.library.store import FILE, Library, default_root, open_library, read_library
from costlab.export.workdir import WorkDir
from costlab.metaschedule.databases import RECORD_FILE, database_file, read_records
from costlab.metaschedule.targets import is_gpu, local_gpu, platform_id_for


def _refuse_into_default(root: Path, host: dict | None, what: str) -> None:
    """The default libraries are this machine's: the first programs of another host added to one would make it that
    host's, and every later run of this machine would be refused there. A UsageError (``what`` measured on that
    host) when ``root`` is the default and ``host`` another machine."""
    if host is not None and not same_host(host, host_info()) and Path(root).resolve() == default_root().resolve():
        raise UsageError(f"{what} measured on {describe_host(host)}, not this machine; add it to a library of that "
                         "host's with --library DIR")


def _add_library(path: Path, root: Path, per_task: int, platform: str | None = None) -> dict:
    src = Library.load(path)
    _refuse_into_default(root, src.host or None, f"the library {path} holds programs")
    with open_library(root, platform or src.platform) as lib:
        added = lib.take(src.host, f"the library {path}", ((shash, e["workload"], e["name"], e["structure"],
                                                             e["programs"]) for shash, e in src.entries.items()),
                         per_task)
    return dict(source=str(path), library=str(root / lib.platform), added=added, tasks=len(src))


def add_work_dir(work: Path, root: Path, per_task: int = 4, check: bool = True, progress: bool = True,
                 platform: str | None = None) -> dict:
    """One work dir's checked best programs per task into the library of its platform (or ``platform``'s); what
    was added."""
    here = host_info()
    # a damaged run record is one error naming it, never read as "no host, no device"
    remote = (WorkDir(work).run_record() or {}).get("rpc_key")
    if remote:  # its timings are a remote device's, which no host record names (the one recorded ran the search)
        raise UsageError(f"the run in {work} measured its programs on a remote device (--rpc-key {remote}): a "
                         "library holds the programs of the machine that measured them, and no record names it")
    host = WorkDir(work).host()
    note = None if host is not None else "no host recorded: taken as this machine's"
    local = host is None or same_host(host, here)
    target = _records_target(work)
    first = platform or (platform_id_for(target) if target is not None else None)
    _refuse_into_default(root, host, f"the run in {work} was")
    if first is not None:  # refused before any program is checked
        # its bad entries are said once, by the write that moves them aside (open_library)
        read_library(root, first, say=False).check_host(host or here, f"the run in {work}")
    if check and not local:
        note = "measured on another machine: added unchecked"
    elif check and target is not None and is_gpu(target) and local_gpu() is None:
        # its programs cannot run here: a check would call every one wrong and add none, without a word
        local, note = False, "its programs are a GPU's, and this machine has none to check them on: added unchecked"
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(unit="task", desc=f"library add {work.name}", leave=False)

    def tick(done, total, name):
        if bar is not None:
            bar.total = total
            bar.update(1)
            bar.set_postfix_str(name[:30])

    skipped: list = []
    try:
        rows = list(work_dir_programs(work, per_task, may_check=check and local, progress=tick, skipped=skipped))
    finally:
        if bar is not None:
            bar.close()
    by_platform: dict = {}
    for shash, b64, name, st, programs, target in rows:
        by_platform.setdefault(platform or platform_id_for(target), []).append((shash, b64, name, st, programs))
    added = 0
    for platform, items in by_platform.items():
        with open_library(root, platform) as lib:
            added += lib.take(host or here, f"the run in {work}", items, per_task)
    libs = ", ".join(str(root / p) for p in by_platform) or str(root)
    out = dict(source=str(work), library=libs, added=added, tasks=len(rows), note=note)
    if skipped:  # lines of the run's database that could not be read (a kill cut its last write short)
        out["skipped_lines"] = skipped
    return out


def _records_target(work: Path) -> dict | None:
    """The target of a work dir's first record, read without TVM (None when there is none)."""
    path = database_file(work, RECORD_FILE)
    if path is None:
        return None
    for _i, _size, parsed in read_records(path, ImportReport()):
        if parsed is not None and parsed[3] is not None:
            return parsed[3]
    return None


def add_work_dirs(paths, root: Path, per_task: int = 4, check: bool = True, progress: bool = True,
                  platform: str | None = None):
    """Each of ``paths`` (work dirs, exported libraries) into the libraries under ``root`` (``platform``: all into
    that platform's), yielding what each added as it is added (a later one that fails leaves the earlier ones
    added, and said). A path that does not exist is refused before anything is added."""
    paths = [Path(given) for given in paths]
    for path in paths:
        if not path.exists():
            raise InputError(path, "no such work dir or library (nothing was added)")
    for path in paths:
        if (path / FILE).exists() or path.name.endswith((".json", ".json.gz")):
            yield _add_library(path, root, per_task, platform)
        else:
            yield add_work_dir(path, root, per_task, check, progress, platform)


def add_finished_run(work, library=None, progress: bool = True) -> dict:
    """After ``costlab exploit`` or ``transfer``: the work dir's checked best programs into the library of its
    platform (``library``: the libraries' folder, default ``default_root()``). A library that cannot take them
    (another host's, not writable, or failing in a way not foreseen) is said in the answer, never the end of a
    finished run."""
    try:
        return add_work_dir(Path(work), Path(library) if library else default_root(), progress=progress)
    except Exception as exc:  # noqa: BLE001  the run is finished: the library's failure is a note, not its end
        return dict(added=0, why=f"not added: {failure_text(exc)}")


def failure_text(exc: Exception) -> str:
    """Why the library did not take a finished run's programs, as its answer says it: costlab's and the system's
    errors as they say it, anything else by its kind and last line."""
    return str(exc) if isinstance(exc, (CostlabError, OSError)) else f"{type(exc).__name__}: {last_line(exc)}"
