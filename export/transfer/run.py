"""``costlab transfer``: measure, for each task of a new workload, the best few schedules of the same
kernel class tuned before, so that a search starts from them.

Per task of the workload (``--workload`` or ``--network``, the tasks ``costlab tune`` would tune):

1. the source tasks that match it (``match.py``: the same blocks, or the same anchor), those with the
   same blocks first, then by how close their anchor's loop extents are;
2. each one's fastest programs replayed on the task with their tilings adapted (``replay.py``), at most
   ``max_candidates``; programs that do not apply are counted by reason, never a crash; programs the work
   dir's database already holds are left out;
3. the replayed programs ranked by the model (PSA without one) and the best ``top`` built and measured
   with costlab's builder and runner, as ``costlab tune`` measures; every result (failures too) becomes a
   record of the work dir's database, which MetaSchedule's evolutionary search and costlab's strategies
   seed their first population from.

``transfer.json`` beside the database says, per task, what matched, what was replayed, what failed and
why, and what was measured from which source record; it is rewritten after each task, and a re-run skips
the tasks it marks done. A program that fails while the run is being stopped is not recorded (the stop's
signal failed it: ``export.stop.recordable``) and leaves its task not done: a re-run measures the rest of the
task's ``top``. Sources that hold nothing to start from (no file that reads as a dataset or
database, or no successfully measured program that decodes) are refused before the work dir is made or a
task is marked done (``usable_sources``).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from costlab.common.errors import InputError, UsageError, last_line, require_seconds
from costlab.common.host import host_info
from costlab.costmodels import kinds
from costlab.costmodels.shipped import aliases
from costlab.datasets.records import record_latency
from costlab.export.machines import refuse_other_machine, run_target
from costlab.export.search.common import measure_candidates, measured_hashes, model_order, schedule_hash
from costlab.export.stop import recordable
from costlab.export.tasks import canonical_workloads, measuring_target, workload_tasks
from costlab.export.transfer.match import match, structure
from costlab.export.transfer.replay import TransferError, transfer_schedule
from costlab.export.transfer.sources import read_sources
from costlab.export.workdir import WorkDir, read_state, write_state
from costlab.metaschedule.runners import build_and_run
from costlab.metaschedule.targets import target_cores
from costlab.metaschedule.traces import plain_json
from costlab.metaschedule.tune_context import tune_context
from costlab.metaschedule.workloads import decode_workload, workload_json

MAX_SEED = 2**31 - 1  # seeds of MetaSchedule's random state are 0 to 2^31 - 2


@dataclass
class TransferOptions:
    work_dir: str
    sources: list = field(default_factory=list)
    workloads: list = field(default_factory=list)
    network: str | None = None
    task_filter: list = field(default_factory=list)
    batch: int = 1
    seq_len: int = 32
    target: str | dict | None = None  # None: the work dir's run's (or its records'), else this machine's
    model: str | None = None  # None: PSA
    head: str | None = None  # the platform head of a multi-platform model (a tuning run's --head)
    top: int = 4  # programs measured per task
    per_source: int = 4  # fastest programs taken from each source task
    max_candidates: int = 128  # programs replayed per task at most
    seed: int = 0
    number: int = 3
    repeat: int = 1
    builder_timeout: float = 30.0
    progress: bool = True

    def check(self) -> None:
        if not self.sources:
            raise UsageError("name what to transfer from: --from DATASET.h5 or WORK_DIR (repeatable)")
        if not self.workloads and not self.network:
            raise UsageError("name what to transfer to: --workload NAME[:ARGS] (repeatable) or --network NET")
        if self.workloads and self.network:
            raise UsageError("transfer to either --workload(s) or one --network, not both")
        if self.task_filter and not self.network:  # it would be dropped without a word
            raise UsageError("--task picks tasks of a --network")
        canonical_workloads(self.workloads)  # a mistyped --workload before its work dir is made
        for source in self.sources:  # before the work dir is made: a mistyped --from leaves nothing behind
            if not Path(source).exists():
                raise InputError(Path(source), "no such dataset or work dir (--from)")
        if not 1 <= self.top <= 1024 or not 1 <= self.per_source <= 1024 or not 1 <= self.max_candidates <= 100_000:
            raise UsageError("--top and --per-source must be 1-1024, --max-candidates 1-100,000")
        if not 0 <= self.seed < MAX_SEED:
            raise UsageError(f"--seed must be in [0, 2^31 - 1), not {self.seed}")
        require_seconds("--builder-timeout", self.builder_timeout)


class _Source:
    """A source task decoded: its module and structure."""

    def __init__(self, st, mod):
        self.task, self.mod, self.structure = st, mod, structure(mod)


def _decode(sources, report) -> list[_Source]:
    out, mods = [], {}
    for st in sources:
        try:
            mod = mods.get(st.shash) or decode_workload(st.shash, st.workload)
        except Exception as exc:  # noqa: BLE001  a workload this TVM cannot decode
            report.problem(f"{st.source}: workload {st.name} does not decode ({last_line(exc)[:120]})")
            continue
        mods[st.shash] = mod
        try:
            out.append(_Source(st, mod))
        except Exception as exc:  # noqa: BLE001
            report.problem(f"{st.source}: workload {st.name} has no analysable blocks ({type(exc).__name__})")
    return out


def usable_sources(paths, per_source: int = 4, exclude=(), kind: str | None = None) -> tuple[list[_Source], object]:
    """The decoded source tasks of ``paths`` and the report of what was skipped (``read_sources``), or an
    InputError when there is nothing to start from: no line read as a workload and record, no successfully
    measured program, or no workload that decodes. Called before anything is written (the work dir, its
    database, ``transfer.json``), so that a wrong ``--from`` leaves nothing behind and marks no task done."""
    raw, report = read_sources(paths, per_source, exclude=exclude, kind=kind)
    sources = _decode(raw, report)
    if not sources:
        where = ", ".join(str(p) for p in paths)
        if report.problems:
            raise InputError(where, f"nothing to transfer from: {report.bad} bad line(s) or workload(s), the first "
                                    f"{report.problems[0]} (--from)")
        if report.notes:
            raise InputError(where, f"nothing to transfer from: {'; '.join(report.notes)} (--from)")
        raise InputError(where, "nothing to transfer from: no successfully measured program (--from)")
    return sources, report


def _closeness(a: list, b: list) -> float:
    if len(a) != len(b):
        return math.inf
    return sum(abs(math.log2(max(x, 1)) - math.log2(max(y, 1))) for x, y in zip(a, b))


def candidates_for(mod, target, postprocs, sources: list[_Source], measured: set, max_candidates: int, seed: int = 1):
    """The programs of ``sources`` replayed on ``mod``: ``(schedules, provenance, counts)``; provenance per
    schedule (source, task, rank, source latency, match kind, tilings adapted), counts of what was tried
    and why programs failed."""
    st = structure(mod)
    matched = []
    for src in sources:
        m = match(src.structure, st)
        if m is not None:
            matched.append((0 if m.kind == "same" else 1, _closeness(src.structure.extents, st.extents), len(matched),
                            src, m))
    matched.sort(key=lambda t: t[:3])
    counts: Counter = Counter(source_tasks=len(matched))
    scheds, prov, seen = [], [], set()
    # round-robin over the matched source tasks, closest first: the best of each before the second of any
    depth = max((len(src.task.programs) for *_, src, _m in matched), default=0)
    for rank in range(depth):
        for kind, _c, _i, src, m in matched:
            if counts["tried"] >= max_candidates:
                break
            if rank >= len(src.task.programs):
                continue
            trace, secs = src.task.programs[rank]
            counts["tried"] += 1
            try:
                sch, adapted, fallback = transfer_schedule(src.mod, trace, mod, m, target, postprocs, seed)
            except TransferError as exc:
                counts[f"failed: {exc}"] += 1
                continue
            h = schedule_hash(sch)
            if h in measured or h in seen:
                counts["already measured" if h in measured else "duplicate"] += 1
                continue
            seen.add(h)
            counts["adapted"] += 1 if adapted else 0
            counts["compute-at resampled"] += 1 if fallback else 0
            scheds.append(sch)
            prov.append(dict(source=src.task.source, task=src.task.name, rank=rank, source_us=round(secs * 1e6, 3),
                             match=m.kind, tilings_adapted=adapted))
    return scheds, prov, counts


def transfer_tasks(tasks, target, database, builder, runner, opts: TransferOptions, state_path: Path,
                   should_stop=None, sources=None) -> dict:
    """Transfer into ``database`` for ``tasks`` (``export.tasks.Task``s); returns the summary (also in
    ``state_path``). ``sources``: ``usable_sources``' answer when the caller has it; read here otherwise (an
    InputError, before any task is marked done, when they hold nothing to start from)."""
    from tvm.s_tir import meta_schedule as ms

    state = read_transfer_state(state_path)
    state["sources"] = [str(s) for s in opts.sources]
    state["options"] = transfer_options(opts)
    # the machine its records are measured on, for a work dir a transfer alone made (no run record says it)
    state.setdefault("host", host_info())
    todo = [t for t in tasks if not state["tasks"].get(task_key(t.mod), {}).get("done")]
    if not todo:
        return state
    sources, report = sources or usable_sources(opts.sources, opts.per_source, exclude=[state_path.parent],
                                                kind=target.kind.name if target is not None else None)
    state["source_tasks"], state["source_problems"] = len(sources), report.problems
    state["source_notes"] = report.notes
    predictor, head = ranking_model(opts, target)
    bar = None
    if opts.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), unit="task", desc="transfer")
    try:
        for task in todo:
            if should_stop is not None and should_stop():
                break
            t0 = time.time()
            key = task_key(task.mod)
            ctx = tune_context(task.mod, target, rand_state=opts.seed)
            measured = measured_hashes(ctx, database)
            scheds, prov, counts = candidates_for(task.mod, target, ctx.space_generator.postprocs, sources, measured,
                                                  opts.max_candidates, seed=opts.seed + 1)
            # a task a stopped run left not done keeps what it measured; its re-run measures the rest of its top
            earlier = state["tasks"].get(key, {}).get("measured", [])
            row = dict(name=task.name, done=False, replayed=len(scheds), counts=dict(counts), measured=list(earlier))
            disturbed, take = 0, max(0, opts.top - len(earlier))
            if scheds and take:
                order = model_order(predictor, head, task.mod, target, scheds)[:take]
                picked = [scheds[i] for i in order]
                mc = measure_candidates(picked)
                results = build_and_run(builder, runner, target, mc)
                workload = database.commit_workload(task.mod)
                for i, c, (costs, err, msg) in zip(order, mc, results):
                    if not recordable(err != 0, msg):  # failed for the stop's signal: a re-run measures it
                        disturbed += 1
                        continue
                    database.commit_tuning_record(ms.database.TuningRecord(c.sch.trace, workload, [float(x) for x in costs],
                                                                           target, c.args_info))
                    secs = [float(x) for x in costs]
                    lat = record_latency(secs) if err == 0 else math.inf
                    ok = math.isfinite(lat)
                    row["measured"].append(dict(prov[i], us=round(lat * 1e6, 3) if ok else None,
                                                error=None if ok else (msg or "failed")[:200]))
            if row["measured"]:
                good = [m["us"] for m in row["measured"] if m["us"] is not None]
                row["best_us"] = min(good) if good else None
                row["failed_measurements"] = len(row["measured"]) - len(good)
            row.update(done=not disturbed, seconds=round(time.time() - t0, 2))
            state["tasks"][key] = row
            write_state(state_path, state)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{task.name[:30]} {row.get('best_us')} us")
    finally:
        if bar is not None:
            bar.close()
    return state


def transfer_options(opts: TransferOptions) -> dict:
    """The options that decide what a transfer measures of a task, as its state records them."""
    # sources as a set of resolved paths: ./a and /abs/a, or another order, are the same sources
    return dict(sources=sorted(str(Path(s).resolve()) for s in opts.sources), top=opts.top, per_source=opts.per_source,
                max_candidates=opts.max_candidates, model=pinned_model(opts.model), seed=opts.seed)


def pinned_model(model) -> str:
    """The name of the model that ranks a transfer's programs, as its state records it: a shipped alias as the
    version it stands for now (``x86-cpu`` -> ``x86-cpu-v2``, as ``costlab tune`` records its model), so that the
    alias and its version continue one transfer and an alias that moved on since does not; the draft kind (PSA)
    for none; anything else as given."""
    name = str(model or kinds.draft())
    if name not in aliases():
        return name
    from costlab.costmodels.predictors import shipped_alias  # lazy: pulls torch; the parser imports this module

    return str(shipped_alias(name))


def _check_same_transfer(state: dict, state_path: Path, opts: TransferOptions) -> None:
    """Refuse ``costlab transfer`` continuing a transfer made with other options (its finished tasks would be
    skipped, and the summary would read as this run's). A state from before options were recorded is continued;
    a tuning run's start is checked with the run's own options (``tune``'s run record). The model is compared as
    ``pinned_model`` names it: one recorded under a bare shipped alias (before versions were recorded) is refused,
    as ``costlab tune`` refuses such a run, since which version the alias stood for then is not known."""
    was = state.get("options")
    if not isinstance(was, dict) or not state.get("tasks"):
        return
    now = transfer_options(opts)
    changed = [f"{k}: {was.get(k)!r} -> {now[k]!r}" for k in now if k in was and was[k] != now[k]]
    if changed:
        raise UsageError(f"{state_path} records a transfer with other options ({'; '.join(changed)}): give the same "
                         "options to continue it, or remove the file to transfer afresh (what was measured stays "
                         "in the database and is never measured twice)")


def ranking_model(opts: TransferOptions, target=None) -> tuple:
    """``(predictor, head)`` that rank the replayed programs: ``--model`` loaded as every tuning command loads
    one (``cost_model.tuning_predictor``), checked against ``target`` as ``costlab tune`` checks it (an
    Ansor-dialect model refused, another target kind warned about); the draft kind (PSA) without one."""
    from costlab.costmodels.predictors import head_of  # lazy: pulls torch; the parser imports this module
    from costlab.export.cost_model import check_model_for_target, tuning_predictor  # lazy: pulls torch and tvm

    predictor = tuning_predictor(opts.model or kinds.draft())
    if opts.model and target is not None:
        check_model_for_target(predictor, target, where=opts.model)
    return predictor, head_of(predictor, opts.head)


def task_key(mod) -> str:
    """A task's key in a transfer's state (its workload's structural hash)."""
    return workload_json(mod)[0]


def read_transfer_state(path, afresh: str = "transfer afresh") -> dict:
    """A transfer's (or library start's) state file, each task's row checked as a run reads it: an object whose
    ``done`` is true or false and whose ``measured`` is a list of objects, each with ``us`` a latency or null. A row
    that does not check is an InputError naming the file and the task (it was a traceback in the run)."""
    state = read_state(path, afresh, {"tasks": {}}, key="tasks")
    for key, row in state["tasks"].items():
        why = None
        if not isinstance(row, dict):
            why = "is not a JSON object"
        elif not isinstance(row.get("done", False), bool):
            why = "'done' is not true or false"
        elif not isinstance(row.get("measured", []), list) or not all(
                isinstance(m, dict) and (m.get("us") is None or (isinstance(m["us"], (int, float))
                                                                 and not isinstance(m["us"], bool)))
                for m in row.get("measured", [])):
            why = "'measured' is not a list of measured programs (objects with 'us' a latency or null)"
        if why:
            raise InputError(path, f"is damaged (task {key}: {why}); remove it to {afresh}")
    return state


def started_tasks(state_path, afresh: str = "transfer afresh") -> dict[str, tuple[bool, int]]:
    """Per task key, what the transfer (or library start) whose state ``state_path`` holds did of it: whether
    it finished the task (False for one a stopped run left with part of its top measured), and how many records
    it added. A task it never reached is not there. A damaged file is an InputError saying to remove it to
    ``afresh``."""
    state = read_transfer_state(state_path, afresh)
    return {key: (bool(row.get("done")), len(row.get("measured") or [])) for key, row in state["tasks"].items()}


def transfer(opts: TransferOptions, *, should_stop=None) -> dict:
    """``costlab transfer``: the tasks of the workload, a work dir (locked), costlab's builder and runner,
    then ``transfer_tasks``. Returns the summary."""
    opts.check()
    work = WorkDir(opts.work_dir)
    work.check_folder()
    work.check_same_host("transferring into it")
    run = run_target(work.path)
    if opts.target is None:  # the run's target, as exploit takes it; this machine's for a new work dir
        target = measuring_target(plain_json(run.export()) if run is not None else "host")
    else:
        target = measuring_target(opts.target)
        refuse_other_machine(target, run, work, "leave out --target to transfer on the run's target, or transfer "
                                                "into another --work-dir")
    state_path = work.transfer_state
    before = read_transfer_state(state_path)
    _check_same_transfer(before, state_path, opts)
    sources = usable_sources(opts.sources, opts.per_source, exclude=[work.path],  # before anything is written
                             kind=target.kind.name)
    work.path.mkdir(parents=True, exist_ok=True)
    with work.lock("transfer"), work.measuring() as stack:  # both released however it ends
        tasks, _network = workload_tasks(opts, target)
        database, repaired = work.open_database()
        builder, runner = stack.start(target, workers=target_cores(target), builder_timeout=opts.builder_timeout,
                                      number=opts.number, repeat=opts.repeat)
        t0 = time.time()
        state = transfer_tasks(tasks, target, database, builder, runner, opts, work.transfer_state, should_stop,
                               sources=sources)
        state["wall_s"] = round(time.time() - t0, 2)
        # this command's tasks, and which of them an earlier command finished (nothing measured for them now)
        asked = {task_key(t.mod) for t in tasks}
        state["this_run"] = {key: bool((before["tasks"].get(key) or {}).get("done")) for key in asked}
        if repaired:
            state["skipped_lines"] = repaired  # moved to database_tuning_record.bad-lines.jsonl
        return state
