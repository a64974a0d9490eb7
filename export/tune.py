"""``costlab tune``: MetaSchedule tuning of benchmark workloads or a network, with a costlab model or with
MetaSchedule's default (evolutionary search + XGBoost), in one command.

- Tasks: TVM benchmark workloads by name (``GMM:1,128,128,128``) or the tasks of a network (a
  ``transformers`` model type or ``MODULE:FUNCTION``), extracted as ``costlab dataset extract`` does and
  weighted by how often they run.
- Search: ``draft-verify`` (``export/draft.py``: PSA drafts, the model verifies) or ``evolutionary``
  (MetaSchedule's own, the model as its cost model); without a model, MetaSchedule's XGBoost model.
- Measuring: costlab's builder (no intrinsic-registry import in every fresh worker) and a runner that runs
  kernels on the target's ``num-cores`` threads, or through an RPC tracker; ``ms_defaults`` uses
  MetaSchedule's own builder and runner exactly as ``tune_tir`` does.
- The work dir holds a normal MetaSchedule JSON database (failed measurements kept, as MetaSchedule writes
  them); re-run with the same work dir, a run continues: trials already in the database count.
- A network is compiled with the tuning database afterwards and its end-to-end latency measured beside
  the untuned build's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from costlab.datasets.errors import InputError, UsageError
from costlab.datasets.ms_workload import plain_json

STRATEGIES = ("draft-verify", "draft-filter", "evolutionary")
ADAPT = ("none", "finetune", "momentum")


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
    model: str | None = None  # None: MetaSchedule's XGBoost model
    strategy: str | None = None  # default: draft-verify with a model, evolutionary without
    adapt: str = "none"
    head: str | None = None
    strict: bool = False
    seed: int = 0
    per_iter: int = 64
    population: int = 512
    verify_fraction: float = 0.1
    ms_defaults: bool = False
    builder_timeout: float = 30.0
    number: int = 3
    repeat: int = 1
    rpc_key: str | None = None
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 9190
    progress: bool = True

    def check(self) -> None:
        if not self.workloads and not self.network:
            raise UsageError("name what to tune: --workload NAME[:ARGS] (repeatable) or --network NET")
        if self.workloads and self.network:
            raise UsageError("tune either --workload(s) or one --network, not both")
        if self.task_filter and not self.network:
            raise UsageError("--task picks tasks of a --network")
        if self.trials < 1 or self.per_iter < 1 or self.population < 2:
            raise UsageError("--trials, --per-iter must be at least 1 and --population at least 2")
        if not 0 < self.verify_fraction <= 1:
            raise UsageError(f"--verify-fraction must be in (0, 1], not {self.verify_fraction}")
        strategy = self.strategy or ("draft-verify" if self.model else "evolutionary")
        if strategy not in STRATEGIES:
            raise UsageError(f"--strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        if strategy != "evolutionary" and not self.model:
            raise UsageError(f"--strategy {strategy} needs a --model to verify with (a model dir, psa or random)")
        if self.adapt not in ADAPT:
            raise UsageError(f"--adapt must be one of {', '.join(ADAPT)}, not {self.adapt!r}")
        if self.adapt != "none" and not self.model:
            raise UsageError("--adapt needs a --model to adapt")
        if self.ms_defaults and self.rpc_key:
            raise UsageError("--ms-defaults runs MetaSchedule's local builder and runner; it cannot use --rpc-key")
        self.strategy = strategy


@dataclass
class Task:
    name: str
    mod: object
    weight: float = 1.0


def _target(opts: TuneOptions):
    import tvm

    from costlab.datasets.targets import runnable_target

    try:
        return tvm.target.Target(runnable_target(opts.target, local=not opts.rpc_key))
    except Exception as exc:  # noqa: BLE001  TVM reports a bad target in several ways
        raise UsageError(f"bad target {opts.target!r}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}") from None


def _tasks(opts: TuneOptions, target) -> tuple[list[Task], object]:
    """The tasks to tune, and the network's Relax module and inputs (None for workloads)."""
    from costlab.datasets.extract import network_module, te_workload_task, torch_fn_model, workload_json_mod

    if opts.workloads:
        out = []
        for spec in opts.workloads:
            try:
                name, func = te_workload_task(spec)
            except ValueError as exc:
                raise UsageError(f"--workload {spec}: {exc}") from None
            out.append(Task(name, workload_json_mod(func)))
        return out, None
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    from costlab.datasets import hf_models

    try:
        if ":" in opts.network and "=" not in opts.network.split(":", 1)[1]:
            model, inputs = torch_fn_model(opts.network)
        else:
            model, inputs, _ = hf_models.build(opts.network, opts.batch, opts.seq_len)
        mod = network_module(model, inputs, target)
    except ValueError as exc:
        raise UsageError(f"--network {opts.network}: {exc}") from None
    tasks = [Task(str(t.task_name), t.dispatched[0], float(t.weight)) for t in extract_tasks(mod, target)]
    if opts.task_filter:
        import fnmatch

        picked = [t for t in tasks if any(fnmatch.fnmatchcase(t.name, p) for p in opts.task_filter)]
        if not picked:
            raise UsageError(f"--task {' '.join(opts.task_filter)} matches none of the network's tasks: "
                             + ", ".join(sorted(t.name for t in tasks)))
        return picked, None  # a part of the network: no end-to-end comparison
    return tasks, (mod, inputs)


