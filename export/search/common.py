"""What the search strategies share: the round log, program hashes, the measured programs of a task (from
the database, so a resumed run knows them), replays of the best measured programs, MetaSchedule's
evolutionary-search FFI, and how a round's batch is picked from the model's order (``pick_batch``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from costlab.metaschedule.traces import replay


class RoundLog:
    """One JSON line per search round: what each stage scored and how long it took."""

    def __init__(self, path=None):
        self.path = Path(path) if path else None
        self.rounds: list[dict] = []

    def add(self, **row) -> None:
        self.rounds.append(row)
        if self.path is not None:
            with open(self.path, "a") as fh:
                fh.write(json.dumps(row) + "\n")

    def close_round(self, pending: dict | None, round_start: float | None) -> None:
        """Log a round a strategy opened at ``round_start`` (``time.perf_counter``) with the stage seconds in
        ``pending``, once its batch has been built and measured (its results in: the measure callbacks that
        commit them and update the model come after, and in a network other tasks' rounds before this task's
        next): ``round_s`` is then the round's search, build and measurement, and ``verify_share`` the model's
        part of it."""
        import time

        if pending is None or round_start is None:
            return
        row = dict(pending, round_s=round(time.perf_counter() - round_start, 4))
        row["verify_share"] = round(row["verify_s"] / row["round_s"], 4) if row["round_s"] > 0 else None
        self.add(**row)


def schedule_hash(sch) -> int:
    """The structural hash of a candidate's program: what the searches mark measured and picked programs by."""
    import tvm_ffi

    return int(tvm_ffi.structural_hash(sch.mod))




def evolution_ffi(name: str):
    """MetaSchedule's evolutionary-search function ``name`` (``SampleInitPopulation``, ``EvolveWithCostModel``,
    ...), called on the inner ``EvolutionarySearch`` a strategy wraps."""
    import tvm

    return tvm.get_global_func(f"s_tir.meta_schedule.SearchStrategyEvolutionarySearch{name}")


def workload_key(workload, memo: dict) -> str:
    """The structural hash of a database record's workload, as its JSON names it, worked out once per workload object
    (``memo``; a workload's records share it), not once per record: ``as_json`` serialises the whole IRModule (~1 ms),
    and a scan of a database of N records per task cost N of them, minutes at the start of a run continued on tens
    of thousands of records."""
    key = memo.get(workload)
    if key is None:
        key = memo[workload] = str(workload.as_json()[0])
    return key


def task_records(context, database):
    """Every record of this task in the database, failed ones included, each with its program replayed on the
    task: ``(record, schedule)``. A record that no longer replays is skipped, as MetaSchedule ignores it."""
    if database is None or not database.has_workload(context.mod):
        return
    key = str(database.commit_workload(context.mod).as_json()[0])
    keys: dict = {}
    for rec in database.get_all_tuning_records():
        if workload_key(rec.workload, keys) != key:
            continue
        try:
            sch = replay(context.mod, rec.trace, 1)
        except Exception:  # noqa: BLE001  TVM raises its own errors
            continue
        yield rec, sch


def measured_hashes(context, database) -> set:
    """The program hashes of every record of this task in the database, failed ones included: what a
    (resumed) run must never measure again."""
    return {schedule_hash(sch) for _rec, sch in task_records(context, database)}


def best_measured(context, database, n: int, seed: int) -> list:
    """The ``n`` fastest measured programs of this task, ready to seed an evolution (as MetaSchedule's
    ``PickBestFromDatabase``)."""
    if n <= 0 or database is None or not database.has_workload(context.mod):
        return []
    workload = database.commit_workload(context.mod)
    out = []
    for rec in database.get_top_k(workload, n):
        try:
            out.append(replay(context.mod, rec.trace, seed, context.space_generator.postprocs))
        except Exception:  # noqa: BLE001  a record that no longer replays is skipped, as MetaSchedule does
            continue
    return out


def model_order(predictor, head: int, mod, target, schedules: list):
    """Indices of ``schedules`` (live candidates of ``mod``), best first by a costlab predictor's ``head``;
    programs its featurizer could not read come last."""
    import numpy as np

    feats = predictor.featurizer.featurize_candidates(mod, target, schedules)
    if hasattr(predictor, "use_target"):  # a hardware input reads the machine tuning now
        predictor.use_target(target)
    score = predictor.predict(feats)[:, head].astype(np.float64)
    score[~np.asarray(feats.get("valid", np.ones(len(schedules), bool)), bool)] = -np.inf
    return np.argsort(-score, kind="stable")


def measure_candidates(schedules: list) -> list:
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    return [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in schedules]


def pick_batch(order: list, pool: list, num: int, n_rand: int, taken: set, key, seed: int, rest=None) -> list:
    """A round's batch of ``num``: the first ``num - n_rand`` of the model's ``order``, then random programs of
    ``pool`` (MetaSchedule's epsilon-greedy share, drawn with ``seed``), then the next of ``rest`` (default
    ``order``) where too few are left; never a program of ``taken`` (measured, or picked before), never one twice
    (``key``: a program's identity)."""
    picks, seen = [], set(taken)

    def add(program) -> None:
        h = key(program)
        if h not in seen:
            seen.add(h)
            picks.append(program)

    for program in order:
        if len(picks) >= num - n_rand:
            break
        add(program)
    for i in np.random.default_rng(seed).permutation(len(pool)):
        if len(picks) >= num:
            break
        add(pool[i])
    for program in order if rest is None else rest:  # too few of either: whatever is left, in that order
        if len(picks) >= num:
            break
        add(program)
    return picks
