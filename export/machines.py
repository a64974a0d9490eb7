"""Which machine a work dir's records were measured on, and the refusal of a command that would add records of
another machine to them: MetaSchedule's database is not target-aware, so records of two machines in one work
dir would be compared with each other (``exploit``, ``transfer``)."""

from __future__ import annotations

from pathlib import Path

from costlab.common.errors import UsageError, last_line
from costlab.export.workdir import WorkDir
from costlab.metaschedule.targets import runnable_target


def machine_of(target) -> tuple:
    """What a target measures on: its kind and CPU (``mcpu``) or GPU (``arch``); ``None`` for generic."""
    attrs = target.export()
    return (str(attrs.get("kind")), attrs.get("mcpu") or attrs.get("arch") or None)


def describe_machine(target) -> str:
    kind, cpu = machine_of(target)
    return f"{kind} {cpu or '(generic, no -mcpu)'}"


def parse_target(spec, what: str = ""):
    """A TVM ``Target`` of a target spec (the command line's, or a JSON dict), or a UsageError naming it."""
    import tvm

    try:
        return tvm.target.Target(runnable_target(spec))
    except Exception as exc:  # noqa: BLE001  TVM refuses a target in several ways
        raise UsageError(f"bad target {spec!r}{what}: {last_line(exc)}") from None


def run_target(work: Path, scan=None):
    """The target of the run a work dir holds: its run record's (``costlab_run.json``), else the one its records
    were measured on (the database's, read from ``scan``, a ``DatabaseScan`` of it, or scanned here), else None.
    A run record's target that does not parse is a UsageError naming the file (``parse_target``); a target in the
    records that this TVM does not know counts as none: nothing then says which machine measured them."""
    work = WorkDir(work)
    spec = work.recorded("target")
    if spec is not None:
        return parse_target(spec, f" in {work.run_file}")
    if scan is None:
        if not work.path.is_dir():
            return None
        from costlab.metaschedule.repair import DatabaseScan  # lazy: reads the database only when no run says

        scan = DatabaseScan(work.path)
    if scan.target is None:
        return None
    import tvm

    try:  # as MetaSchedule exported it, complete: what the records were measured on, not a spec to complete
        return tvm.target.Target(scan.target)
    except Exception:  # noqa: BLE001  TVM refuses a target in several ways
        return None


def refuse_other_machine(target, run, work, advice: str) -> None:
    """A UsageError when ``target`` is not the machine of ``run`` (the work dir's run target, or None)."""
    if run is not None and machine_of(target) != machine_of(run):
        raise UsageError(f"--target {describe_machine(target)} is not the machine of the run in {work} "
                         f"({describe_machine(run)}): its records were measured there and would be compared with "
                         f"this target's; {advice}")
    if run is not None and None not in (cores := (_cores(target), _cores(run))) and cores[0] != cores[1]:
        # the threads a kernel runs on are part of the platform (llvm-znver5-2c): 1 and 2 threads time apart
        raise UsageError(f"--target runs kernels on {cores[0]} cores, the run in {work} on {cores[1]} "
                         f"(num-cores): its records were measured so and would be compared with this target's; "
                         f"{advice}")


def _cores(target) -> int | None:
    """A CPU target's ``num-cores`` (None for a GPU, or when it names none)."""
    attrs = target.export()
    cores = attrs.get("num-cores") if str(attrs.get("kind")) == "llvm" else None
    return int(cores) if cores else None