def _done_per_task(database, tasks: list[Task]) -> list[int]:
    """Trials already in the database per task (a continued run counts them)."""
    counts: dict = {}
    for rec in database.get_all_tuning_records():
        key = str(rec.workload.as_json()[0])  # the workload's structural hash
        counts[key] = counts.get(key, 0) + 1
    return [counts.get(str(database.commit_workload(t.mod).as_json()[0]), 0) if database.has_workload(t.mod) else 0
            for t in tasks]


def _cost_model(opts: TuneOptions, target, cores: int):
    """The cost model of the run: the costlab model, or MetaSchedule's default XGBoost model exactly as
    ``tune_tasks`` makes it (a fresh one per workload)."""
    if not opts.model:
        from tvm.s_tir.meta_schedule.cost_model import CostModel

        return CostModel.create("xgb", num_tuning_cores=cores, tree_method="auto")
    from costlab.export.cost_model import CostlabCostModel, check_model_for_target

    model = CostlabCostModel(opts.model, head=opts.head, adapt=opts.adapt, strict=opts.strict, seed=opts.seed)
    check_model_for_target(model.predictor, target, opts.strict, opts.model)  # before any tuning starts
    if opts.strategy == "draft-filter":
        from costlab.export.draft import DraftFilterModel

        return DraftFilterModel(model, opts.verify_fraction)
    return model


def _strategy(opts: TuneOptions, log):
    if opts.strategy in ("evolutionary", "draft-filter"):  # draft-filter drafts inside the cost model
        from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

        return EvolutionarySearch(population_size=opts.population)
    from costlab.export.draft import DraftVerifySearch

    return DraftVerifySearch(verify_fraction=opts.verify_fraction, population_size=opts.population, log=log)


def _measure_stack(opts: TuneOptions, target, cores: int):
    if opts.ms_defaults:
        return "local", "local"
    from costlab.datasets.measure import MeasureOptions, make_builder, make_runner

    mopts = MeasureOptions(target=target.export(), number=opts.number, repeat=opts.repeat, rpc_key=opts.rpc_key,
                           rpc_host=opts.rpc_host, rpc_port=opts.rpc_port)
    return make_builder(opts.builder_timeout, workers=cores), make_runner(mopts, target)


_LOG_FORMAT = logging.Formatter("%(asctime)s [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")


def _file_logger(name: str, path: Path) -> logging.Logger:
    """A logger that writes to PATH alone (its handlers of an earlier run in this process replaced)."""
    logger = logging.getLogger(name)
    for h in list(logger.handlers):
        if getattr(h, "costlab", False):
            logger.removeHandler(h)
            h.close()
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(_LOG_FORMAT)
    handler.costlab = True
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._,:=+-" else "_" for c in name)


def _task_loggers(work: Path, names: list[str]) -> list[logging.Logger]:
    """MetaSchedule's logs in WORK/logs, as tune_tasks writes them, but never on stdout (the progress bar
    and --json own it) and without MetaSchedule's dictConfig, which reconfigures the process's logging
    and fails when called twice in one process with handlers it did not name."""
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    _file_logger("tvm.s_tir.meta_schedule", logs / "task_scheduler.log")
    width = len(str(len(names) - 1))
    return [_file_logger(f"costlab.tune.task_{i:0{width}d}", logs / f"task_{i:0{width}d}_{_safe(n)[:100]}.log")
            for i, n in enumerate(names)]


