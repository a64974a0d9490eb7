"""A tuning work dir: the folder ``costlab tune``, ``costlab exploit`` and ``costlab transfer`` measure into,
described by one object, ``WorkDir``.

- Its files: the MetaSchedule JSON database (``database_workload.json``, ``database_tuning_record.json``, the
  bad lines a repair moved aside), the record of the run it holds (``costlab_run.json``: the run's options
  and the host that measured it), the run's summary, progress history, search rounds, tuning curve and
  MetaSchedule's logs, and the JSON state files that let a command resume (``exploit_state.json``,
  ``transfer.json``, ``library_start.json``). Their names are ``WorkDir``'s constants, its paths properties.
- Its lock: one process at a time; the three commands take the same one (``common/locks.take_lock``, an
  exclusive ``flock`` on ``.costlab_tune.lock``, held by the open file and released with the process however
  it ends); a refused command names the one that holds it.
- Its repair and database: lines an interrupted run cut short moved aside (``metaschedule.repair.repair_work_dir``),
  then MetaSchedule's ``JSONDatabase`` on it.
- Its state: the JSON state files are read and written by ``read_state`` / ``write_state``; the run record
  by ``recorded`` (one field, leniently) and ``run_record`` (the whole record, a damaged one refused).
- Its measuring stack: ``measuring()`` is a ``with`` block in which ``MeasuringStack.start`` builds the
  builder and runner (costlab's, made by ``metaschedule/builders.py`` and ``metaschedule/runners.py``, or
  MetaSchedule's own) and which releases them when it ends, however it ends.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from costlab.common.errors import InputError, UsageError
from costlab.common.files import write_atomically
from costlab.common.host import describe_host, host_difference, host_info, same_host
from costlab.common.locks import LockHeld, take_lock
from costlab.datasets.measure import MeasureOptions
from costlab.metaschedule.builders import make_builder
from costlab.metaschedule.databases import RECORD_FILE, WORKLOAD_FILE, json_database
from costlab.metaschedule.pools import warm_up
from costlab.metaschedule.repair import BAD_LINES_FILE, repair_work_dir
from costlab.metaschedule.runners import close_runner, make_runner

LOCK_FILE = ".costlab_tune.lock"
RUN_FILE = "costlab_run.json"  # the options of the tuning run a work dir holds, and the host that measured it


class WorkDir:
    """A tuning work dir at ``path`` (nothing is made or read until a method is called)."""

    WORKLOADS = WORKLOAD_FILE
    RECORDS = RECORD_FILE
    BAD_LINES = BAD_LINES_FILE  # database lines a repair moved aside
    LOCK = LOCK_FILE
    RUN = RUN_FILE
    SUMMARY = "costlab_tune.json"  # a finished tuning run's summary
    # the adaptation records of the parts stopped since the summary was written (a stopped part writes none), oldest
    # first: the next finished part's summary takes them into adaptation.earlier
    STOPPED_ADAPTATION = "adaptation_stopped.json"
    PROGRESS = "progress.jsonl"  # per measured batch: the best latencies so far and the run's seconds
    ROUNDS = "search_rounds.jsonl"  # per search round: the candidates each stage scored and its seconds
    CURVE = "tuning_curve.png"
    LOGS = "logs"  # MetaSchedule's logs: the task scheduler's, one per task
    SCHEDULER_LOG = "task_scheduler.log"
    EXPLOIT_STATE = "exploit_state.json"
    TRANSFER_STATE = "transfer.json"
    LIBRARY_STATE = "library_start.json"
    HOST = "costlab_host.json"  # the host that measured a work dir no run record names (an exploit of tune_tir's)
    RESULT = "result"  # a MetaSchedule database of the run's result: per task the program it chose

    def __init__(self, path):
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    # -- its files ----------------------------------------------------------------------------------------
    @property
    def workloads_file(self) -> Path:
        return self.path / self.WORKLOADS

    @property
    def records_file(self) -> Path:
        return self.path / self.RECORDS

    @property
    def run_file(self) -> Path:
        return self.path / self.RUN

    @property
    def summary_file(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def stopped_adaptation_file(self) -> Path:
        return self.path / self.STOPPED_ADAPTATION

    @property
    def progress_file(self) -> Path:
        return self.path / self.PROGRESS

    @property
    def rounds_file(self) -> Path:
        return self.path / self.ROUNDS

    @property
    def curve_file(self) -> Path:
        return self.path / self.CURVE

    @property
    def result_dir(self) -> Path:
        return self.path / self.RESULT

    @property
    def logs_dir(self) -> Path:
        return self.path / self.LOGS

    @property
    def scheduler_log(self) -> Path:
        return self.logs_dir / self.SCHEDULER_LOG

    @property
    def exploit_state(self) -> Path:
        return self.path / self.EXPLOIT_STATE

    @property
    def transfer_state(self) -> Path:
        return self.path / self.TRANSFER_STATE

    @property
    def library_state(self) -> Path:
        return self.path / self.LIBRARY_STATE

    @property
    def host_file(self) -> Path:
        return self.path / self.HOST

    def has_database(self) -> bool:
        return self.records_file.is_file() and self.workloads_file.is_file()

    # -- the folder, its lock ----------------------------------------------------------------------------
    def check_folder(self) -> None:
        """An InputError when the path exists and is not a directory."""
        if self.path.exists() and not self.path.is_dir():
            raise InputError(self.path, "exists and is not a directory (--work-dir)")

    def lock(self, command: str = "tune"):
        """The work dir's lock (an open file; closing it releases the lock), or a UsageError when another run
        holds it, naming the command that holds it: the holder writes its command's name into the lock file."""
        try:
            return take_lock(self.path / self.LOCK, wait=False, holder=command)
        except LockHeld as held:
            raise UsageError(f"{self.path}: another costlab {held.command} is running in this work dir; wait for it "
                             "to end, or use another --work-dir") from None

    # -- its database --------------------------------------------------------------------------------------
    def open_database(self) -> tuple:
        """``(database, problems)``: the lines an interrupted run cut short moved aside, one ``FILE:LINE: what``
        per line (``metaschedule.repair.repair_work_dir``), then MetaSchedule's JSON database of the work dir (its files
        made when missing). Called under the work dir's lock."""
        repaired = repair_work_dir(self.path)
        return json_database(work_dir=str(self.path)), repaired

    def check_written(self, folder: Path | None = None) -> None:
        """An InputError naming a database file of ``folder`` (the work dir's own by default) whose last line is
        cut short: MetaSchedule writes each record as a line and never checks the write, so a full disk or a file
        size limit leaves a run that reported success with a file the next run cannot read."""
        for path in ((folder or self.path) / WORKLOAD_FILE, (folder or self.path) / RECORD_FILE):
            try:
                size = path.stat().st_size
                if size == 0:
                    continue
                with open(path, "rb") as f:
                    f.seek(size - 1)
                    whole = f.read(1) == b"\n"
            except FileNotFoundError:
                continue
            if not whole:
                raise InputError(path, f"its last line was cut short while the run wrote it ({size} bytes: a full disk "
                                       "or a file size limit?); the records the run measured are not all on disk: make "
                                       "room and run the same command again (the cut line is moved aside)")

    # -- the run it holds ----------------------------------------------------------------------------------
    def recorded(self, key: str):
        """What the run record (``costlab_run.json``) holds under ``key``; None when there is no record, or it
        cannot be read (what it holds is then checked by the command that needs it all, ``run_record``)."""
        try:
            return json.loads(self.run_file.read_text()).get(key)
        except (OSError, ValueError, AttributeError, RecursionError):
            return None

    def run_record(self) -> dict | None:
        """The run record, None when there is none; a damaged one (not JSON, not an object) is an InputError."""
        if not (self.run_file.exists() or self.run_file.is_symlink()):
            return None
        return _json_object(self.run_file, ": it records which run this work dir holds; tune in another --work-dir, "
                                           "or remove it if you know the run's options")

    def host(self) -> dict | None:
        """The host that measured the run (its record's ``host``, else, in a work dir a transfer alone made, the
        transfer's); None when none is recorded."""
        host = self.recorded("host")
        if host is None and not self.run_file.exists():
            for state in (self.host_file, self.transfer_state):  # what measured here when no run record says
                try:
                    host = json.loads(state.read_text()).get("host")
                except (OSError, ValueError, AttributeError):
                    host = None
                if isinstance(host, dict):
                    break
        return host if isinstance(host, dict) else None

    def claim_host(self) -> None:
        """Record this machine as the work dir's measuring host when nothing names one yet (no run record, no
        transfer's): a command that measures into a work dir tune_tir made, so that another machine is refused
        there later (``check_same_host``)."""
        if self.host() is None and not self.run_file.exists():
            write_atomically(self.host_file, json.dumps(dict(host=host_info()), indent=1).encode())

    def write_run_record(self, record: dict) -> None:
        write_atomically(self.run_file, json.dumps(record, indent=2).encode())

    def check_same_host(self, command: str, rpc_key: str | None = None) -> None:
        """A work dir's records are one machine's timings: a UsageError, in one line, when its run record names
        another host than this one, or a remote device (``rpc_key``) other than the command's (a command here would
        mix two machines' records in one database and compare them). A work dir without a recorded host (made
        before hosts were recorded) passes; a damaged run record is an InputError naming it (read as none, it let a
        remote device's or another host's run be measured here)."""
        remote = (self.run_record() or {}).get("rpc_key")
        if (remote or None) != (rpc_key or None):
            there = f"a remote device (--rpc-key {remote})" if remote else "this machine"
            raise UsageError(f"{self.path} holds a run measured on {there}, not on "
                             f"{f'the devices of --rpc-key {rpc_key}' if rpc_key else 'this machine'}: {command} "
                             "would mix two machines' timings in one database; use another --work-dir")
        there, here = self.host(), host_info()
        if there is not None and not same_host(there, here):
            raise UsageError(f"{self.path} holds a run measured on {describe_host(there)}; this machine is "
                             f"{describe_host(here)} ({host_difference(there, here)}): {command} here would mix two "
                             f"machines' timings in one database; use another --work-dir (--transfer-from "
                             f"{self.path} starts from its programs)")

    # -- its measuring stack -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def measuring(self):
        """A ``with`` block whose ``MeasuringStack`` (what ``start`` builds) is released when it ends."""
        stack = MeasuringStack()
        try:
            yield stack
        finally:
            stack.close()


