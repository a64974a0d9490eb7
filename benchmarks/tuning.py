"""Tuning with a costlab model against MetaSchedule's default, side by side on this machine.

Arms, each a `costlab tune` run (a0 excepted) on the host's own target:
  a0  tune_tir exactly as a user calls it (MetaSchedule's builder, runner, XGBoost), seed 0: its wall time, and
      its best program re-measured like the others'
  a   MetaSchedule's evolutionary search + XGBoost with costlab's builder and runner: the search baseline
  a1000  a with a budget of 1000 trials, seed 0: the "fully tuned" reference
  b   costlab tune's default with the pre-trained model (--model), frozen: model-led (PSA drafts the pool, the
      model leads the evolution, small first rounds)
  c   b with online momentum adaptation (MoA)
  b2, c2  b and c with a second pre-trained model (--model2), so that two models are compared in one benchmark
  d   draft-verify, frozen: PSA leads the evolution, the model re-ranks its drafts (the earlier default)
  f   draft-filter, frozen: MetaSchedule's evolutionary search with a cost model that drafts with PSA inside
      every call

Seconds count from each command's start (process start), start-up included.

Every run is a work dir OUT/runs/ARM/WORKLOAD/sSEED that is kept: re-running `run` continues an interrupted run
and skips finished ones (a0, timed as one call, restarts), and `table` rebuilds every figure from the work dirs.
`run --seconds S` (a job with a time limit, counted from the process's start) starts no run while the longest run
so far (each run that went from nothing to its end records its seconds in OUT/spans.json) is longer than what is
left of the S seconds: an estimate, so that a run is seldom stopped before its end and its round lost.
The three fastest programs of each finished run (by their tuning measurement, one of which can be a lucky
one) are measured again by one runner (same threads, same repeats), and the lowest median is the run's final
latency, so that every final latency is comparable; `remeasure` does it again for every run. Each run holds /tmp/costlab-cpu.lock while it builds and measures, so
that nothing else costlab starts under that lock measures at the same time.

    .venv/bin/python benchmarks/tuning.py run --out bench/tuning --model MODEL_DIR
    .venv/bin/python benchmarks/tuning.py table --out bench/tuning
    .venv/bin/python benchmarks/tuning.py remeasure --out bench/tuning      # every run's bests again, then the table
    .venv/bin/python benchmarks/tuning.py retime --out bench/tuning         # per workload, all runs' bests in turn
    .venv/bin/python benchmarks/tuning.py openblas --out bench/tuning       # the matmul through numpy's OpenBLAS
    .venv/bin/python benchmarks/tuning.py archive --out bench/tuning --to benchmarks/results/tuning-HOST
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from costlab.common.children import run_or_stop
from costlab.common.cpu_lock import cpu_lock
from costlab.common.errors import InputError
from costlab.common.files import write_atomically
from costlab.common.import_report import ImportReport
from costlab.export.workdir import WorkDir
from costlab.metaschedule.databases import database_file, read_records, work_dir_database

from identity import check_measuring_host  # benchmarks/: the script's own folder

ROOT = Path(__file__).resolve().parent.parent
COSTLAB = [sys.executable, "-m", "costlab"]

# Workloads none of which (shapes included) is in the pre-training corpus (scripts/make_corpus.sh)
WORKLOADS = {
    "gmm": ["--workload", "GMM:1,128,128,128"],
    "c2d": ["--workload", "C2D:1,28,28,128,128,3,1,1"],
    "dep": ["--workload", "DEP:1,56,56,64,3,1,1"],
    # the query/key/value/output projections of BERT (hidden 256, sequence 128): dense 128x256 by 256x256 + bias
    "bert-dense": ["--network", "bert:hidden=256,heads=4,intermediate=1024", "--seq-len", "128",
                   "--task", "fused_matmul_add2"],
    # the same network's attention batch matmul (heads x 128x64 by 64x128) and its masked softmax
    "bert-bmm": ["--network", "bert:hidden=256,heads=4,intermediate=1024", "--seq-len", "128", "--task", "matmul1"],
    "bert-softmax": ["--network", "bert:hidden=256,heads=4,intermediate=1024", "--seq-len", "128",
                     "--task", "fused_softmax*"],
}
GMM_FLOPS = 2 * 128 * 128 * 128
ARMS = ("a0", "a", "a1000", "b", "c", "b2", "c2", "d", "f")
SEED0_ONLY = ("a0", "a1000")
COSTLAB_ARMS = ("b", "c", "b2", "c2", "d", "f")
SECOND_MODEL = ("b2", "c2")  # the arms of --model2


def _arm_args(arm: str, model: str | None, model2: str | None = None) -> list[str]:
    if arm in ("a", "a1000"):
        return ["--strategy", "evolutionary"]
    if arm in COSTLAB_ARMS:
        model, flag = (model2, "--model2") if arm in SECOND_MODEL else (model, "--model")
        if not model:
            raise SystemExit(f"arm {arm} needs {flag} (a model pre-trained on other tasks of this target)")
        strategy = {"d": "draft-verify", "f": "draft-filter"}.get(arm, "model-led")
        return ["--model", model, "--strategy", strategy, "--adapt", "momentum" if arm in ("c", "c2") else "none"]
    raise ValueError(arm)


def _trials(arm: str, args) -> int:
    return 1000 if arm == "a1000" else args.trials


def _workload_args(name: str) -> list[str]:
    if name in WORKLOADS:
        return WORKLOADS[name]
    return ["--workload", name]  # any te_workload spec, e.g. GMM:1,32,32,32 for a quick try


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _finished(work: Path, trials: int) -> bool:
    path = work / WorkDir.SUMMARY
    if not path.exists():
        return False
    summary = json.loads(path.read_text())
    return all(t["trials"] >= trials for t in summary["tasks"])


SPANS = "spans.json"  # per run that went from nothing to its end in one go: its seconds, its check included


def _spans(out: Path) -> dict:
    path = out / SPANS
    return json.loads(path.read_text()) if path.exists() else {}


def _too_long(out: Path, deadline: float | None, to_come: float = 1.0) -> tuple[float, float] | None:
    """(the seconds the run may need, the seconds left) when a run may not end before ``deadline``: a run stopped
    before its end loses the round it was searching; None when it may start. A run needs the longest run of this
    benchmark so far, a continued one the part of it its trials still to come are (``to_come``, at least a
    quarter: it starts again, and checks its programs at its end)."""
    spans = _spans(out).values()
    if deadline is None or not spans:
        return None
    left = deadline - time.time()
    need = max(spans) * max(0.25, min(1.0, to_come))
    return (need, left) if need > left else None


def _run_one(arm: str, workload: str, seed: int, args, out: Path) -> None:
    work = out / "runs" / arm / _slug(workload) / f"s{seed}"
    db_dir = work / "ms" if arm == "a0" else work  # where the run's database (and its re-measurement) is
    done = (work / "a0.json").exists() if arm == "a0" else _finished(work, _trials(arm, args))
    if done:
        if args.remeasure and not (db_dir / "remeasured.json").exists():
            with cpu_lock():
                _remeasure(db_dir, args.target)
        return
    measured = len(_curve(work)) if arm != "a0" else 0  # a continued run's trials already measured
    too_long = _too_long(out, getattr(args, "deadline", None), 1 - measured / max(_trials(arm, args), 1))
    if too_long:
        print(f"[{time.strftime('%H:%M:%S')}] {arm} {workload} seed {seed}: not started (it may take "
              f"{too_long[0]:.0f} s by this benchmark's runs so far, {max(0.0, too_long[1]):.0f} s left)", flush=True)
        return
    if arm == "a0":
        cmd = [sys.executable, __file__, "_a0", "--work", str(work), "--trials", str(args.trials), "--seed", str(seed),
               "--target", args.target, "--", *_workload_args(workload)]
    else:
        cmd = [*COSTLAB, "tune", *_workload_args(workload), *_arm_args(arm, args.model, args.model2), "--trials", str(_trials(arm, args)),
               "--seed", str(seed), "--target", args.target, "--work-dir", str(work), "--no-progress",
               "--no-library"]  # the search and model alone, no schedule library start
    if arm == "a0" and db_dir.exists():  # tune_tir loads what a killed a0 measured: it starts again from nothing
        shutil.rmtree(db_dir)
    fresh = arm == "a0" or not (work / WorkDir.RECORDS).exists()  # a continued run's seconds are a part of one
    work.mkdir(parents=True, exist_ok=True)
    print(f"[{time.strftime('%H:%M:%S')}] {arm} {workload} seed {seed}", flush=True)
    with cpu_lock():
        t0 = time.time()
        with open(work / "run.log", "a") as log:
            code = run_or_stop(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work)
        if code != 0:
            print(f"  failed (exit {code}); see {work / 'run.log'}", flush=True)
            return
        if fresh:
            spans = dict(_spans(out), **{str(work.relative_to(out / "runs")): round(time.time() - t0, 1)})
            write_atomically(out / SPANS, json.dumps(spans, indent=1).encode())
        if args.remeasure:
            _remeasure(db_dir, args.target)


def _tasks_of(workload_args: list[str], target):
    """The workload's tasks as `costlab tune` extracts them."""
    from costlab.export.tasks import workload_tasks
    from costlab.export.tune import TuneOptions

    opts = TuneOptions(work_dir=".", target=target)
    i = 0
    while i < len(workload_args):
        key, val = workload_args[i], workload_args[i + 1]
        if key == "--workload":
            opts.workloads.append(val)
        elif key == "--network":
            opts.network = val
        elif key == "--seq-len":
            opts.seq_len = int(val)
        elif key == "--task":
            opts.task_filter.append(val)
        i += 2
    return workload_tasks(opts, target)[0]