def tune(opts: TuneOptions) -> dict:
    """Tune; returns a summary (per task: trials, best latency; wall seconds; a network's end-to-end)."""
    opts.check()
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import fork_seed

    from costlab.export.draft import RoundLog
    from costlab.export.progress import TuneProgress

    target = _target(opts)
    cores = int(target.attrs.get("num-cores", 0) or 0) or os.cpu_count() or 1
    work = Path(opts.work_dir)
    if work.exists() and not work.is_dir():
        raise InputError(work, "exists and is not a directory (--work-dir)")
    work.mkdir(parents=True, exist_ok=True)
    _check_same_run(work, opts)
    tasks, network = _tasks(opts, target)
    cost_model = _cost_model(opts, target, cores)
    database = ms.database.JSONDatabase(work_dir=str(work))
    done = _done_per_task(database, tasks)
    # workloads are tuned one after the other, each with its own budget; a network's tasks share one
    groups = [[i] for i in range(len(tasks))] if opts.workloads else [list(range(len(tasks)))]
    budget = opts.trials * len(groups)
    log = RoundLog(work / "search_rounds.jsonl")
    started = time.time()
    progress = TuneProgress([t.name for t in tasks], done, budget, enabled=opts.progress,
                            history=work / "progress.jsonl")
    try:
        for group in groups:
            remaining = opts.trials - sum(done[i] for i in group)
            if remaining <= 0:
                continue
            names = [tasks[i].name for i in group]
            contexts = []
            for i, logger, rand in zip(group, _task_loggers(work, names),
                                       fork_seed(opts.seed, n=len(group))):
                contexts.append(ms.TuneContext(mod=tasks[i].mod, target=target, space_generator="post-order-apply",
                                               search_strategy=_strategy(opts, log), task_name=tasks[i].name,
                                               rand_state=rand, num_threads=cores, logger=logger).clone())
            builder, runner = _measure_stack(opts, target, cores)
            progress.focus(group)
            ms.tune_tasks(tasks=contexts, task_weights=[tasks[i].weight for i in group], work_dir=str(work),
                          max_trials_global=remaining, max_trials_per_task=remaining, num_trials_per_iter=opts.per_iter,
                          builder=builder, runner=runner, database=database,
                          cost_model=cost_model if opts.model else _cost_model(opts, target, cores),
                          measure_callbacks=ms.measure_callback.MeasureCallback.create("default")
                          + [progress.callback()], task_scheduler="gradient")
    finally:
        progress.close()
    summary = dict(options=asdict(opts), target=plain_json(target.export()), wall_s=round(time.time() - started, 2),
                   tasks=[])
    for t, n in zip(tasks, _done_per_task(database, tasks)):
        best = _best_latency(database, t.mod)
        summary["tasks"].append(dict(name=t.name, weight=t.weight, trials=n, best_us=best and round(best * 1e6, 3)))
    if log.rounds:
        summary["rounds"] = len(log.rounds)
    if hasattr(cost_model, "stats"):
        summary["cost_model"] = dict(cost_model.stats)
        if getattr(cost_model, "adapter", None) is not None:
            summary["adaptation"] = dict(cost_model.adapter.stats)
    if network is not None:
        from costlab.export.network import end_to_end

        summary["network"] = end_to_end(network[0], network[1], target, database, cores)
    (work / "costlab_tune.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def _best_latency(database, mod) -> float | None:
    if not database.has_workload(mod):
        return None
    top = database.get_top_k(database.commit_workload(mod), 1)
    if not top:
        return None
    secs = [float(s) for s in top[0].run_secs]
    mean = sum(secs) / len(secs)
    return mean if math.isfinite(mean) and mean < 1e9 else None


def _check_same_run(work: Path, opts: TuneOptions) -> None:
    """A work dir continues the run that made it: the same tasks, target and search; another run there would
    mix two searches in one database."""
    path = work / "costlab_run.json"
    keys = ("workloads", "network", "batch", "seq_len", "target", "model", "strategy", "adapt", "seed",
            "ms_defaults", "per_iter", "population", "verify_fraction")
    mine = {k: json.loads(json.dumps(getattr(opts, k), default=str)) for k in keys}
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except json.JSONDecodeError:
            old = None
        if isinstance(old, dict) and old != mine:
            diff = ", ".join(f"{k}: {old.get(k)!r} -> {mine[k]!r}" for k in keys if old.get(k) != mine[k])
            raise UsageError(f"{work} holds a tuning run with other options ({diff}); continue it with the same "
                             "options, or tune in another --work-dir")
    else:
        path.write_text(json.dumps(mine, indent=2))