class MeasuringStack:
    """The builder and runner a command measures with, released together by ``close``: a pooled builder's
    workers, a runner's worker pool (through an RPC or screening wrapper too)."""

    def __init__(self):
        self.builder = self.runner = None

    def start(self, target, *, workers: int, builder_timeout: float = 30.0, on_lost=None, warm: bool = False,
              ms_defaults: bool = False, **measure) -> tuple:
        """``(builder, runner)``: costlab's pooled builder (``workers`` processes) and its runner
        (``metaschedule/runners.make_runner``; ``measure``: ``MeasureOptions`` fields, ``number``, ``repeat``, the
        RPC tracker's; ``on_lost(reason)`` when an RPC device stops answering), the builder's workers started now
        with ``warm`` (the local runner starts its own); or, with ``ms_defaults``, MetaSchedule's
        ``LocalBuilder`` and ``LocalRunner`` as "local" makes them, but for the build timeout given (30 s, theirs,
        by default: ``--builder-timeout`` was dropped there, and builds were killed after 30 s whatever it said)."""
        from tvm.s_tir import meta_schedule as ms

        if ms_defaults:
            self.builder, self.runner = ms.builder.LocalBuilder(timeout_sec=builder_timeout), ms.runner.LocalRunner()
            return self.builder, self.runner

        # an RPC device links its own artifacts (a tar of objects): this machine's linker may not know its architecture
        self.builder = make_builder(builder_timeout, workers=workers, pooled=True, shared=not measure.get("rpc_key"))
        self.runner = make_runner(MeasureOptions(target=target.export(), **measure), target, on_lost=on_lost)
        if warm:
            warm_up(self.builder)
        return self.builder, self.runner

    def close(self) -> None:
        builder, runner, self.builder, self.runner = self.builder, self.runner, None, None
        try:
            if hasattr(builder, "close"):
                builder.close()
        finally:
            if runner is not None:
                close_runner(runner)


def read_state(path: Path, afresh: str, default: dict, key: str | None = None) -> dict:
    """The JSON object of a state file, ``default`` when there is none yet. A file that is not JSON, not an
    object, or (with ``key``) has no object under ``key`` is an InputError naming it and saying how to start
    afresh: ``afresh`` completes "remove it to ...", e.g. "transfer afresh"."""
    path = Path(path)
    if not path.exists():
        return default
    return _json_object(path, f"; remove it to {afresh}", key)


def _json_object(path: Path, advice: str, key: str | None = None) -> dict:
    """The JSON object in ``path`` (with ``key``: one holding an object under ``key``), else an InputError
    naming it: "is damaged (why)" and ``advice``."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise InputError(path, f"is damaged ({type(exc).__name__}){advice}") from None
    if key is None and not isinstance(state, dict):
        raise InputError(path, f"is damaged (not a JSON object){advice}")
    if key is not None and (not isinstance(state, dict) or not isinstance(state.get(key), dict)):
        raise InputError(path, f"is damaged (no {key!r} object){advice}")
    return state


def write_state(path: Path, state: dict) -> None:
    """Replace a state file by ``state`` atomically (a reader or a resumed run never sees half of it)."""
    write_atomically(path, json.dumps(state, indent=1).encode())