def _a0(argv) -> int:
    """tune_tir as a user calls it, timed: MetaSchedule's builder, runner, cost model and search."""
    p = argparse.ArgumentParser()
    p.add_argument("--work", type=Path)
    p.add_argument("--trials", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--target")
    p.add_argument("rest", nargs="*")
    a = p.parse_args(argv)
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from costlab.metaschedule.targets import runnable_target

    target = tvm.target.Target(runnable_target(a.target))
    (task,) = _tasks_of(a.rest, target)
    started = time.time()
    db = ms.tune_tir(task.mod, target, str(a.work / "ms"), max_trials_global=a.trials, seed=a.seed)
    wall = time.time() - started
    best = min((_mean(r.run_secs) for r in db.get_all_tuning_records() if r.run_secs), default=None)
    write_atomically(a.work / "a0.json", json.dumps(dict(wall_s=round(wall, 2), best_us=best and best * 1e6,
                                                         trials=len(db.get_all_tuning_records()))).encode())
    return 0


def _mean(secs) -> float:
    vals = [float(s.value if hasattr(s, "value") else s) for s in secs]
    return sum(vals) / len(vals)


def _best_programs(work: Path, top: int) -> list:
    """``(record, trace JSON)`` of a run's ``top`` fastest distinct programs by their tuning measurement."""
    from costlab.metaschedule.traces import trace_text

    skipped: list = []
    try:
        with work_dir_database(work, skipped) as database:  # a run archived gzipped (``archive``) too
            records = database.get_all_tuning_records()
    except InputError:  # no database kept (an archive may leave it out): nothing to read
        return []
    if skipped:  # a damaged archived run: its best programs come from its good lines
        print(f"{work}: {len(skipped)} bad line(s) of the database left out, the first {skipped[0]}", file=sys.stderr)
    ranked = sorted((r for r in records if r.run_secs), key=lambda r: _mean(r.run_secs))
    best, seen = [], set()
    for r in ranked:
        trace = trace_text(r.trace)
        if trace not in seen:
            seen.add(trace)
            best.append((r, trace))
        if len(best) == top:
            break
    return best


def _measure_bests(works: list[Path], target_text: str, rounds: int, repeat: int, top: int = 3) -> list:
    """``(work, programs)`` per run: its ``top`` best programs (``_best_programs``) measured again by one runner,
    the programs of all ``works`` built once and run in turn, ``rounds`` times over (``build_and_run``).
    Each program's row has its tuning measurement, its costs and their median."""
    import tvm

    from costlab.datasets.measure import MeasureOptions
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import build_and_run, close_runner, make_runner
    from costlab.metaschedule.targets import runnable_target
    from costlab.metaschedule.traces import replay_candidate

    target = tvm.target.Target(runnable_target(target_text))
    picks = [(work, _best_programs(work, top)) for work in works]
    cands = [replay_candidate(r.workload.mod, trace) for _, best in picks for r, trace in best]
    if not cands:
        return [(work, []) for work in works]
    runner = make_runner(MeasureOptions(target=target_text, number=3, repeat=repeat), target)
    builder = make_builder(pooled=True)
    try:
        results = iter(build_and_run(builder, runner, target, cands, rounds=rounds))
    finally:
        close_runner(runner)
        builder.close()
    out = []
    for work, best in picks:
        programs = []
        for (r, _), (costs, error, msg) in zip(best, results):
            costs = sorted(costs)
            # the upper median (of an even count, the higher middle value), as every committed final was taken
            programs.append(dict(tuning_us=_mean(r.run_secs) * 1e6, costs_us=[c * 1e6 for c in costs], error=msg,
                                 median_us=costs[len(costs) // 2] * 1e6 if costs and not msg else None))
        out.append((work, programs))
    return out


def _write_final(path: Path, programs: list[dict], at: str | None = None, **extra) -> None:
    """A run's final latency (the lowest median of its programs) with the programs, written atomically."""
    from costlab.common.host import host_info

    medians = [p["median_us"] for p in programs if p["median_us"]]
    write_atomically(path, json.dumps(dict(best_us=min(medians) if medians else None, programs=programs, **extra,
                                           host=host_info(), at=at or time.strftime("%Y-%m-%d %H:%M:%S"))).encode())


def _remeasure(work: Path, target_text: str, repeat: int = 10, top: int = 3) -> None:
    """The run's best programs by their tuning measurement (the ``top`` fastest distinct ones: a single
    tuning measurement can be a lucky one), built and run again by one runner; the run's final latency is
    the lowest of their medians."""
    ((_, programs),) = _measure_bests([work], target_text, rounds=1, repeat=repeat, top=top)
    if programs:
        _write_final(work / "remeasured.json", programs, tuning_us=programs[0]["tuning_us"], repeat=repeat)


def remeasure(args) -> int:
    """Re-measure the best programs of every finished run (all by the same procedure, one run at a time
    under the lock), then print the table."""
    out = Path(args.out)
    target = _target_of(args, _check_host(out))  # the benchmark's host and target only
    # every finished run: a costlab arm's work dir (its summary), an a0 run's database (ms/ beside a0.json)
    found = [p.parent for p in out.glob(f"runs/*/*/s*/{WorkDir.SUMMARY}")]
    found += [p.parent / "ms" for p in out.glob("runs/a0/*/s*/a0.json")]
    for work in sorted(found):
        with cpu_lock():
            _remeasure(work, target)
        final = work / "remeasured.json"
        best = json.loads(final.read_text()).get("best_us") if final.exists() else None
        print(f"{work}: " + (f"{best:.2f} µs" if best is not None else "no program measured again"), flush=True)
    return table(args)


def _retime(works: list[Path], target_text: str, rounds: int, repeat: int = 3, top: int = 3) -> None:
    """The ``top`` best programs of every run of one workload, built once and run in turn, ``rounds`` times
    over: programs compared with each other meet the machine's drift alike (separate re-measurements of one
    program, minutes apart, differ by up to 10 % here). Each run's final latency is the lowest median of its
    programs, into its retimed.json, with the runs retimed together."""
    at, together = time.strftime("%Y-%m-%d %H:%M:%S"), [str(w.relative_to(w.parents[3])) for w in works]
    for work, programs in _measure_bests(works, target_text, rounds, repeat, top):
        if programs:  # a run whose database was not kept has nothing retimed
            _write_final(work / "retimed.json", programs, rounds=rounds, repeat=repeat, together=together, at=at)


def retime(args) -> int:
    """Per workload, every finished run's best programs measured together in turn (``_retime``), then the table:
    its finals are the retimed ones for each workload whose runs were all retimed together."""
    out = Path(args.out)
    if not (out / "runs").is_dir():
        raise SystemExit(f"error: {out} holds no benchmark runs (no {out / 'runs'}): give the --out of `run`")
    if args.rounds < 1:
        raise SystemExit(f"error: --rounds must be at least 1, not {args.rounds}")
    target = _target_of(args, _check_host(out))  # the benchmark's host and target only
    by_workload: dict = {}
    for summary in sorted(out.glob(f"runs/*/*/s*/{WorkDir.SUMMARY}")):
        by_workload.setdefault(summary.parent.parent.name, []).append(summary.parent)
    for wl, works in sorted(by_workload.items()):
        if args.workloads and wl not in args.workloads:
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {wl}: {len(works)} runs, {args.rounds} rounds", flush=True)
        with cpu_lock():
            _retime(works, target, args.rounds)
    return table(args)


def run(args) -> int:
    out = Path(args.out).resolve()  # the runs start in their work dirs: a relative --out nested them in themselves
    out.mkdir(parents=True, exist_ok=True)
    meta = out / "benchmark.json"
    from costlab.common.host import same_host
    from costlab.costmodels.predictors import pinned_name, weights_sha256
    from costlab.costmodels.shipped import aliases
    from costlab.metaschedule.targets import measuring_host, runnable_target

    for key in ("model", "model2"):  # a model directory given relative to here, as the runs (in their work dirs) find it
        if getattr(args, key) and Path(getattr(args, key)).exists():
            setattr(args, key, str(Path(getattr(args, key)).resolve()))
    model, model2 = pinned_name(args.model), pinned_name(args.model2)  # versioned: an alias may move on
    target = runnable_target(args.target)
    info = dict(host=measuring_host(target), target=target, trials=args.trials, model=model,
                model_sha256=weights_sha256(model), model2=model2, model2_sha256=weights_sha256(model2))
    if meta.exists():  # a benchmark continued: same machine and budget, and each arm's runs by one model
        old = json.loads(meta.read_text())
        if not same_host(old["host"], info["host"]) or old["trials"] != info["trials"]:
            raise SystemExit(f"{out} holds a benchmark of another host or budget: use another --out")
        if old.get("target") and old["target"] != info["target"]:  # runs compiled for another target
            raise SystemExit(f"{out} holds a benchmark of target {json.dumps(old['target'])}, not "
                             f"{json.dumps(info['target'])}: give its --target, or use another --out")
        for key in ("model", "model2"):
            if not info[key]:  # not given this time: the arms already run keep their weights, by a name that has them
                if old.get(key) and not old.get(f"{key}_sha256") and old[key] in aliases():
                    raise SystemExit(f"{out} was run with --{key} {old[key]} and no record of its weights; the name "
                                     f"now stands for {aliases()[old[key]]}: give the --{key} it ran with (its "
                                     "version), or use another --out")
                info[key] = pinned_name(old.get(key), old.get(f"{key}_sha256"))
                if old.get(key) and not info[key]:
                    raise SystemExit(f"{out} was run with --{key} {old[key]} (weights "
                                     f"{str(old.get(f'{key}_sha256'))[:12]}), which no model shipped now has: "
                                     f"use another --out")
                info[f"{key}_sha256"] = old.get(f"{key}_sha256")
            elif old.get(key) and old.get(f"{key}_sha256") != info[f"{key}_sha256"]:
                raise SystemExit(f"{out} was run with --{key} {old[key]} (weights {str(old.get(f'{key}_sha256'))[:12]}), "
                                 f"not {info[key]} ({str(info[f'{key}_sha256'])[:12]}): use another --out")
        info["host"] = old["host"]
    args.model, args.model2 = info["model"], info["model2"]
    seconds = getattr(args, "seconds", None)  # from the process's start (its imports too), as its job's limit
    args.deadline = psutil.Process().create_time() + seconds if seconds else None
    write_atomically(meta, json.dumps(info, indent=1).encode())
    for workload in args.workloads:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for arm in args.arms.split(","):
                if arm in SEED0_ONLY and seed != 0:
                    continue
                _run_one(arm, workload, seed, args, out)
    return table(args)


# ---- the table, rebuilt from the work dirs ----

def _progress(work: Path) -> list[dict]:
    path = work / WorkDir.PROGRESS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def _curve(work: Path) -> list[float]:
    """Latency (µs) of every trial in the order measured (the database's order, ``.json`` or the ``.json.gz``
    ``archive`` keeps); failures are inf, lines that are no record are skipped."""
    path = database_file(work, WorkDir.RECORDS)
    out = []
    for _, _, parsed in read_records(path, ImportReport()) if path is not None else ():
        if parsed is not None:
            secs = parsed[2]
            lat = sum(secs) / len(secs) * 1e6 if secs else math.inf
            out.append(lat if lat < 1e9 else math.inf)
    return out


def _best_after(curve: list[float], trials: int) -> float | None:
    best = min(curve[:trials], default=math.inf)
    return best if math.isfinite(best) else None


def _reach(curve: list[float], progress: list[dict], latency: float) -> tuple[int, float] | None:
    """The trial at which the run's best first got to LATENCY or below, and the run's seconds at the end of
    that trial's batch (progress.jsonl has one row per measured batch)."""
    best = math.inf
    for i, lat in enumerate(curve, 1):
        best = min(best, lat)
        if best <= latency:
            secs = next((r["elapsed_s"] for r in progress if r["trials"] >= i), progress[-1]["elapsed_s"] if progress else None)
            return i, secs
    return None


def _rounds(work: Path) -> list[dict]:
    path = work / WorkDir.ROUNDS
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _geo(values) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def _same_machine(a: dict | None, b: dict | None) -> bool:
    from costlab.common.host import same_host

    return bool(a) and bool(b) and same_host(a, b)


def _check_host(out: Path) -> dict:
    """The benchmark's record (benchmark.json, {} for none); SystemExit when this machine (with the GPU its target
    runs on) is not the host its runs were measured on (``identity.check_measuring_host``)."""
    return check_measuring_host(out)[0]


def _target_of(args, meta: dict) -> str:
    """--target as given, else the benchmark's own (a GPU benchmark's programs do not build for the host CPU)."""
    if args.target:
        return args.target
    return json.dumps(meta["target"]) if meta.get("target") else "host"


def collect(out: Path) -> dict:
    """Per workload and arm, per seed: final (re-measured) latency, best after 64 trials, wall seconds, rounds."""
    data: dict = {}
    for arm_dir in sorted((out / "runs").glob("*")):
        for wl_dir in sorted(arm_dir.glob("*")):
            for seed_dir in sorted(wl_dir.glob("s*")):
                row: dict = dict(seed=int(seed_dir.name[1:]))
                if arm_dir.name == "a0":
                    if not (seed_dir / "a0.json").exists():
                        continue
                    row.update(json.loads((seed_dir / "a0.json").read_text()))
                    re = seed_dir / "ms" / "remeasured.json"
                    row["final_us"] = json.loads(re.read_text()).get("best_us") if re.exists() else None
                else:
                    if not (seed_dir / WorkDir.SUMMARY).exists():
                        continue
                    summary = json.loads((seed_dir / WorkDir.SUMMARY).read_text())
                    prog = _progress(seed_dir)
                    curve = _curve(seed_dir)
                    re = json.loads((seed_dir / "remeasured.json").read_text()) if (seed_dir / "remeasured.json").exists() else {}
                    rt = seed_dir / "retimed.json"
                    row["retimed"] = json.loads(rt.read_text()) if rt.exists() else None
                    row.update(wall_s=prog[-1]["elapsed_s"] if prog else summary["wall_s"], progress=prog,
                               first_batch_s=summary.get("first_batch_s"),
                               final_us=re.get("best_us"), tuning_final_us=_best_after(curve, len(curve)),
                               curve=curve, at64_us=_best_after(curve, 64), rounds=_rounds(seed_dir),
                               trials=sum(t["trials"] for t in summary["tasks"]), cost_model=summary.get("cost_model"))
                data.setdefault(wl_dir.name, {}).setdefault(arm_dir.name, []).append(row)
    for arms in data.values():  # one workload's runs all retimed together: their finals are the retimed ones
        rows = [r for arm, rs in arms.items() if arm != "a0" for r in rs]
        stamps = {(r["retimed"] or {}).get("at") for r in rows}
        if len(stamps) == 1 and None not in stamps:
            for r in rows:
                r["final_us"], r["final_from"] = r["retimed"]["best_us"], "retimed"
    return data


def _reach_cells(rows: list[dict], latency: float | None) -> tuple[str, str, float | None, float | None]:
    """Trials and seconds (geomean over the seeds that reached LATENCY) and how many seeds reached it."""
    if not latency:
        return "-", "-", None, None
    got = [x for x in (_reach(r["curve"], r["progress"], latency) for r in rows) if x]
    t, sec = _geo([x[0] for x in got]), _geo([x[1] for x in got])
    return (f"{_fmt(t, '.0f')} ({len(got)}/{len(rows)})", _fmt(sec, '.0f'),
            t if len(got) == len(rows) else None, sec if len(got) == len(rows) else None)


def table(args) -> int:
    out = Path(args.out)
    data = collect(out)
    meta = json.loads((out / "benchmark.json").read_text()) if (out / "benchmark.json").exists() else {}
    lines = []
    if meta:
        from costlab.common.host import describe_host

        lines.append(f"host: {describe_host(meta['host'])}; target {json.dumps(meta['target'])}; "
                     f"budget {meta['trials']} trials; model {meta.get('model')} {meta.get('model_sha256', '')}"
                     + (f"; model2 (b2, c2) {meta['model2']} {meta.get('model2_sha256', '')}" if meta.get("model2") else ""))
    head = ("| workload | arm | seeds | start-up s | final µs (geomean, min–max) | after 64 µs (min–max) | wall s | "
            "reach a: trials (seeds) | reach a: s | reach a1000: trials (seeds) | reach a1000: s |")
    lines += [head, "|---" * (head.count("|") - 1) + "|"]
    ratios: dict = {}
    for wl, arms in sorted(data.items()):
        a = arms.get("a", [])
        a_final = _geo([r["tuning_final_us"] for r in a])
        full = _geo([r["tuning_final_us"] for r in arms.get("a1000", [])])
        for arm in [*ARMS, *sorted(set(arms) - set(ARMS))]:  # an arm of another name (a copy of runs) after them
            rows = arms.get(arm, [])
            if not rows:
                continue
            if arm == "a0":
                lines.append(f"| {wl} | a0 | {len(rows)} | - | {_fmt(_geo([r['final_us'] for r in rows]))} (tune_tir's "
                             f"runner: {_fmt(_geo([r['best_us'] for r in rows]))}) | - | "
                             f"{_fmt(_geo([r['wall_s'] for r in rows]), '.0f')} | - | - | - | - |")
                continue
            finals = [r["final_us"] for r in rows if r["final_us"]]
            at64 = [r["at64_us"] for r in rows if r["at64_us"]]
            ta, sa, t_reach, s_reach = _reach_cells(rows, a_final)
            tf, sf, _, _ = _reach_cells(rows, full)
            startup = _geo([r.get("first_batch_s") for r in rows])
            lines.append(f"| {wl} | {arm} | {len(rows)} | {_fmt(startup)} | {_fmt(_geo(finals))} "
                         f"({_fmt(min(finals, default=None))}–{_fmt(max(finals, default=None))}) | {_fmt(_geo(at64))} "
                         f"({_fmt(min(at64, default=None))}–{_fmt(max(at64, default=None))}) | "
                         f"{_fmt(_geo([r['wall_s'] for r in rows]), '.0f')} | {ta} | {sa} | {tf} | {sf} |")
            if arm in COSTLAB_ARMS and a:
                r_ = ratios.setdefault(arm, {"at64": [], "final": [], "trials": [], "secs": [], "secs_all": [],
                                             "missed": 0, "full": 0, "wl": 0})
                a_wall = _geo([r["wall_s"] for r in a])
                for r in rows:  # every seed counts: one that never reaches a's final at the longer of its
                    # full wall time and a's (a miss is never better than a, nor than the time it ran in vain)
                    got = _reach(r["curve"], r["progress"], a_final) if a_final else None
                    r_["secs_all"].append((got[1] if got else max(r["wall_s"], a_wall)) / a_wall)
                    r_["missed"] += got is None
                ga64, g64 = _geo([r["at64_us"] for r in a]), _geo(at64)
                gaf, gf = _geo([r["final_us"] for r in a]), _geo(finals)
                if ga64 and g64:
                    r_["at64"].append(ga64 / g64)
                if gaf and gf:
                    r_["final"].append(gaf / gf)
                if t_reach:
                    r_["trials"].append(t_reach / _geo([r["trials"] for r in a]))
                    r_["secs"].append(s_reach / _geo([r["wall_s"] for r in a]))
                r_["wl"] += 1
                r_["full"] += bool(full) and all(_reach(r["curve"], r["progress"], full) for r in rows)
    lines.append("")
    retimed = sorted(wl for wl, arms in data.items()
                     if any(r.get("final_from") == "retimed" for rs in arms.values() for r in rs))
    unmeasured = sorted(wl for wl, arms in data.items() if wl not in retimed
                        and any(r["final_us"] is None for arm, rs in arms.items() if arm != "a0" for r in rs))
    alone = sorted(set(data) - set(retimed) - set(unmeasured))
    if retimed:
        lines.append(f"finals retimed together, every run's best programs in turn (`retime`): {', '.join(retimed)}"
                     + (f"; re-measured one run at a time: {', '.join(alone)}" if alone else ""))
    if unmeasured:
        lines.append(f"no final for some runs of {', '.join(unmeasured)} (neither retimed nor re-measured): their "
                     "comparisons rest on the tuning measurements")
    for arm, r_ in ratios.items():
        lines.append(f"geomean over workloads, {arm} vs a: speed-up after 64 trials {_fmt(_geo(r_['at64']), '.2f')}x; "
                     f"final a/{arm} {_fmt(_geo(r_['final']), '.2f')}x; to reach a's final: "
                     f"{_fmt(_geo(r_['trials']), '.2f')} of a's trials, {_fmt(_geo(r_['secs']), '.2f')} of a's seconds "
                     f"(on the {len(r_['secs'])} of {r_['wl']} workloads where every seed reached it); over all "
                     f"{r_['wl']} workloads and {len(r_['secs_all'])} runs of {arm}, a seed that never reached it counted at "
                     f"the longer of its and a's wall time ({r_['missed']} such): "
                     f"{_fmt(_geo(r_['secs_all']), '.2f')} of a's seconds; "
                     f"every seed reached a1000's final on {r_['full']} of {r_['wl']} workloads")
    for arm in COSTLAB_ARMS:
        rounds = [x for wl in data.values() for r in wl.get(arm, []) for x in r["rounds"] if x.get("round_s")]
        if rounds:
            share = sum(x["verify_s"] for x in rounds) / max(sum(x["round_s"] for x in rounds), 1e-9)
            lines.append(f"{arm}: verify stage {share:.1%} of a round's time ({len(rounds)} rounds)")
    for wl, arms in sorted(data.items()):
        if "a0" in arms and "a" in arms:
            lines.append(f"{wl}: a0 (tune_tir as users call it) {_fmt(_geo([r['wall_s'] for r in arms['a0']]), '.0f')} s "
                         f"vs a {_fmt(_geo([r['wall_s'] for r in arms['a'] if r['seed'] == 0]), '.0f')} s for the same budget")
    blas = out / "openblas.json"
    b = json.loads(blas.read_text()) if blas.exists() else {}
    if b.get("host") and meta and not _same_machine(b["host"], meta["host"]):  # another machine's: no ratio
        from costlab.common.host import describe_host

        lines.append(f"openblas.json was measured on {describe_host(b['host'])}, not on this benchmark's host: "
                     "no OpenBLAS ratio")
        b = {}
    if b and "gmm" in data:
        best = min((r["final_us"] for arm in data["gmm"].values() for r in arm if r.get("final_us")), default=None)
        if best:
            gf = GMM_FLOPS / best / 1e3
            lines.append(f"gmm 128^3: best tuned {best:.1f} µs = {gf:.1f} GFLOP/s; OpenBLAS ({b['kernel']}, "
                         f"{b['threads']} threads) {b['us']:.1f} µs = {b['gflops']:.1f} GFLOP/s; ratio {gf / b['gflops']:.2f}")
    text = "\n".join(lines)
    print(text)
    (out / "table.md").write_text(text + "\n")
    return 0


def plot(args) -> int:
    """Per workload: best latency against wall seconds and against trials, one line per arm (geomean over
    seeds), the seeds' min-max as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path(args.out)
    data = collect(out)
    names = sorted(data)
    if not names:
        raise SystemExit(f"{out}: no finished runs to plot")
    fig, axes = plt.subplots(len(names), 2, figsize=(11, 3.2 * len(names)), squeeze=False)
    for row, wl in zip(axes, names):
        for arm in ARMS:
            runs = [r for r in data[wl].get(arm, []) if r.get("curve")]
            if arm == "a0" or not runs:
                continue
            n = max(len(r["curve"]) for r in runs)
            best = np.array([np.minimum.accumulate(np.pad(r["curve"], (0, n - len(r["curve"])), mode="edge"))
                             for r in runs])
            best[~np.isfinite(best)] = np.nan
            trials = np.arange(1, n + 1)
            row[1].plot(trials, np.exp(np.nanmean(np.log(best), axis=0)), label=arm)
            row[1].fill_between(trials, np.nanmin(best, axis=0), np.nanmax(best, axis=0), alpha=0.2)
            grid = np.linspace(0, max(r["progress"][-1]["elapsed_s"] for r in runs if r["progress"]), 200)
            by_time = []
            for r in runs:
                t = [p["elapsed_s"] for p in r["progress"]]
                b = [p["best_us"] or np.nan for p in r["progress"]]
                idx = np.searchsorted(t, grid, side="right") - 1
                by_time.append(np.where(idx >= 0, np.array(b)[np.clip(idx, 0, None)], np.nan))
            by_time = np.array(by_time, float)
            row[0].plot(grid, np.exp(np.nanmean(np.log(by_time), axis=0)), label=arm)
            row[0].fill_between(grid, np.nanmin(by_time, axis=0), np.nanmax(by_time, axis=0), alpha=0.2)
        row[0].set_xlabel("wall seconds since the command started")
        row[1].set_xlabel("trials")
        row[1].set_xscale("log")
        row[1].set_yscale("log")
        for ax in row:
            ax.set_ylabel(f"{wl}: best µs")
            ax.grid(alpha=0.3)
        row[1].legend(fontsize=8)
    fig.tight_layout()
    path = out / "tuning.png"
    fig.savefig(path, dpi=100)
    print(path)
    return 0


def archive(args) -> int:
    """What the table is rebuilt from, small enough to commit: every run's summaries, progress and search
    rounds, the re-measured best, and its database gzipped (records and workloads: `costlab transfer --from`
    reads an archived run as a source)."""
    src, dst = Path(args.out), Path(args.to)
    keep = ("benchmark.json", "openblas.json", "table.md", SPANS, WorkDir.SUMMARY, WorkDir.PROGRESS, WorkDir.ROUNDS,
            "remeasured.json", "retimed.json", "a0.json", "done.json", WorkDir.EXPLOIT_STATE, WorkDir.TRANSFER_STATE,
            "network.json", "table.json")
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.name in keep:
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / rel).write_bytes(path.read_bytes())
        elif path.name in (WorkDir.RECORDS, WorkDir.WORKLOADS):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / rel).with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        elif path.name in (WorkDir.RECORDS + ".gz", WorkDir.WORKLOADS + ".gz"):  # a run copied from an archive
            if not path.with_name(path.name[:-3]).exists():  # the plain database, where there is one, wins
                (dst / rel).parent.mkdir(parents=True, exist_ok=True)
                (dst / rel).write_bytes(path.read_bytes())
    print(f"{dst}: {sum(p.stat().st_size for p in dst.rglob('*') if p.is_file()) / 1e6:.1f} MB")
    return 0


def openblas(args) -> int:
    """The 128^3 matmul through numpy, OpenBLAS on its own best kernel for this CPU (the machine's
    OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE force an older one: unset for this measurement alone)."""
    out = Path(args.out)
    _check_host(out)  # compared with the benchmark's tuned matmul: on its host only, checked before measuring
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    from costlab.common.host import usable_cores

    env["OPENBLAS_NUM_THREADS"] = str(usable_cores())
    code = r"""
import ctypes, glob, json, os, time
import numpy as np
lib = next(iter(glob.glob(os.path.join(os.path.dirname(np.__file__), '..', 'numpy.libs', '*openblas*'))), None)
kernel = 'unknown'
if lib:
    so = ctypes.CDLL(lib)
    for name in ('scipy_openblas_get_corename64_', 'openblas_get_corename'):
        if hasattr(so, name):
            f = getattr(so, name); f.restype = ctypes.c_char_p; kernel = f().decode(); break
a = np.random.rand(128, 128).astype('float32'); b = np.random.rand(128, 128).astype('float32')
for _ in range(200): a @ b
best = []
for _ in range(20):
    t = time.perf_counter()
    for _ in range(200): a @ b
    best.append((time.perf_counter() - t) / 200)
us = sorted(best)[len(best) // 2] * 1e6
print(json.dumps(dict(kernel=kernel, us=us, gflops=2 * 128 ** 3 / us / 1e3, threads=int(os.environ['OPENBLAS_NUM_THREADS']))))
"""
    with cpu_lock():
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    out.mkdir(parents=True, exist_ok=True)
    from costlab.common.host import host_info

    write_atomically(out / "openblas.json", json.dumps(dict(json.loads(res.stdout), host=host_info())).encode())
    print(res.stdout.strip())
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_a0":
        return _a0(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run (or continue) every arm, then print the table")
    r.add_argument("--out", required=True)
    r.add_argument("--model", help="the pre-trained model of arms b and c")
    r.add_argument("--model2", help="a second pre-trained model, of arms b2 and c2")
    r.add_argument("--arms", default="a,a1000,b,c")
    r.add_argument("--workloads", nargs="+", default=list(WORKLOADS),
                   help=f"names of the benchmark's workloads ({', '.join(WORKLOADS)}) or te_workload specs")
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--trials", type=int, default=200)
    r.add_argument("--target", default="host")
    r.add_argument("--no-remeasure", dest="remeasure", action="store_false",
                   help="leave each run's best programs unmeasured after it (a `retime` of all runs follows)")
    r.add_argument("--seconds", type=float, metavar="S",
                   help="the time this call may take: a run is not started where the longest of this benchmark's "
                   f"runs ({SPANS}) would not end within what is left (a stopped run loses the round it searched)")
    r.set_defaults(func=run)
    t = sub.add_parser("table", help="the table from the work dirs")
    t.add_argument("--out", required=True)
    t.set_defaults(func=table)
    m = sub.add_parser("remeasure", help="re-measure every finished run's best programs, then the table")
    m.add_argument("--out", required=True)
    m.add_argument("--target", help="default: the target benchmark.json records")
    m.set_defaults(func=remeasure)
    q = sub.add_parser("retime", help="per workload, every finished run's best programs measured together in "
                                      "turn, several rounds; then the table with those finals")
    q.add_argument("--out", required=True)
    q.add_argument("--target", help="default: the target benchmark.json records")
    q.add_argument("--rounds", type=int, default=5)
    q.add_argument("--workloads", nargs="*", default=[], help="only these workloads (default: all)")
    q.set_defaults(func=retime)
    k = sub.add_parser("archive", help="copy what the table needs, tuning records gzipped, to commit it")
    k.add_argument("--out", required=True)
    k.add_argument("--to", required=True)
    k.set_defaults(func=archive)
    g = sub.add_parser("plot", help="best latency against seconds and trials per workload (OUT/tuning.png)")
    g.add_argument("--out", required=True)
    g.set_defaults(func=plot)
    o = sub.add_parser("openblas", help="the 128^3 matmul through numpy's OpenBLAS")
    o.add_argument("--out", required=True)
    o.set_defaults(func=openblas)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
