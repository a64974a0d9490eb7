"""``costlab tune``: MetaSchedule tuning of benchmark workloads or a network, with a costlab model or with
MetaSchedule's default (evolutionary search + XGBoost), in one command.

- Tasks: TVM benchmark workloads by name (``GMM:1,128,128,128``) or the tasks of a network (a
  ``transformers`` model type or ``MODULE:FUNCTION``), extracted as ``costlab dataset extract`` does and
  weighted by how often they run (``export/tasks.py``).
- Search: a strategy of ``export/search/`` by name (``model-led``, the default with a model: PSA drafts,
  the model leads the evolution, small first rounds); without a model, MetaSchedule's evolutionary search
  and XGBoost model. ``max_seconds`` is a wall-time budget beside ``trials``: no round starts after it.
- No fixed start-up: tune contexts are made without the tensor-intrinsic registry when a task cannot use
  it (``metaschedule/tune_context.py``); the seconds to the first measured batch are in the summary.
- Measuring: costlab's builder (no intrinsic-registry import; one pool of workers for the whole run,
  shared-library artifacts the runner loads without linking) and a runner that runs kernels on the
  target's ``num-cores`` threads, or through an RPC tracker; ``ms_defaults`` uses MetaSchedule's own
  builder and runner exactly as ``tune_tir`` does. Locally, the runner screens (``screen``,
  ``metaschedule/screening.py``): a candidate whose first run is >= 1.5x its task's best is not measured further,
  the others with ``min_repeat_ms`` sized to their first run (``sized_repeats``). Each batch's seconds of
  search, build and run are in ``progress.jsonl``.
- The work dir holds a normal MetaSchedule JSON database (failed measurements kept, as MetaSchedule writes
  them); re-run with the same work dir, a run continues: trials already in the database count.
- A network is compiled with the tuning database afterwards and its end-to-end latency measured beside
  the untuned build's.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from costlab.common import jsontext
from costlab.common.errors import InputError, UsageError, last_line, require_seconds
from costlab.common.files import write_atomically
from costlab.common.host import host_info
from costlab.datasets.records import record_latency
from costlab.costmodels import kinds
from costlab.costmodels.recipes import ADAPT_MODES, adapts, auto_adapt_mode
from costlab.export.check import check_tasks, fastest_records
from costlab.export.exploit import ExploitOptions, exploit, read_exploit_state
from costlab.export.finals import KEEP_UNTUNED, MEASURES as FINAL_MEASURES, WITHIN as FINALS_WITHIN
from costlab.export.finals import keep_untuned, remeasure
from costlab.export.library.add import failure_text
from costlab.export.library.start import add_run, run_libraries, start_from_library
from costlab.export.network import end_to_end
from costlab.export.schedulers import DEFAULT_FOR_NETWORK, DEFAULT_FOR_WORKLOADS, TASK_SCHEDULERS, make_task_scheduler
from costlab.export.search import DEFAULT_WITHOUT_MODEL, DEFAULT_WITH_MODEL, STRATEGIES, draft_cost_model, make_strategy
from costlab.export.search.common import RoundLog, workload_key
from costlab.export.tasks import Task, canonical_workloads, function_network, measuring_target, workload_tasks
from costlab.export.transfer.run import TransferOptions, started_tasks, task_key, transfer_tasks
from costlab.export.machines import refuse_other_machine, run_target
from costlab.export.workdir import MeasuringStack, WorkDir
from costlab.metaschedule.rpc import tracker_problem
from costlab.metaschedule.runners import runner_failure
from costlab.metaschedule.targets import is_gpu, platform_id_for, runnable_target, target_cores
from costlab.metaschedule.traces import plain_json
from costlab.metaschedule.workloads import unique_buffer_names
from costlab.metaschedule.tune_context import tune_context

# the imports inside functions pull torch and tvm: costlab/commands/tune.py imports this module when the command
# line's parser is built

MAX_TRIALS = 1_000_000
MAX_POPULATION = 16_384
SCREEN_DEFAULT = 1.5  # --screen: benchmarks/screening.py, docs/search.md


@dataclass
class TuneOptions:
    work_dir: str
    workloads: list = field(default_factory=list)  # te_workload specs
    network: str | None = None  # a transformers model type (with overrides) or MODULE:FUNCTION
    task_filter: list = field(default_factory=list)  # shell patterns of the network's task names to tune
    batch: int = 1
    seq_len: int = 32
    target: str | dict | None = "host"
    trials: int = 200  # per workload; a network's budget in all
    max_seconds: float | None = None  # wall-time budget of the whole run (this invocation); None: trials only
    model: str | None = None  # None: MetaSchedule's XGBoost model
    strategy: str | None = None  # default: model-led with a model, evolutionary without
    task_scheduler: str | None = None  # export/schedulers: default gain for a network, gradient for workloads
    adapt: str = "auto"  # momentum with a learned model, none otherwise (resolved_adapt)
    head: str | None = None
    strict: bool = False
    seed: int = 0
    per_iter: int = 64
    population: int | None = None  # the strategy's own default (make_strategy)
    first_rounds: tuple = (8, 16, 32)  # model-led: sizes of the first rounds, then per_iter
    verify_fraction: float = 0.1
    ms_defaults: bool = False
    # screening runner (metaschedule/screening.py): a candidate whose one first run is >= screen x its task's best is
    # not measured further; None: SCREEN_DEFAULT with costlab's local runner, off with --ms-defaults or --rpc-key
    screen: float | None = None
    # screening: phase 2's min_repeat_ms sized to the kernel's first run; None: on whenever the runner screens
    sized_repeats: bool | None = None
    builder_timeout: float = 30.0
    number: int = 3
    repeat: int = 1
    rpc_key: str | None = None
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 9190
    rpc_wait: float = 60.0  # seconds to wait for an RPC tracker that stopped answering before the run stops
    exploit: int = 0  # trials of Droplet exploitation (costlab exploit) after the search
    transfer_from: list = field(default_factory=list)  # sources of transfer-tuning before the search
    transfer_top: int = 4  # programs transferred (measured) per task, from --transfer-from and from the library
    library: str | None = None  # the schedule library's root folder (export/library); None: its default
    use_library: bool = True  # start each task from the library's matching programs; add the run's best to it
    progress: bool = True
    started_at: float | None = None  # when the command started (the CLI's process start); default: the call
    check_output: bool = True  # each task's best programs run beside a reference build before they are reported
    # a network's tasks: their fastest programs (up to final_top, within finals.WITHIN of the best) measured again
    # together and the network built from the fastest of that measurement (export/finals.py); 0 or 1: off
    final_top: int = 4
    # how that second measurement times them: "cold" (CPU caches flushed of the kernel's weights before every
    # run, as inside the network; a CPU target) or "warm" (as the search measures)
    final_measure: str = "cold"
    # in that measurement, each task's untuned program too: a task keeps it where it ran faster than the chosen
    # program (export/finals.keep_untuned); "auto": on a GPU (a CPU's untuned programs are unscheduled loops,
    # measuring them cold costs more than they win), "on", "off"
    keep_untuned: str = "auto"

    def check(self) -> None:
        if not self.workloads and not self.network:
            raise UsageError("name what to tune: --workload NAME[:ARGS] (repeatable) or --network NET")
        if self.workloads and self.network:
            raise UsageError("tune either --workload(s) or one --network, not both")
        if self.task_filter and not self.network:
            raise UsageError("--task picks tasks of a --network")
        canonical_workloads(self.workloads)  # a mistyped --workload before its work dir is made
        if self.network and function_network(self.network) and (self.batch, self.seq_len) != (1, 32):
            raise UsageError("--batch and --seq-len size a transformers model's inputs; a MODULE:FUNCTION network is "
                             "tuned at the example inputs its function returns (resize them there)")
        if self.trials < 1 or self.per_iter < 1 or (self.population is not None and self.population < 2):
            raise UsageError("--trials, --per-iter must be at least 1 and --population at least 2")
        if self.trials > MAX_TRIALS or self.per_iter > MAX_TRIALS:
            raise UsageError(f"--trials and --per-iter are at most {MAX_TRIALS:,}")
        if self.population is not None and self.population > MAX_POPULATION:
            raise UsageError(f"--population is at most {MAX_POPULATION:,} (each member is a scheduled program held "
                             "in memory, several times over during the genetic search)")
        if not 0 <= self.seed < 2**31 - 1:
            raise UsageError(f"--seed must be in [0, 2^31 - 1), not {self.seed}")
        require_seconds("--builder-timeout", self.builder_timeout)
        if self.rpc_key and not 0 < self.rpc_port < 65536:
            raise UsageError(f"--rpc-port must be a TCP port (1-65535), not {self.rpc_port}")
        if not 0 <= self.exploit <= MAX_TRIALS:
            raise UsageError(f"--exploit takes a number of trials (0 to {MAX_TRIALS:,}), not {self.exploit}")
        if self.transfer_from and self.rpc_key:
            raise UsageError("--transfer-from measures on this machine; it cannot start an --rpc-key run (yet)")
        if not 0 <= self.final_top <= 64:
            raise UsageError(f"--final-top must be 0-64 (0: no second measurement), not {self.final_top}")
        if self.final_measure not in FINAL_MEASURES:
            raise UsageError(f"--final-measure is one of {', '.join(FINAL_MEASURES)}, not {self.final_measure!r}")
        if self.keep_untuned not in KEEP_UNTUNED:
            raise UsageError(f"--keep-untuned is one of {', '.join(KEEP_UNTUNED)}, not {self.keep_untuned!r}")
        if self.keep_untuned == "on" and (not self.network or self.task_filter or self.final_top < 2 or self.rpc_key):
            # the untuned programs are measured in the finals' rounds: without them the option did nothing
            raise UsageError("--keep-untuned on compares each task's untuned program in the second measurement of a "
                             "whole --network's finals: it needs --final-top 2 or more, no --task and no --rpc-key")
        if not 1 <= self.transfer_top <= 1024:
            raise UsageError(f"--transfer-top must be 1-1024, not {self.transfer_top}")
        if self.exploit and self.rpc_key:
            raise UsageError("--exploit measures on this machine; it cannot follow an --rpc-key run (yet)")
        if not (self.rpc_wait >= 0 and math.isfinite(self.rpc_wait)):
            raise UsageError(f"--rpc-wait must be a number of seconds (0 or more), not {self.rpc_wait}")
        if self.max_seconds is not None and not (self.max_seconds > 0 and math.isfinite(self.max_seconds)):
            raise UsageError(f"--max-seconds must be a positive number of seconds, not {self.max_seconds}")
        if any(int(x) < 1 for x in self.first_rounds):
            raise UsageError(f"--first-rounds must be positive candidate counts, not {self.first_rounds}")
        if not 0 < self.verify_fraction <= 1:
            raise UsageError(f"--verify-fraction must be in (0, 1], not {self.verify_fraction}")
        strategy = self.strategy or (DEFAULT_WITH_MODEL if self.model else DEFAULT_WITHOUT_MODEL)
        if strategy not in STRATEGIES:
            raise UsageError(f"--strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        if STRATEGIES[strategy].needs_model and not self.model:
            raise UsageError(f"--strategy {strategy} needs a --model to verify with (a model dir, "
                             f"{kinds.spoken(kinds.untrained())})")
        if self.adapt != "auto" and self.adapt not in ADAPT_MODES:  # auto: resolved_adapt picks a mode
            raise UsageError(f"--adapt must be one of auto, {', '.join(ADAPT_MODES)}, not {self.adapt!r}")
        if self.adapt != "auto" and adapts(self.adapt) and not self.model:
            raise UsageError("--adapt needs a --model to adapt")
        if (self.head or self.strict) and not self.model:
            raise UsageError(f"{'--head' if self.head else '--strict'} applies to a --model, and none is given")
        if self.ms_defaults and self.rpc_key:
            raise UsageError("--ms-defaults runs MetaSchedule's local builder and runner; it cannot use --rpc-key")
        if self.screen is not None:
            if not (math.isfinite(self.screen) and (self.screen == 0 or self.screen > 1)):
                raise UsageError(f"--screen takes a ratio above 1 (e.g. 1.5), or 0 for no screening, not {self.screen}")
            if self.screen and (self.ms_defaults or self.rpc_key):
                raise UsageError("--screen runs candidates on this machine's costlab runner; it cannot be used with "
                                 + ("--ms-defaults" if self.ms_defaults else "--rpc-key") + " (give --screen 0)")
        else:
            self.screen = 0.0 if (self.ms_defaults or self.rpc_key) else SCREEN_DEFAULT
        if self.sized_repeats and not self.screen:
            raise UsageError("sized repeats need the screening runner's first run (--screen RATIO)")
        self.sized_repeats = bool(self.screen) if self.sized_repeats is None else self.sized_repeats
        self.strategy = strategy
        self.task_scheduler = self.task_scheduler or (DEFAULT_FOR_NETWORK if self.network else DEFAULT_FOR_WORKLOADS)
        if self.task_scheduler not in TASK_SCHEDULERS:
            raise UsageError(f"--task-scheduler must be one of {', '.join(TASK_SCHEDULERS)}, "
                             f"not {self.task_scheduler!r}")


def _searched_per_task(work: WorkDir, database, tasks: list[Task]) -> list[int]:
    """The search's trials already in the database per task: its records less those exploitation measured
    (``exploit_state.json``, by structural hash, as ``--exploit`` or ``costlab exploit`` counts them), which have
    a budget of their own: counted as search trials, a continued run with more --trials searched nothing."""
    # checked as costlab exploit checks it: a field that does not read is one InputError naming the file and task
    state = read_exploit_state(work.exploit_state)
    exploited = [state.get(key) if key is not None else None for key in _workload_keys(database, tasks)]
    return [max(0, d - e["trials"]) if isinstance(e, dict) else d
            for d, e in zip(_done_per_task(database, tasks), exploited)]


def _rounds_of(history, names: list[str]) -> list[list[tuple[float, float]]]:
    """Per task (by name), the search's batches an earlier part of the run measured, from its progress.jsonl:
    ``(best latency in s after the batch, the batch's seconds)``, in order; a damaged line is left out."""
    out: dict = {name: [] for name in names}
    for row in _progress_rows(history):
        try:
            best = float(row["best_us"]) / 1e6 if row.get("best_us") is not None else math.inf
            seconds = sum(float(row.get(k) or 0.0) for k in ("search_s", "build_s", "run_s", "update_s"))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        if isinstance(row.get("task"), str) and row["task"] in out and "search_s" in row:
            out[row["task"]].append((best if best > 0 else math.inf, seconds))
    return [out[name] for name in names]


def _progress_rows(history) -> list[dict]:
    """The rows of a run's progress.jsonl (none where it cannot be read; a damaged line is left out)."""
    try:
        lines = Path(history).read_text().splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _last_failures(history) -> dict:
    """Per task name, why its latest failed candidate failed (progress.jsonl's ``error``)."""
    return {row["task"]: row["error"] for row in _progress_rows(history)
            if isinstance(row.get("task"), str) and isinstance(row.get("error"), str)}


def _workload_keys(database, tasks: list[Task]) -> list[str | None]:
    """Each task's workload in the database by its structural hash (what records, and exploit_state.json, are
    keyed by); None for one the database does not hold yet."""
    return [str(database.commit_workload(t.mod).as_json()[0]) if database.has_workload(t.mod) else None
            for t in tasks]


def _done_per_task(database, tasks: list[Task]) -> list[int]:
    """Trials already in the database per task (a continued run counts them)."""
    counts: dict = {}
    keys: dict = {}
    for rec in database.get_all_tuning_records():
        key = workload_key(rec.workload, keys)  # the workload's structural hash
        counts[key] = counts.get(key, 0) + 1
    return [counts.get(key, 0) if key is not None else 0 for key in _workload_keys(database, tasks)]


def _cost_model(opts: TuneOptions, target, cores: int):
    """The cost model of the run: the costlab model, or MetaSchedule's default XGBoost model exactly as
    ``tune_tasks`` makes it (a fresh one per workload)."""
    if not opts.model:
        from tvm.s_tir.meta_schedule.cost_model import CostModel

        return CostModel.create("xgb", num_tuning_cores=cores, tree_method="auto")
    from costlab.export.cost_model import CostlabCostModel, check_model_for_target  # lazy: pulls torch and tvm

    model = CostlabCostModel(opts.model, head=opts.head, adapt=opts.adapt, strict=opts.strict, seed=opts.seed)
    check_model_for_target(model.predictor, target, opts.strict, opts.model)  # before any tuning starts
    return draft_cost_model(opts.strategy, model, opts.verify_fraction)


def _strategy(opts: TuneOptions, log, clock, reached: bool = True, position=None):
    from costlab.export.search.timed import TimedSearch  # lazy: pulls torch and tvm

    inner = make_strategy(opts.strategy, population=opts.population, verify_fraction=opts.verify_fraction,
                          first_rounds=opts.first_rounds, log=log)
    return TimedSearch(inner, clock, reached, position)


def _measure_stack(opts: TuneOptions, target, cores: int, clock=None, stack=None):
    """The builder and runner of a run, built into ``stack`` (a ``workdir.MeasuringStack``, which releases
    them). costlab's builder keeps one pool of workers for the whole run; an RPC device that stops answering
    ends the run (``clock.lose``) without a failed record; ``ms_defaults``: what "local" makes, as tune_tir
    does."""
    stack = stack if stack is not None else MeasuringStack()
    builder, runner = stack.start(target, workers=cores, builder_timeout=opts.builder_timeout,
                                  on_lost=clock.lose if clock is not None else None, warm=True,
                                  ms_defaults=opts.ms_defaults, number=opts.number, repeat=opts.repeat,
                                  rpc_key=opts.rpc_key, rpc_host=opts.rpc_host, rpc_port=opts.rpc_port,
                                  rpc_wait=opts.rpc_wait)
    if opts.screen and clock is not None:  # the search tags candidates with their task, the builder artifacts
        from costlab.metaschedule.screening import ScreeningRunner, TaskTags  # lazy: pulls torch and tvm

        clock.tags = TaskTags()
        runner = stack.runner = clock.screening = ScreeningRunner(runner, opts.screen, clock.tags,
                                                                  sized=opts.sized_repeats)
    return builder, runner


_LOG_FORMAT = logging.Formatter("%(asctime)s [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")


class _LogFile(logging.FileHandler):
    """A run's log file. A line it cannot write (a full disk) is dropped without the traceback ``logging`` prints
    for each: the run's own files say what failed (``TuneProgress.write_failure``, ``WorkDir.check_written``)."""

    def handleError(self, record) -> None:
        pass

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # its last lines could not be flushed: a full disk, said by the run's own files
            pass


def _file_logger(name: str, path: Path) -> logging.Logger:
    """A logger that writes to PATH alone (its handlers of an earlier run in this process replaced)."""
    logger = logging.getLogger(name)
    if not hasattr(logger, "_costlab_saved"):  # the logger as the process had it: restored by _release_loggers
        logger._costlab_saved = (logger.level, logger.propagate)
    for h in list(logger.handlers):
        if getattr(h, "costlab", False):
            logger.removeHandler(h)
            h.close()
    handler = _LogFile(path, mode="a")
    handler.setFormatter(_LOG_FORMAT)
    handler.costlab = True
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger


def _release_loggers() -> None:
    """Take costlab's file handlers off MetaSchedule's loggers once a run ends: MetaSchedule's own
    ``tune_tir`` later in the same process rebuilds its logging from the handlers it finds, by name."""
    for name in list(logging.Logger.manager.loggerDict):
        if name == "tvm.s_tir.meta_schedule" or name.startswith("costlab.tune.task_"):
            logger = logging.getLogger(name)
            for h in list(logger.handlers):
                if getattr(h, "costlab", False):
                    logger.removeHandler(h)
                    h.close()
            # its level and propagation as they were: left at DEBUG and propagating, every later MetaSchedule
            # debug and info line of the process reached the caller's root handlers (a notebook's basicConfig)
            level, propagate = getattr(logger, "_costlab_saved", (logging.NOTSET, True))
            logger.setLevel(level)
            logger.propagate = propagate
            if hasattr(logger, "_costlab_saved"):
                del logger._costlab_saved


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._,:=+-" else "_" for c in name)


def _task_loggers(work: WorkDir, names: list[str]) -> list[logging.Logger]:
    """MetaSchedule's logs in WORK/logs, as tune_tasks writes them, but never on stdout (the progress bar
    and --json own it) and without MetaSchedule's dictConfig, which reconfigures the process's logging
    and fails when called twice in one process with handlers it did not name."""
    logs = work.logs_dir
    logs.mkdir(exist_ok=True)
    _file_logger("tvm.s_tir.meta_schedule", work.scheduler_log)
    width = len(str(len(names) - 1))
    return [_file_logger(f"costlab.tune.task_{i:0{width}d}", logs / f"task_{i:0{width}d}_{_safe(n)[:100]}.log")
            for i, n in enumerate(names)]


def process_start() -> float:
    """When this process started (the command's own start, before Python imported anything)."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001  no process table: the call's start will do
        return time.time()


def tune(opts: TuneOptions) -> dict:
    """Tune; returns a summary (per task: trials, best latency; wall seconds; seconds to the first measured
    batch; a network's end-to-end)."""
    held: list = []  # the work dir's lock, held until the summary is written: the checks (which run the
    try:  # programs), a network's end-to-end timing, the result, the library and the summary are the run's too
        return _tune(opts, held)
    finally:
        for fh in held:
            fh.close()


def _tune(opts: TuneOptions, held: list) -> dict:
    started = time.time()
    command_start = opts.started_at or started
    opts.check()
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import fork_seed

    from costlab.export.callbacks import run_callbacks  # lazy: pulls torch and tvm
    from costlab.export.progress import TuneProgress  # lazy: pulls torch and tvm
    from costlab.export.search.timed import RoundClock, TimedBuilder, stop_requested  # lazy: pulls torch and tvm

    target = measuring_target(opts.target, local=not opts.rpc_key)
    cores = target_cores(target)
    work = WorkDir(opts.work_dir)
    if not str(opts.work_dir).strip():
        raise UsageError("--work-dir must name a directory")
    work.check_folder()
    if opts.model:  # a model whose config does not read is refused before the work dir is made
        from costlab.costmodels.predictors import check_config  # lazy: pulls torch

        check_config(opts.model)
    try:
        work.path.mkdir(parents=True, exist_ok=True)
        held.append(work.lock())
    except OSError as exc:
        raise InputError(work.path, f"cannot be used as the work dir: {exc.strerror or exc}") from None
    exploited, transferred, started_from, finals, finals_stats, earlier = None, None, None, None, None, None
    # from here on the builder's workers and MetaSchedule's loggers are released however it ends (the lock by tune)
    with work.measuring() as stack:
        try:
            for path in (work.progress_file, work.rounds_file, work.summary_file, work.records_file,
                         work.workloads_file):
                if path.is_dir():
                    raise InputError(path, "is a directory; the run writes a file of that name")
            if opts.rpc_key:
                _check_tracker(opts)
            opts.adapt = resolved_adapt(opts, work)
            run_options = _check_same_run(work, opts, target)
            tasks, network = workload_tasks(opts, target)
            clock = RoundClock(command_start + opts.max_seconds if opts.max_seconds else None)
            builder, runner = _measure_stack(opts, target, cores, clock, stack)  # workers start while the model loads
            cost_model = _cost_model(opts, target, cores)
            work.write_run_record(run_options)  # the run has started
            database, repaired = work.open_database()  # lines an interrupted run cut short: moved aside, reported
            # a task's search starts from programs transferred from elsewhere: those of a task whose search has not
            # begun (a continued run's searched tasks go on from their own; a start a stop cut short is finished),
            # the transferred ones first, the library's after them
            library = opts.use_library and not opts.rpc_key
            counts = _done_per_task(database, tasks)
            to_transfer, to_start = _starting_tasks(work, tasks, counts, bool(opts.transfer_from), library)
            if not opts.workloads:  # a network's start, within its --trials left (exploitation's are its own)
                left = opts.trials - sum(_searched_per_task(work, database, tasks))
                to_transfer, to_start = _start_within(left, to_transfer, to_start)
            if opts.transfer_from and to_transfer:
                transferred = _transfer(opts, to_transfer, target, database, builder, runner, clock, len(tasks))
            if library and to_start:
                # what the transfer measured of each task (this run's and an earlier one's) leaves the library less
                taken = {key: added for key, (_done, added) in
                         _start_state(work.transfer_state, "transfer afresh", bool(opts.transfer_from)).items()}
                started_from = _library_start(opts, to_start, target, database, builder, runner, clock, taken,
                                              len(tasks))
            done = _searched_per_task(work, database, tasks)
            # workloads are tuned one after the other, each with its own budget; a network's tasks share one
            groups = [[i] for i in range(len(tasks))] if opts.workloads else [list(range(len(tasks)))]
            budget = opts.trials * len(groups)
            log = RoundLog(work.rounds_file)
            # progress.jsonl's best_us is the database's best so far: what the start and exploitation measured too
            progress = TuneProgress([t.name for t in tasks], done, budget, enabled=opts.progress,
                                    history=work.progress_file, clock=clock, started=command_start,
                                    known_best=[_best_latency(database, t.mod) for t in tasks],
                                    check_written=work.check_written)
            try:
                if getattr(cost_model, "adapter", None) is not None and not clock.expired() and any(
                        opts.trials > sum(done[i] for i in group) for group in groups):
                    # a continued run adapts on all its records: those of every task the work dir holds, a finished
                    # workload's too (a run not interrupted had them when it reached the next workload)
                    for i, t in enumerate(tasks):
                        if done[i] > 0:
                            cost_model.remember(tune_context(unique_buffer_names(t.mod), target, space=None), database)
                for group in groups:
                    remaining = opts.trials - sum(done[i] for i in group)
                    if remaining <= 0 or clock.expired():
                        continue
                    names = [tasks[i].name for i in group]
                    contexts = []
                    for i, logger, rand in zip(group, _task_loggers(work, names), fork_seed(opts.seed, n=len(group))):
                        # buffers named apart (the same workload to the database: names are not in its hash), so
                        # that the model's features of the live candidates need no replay (ms_records.named_apart)
                        contexts.append(tune_context(unique_buffer_names(tasks[i].mod), target,
                                                     _strategy(opts, log, clock, done[i] > 0, i),
                                                     task_name=tasks[i].name, rand_state=rand, num_threads=cores,
                                                     logger=logger).clone())
                    if clock.screening is not None:  # each task's best in the work dir's database (a continued run)
                        from costlab.metaschedule.screening import task_key  # lazy: pulls torch and tvm

                        for i, ctx in zip(group, contexts):
                            clock.screening.seed(task_key(ctx.mod), _best_latency(database, tasks[i].mod))
                    progress.focus(group)
                    clock.trials_left = remaining  # every batch is cut to it: the budget holds for a network too
                    clock.unreached = sum(done[i] == 0 for i in group)  # their first batches share it
                    run_model = cost_model if opts.model else _cost_model(opts, target, cores)
                    gain = opts.task_scheduler == "gain"  # it goes on from the earlier parts' rounds of each task
                    scheduler = make_task_scheduler(opts.task_scheduler, **(
                        {"cost_model": run_model,
                         "history": _rounds_of(work.progress_file, [tasks[i].name for i in group])} if gain else {}))
                    try:
                        ms.tune_tasks(tasks=contexts, task_weights=[tasks[i].weight for i in group],
                                      work_dir=str(work), max_trials_global=remaining, max_trials_per_task=remaining,
                                      num_trials_per_iter=opts.per_iter, builder=TimedBuilder(builder, clock),
                                      runner=runner, database=database, cost_model=run_model,
                                      measure_callbacks=run_callbacks(progress.callback(),
                                                                      on_results=progress.results_in,
                                                                      cost_model=run_model),
                                      task_scheduler=scheduler)
                    except Exception:
                        if runner_failure(runner) is not None:  # the runner's worker never started: one line
                            raise runner_failure(runner) from None
                        if getattr(builder, "room_failure", None) is not None:  # the temporary folder filled up
                            raise builder.room_failure from None
                        raise
                    clock.end_group()
            finally:
                progress.close()
            if progress.write_failure is not None:  # the run stopped at it: the disk is full, or the file too large
                _keep_stopped_adaptation(work, cost_model)  # a stopped part's updates, where room is left for them
                raise progress.write_failure
            work.check_written()
            if opts.exploit and stop_requested() is None and clock.lost is None and not clock.expired():
                exploited = exploit(ExploitOptions(str(work), trials=opts.exploit, model=opts.model, head=opts.head,
                                                   seed=opts.seed, target=plain_json(target.export()), cumulative=True,
                                                   builder_timeout=opts.builder_timeout, progress=opts.progress),
                                    database=database, locked=True, should_stop=clock.expired,
                                    # the neighbours screened by the model as the search's adaptation left it
                                    adapted=cost_model.predictor if getattr(cost_model, "adapter", None) else None)
            # the summary of a finished run re-run (None: none, or the database has grown since); a re-run whose run
            # was stopped after its last batch (no summary) measures its finals now
            earlier = _finished_summary(work, tasks, _done_per_task(database, tasks), opts)
            if (network is not None and _finals_due(opts)
                    and (clock.first_batch_at is not None or earlier is None)
                    and stop_requested() is None and clock.lost is None and not clock.expired()):
                gpu = is_gpu(plain_json(target.export()))
                untuned = opts.keep_untuned == "on" or (opts.keep_untuned == "auto" and gpu)
                finals, finals_stats = remeasure(database, [t.mod for t in tasks], builder,
                                                 getattr(runner, "inner", runner), target, top=opts.final_top,
                                                 cold=opts.final_measure == "cold" and not gpu, untuned=untuned)
        finally:
            _release_loggers()
    summary = dict(options=asdict(opts), target=plain_json(target.export()), wall_s=round(time.time() - command_start, 2),
                   tasks=[])
    if clock.first_batch_at is not None:
        summary["first_batch_s"] = round(clock.first_batch_at - command_start, 2)
        # where those seconds went: the batch's own search, build and run, and everything before its search
        parts = {k: v or 0.0 for k, v in clock.first_batch.items()}
        summary["first_batch"] = dict(start_up_s=round(max(0.0, summary["first_batch_s"] - sum(parts.values())), 2),
                                      **{k: round(v, 2) for k, v in parts.items()})
    if repaired:
        summary["skipped_lines"] = repaired  # moved to database_tuning_record.bad-lines.jsonl
    if exploited is not None:
        summary["exploit"] = exploited
    if transferred is not None:
        summary["transfer"] = {row["name"]: dict(best_us=row.get("best_us"), measured=len(row.get("measured", [])),
                                                 counts=row.get("counts", {}))
                               for row in transferred.get("tasks", {}).values()}
    if clock.screening is not None:
        summary["screening"] = dict(ratio=opts.screen, sized_repeats=opts.sized_repeats, **clock.screening.stats)
    if started_from is not None:
        summary["library_start"] = started_from
    if clock.stopped_by_deadline:
        summary["stopped"] = f"--max-seconds {opts.max_seconds:g} reached"
    if clock.lost is not None or stop_requested() is not None:  # a stopped part writes no summary: its updates
        _keep_stopped_adaptation(work, cost_model)
    if clock.lost is not None:
        n = sum(_done_per_task(database, tasks))
        raise UsageError(f"{clock.lost}: the run stopped with {n} measured trials in {work} (candidates that "
                         "were not measured are not recorded and count against no budget); run the same command "
                         "again to continue")
    if stop_requested() is not None:  # interrupted: the database is complete; no checks, no summary
        return summary
    exploited_now = exploited is not None and exploited["trials"] > 0
    if (earlier is not None and clock.first_batch_at is None and not exploited_now and transferred is None
            and not clock.stopped_by_deadline):  # a deadline that came before any batch is no finished run
        # a finished run re-run: nothing was measured, its summary stands as it was written (what this command's
        # own seconds were is not in it: marked, not written)
        return dict(earlier, unchanged=True)
    checked = opts.check_output and not opts.rpc_key  # a remote device's programs are not run here
    chosen = []  # per task: the record the result is (None: the database's fastest, unchecked)
    answers = []  # per task: check_task's whole answer (its records too), None when not checked
    rows, to_check = [], []  # to_check: (task index, (mod, records, skip)) of the tasks checked, all at once
    failures = _last_failures(work.progress_file)
    keys = _workload_keys(database, tasks)  # (what exploitation's rows are keyed by: they are named by it)
    # this run's --exploit rows are named as costlab exploit names them (it read no summary of this run's tasks yet)
    names = {k: t.name for k, t in zip(keys, tasks) if k is not None}
    for row in (exploited or {}).get("tasks", []):
        if "name" not in row and row.get("workload") in names:
            row["name"] = names[row["workload"]]
    for i, (t, n) in enumerate(zip(tasks, _done_per_task(database, tasks))):
        best = _best_latency(database, t.mod)
        row = dict(name=t.name, weight=t.weight, trials=n, best_us=best and round(best * 1e6, 3))
        if keys[i] is not None:
            row["workload_key"] = keys[i]
        if best is None and t.name in failures:  # every candidate failed: why the last one did
            row["failure"] = failures[t.name]
        record, live, failed = None, None, []
        if finals is not None:
            # a contender that failed its second measurement is never the result, whatever its first one said
            live = [r for r, s in finals[i] if math.isfinite(s)]
            failed = [r for r, s in finals[i] if not math.isfinite(s)]
            if finals[i]:
                row["final_us"] = [round(s * 1e6, 3) if math.isfinite(s) else None for _, s in finals[i]]
                record = live[0] if live else None
        if checked and best is not None:
            to_check.append((i, (t.mod, live, failed)))
        chosen.append(record)
        answers.append(None)
        rows.append(row)
    t_check = time.time()
    got = check_tasks(database, [item for _, item in to_check], target, seed=opts.seed) if to_check else []
    if to_check:  # after wall_s: the seconds the checks add to the command's own
        summary["check_s"] = round(time.time() - t_check, 2)
    for (i, _), answer in zip(to_check, got):
        chosen[i], answers[i] = answer["record"], answer
        rows[i]["check"] = {k: v for k, v in answer.items() if k not in ("record", "tried")}
        rows[i]["best_us"] = rows[i]["check"]["best_us"]  # a program whose output is wrong is never the result
    untuned_s = finals_stats.pop("untuned_s", None) if finals_stats else None
    if untuned_s is not None:  # a task none of whose programs beat its untuned schedule keeps that schedule
        kept = keep_untuned(chosen, finals, untuned_s)
        for i, keep in enumerate(kept):
            if untuned_s[i] is not None:
                rows[i]["untuned_us"] = round(untuned_s[i] * 1e6, 3) if math.isfinite(untuned_s[i]) else None
            if keep:
                rows[i]["kept"] = "untuned"
        finals_stats["kept_untuned"] = sum(kept)
    summary["tasks"].extend(rows)
    # an earlier invocation's summary does not describe the result about to replace its own: removed first, so that
    # a run stopped before its summary is written (a Ctrl-C while the network is timed) is not taken for finished
    # by a re-run of the earlier options, which would report that summary beside this run's result/
    earlier_adaptation = _earlier_adaptation(work)  # (read before the file goes)
    work.summary_file.unlink(missing_ok=True)
    if any(r is not None for r in chosen) or any(r.get("kept") for r in rows):  # (every task kept: an empty result)
        summary["result"] = _write_result(work, tasks, chosen, finals)
        work.check_written(work.result_dir)
    elif work.result_dir.exists():  # an earlier invocation's choice (an unchecked run chooses none) is not this one's
        shutil.rmtree(work.result_dir, ignore_errors=True)
    if log.rounds:
        summary["rounds"] = len(log.rounds)
    if finals is not None:
        summary["finals"] = dict(top=opts.final_top, within=FINALS_WITHIN, **finals_stats)
    if opts.use_library and not opts.rpc_key:
        summary["library"] = _library_add(opts, tasks, target, database, answers, checked)
    if hasattr(cost_model, "stats"):
        summary["cost_model"] = dict(cost_model.stats)
        if getattr(cost_model, "adapter", None) is not None:
            summary["adaptation"] = dict(cost_model.adapter.stats, rounds=cost_model.adapter.rounds)
            if earlier_adaptation:  # a continued run: the updates of the parts before it stay reported
                summary["adaptation"]["earlier"] = earlier_adaptation
    if network is not None:
        try:
            summary["network"] = end_to_end(network[0], network[1], target,
                                            _checked_database(database, tasks, chosen,
                                                              checked or finals is not None), cores,
                                            reference=network[2] if checked else None)
        except Exception as exc:  # noqa: BLE001  the tuning it follows is complete: its summary is still written
            if stop_requested() is not None:  # a terminal's Ctrl-C also reached the compiler the network's export
                # ran (its process group): the stop's, not the network's; no summary, a re-run times it. The earlier
                # summary is gone already: its updates are kept with this part's
                _keep_stopped_adaptation(work, cost_model, earlier_adaptation)
                raise
            summary["network"] = dict(error=f"{type(exc).__name__}: {last_line(exc)}")
    write_atomically(work.summary_file, jsontext.dumps(summary, indent=2).encode())
    work.stopped_adaptation_file.unlink(missing_ok=True)  # in the summary's adaptation.earlier now
    try:
        from costlab.export.progress import plot_history  # lazy: pulls torch and tvm

        plot_history(work.progress_file, work.curve_file)
    except Exception as exc:  # noqa: BLE001  a picture is never worth failing a finished run for
        logging.getLogger(__name__).warning("no tuning curve drawn: %s", exc)
    return summary


def _starting_tasks(work: WorkDir, tasks: list[Task], counts: list[int], transfer: bool,
                    library: bool) -> tuple[list[Task], list[Task]]:
    """The tasks the transfer and the library start measure before the search (``counts``: each task's records;
    ``transfer``, ``library``: whether this run has them, and so needs their state files): those whose search
    has not begun, every record of theirs being the start's (a stopped run may have left their start
    unfinished, or not begun), and whose transfer (or library start) is not done."""
    # both states count a task's start records (what tells a search that has begun), whichever starts this run
    # has; a damaged state of a start it has not is read as none
    transferred = _start_state(work.transfer_state, "transfer afresh", transfer)
    started = _start_state(work.library_state, "start from the library afresh", library)
    keys = [task_key(t.mod) for t in tasks] if transferred or started else [None] * len(tasks)
    to_transfer, to_start = [], []
    for task, key, n in zip(tasks, keys, counts):
        t_done, t_added = transferred.get(key, (False, 0))
        s_done, s_added = started.get(key, (False, 0))
        if n > t_added + s_added:  # the search has measured it
            continue
        if not t_done:
            to_transfer.append(task)
        if not s_done:
            to_start.append(task)
    return to_transfer, to_start


def _start_within(left: int, to_transfer: list[Task], to_start: list[Task]) -> tuple[list[Task], list[Task]]:
    """The tasks of a network that start before the search when its ``--trials`` left are fewer than they are:
    the heaviest (by weight; in the network's order among equals), as many as the trials left. Each task's start
    measures at least one program (``_start_share``), so a start of every task spent more than ``--trials``."""
    starting = {id(t): t for t in [*to_transfer, *to_start]}
    if len(starting) <= left:
        return to_transfer, to_start
    order = list(starting)
    chosen = set(sorted(order, key=lambda i: (-starting[i].weight, order.index(i)))[:max(0, left)])
    return [t for t in to_transfer if id(t) in chosen], [t for t in to_start if id(t) in chosen]


def _start_state(path: Path, afresh: str, needed: bool) -> dict:
    """``started_tasks`` of a start's state file; {} for a damaged one the run does not need."""
    try:
        return started_tasks(path, afresh)
    except InputError:
        if needed:
            raise
        return {}


def _start_share(opts: TuneOptions, n_tasks: int) -> int:
    """What the start before the search (the transfer, then the library) may measure of one task: a workload's
    ``--trials``; a network's ``--trials`` shared by its tasks, at least one each, so that the start does not
    spend a network's whole budget (19 tasks, ``--transfer-top 4``, ``--trials 32``: one each; with fewer trials
    than tasks, only the heaviest tasks start: ``_start_within``)."""
    return opts.trials if opts.workloads else max(1, opts.trials // max(1, n_tasks))


def _transfer(opts: TuneOptions, tasks: list[Task], target, database, builder, runner, clock, n_tasks: int) -> dict:
    """``--transfer-from``: ``costlab transfer`` into the run's database, before the search of the tasks whose
    search has not begun (``_starting_tasks``; a continued run's searched tasks go on from their own programs).
    Each task's transfer measures its ``--transfer-top`` within its share of ``--trials`` (``_start_share``;
    all of a workload's with ``--trials 1``: transfer alone). It stops between tasks once the run is stopped or
    its ``--max-seconds`` are spent (``clock``); a re-run goes on with the tasks left."""
    topts = TransferOptions(opts.work_dir, sources=list(opts.transfer_from), model=opts.model, head=opts.head,
                            top=min(opts.transfer_top, _start_share(opts, n_tasks)),
                            seed=opts.seed, number=opts.number, repeat=opts.repeat, progress=opts.progress)
    return transfer_tasks(tasks, target, database, builder, runner, topts, WorkDir(opts.work_dir).transfer_state,
                          should_stop=clock.expired)


def _library_start(opts: TuneOptions, tasks: list[Task], target, database, builder, runner, clock,
                   taken: dict, n_tasks: int) -> dict:
    """Each task starts from the library: its ``--transfer-top`` best replayed programs of the library's matching
    tasks (``export/library/start``), measured into the database before the search, within what ``taken`` (per
    task key, the transfer's records) leaves of the task's share of ``--trials`` (``_start_share``). It stops
    between tasks once the run is stopped or its ``--max-seconds`` are spent."""
    share = _start_share(opts, n_tasks)
    by_top: dict[int, list[Task]] = {}
    for task in tasks:
        top = min(opts.transfer_top, share - min(taken.get(task_key(task.mod), 0), share))
        if top > 0:
            by_top.setdefault(top, []).append(task)
    if not by_top:
        return dict(skipped="the transfer took the start's share of --trials")
    libraries = run_libraries(opts.library, platform_id_for(plain_json(target.export())), kind=target.kind.name)
    summary: dict = dict(libraries=[str(lib.path) for lib in libraries], matching_entries=0)
    for top, group in sorted(by_top.items(), reverse=True):  # one start per share left (a task's own top)
        if clock.expired():
            summary["stopped"] = "the run's time was spent"
            break
        part = start_from_library(WorkDir(opts.work_dir), group, target, database, builder, runner,
                                  libraries=libraries, model=opts.model, head=opts.head, top=top, seed=opts.seed,
                                  number=opts.number, repeat=opts.repeat, progress=opts.progress,
                                  should_stop=clock.expired)
        summary["matching_entries"] += part["matching_entries"]
        summary.setdefault("tasks", {}).update(part.get("tasks", {}))
    return summary


def _library_add(opts: TuneOptions, tasks: list[Task], target, database, answers: list, checked: bool) -> dict:
    """The run's checked best programs (``answers``: each task's ``check_task`` answer) into the library of its
    platform; nothing when they were not checked (``--no-check``): a library holds programs known to compute
    the right result. A library that cannot take them (another host's, not writable, or failing in a way not
    foreseen) is said in the summary and as a warning, never the end of a finished run: its summary is written."""
    if not checked:
        return dict(added=0, why="not added: the run's programs were not checked (--no-check)")
    try:
        return add_run(opts.library, platform_id_for(plain_json(target.export())), host_info(), database, tasks,
                       answers, Path(opts.work_dir))
    except Exception as exc:  # noqa: BLE001  the run is finished: its summary is written whatever the library does
        said = failure_text(exc)
        logging.getLogger(__name__).warning("the run's programs were not added to the schedule library: %s", said)
        return dict(added=0, why=f"not added: {said}")


def _checked_database(database, tasks: list[Task], chosen: list, checked: bool):
    """The database a network is compiled with: once programs were checked, each task's checked program
    (a task none of whose programs matched is built untuned); unchecked, each task's fastest record
    (``fastest_records``: never a damaged record of 0 seconds, which MetaSchedule's top-1, what a build applies
    from the database as tuned, would be)."""
    from tvm.s_tir import meta_schedule as ms

    if not checked:
        chosen = [next(iter(fastest_records(database, task.mod, 1)), None) for task in tasks]
    out = ms.database.MemoryDatabase()
    for task, rec in zip(tasks, chosen):
        if rec is not None:
            out.commit_tuning_record(ms.database.TuningRecord(rec.trace, out.commit_workload(task.mod), rec.run_secs,
                                                             rec.target, rec.args_info))
    return out


def _write_result(work: WorkDir, tasks: list[Task], chosen: list, finals: list | None) -> str:
    """The run's result as a MetaSchedule database in ``WORK/result``: per task the record it chose (checked, and
    the fastest of the second measurement where there was one, with that measurement's seconds), the one a
    build applies (``MetaScheduleApplyDatabase``). Replaced whole, so it never mixes two runs' choices; the
    previous one is moved aside, not deleted, until the new one is in its place."""
    from tvm.s_tir import meta_schedule as ms

    again = {id(rec): secs for per_task in (finals or []) for rec, secs in per_task if math.isfinite(secs)}
    tmp = work.path / (WorkDir.RESULT + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    db = ms.database.JSONDatabase(work_dir=str(tmp))
    for task, rec in zip(tasks, chosen):
        if rec is not None:
            secs = [again[id(rec)]] if id(rec) in again else rec.run_secs
            db.commit_tuning_record(ms.database.TuningRecord(rec.trace, db.commit_workload(task.mod), secs,
                                                             rec.target, rec.args_info))
    old = work.path / (WorkDir.RESULT + ".old")  # the previous result stays whole until the new one is in place
    shutil.rmtree(old, ignore_errors=True)
    if work.result_dir.exists():
        work.result_dir.rename(old)
    tmp.rename(work.result_dir)
    shutil.rmtree(old, ignore_errors=True)
    return str(work.result_dir)


def _best_latency(database, mod) -> float | None:
    top = fastest_records(database, mod, 1)
    return record_latency(top[0].run_secs) if top else None


def _check_tracker(opts: TuneOptions) -> None:
    """An RPC tracker that answers, and has a device of the key, before any tuning: otherwise every trial of
    the budget would be a failed record."""
    why = tracker_problem(opts.rpc_host, opts.rpc_port, opts.rpc_key)
    if why is not None:
        raise UsageError(why + ("; start one, or check --rpc-host/--rpc-port" if why.startswith("no RPC") else ""))


def _same_target(value):
    """A recorded target as the JSON dict it resolves to ("host" and the host written out are one target)."""
    import tvm

    try:
        return plain_json(tvm.target.Target(runnable_target(value)).export())
    except Exception:  # noqa: BLE001  a target this machine cannot resolve compares as written
        return value


def _earlier_adaptation(work: WorkDir) -> list:
    """The adaptation records of the work dir's earlier parts, oldest first, for a continued run's summary, which
    replaces that file: its summary's (its own and its ``earlier``), then those of the parts stopped since."""
    try:
        old = json.loads(work.summary_file.read_text()).get("adaptation")
    except (OSError, ValueError, AttributeError):
        old = None
    records = []
    if isinstance(old, dict):
        records = old.get("earlier") if isinstance(old.get("earlier"), list) else []
        records = [*records, {k: v for k, v in old.items() if k != "earlier"}]
    return [*records, *_stopped_adaptation(work)]


def _stopped_adaptation(work: WorkDir) -> list:
    """The adaptation records of the parts stopped since the summary was written (none where the file is
    unreadable: a report, never a reason to stop a run)."""
    try:
        stopped = json.loads(work.stopped_adaptation_file.read_text())
    except (OSError, ValueError):
        return []
    return [r for r in stopped if isinstance(r, dict)] if isinstance(stopped, list) else []


def _keep_stopped_adaptation(work: WorkDir, cost_model, earlier: list | None = None) -> None:
    """A stopped part's adaptation updates, kept for the next finished part's ``adaptation.earlier``: added to the
    stopped parts' file, or, with ``earlier`` (every record before this part, read before the summary was
    removed), written as that list and this part's."""
    adapter = getattr(cost_model, "adapter", None)
    if adapter is None or not adapter.rounds:
        return
    before = _stopped_adaptation(work) if earlier is None else earlier
    record = dict(adapter.stats, rounds=adapter.rounds, stopped=True)
    try:
        write_atomically(work.stopped_adaptation_file, jsontext.dumps([*before, record], indent=1).encode())
    except OSError as exc:  # a report: the stop goes on
        logging.getLogger(__name__).warning("the stopped part's adaptation updates were not kept: %s", exc)


def resolved_adapt(opts: TuneOptions, work: Path) -> str:
    """``--adapt auto``: what the work dir's run adapts with when it continues one; else ``momentum`` for a
    learned net (the tuning benchmark's arm c, momentum adaptation, reached MetaSchedule's final in every seed
    on 4 of 6 workloads against 1 of 6 frozen: docs/search.md), ``none`` for a kind that needs no weights (PSA,
    random), a baseline, or a model whose config does not read (loading it says why, with the file)."""
    if opts.adapt != "auto":
        return opts.adapt
    old = WorkDir(work).recorded("adapt")
    if old in ADAPT_MODES:
        return old
    from costlab.costmodels.predictors import kind_of  # lazy: pulls torch; MetaSchedule's default needs none

    return auto_adapt_mode(kind_of(opts.model) in kinds.learned())


FINAL_KEYS = ("final_top", "final_measure", "keep_untuned")  # how a network's finals are chosen


def _finished_summary(work: Path, tasks: list, done: list, opts: TuneOptions) -> dict | None:
    """The summary of the run this work dir already finished, when its per-task trials are the database's now
    and it did the work after the search that ``opts`` ask for: checks (a run that checked stands for one
    that does not), the library's update, a network's finals chosen the same way. None when there is none
    (or it no longer describes the database, or that work is still to do)."""
    try:
        old = json.loads(WorkDir(work).summary_file.read_text())
        same = [(r["name"], r["trials"]) for r in old["tasks"]] == [(t.name, n) for t, n in zip(tasks, done)]
        before = old.get("options") or {}
        done_after = ((not opts.check_output or before.get("check_output", True))
                      and (not opts.use_library or (before.get("use_library", True)
                                                    and before.get("library") == opts.library))
                      and (opts.network is None or opts.task_filter  # a part of a network has no finals
                           or all(before.get(k) == getattr(opts, k) for k in FINAL_KEYS))
                      # a network's finals a deadline left unmeasured are still to do
                      and (not _finals_due(opts) or "finals" in old))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return old if same and done_after else None


def _finals_due(opts: TuneOptions) -> bool:
    """Whether a run of ``opts`` measures a network's finals after its search (``finals.remeasure``): a whole
    network's (a part picked by --task is built as no network: it has none, and a re-run would never find its
    finished summary)."""
    return opts.network is not None and not opts.task_filter and opts.final_top > 1 and not opts.rpc_key


MEASURE_KEYS = ("number", "repeat", "screen", "sized_repeats")  # how a program is timed: one way per database


def _check_same_run(work: Path, opts: TuneOptions, target) -> dict:
    """A work dir continues the run that made it: the same tasks, target, search and measurement settings, on the
    same machine (its host is recorded); another run there would mix two searches, two ways of timing, or two
    machines' timings, in one database. Returns the options to record once the run has started."""
    work = WorkDir(work)
    keys = ("workloads", "network", "batch", "seq_len", "target", "model", "model_sha256", "head", "strategy", "adapt",
            "seed", "ms_defaults", "per_iter", "first_rounds", "population", "verify_fraction", "task_scheduler",
            "task_filter", "transfer_from", "transfer_top", "rpc_key", *MEASURE_KEYS)
    mine = {k: json.loads(json.dumps(getattr(opts, k), default=str)) for k in keys if hasattr(opts, k)}
    mine["target"] = plain_json(target.export())
    mine["task_filter"] = sorted(opts.task_filter or [])
    mine["transfer_from"] = sorted(str(Path(s).resolve()) for s in opts.transfer_from or [])
    # workloads as their tasks are named (GMM:1,16,16,16 and gmm:1,16,16,16 are one task); a run recorded before,
    # its specs as typed, continues when they name the same tasks
    mine["workloads"] = canonical_workloads(opts.workloads)
    # a shipped alias recorded as the version it stands for: once the alias moves on, continuing the run with it
    # is refused (two models' choices in one search), as is a run recorded under the bare alias
    from costlab.costmodels.predictors import shipped_alias, weights_sha256  # lazy: pulls torch; MetaSchedule's
    # default needs none

    mine["model"] = shipped_alias(opts.model) if isinstance(opts.model, str) else mine["model"]
    # a model directory is its weights: another model copied over it is refused, the same one spelled another way
    # (an absolute path, from another folder) is not
    mine["model_sha256"] = weights_sha256(opts.model) if isinstance(opts.model, str) else None
    old = work.run_record()
    if old is None:  # records without a run (a transfer made the work dir): measured for the target they name,
        # on the machine the transfer recorded
        refuse_other_machine(target, run_target(work.path), work, "tune it with the --target its records were "
                                                                  "measured for, or tune another --work-dir")
        work.check_same_host("tuning it", opts.rpc_key if work.has_database() else None)
    if old is not None:
        if old.get("model_sha256") and old["model_sha256"] == mine["model_sha256"]:
            old["model"] = mine["model"]  # the same weights, however the model is named
        if old.get("model_sha256") is None and old.get("model") == mine["model"]:
            old["model_sha256"] = mine["model_sha256"]  # an archive recorded before archives were hashed: as named
        for k in ("model_sha256", "head", "first_rounds", "task_filter", "transfer_from", "transfer_top", "rpc_key"):
            old.setdefault(k, mine[k])  # runs recorded before these were (a model then compared as named)
        if "target" in old:
            old["target"] = _same_target(old["target"])
        if isinstance(old.get("workloads"), list):
            old["workloads"] = canonical_workloads(old["workloads"], strict=False)
        old.setdefault("task_scheduler", "gradient")  # runs recorded before the option was MetaSchedule's gradient
        for k in MEASURE_KEYS:  # runs recorded before these were (what they measured with is not known)
            old.setdefault(k, mine[k])
        work.check_same_host("continuing it", opts.rpc_key)
        old.pop("host", None)
        if old != mine:
            diff = ", ".join(f"{k}: {old.get(k)!r} -> {mine.get(k)!r}" for k in [*keys, *sorted(set(old) - set(keys))]
                             if old.get(k) != mine.get(k))
            raise UsageError(f"{work} holds a tuning run with other options ({diff}); continue it with the same "
                             "options, or tune in another --work-dir")
    return dict(mine, host=host_info())
