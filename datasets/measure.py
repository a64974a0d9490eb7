"""``costlab dataset measure``: sample candidate programs per MetaSchedule task, build and run them, and
store every result (failures included) as records of one platform.

Sampling mixes two of MetaSchedule's own search strategies over the task's design space
(``post-order-apply`` with the target's default rules), each in its own ``TuneContext``:

- ``ReplayTrace``: the design spaces' traces replayed with freshly sampled decisions, postprocessors
  applied (uniform random programs, as TenSet sampled);
- ``EvolutionarySearch`` under ``RandomModel``: random initial population, mutated and selected by a
  random cost model (programs near others, which random replay rarely yields).

Candidates are taken alternately from both, and a program already measured on the platform (same
program id) is never measured again. Candidates are built by one pool of builder workers kept for the whole
run (``costlab.metaschedule.builders``; through an RPC tracker, exporting the tar the remote device links) and run with
``LocalRunner`` (or ``RPCRunner`` through a tracker; ``runners``). Batches are saved as they come, each in its own
dataset transaction while the dataset is small, gathered into fewer transactions once saving costs more
(``_Saver``); an interruption saves what was measured, a kill loses at most the batches since the last save, and a
re-run continues where it stopped.

Records hold the trace exactly as MetaSchedule's database writes it (``sch.trace.as_json()``, written
compactly), so a program has the same id here as when ``import-ms`` reads it from a tuning database.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from itertools import zip_longest

import numpy as np

from costlab.common.errors import InputError, UsageError, last_line, require_seconds
from costlab.common.files import signals_deferred
from costlab.common.host import describe_host, host_difference, same_host
from costlab.common.stopwatch import stopwatch
from costlab.datasets import records as rec
from costlab.datasets.names import check_platform_id
from costlab.datasets.store import DatasetWriter, check_same_target, open_dataset
from costlab.metaschedule.builders import make_builder
from costlab.metaschedule.pools import warm_up
from costlab.metaschedule.results import ERROR_NONE, short_error
from costlab.metaschedule.rpc import LOST, is_lost
from costlab.metaschedule.runners import build_and_run, close_runner, make_runner
from costlab.metaschedule.targets import measuring_host, platform_id_for, runnable_target
from costlab.metaschedule.traces import ReplayError, compact_json, plain_json, replay_candidate, trace_json
from costlab.metaschedule.tune_context import tune_context
from costlab.metaschedule.workloads import decode_workload

@dataclass
class MeasureOptions:
    target: str | dict | None = "host"  # this machine's CPU (targets.host_target)
    per_task: int = 32  # records wanted per task on the platform (existing ones count)
    platform: str | None = None  # default: derived from the target
    tasks: str | None = None  # comma-separated task indices or names; default all MetaSchedule tasks
    same_programs_as: str | None = None  # replay the programs recorded on this platform instead of sampling
    batch_size: int = 16  # candidates built, run and saved at once
    seed: int = 0
    builder_timeout: float = 30.0
    number: int = 3  # runs averaged into one cost
    repeat: int = 1  # costs per candidate
    rpc_key: str | None = None
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 9190
    rpc_wait: float = 60.0  # seconds to wait for a tracker that stopped answering before the run stops
    runner_timeout: float = 30.0
    min_repeat_ms: int = 100  # MetaSchedule's default: repeat short kernels until a run takes this long
    progress: bool = True

    def check(self) -> None:
        """Refuse options that would waste the run, before TVM is imported or anything is built: a build
        timeout of 0 (or less, NaN, inf) would store every candidate as a timeout, and a failed record is never
        measured again; a platform id that is not a name would be refused only when the first batch is saved,
        after it was built and run; a --tasks that names no task was reported as a dataset without tasks."""
        require_seconds("--builder-timeout", self.builder_timeout)
        if not (self.rpc_wait >= 0 and math.isfinite(self.rpc_wait)):  # NaN: a device that died mid-batch waited for
            # good (no comparison with it is ever true); as costlab tune refuses it
            raise UsageError(f"--rpc-wait must be a number of seconds (0 or more), not {self.rpc_wait}")
        if self.platform:  # empty: derived from the target, as measure() does
            try:
                check_platform_id(self.platform)
            except UsageError as exc:
                raise UsageError(f"--platform: {exc}") from None
        # a selection of no task ("," or "") selected nothing, which was then reported as a dataset without tasks
        if self.tasks is not None and not any(item.strip() for item in self.tasks.split(",")):
            raise UsageError(f"--tasks names no task ({self.tasks!r}): give task indices or names, comma-separated, "
                             "or leave --tasks out to measure every MetaSchedule task")


def _rand_state(seed: int, task: int, have: int, stream: int) -> int:
    """A TuneContext random state in [1, 2^31 - 1], different per task, per stream and per resume point
    (so that a continued run does not propose the candidates of the first one again)."""
    x = (seed * 1_000_003 + task * 7_919 + have * 104_729 + stream * 15_485_863) % (2**31 - 2)
    return x + 1


class _Sampler:
    """Alternating candidates from ReplayTrace and EvolutionarySearch(RandomModel) on one task."""

    MAX_EMPTY_ROUNDS = 8  # rounds in a row without a new program before the space counts as exhausted

    def __init__(self, mod, target, seed: int, per_iter: int):
        from tvm.s_tir import meta_schedule as ms

        self.ms = ms
        self.per_iter = max(1, per_iter)
        self.seed, self.starts = seed, 0
        self.contexts = []
        for stream, strategy in enumerate((
            ms.search_strategy.ReplayTrace(),
            ms.search_strategy.EvolutionarySearch(population_size=128, init_min_unmeasured=32),
        )):
            # one thread: MetaSchedule hands its per-thread random states to whichever thread takes the next
            # candidate, so with several the same seed samples other programs from run to run
            ctx = tune_context(mod, target, strategy, rand_state=seed + stream, num_threads=1)
            self.contexts.append(ctx)
        self.spaces = self.contexts[0].generate_design_space()
        for ctx in self.contexts:
            self._start(ctx)

    def _start(self, ctx) -> None:
        ms = self.ms
        # RandomModel() without a seed seeds numpy from the OS: the evolutionary stream's picks would differ from
        # run to run under the same --seed; a restarted strategy gets a seed of its own
        self.starts += 1
        model = ms.cost_model.RandomModel(seed=(self.seed * 7_919 + self.starts) % (2**32 - 1))
        ctx.pre_tuning(1 << 30, self.per_iter, self.spaces, ms.database.MemoryDatabase(), model)

    def _draw(self, ctx) -> list:
        cands = ctx.generate_measure_candidates()
        if not cands:  # the strategy ran out (e.g. evolutionary search failed to sample): restart it
            ctx.post_tuning()
            self._start(ctx)
            cands = ctx.generate_measure_candidates() or []
        cands = list(cands)
        # The strategies only advance when told the results; the measured ones are recorded by costlab.
        ctx.notify_runner_results(cands, [self.ms.runner.RunnerResult([1.0], None) for _ in cands])
        return cands

    def sample(self, n: int, known: set, workload_hash: str) -> list[tuple[object, str, int]]:
        """Up to ``n`` new candidates as ``(candidate, schedule text, program id)``; fewer only when the
        design space yields no new program for several rounds."""
        out: list[tuple[object, str, int]] = []
        empty = 0
        while len(out) < n and empty < self.MAX_EMPTY_ROUNDS:
            with signals_deferred():  # TVM's threads draw them: an exception raised in there ends the process
                drawn = [self._draw(ctx) for ctx in self.contexts]
            before = len(out)
            for cand in (c for pair in zip_longest(*drawn) for c in pair if c is not None):
                schedule = compact_json(trace_json(cand.sch.trace))
                pid = rec.program_id("ms", workload_hash, schedule)
                if pid in known or len(out) >= n:
                    continue
                known.add(pid)
                out.append((cand, schedule, pid))
            empty = empty + 1 if len(out) == before else 0
        return out


# the phases of a run whose seconds the summary gives
_PHASES = {"start": "start-up", "space": "design spaces", "sample": "sampling", "build": "building",
           "run": "running", "save": "saving"}


def _select_tasks(ds, spec: str | None, path) -> list:
    ms_tasks = [t for t in ds.tasks if t.dialect == "ms"]
    if spec is None:  # a spec that names no task is refused by MeasureOptions.check
        return ms_tasks
    by_name: dict = {}  # a name can be several tasks' (one fused kernel of several shapes): it means them all
    for t in ds.tasks:
        by_name.setdefault(t.name, []).append(t)
    chosen = []
    # a name may hold commas itself (a benchmark workload's task is named by its spec, GMM:1,128,128,128): the
    # longest run of comma-separated pieces that is a task's name is taken as one
    parts = [s.strip() for s in spec.split(",")]
    i = 0
    while i < len(parts):
        item = parts[i]
        for j in range(len(parts), i + 1, -1):
            joined = ",".join(parts[i:j])
            if joined in by_name:
                item, i = joined, j - 1
                break
        i += 1
        if not item:
            continue
        if item.isdigit() and int(item) < len(ds.tasks):
            named = [ds.tasks[int(item)]]
        elif item in by_name:
            named = by_name[item]
        else:
            shown = ", ".join(f"{k} {t.name}" for k, t in enumerate(ds.tasks[:8]))
            more = f", ... ({len(ds.tasks)} in all)" if len(ds.tasks) > 8 else ""
            raise InputError(path, f"no task {item!r} (give task indices 0..{len(ds.tasks) - 1} or names: "
                                   f"{shown}{more})")
        if any(t.dialect != "ms" for t in named):
            raise InputError(path, f"task {item!r} is an Ansor task; only MetaSchedule tasks can be measured")
        chosen += [t for t in named if t not in chosen]
    return chosen


def check_host(ds, pid: str, host: dict) -> None:
    """Refuse to add this machine's measurements to a platform that another machine measured (or an unknown
    one: imported records, or records measured before costlab recorded hosts): a platform that mixes two
    CPUs is two platforms, and its labels would compare timings of different machines."""
    plat = ds.platforms.get(pid)
    if plat is None or pid not in ds.record_platforms() or ds.num_records(pid) == 0:
        return
    advice = ("measure into a new platform instead, e.g. --platform "
              f"{pid}-{(host.get('cpu_model') or 'host').split()[-1].lower()}-{host.get('threads')}t")
    if plat.host is None:
        raise InputError(ds.path, f"platform {pid!r} holds records of an unknown machine (imported, or measured "
                                  f"before costlab recorded hosts), and this machine cannot tell whether it is the "
                                  f"same: {advice}")
    if not same_host(plat.host, host):
        raise InputError(ds.path, f"platform {pid!r} was measured on another machine ({describe_host(plat.host)}); "
                                  f"this one differs in {host_difference(plat.host, host)}: {advice}")


SAVE_EVERY = 10  # measuring goes on for this many times the last save's seconds before the next save


class _Saver:
    """A run's measured batches, saved into the dataset. A transaction copies the whole file (``DatasetWriter``):
    milliseconds for a small dataset, whose batches are saved one by one as they come, but seconds for one of a
    GB, whose batches are gathered and saved together once the run has measured for ``SAVE_EVERY`` times the
    last save's seconds: saving stays within about a tenth of the run. Whatever stops the run, its caller saves
    what is gathered; a kill loses at most the batches since the last save.

    Each save reads again, under the writer's lock, what the platform holds: another command may have written it
    since this one began (an import of another machine's records; a second measure of the same tasks), and a
    program another measure saved meanwhile is recorded neither twice nor past ``per_task`` (None: no bound)."""

    def __init__(self, data, pid: str, target_json: dict, host: dict | None, per_task: int | None, clock: dict,
                 count: dict[int, int]):
        self.data, self.pid, self.target_json, self.host, self.per_task = data, pid, target_json, host, per_task
        self.clock = clock
        self.pending: list[tuple] = []  # (task index, [(schedule, program id)], results, time measured)
        self.count = dict(count)  # task -> its records on the platform, as of the last save
        self.failed: dict[int, int] = {}  # task -> failed candidates saved by this run
        self.errors: dict[str, int] = {}
        self.measured = self.dropped = 0
        self.last_seconds: float | None = None
        self.last_end = 0.0

    def add(self, task: int, batch: list, results: list, when: float) -> None:
        """A measured batch (``(candidate, schedule, program id)`` each, and its results), the candidates let go."""
        self.pending.append((task, [(schedule, prog) for _, schedule, prog in batch], results, when))

    def due(self) -> bool:
        return self.last_seconds is None or time.monotonic() - self.last_end >= SAVE_EVERY * self.last_seconds

    def save(self) -> dict[int, set]:
        """Save the gathered batches in one transaction; per task saved, the program ids the platform now holds."""
        if not self.pending:
            return {}
        pending, self.pending = self.pending, []  # a save that fails (but for an interruption) is not tried again
        began = time.monotonic()
        records = rec.RecordBatch()
        failed: dict[int, int] = {}
        errors: dict[str, int] = {}
        kept_n = dropped = 0
        try:
            with stopwatch(self.clock, "save"), DatasetWriter(self.data) as w:
                with open_dataset(self.data) as ds:
                    if self.host is not None:
                        check_host(ds, self.pid, self.host)
                    saved = _programs_by_task(ds, self.pid, {task for task, *_ in pending})
                for task, batch, results, when in pending:
                    have = saved[task]
                    room = len(batch) if self.per_task is None else max(0, self.per_task - len(have))
                    kept = [i for i, (_, prog) in enumerate(batch) if prog not in have][:room]
                    dropped += len(batch) - len(kept)
                    kept_n += len(kept)
                    for i in kept:
                        (schedule, prog), (costs, error, msg) = batch[i], results[i]
                        records.append(task, schedule, costs, error, when, prog)
                        have.add(prog)
                        failed[task] = failed.get(task, 0) + (error != ERROR_NONE)
                        if msg:
                            reason = short_error(msg)
                            errors[reason] = errors.get(reason, 0) + 1
                w.add_platform(self.pid, self.target_json, host=self.host)
                w.add_records(self.pid, records)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM while the save waited for the lock or copied the file: the transaction is undone, and
            # the batches stay for the save on the way out (after a commit that held the signal back, that save
            # finds them recorded and adds nothing)
            self.pending = pending + self.pending
            raise
        self.measured += kept_n
        self.dropped += dropped
        for task, n in failed.items():
            self.failed[task] = self.failed.get(task, 0) + n
        for reason, n in errors.items():
            self.errors[reason] = self.errors.get(reason, 0) + n
        self.count.update({task: len(ids) for task, ids in saved.items()})
        self.last_end = time.monotonic()
        self.last_seconds = self.last_end - began - w.waited  # the save's own cost: not a wait for another writer
        return saved


def _programs_by_task(ds, pid: str, tasks: set) -> dict[int, set]:
    """The program ids of each task's records on a platform."""
    if pid not in ds.record_platforms():
        return {t: set() for t in tasks}
    table = ds.records(pid)
    return {t: set(table.program_id[table.task == t].tolist()) for t in tasks}


def _measure_task(task, n: int, opts, target, builder, runner, have: dict, replay: dict, saver: _Saver, short: list,
                  bar, clock: dict) -> None:
    """Measure ``n`` more candidates of one task (or replay its ``replay`` programs), batch after batch, each
    handed to ``saver``."""
    if bar is not None:
        bar.set_postfix_str(task.name[:40])
    mod = decode_workload(task.workload_hash, task.workload)
    sampler = None
    if not opts.same_programs_as:
        seed = _rand_state(opts.seed, task.index, len(have[task.index]), 0)
        with stopwatch(clock, "space"):
            sampler = _Sampler(mod, target, seed, max(1, opts.batch_size // 2))
    queue = list(replay.get(task.index, []))
    done = 0
    count = len(have[task.index])  # the task's records on the platform (as far as this run knows)
    while done < n:
        size = min(opts.batch_size, n - done)
        if sampler is not None:
            with stopwatch(clock, "sample"):
                batch = sampler.sample(size, have[task.index], task.workload_hash)
            if not batch:
                short.append(f"task {task.index} {task.name}: design space gave only "
                             f"{len(have[task.index])} distinct programs")
                if bar is not None:
                    bar.total -= n - done
                break
        else:
            batch = []
            for schedule, prog in queue[:size]:
                try:
                    batch.append((replay_candidate(mod, schedule), schedule, prog))
                except Exception as exc:  # a trace that does not apply to this workload
                    why = exc.reason if isinstance(exc, ReplayError) else last_line(exc)
                    short.append(f"task {task.index} {task.name}: program {prog:016x} does not replay ({why})")
            del queue[:size]
            if not batch:
                done += size
                if bar is not None:
                    bar.update(size)
                continue
        results = build_and_run(builder, runner, target, [c for c, _, _ in batch], clock=clock)
        now = time.time()
        lost = [msg for _, _, msg in results if is_lost(msg)]
        if lost:  # not measurements: nothing recorded for them, the measured rest saved, then stop
            batch = [b for b, r in zip(batch, results) if not is_lost(r[2])]
            results = [r for r in results if not is_lost(r[2])]
        for _, _, prog in batch:
            have[task.index].add(prog)  # (the sampler has added its own picks already)
        saver.add(task.index, batch, results, now)
        if lost or saver.due():
            for t, ids in saver.save().items():
                have[t] |= ids  # programs another measure saved meanwhile are not sampled again
            count = saver.count[task.index]
        else:
            count += len(batch)
        step = size if sampler is None else n - max(0, opts.per_task - count) - done
        done += step
        if bar is not None:
            bar.update(step)
        if lost:
            raise UsageError(f"{lost[0][len(LOST) + 2:-1]}: stopped after {saver.measured} candidates, every "
                             f"one saved in {saver.data}; run the same command again to continue")


def measure(data, opts: MeasureOptions) -> str:
    """Measure candidates of the dataset's MetaSchedule tasks on one platform; returns a summary."""
    called = time.time()
    opts.check()
    import tvm

    try:
        target = tvm.target.Target(runnable_target(opts.target, local=not opts.rpc_key))
    except Exception as exc:
        raise InputError(data, f"bad target {opts.target!r}: {exc}") from None
    target_json = plain_json(target.export())
    pid = opts.platform or platform_id_for(target_json)

    # kernels of an RPC run run on the remote device; a CUDA target's on this machine's GPU, recorded with it
    host = None if opts.rpc_key else measuring_host(target_json)
    with open_dataset(data) as ds:
        check_same_target(data, pid, ds.platforms.get(pid), target_json)  # before anything is measured
        if host is not None:
            check_host(ds, pid, host)
        elif (pid in ds.record_platforms() and ds.num_records(pid) and ds.platforms[pid].host
              and not ds.platforms[pid].host.get("stated")):
            # a remote device's timings beside those of the machine that measured this platform locally would be
            # two machines (a host stated by `dataset set-machine`, a remote board's, takes more of its records)
            known = describe_host(ds.platforms[pid].host)
            raise InputError(data, f"platform {pid!r} holds records measured on {known}; a remote device's records "
                                   f"go to another platform, e.g. --platform {pid}-rpc")
        tasks = _select_tasks(ds, opts.tasks, data)
        if not tasks:
            raise InputError(data, "has no MetaSchedule tasks to measure (run `costlab dataset extract` first)")
        have: dict[int, set] = {t.index: set() for t in tasks}
        if pid in ds.record_platforms():
            table = ds.records(pid)
            for t, p in zip(table.task.tolist(), table.program_id.tolist()):
                if t in have:
                    have[t].add(p)
        replay: dict[int, list[tuple[str, int]]] = {}
        if opts.same_programs_as:
            src = ds.records(opts.same_programs_as)
            groups = src.rows_by_task()
            for t in tasks:
                rows = groups.get(t.index, np.zeros(0, np.int64))
                ids = src.program_id[rows] if rows.size else []
                replay[t.index] = [(s, int(i)) for s, i in zip(src.schedules(rows), ids) if int(i) not in have[t.index]]

    if opts.same_programs_as:
        todo = {t.index: len(replay[t.index]) for t in tasks}
    else:
        todo = {t.index: max(0, opts.per_task - len(have[t.index])) for t in tasks}
    total = sum(todo.values())
    if total == 0:
        return f"{data}: nothing to measure on {pid!r} ({len(tasks)} task(s) already have their records)"

    # one pool of builder workers for every batch, started while the first task's candidates are sampled; an
    # RPC run keeps MetaSchedule's tar artifacts, which the remote device links itself
    builder = make_builder(opts.builder_timeout, pooled=True, shared=not opts.rpc_key)
    runner = make_runner(opts, target)
    warm_up(builder)
    bar = None
    if opts.progress:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="cand", desc=f"measure {pid}")
    short: list[str] = []
    visited: list = []
    clock: dict[str, float] = {"start": time.time() - called}  # where the seconds go, said in the summary
    saver = _Saver(data, pid, target_json, host, None if opts.same_programs_as else opts.per_task, clock,
                   {t.index: len(have[t.index]) for t in tasks})
    try:
        try:
            for task in tasks:
                n = todo[task.index]
                if n == 0:
                    continue
                visited.append(task)
                _measure_task(task, n, opts, target, builder, runner, have, replay, saver, short, bar, clock)
            saver.save()  # the batches still gathered
        except BaseException:
            if saver.pending:  # whatever stopped the run (Ctrl-C, SIGTERM, a lost device), what it measured is kept
                print(f"costlab: saving the {sum(len(b) for _, b, *_ in saver.pending)} candidates measured since the "
                      f"last save into {data} ...", file=sys.stderr)
                saver.save()
            raise
    finally:
        if bar is not None:
            bar.close()
        close_runner(runner)
        if hasattr(builder, "close"):
            builder.close()
    lines = [f"  task {t.index} {t.name}: {saver.count[t.index]} records on {pid} "
             f"({saver.failed.get(t.index, 0)} of the new ones failed)" for t in visited]
    measured, failed, errors, dropped = saver.measured, sum(saver.failed.values()), saver.errors, saver.dropped
    text = (f"{data}: measured {measured} candidates of {len(lines)} task(s) on {pid!r} "
            f"({failed} failed) in {time.time() - called:.0f} s"
            + (f" on {describe_host(host)}" if host else "") + "\n" + "\n".join(lines)
            + "\n  seconds: " + ", ".join(f"{_PHASES[k]} {clock[k]:.1f}" for k in _PHASES if k in clock))
    for reason, count in sorted(errors.items(), key=lambda kv: -kv[1])[:5]:
        text += f"\n  failure x{count}: {reason}"
    if dropped:
        text += (f"\n  note: {dropped} measured candidate(s) not recorded: another measure of the platform saved "
                 "them, or its task's records, meanwhile")
    for msg in short[:10]:
        text += f"\n  note: {msg}"
    if len(short) > 10:
        text += f"\n  ... and {len(short) - 10} more notes"
    return text
