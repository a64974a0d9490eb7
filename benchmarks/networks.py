"""Whole networks tuned: MetaSchedule's Relax tuning as users call it against `costlab tune --network`, with and
without the model and the schedule library, over networks users tune, budgets of 1,000-2,000 trials and seeds.

Networks (benchmarks/nets.py, `costlab tune --network nets:FUNCTION`): `llama` (a Llama-style decoder layer,
hidden 768, sequence 128), `bert` (a BERT-base encoder layer, sequence 128), `resnet18` (224x224); and
`llama-small` (hidden 512, sequence 32) for a smoke run. Arms, each a work dir OUT/runs/NET/sSEED/ARM:

  stock    relax_integration.tune_relax(mod, None, target, work_dir, max_trials_global=TRIALS, seed=SEED) with
           everything else its default (LocalBuilder, LocalRunner, XGBoost, gradient task scheduler), on the
           module `costlab tune` extracts its tasks from (legalized, fused)
  a        `costlab tune --network` without a model (MetaSchedule's search and XGBoost, costlab's builder,
           runner and task scheduler), --no-library
  k-nolib  a with --model MODEL (the model-led search; the gain task scheduler, the default for networks)
  k        k-nolib with the schedule library: --library WORK/library, a copy of --library LIBRARY

The library never holds a task of the benchmark's networks: before each k run, what it can start from is read
(every library.json and database_workload.json under its copy of --library, and the starter library costlab
ships) and the run is refused when any workload's structural hash is that of one of the network's tasks
(other shapes of a kernel class are what a library is for, and allowed); each k run gets its own copy, so
what one run adds to its library never reaches another run (`run` checks every network against --library
before it starts anything, too). Every run holds /tmp/costlab-cpu.lock while it builds and measures; an arm
cut short starts again (its seconds are those of one uninterrupted run), a finished one (done.json) is skipped.

Once a network and seed has arms finished, they are timed together: each arm's final build (a costlab arm's
result database, WORK/result: the programs its run chose, checked and measured again; stock's: each task's
fastest record of its database; compiled by export/network.build, DLight on what has none) and builds of
its database as it was at 1/4 and 1/2 of its seconds, with the untuned build, in turn, --rounds times,
median kept (timed.json). Curves: per arm, sum of weight x task best (from progress.jsonl, or stock's
task_scheduler.log), untuned task latencies where a task has no program yet, scaled to the final build's
timing; the checkpoint builds show how well the curve follows real builds. Figures: seconds for k to reach
stock's final over stock's seconds (target <= 1/10), k to reach a's over a's (<= 1/4), k's final over
stock's (<= 0.95): geometric means of the runs' ratios over networks and seeds (the reach figures also pooled:
seconds summed over seconds summed), a run that never reaches counted at the longer of its own and the goal's
full seconds, never better than the arm it did not reach (netcurves.figures).

    .venv/bin/python benchmarks/networks.py run --out bench/networks --library LIBRARY --trials 1500 --seeds 0,1
    .venv/bin/python benchmarks/networks.py run --out bench/networks --networks bert --arms stock --seeds 1 ...
    .venv/bin/python benchmarks/networks.py table --out bench/networks --to benchmarks/results/networks-HOST
    .venv/bin/python benchmarks/networks.py table --out bench/networks-s1 --with benchmarks/results/networks-HOST/results.json
    .venv/bin/python benchmarks/networks.py finals --out bench/networks --networks llama --seeds 0 [--again cold,warm]

`finals` times each costlab arm's result (WORK/result) against the build of its database's fastest records:
what choosing a network's programs by a second measurement is worth, in one process. `table --with` sums in
the runs an earlier table recorded (its results.json, of the same host and budget): seeds run in another
session, whose work dirs are gone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import netcurves  # noqa: E402
from identity import check_measuring_host  # noqa: E402

from costlab.common.children import run_or_stop  # noqa: E402
from costlab.common.cpu_lock import cpu_lock  # noqa: E402
from costlab.common.errors import last_line  # noqa: E402
from costlab.common.files import write_atomically  # noqa: E402
from costlab.common.host import host_difference, same_host  # noqa: E402
from costlab.export.workdir import WorkDir  # noqa: E402
from costlab.metaschedule.databases import json_database  # noqa: E402

HERE = Path(__file__).resolve().parent
COSTLAB = [sys.executable, "-m", "costlab"]
NETWORKS = {"llama": "nets:llama_layer", "bert": "nets:bert_layer", "resnet18": "nets:resnet18",
            "llama-small": "nets:llama_small"}
ARMS = ("stock", "a", "k-nolib", "k")
CHECKPOINTS = (0.25, 0.5)


def _env() -> dict:
    """The arms' environment: nets.py importable by `costlab tune --network nets:FUNCTION`."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p))


def _network(net: str, target):
    """The network's tasks, and (Relax module, inputs, PyTorch's output), as `costlab tune` extracts them."""
    from types import SimpleNamespace

    from costlab.export.tasks import workload_tasks

    opts = SimpleNamespace(workloads=[], network=NETWORKS[net], batch=1, seq_len=0, task_filter=[])
    return workload_tasks(opts, target)


def library_workloads(library: Path) -> dict[str, set]:
    """Structural hashes of the workloads a k run can start from, per file: every schedule library under
    ``library`` (``<platform>/library.json``, entries keyed by MetaSchedule's workload hash), any MetaSchedule
    database in it (``database_workload.json``, as ``costlab library export`` writes one), and the starter
    libraries shipped with costlab, which every run consults beside the user's (``$COSTLAB_STARTER_LIBRARY``)."""
    from costlab.common.import_report import ImportReport
    from costlab.metaschedule.databases import read_workloads

    held: dict = {}
    for path in sorted(library.rglob(WorkDir.WORKLOADS + "*")):
        held[str(path)] = {shash for shash, _b64 in read_workloads(path, ImportReport()).values()}
    try:
        from costlab.export.library.store import Library, starter_library
    except ImportError:  # a costlab without the schedule library: only MetaSchedule databases can be read
        return held
    for path in sorted([*library.rglob("library.json"), *library.rglob("library.json.gz")]):
        held[str(path)] = set(Library.load(path).entries)
    for lib in starter_library():
        held[f"{lib.path} (starter)"] = set(lib.entries)
    return held


def library_overlap(library: Path, tasks) -> tuple[int, list[str]]:
    """(workloads the k run can start from, names of ``tasks`` whose structural hash is among them)."""
    from costlab.metaschedule.workloads import workload_json

    held = set().union(*library_workloads(library).values())
    return len(held), [t.name for t in tasks if workload_json(t.mod)[0] in held]


def _library_flags() -> bool:
    """Whether this costlab's tune has --library / --no-library (the schedule library)."""
    text = subprocess.run([*COSTLAB, "tune", "--help"], capture_output=True, text=True).stdout
    return "--no-library" in text


def _cmd(arm: str, net: str, seed: int, work: Path, args, has_library: bool) -> list[str]:
    if arm == "stock":
        return [sys.executable, __file__, "_stock", "--work", str(work), "--network", NETWORKS[net],
                "--trials", str(args.trials), "--seed", str(seed), "--target", args.target]
    cmd = [*COSTLAB, "tune", "--network", NETWORKS[net], "--target", args.target, "--seed", str(seed),
           "--trials", str(args.trials), "--work-dir", str(work), "--no-progress"]
    if arm == "a":
        return cmd + (["--no-library"] if has_library else [])
    if not has_library:
        raise SystemExit(f"arm {arm} needs `costlab tune --library/--no-library` (the schedule library), which this "
                         "costlab does not have yet")
    cmd += ["--model", args.model]
    return cmd + (["--no-library"] if arm == "k-nolib" else ["--library", str(work / "library")])


def _run_arm(arm: str, net: str, seed: int, args, out: Path, has_library: bool) -> bool:
    """One arm's run unless done; True when it (now or before) finished."""
    from costlab.costmodels.predictors import weights_sha256
    from costlab.metaschedule.targets import measuring_host, runnable_target

    work = out / "runs" / net / f"s{seed}" / arm
    if (work / "done.json").exists():
        return True
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    print(f"[{time.strftime('%H:%M:%S')}] {net} seed {seed} {arm}", flush=True)
    with cpu_lock():
        if arm == "k":
            _start_library(Path(args.library), work / "library", net, args.target)
        cmd = _cmd(arm, net, seed, work, args, has_library)
        t0 = time.time()
        with open(work / "run.log", "a") as log:
            rc = run_or_stop(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work, env=_env())
    if rc:
        print(f"  failed (exit {rc}); see {work / 'run.log'}", flush=True)
        return False
    model = dict(model=args.model, model_sha256=weights_sha256(args.model)) if arm in ("k", "k-nolib") else {}
    write_atomically(work / "done.json", json.dumps(dict(wall_s=round(time.time() - t0, 2), cmd=cmd[1:],
                                                    host=measuring_host(runnable_target(args.target)),
                                                    at=time.strftime("%Y-%m-%d %H:%M:%S"), **model), indent=1).encode())
    return True


def _start_library(source: Path, copy: Path, net: str, target_text: str) -> None:
    """The k run's own copy of the library, refused when it holds any task of the network."""
    import tvm

    from costlab.metaschedule.targets import runnable_target

    shutil.copytree(source, copy)
    tasks, _ = _network(net, tvm.target.Target(runnable_target(target_text)))
    held = _refuse_overlap(copy, tasks, net, shown=source)
    write_atomically(copy.parent / "library_check.json", json.dumps(dict(
        library=str(source), files=sorted(library_workloads(copy)), workloads=held, network_tasks=len(tasks),
        overlap=0, how="MetaSchedule structural hash of every workload the run can start from (the library copy "
                       "and the starter) against each of the network's tasks"), indent=1).encode())


def _refuse_overlap(library: Path, tasks, net: str, shown: Path | None = None) -> int:
    """Stop the benchmark when the library holds any of the network's tasks; else say so, and return how many
    workloads it holds."""
    held, overlap = library_overlap(library, tasks)
    if overlap:
        raise SystemExit(f"the library {shown or library} holds {len(overlap)} of {net}'s {len(tasks)} tasks ("
                         f"{', '.join(overlap[:5])}{', ...' if len(overlap) > 5 else ''}): a benchmark run must not "
                         "start from its own network's programs; use a library built without them")
    print(f"library {shown or library}: {held} workloads (with the starter's), none of {net}'s {len(tasks)} tasks "
          "(by structural hash)", flush=True)
    return held


def _stock(argv) -> int:
    """tune_relax as a user calls it, on the network's module; seconds from this process's start."""
    p = argparse.ArgumentParser()
    for k in ("--work", "--network", "--target"):
        p.add_argument(k)
    p.add_argument("--trials", type=int)
    p.add_argument("--seed", type=int)
    a = p.parse_args(argv)
    from costlab.export.tune import process_start

    started = process_start()
    import tvm
    from tvm.s_tir.meta_schedule import relax_integration

    from costlab.datasets.extract import network_module, torch_fn_model
    from costlab.metaschedule.targets import runnable_target

    target = tvm.target.Target(runnable_target(a.target))
    model, inputs = torch_fn_model(a.network)
    mod = network_module(model, inputs, target)
    relax_integration.tune_relax(mod, None, target, a.work, max_trials_global=a.trials, seed=a.seed)
    write_atomically(Path(a.work, "stock.json"),
                     json.dumps(dict(started=started, tune_s=round(time.time() - started, 2))).encode())
    return 0


def run(args) -> int:
    from costlab.costmodels.predictors import pinned_name, weights_sha256
    from costlab.metaschedule.targets import measuring_host, runnable_target

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.model = pinned_name(args.model)  # versioned: the alias may stand for another version later
    ran = {json.loads(p.read_text()).get("model_sha256") for p in out.glob("runs/*/s*/k*/done.json")} - {None}
    if ran and ran != {weights_sha256(args.model)}:  # every k run of one benchmark by the same weights
        names = [pinned_name(args.model, sha) or sha[:12] for sha in sorted(ran)]
        raise SystemExit(f"{out}'s k runs were made with {', '.join(names)}, not {args.model}: give that --model, "
                         "or use another --out")
    meta = dict(host=measuring_host(runnable_target(args.target)), trials=args.trials, target=args.target,
                model=args.model, model_sha256=weights_sha256(args.model),
                library=str(Path(args.library).resolve()) if args.library else None)
    if (out / "benchmark.json").exists():
        why = other_benchmark(json.loads((out / "benchmark.json").read_text()), meta)
        if why:
            raise SystemExit(f"{out} holds a benchmark of another {why}: use another --out")
    if "k" in args.arms and not (args.library and Path(args.library).is_dir()):
        raise SystemExit("arm k needs --library DIR: the library it starts from (none of the networks' tasks in it)")
    if (out / "benchmark.json").exists() and not meta["library"]:  # a call without k keeps the k runs' library
        meta["library"] = json.loads((out / "benchmark.json").read_text()).get("library")
    write_atomically(out / "benchmark.json", json.dumps(meta, indent=1).encode())
    has_library = _library_flags()
    if "k" in args.arms:  # refused before any run starts, not hours into one; each k run checks its copy again
        import tvm

        from costlab.metaschedule.targets import runnable_target

        for net in args.networks:
            with cpu_lock():  # extraction compiles: not beside another job's measurements
                tasks, _ = _network(net, tvm.target.Target(runnable_target(args.target)))
            _refuse_overlap(Path(args.library), tasks, net)
    failed = []
    for net in args.networks:
        for seed in args.seeds:
            done = [arm for arm in args.arms if _run_arm(arm, net, seed, args, out, has_library)]
            failed += [f"{net} s{seed} {arm}" for arm in args.arms if arm not in done]
            if done:
                _retime(out / "runs" / net / f"s{seed}", net, args)
    shown = table(args)
    if failed:  # the table shows what finished; the exit status says that not everything did
        print(f"runs that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return shown


def _prefix_db(work: Path, records: int, into: Path):
    """The arm's database as it was after its first ``records`` records (records are appended as measured)."""
    into.mkdir(parents=True, exist_ok=True)
    shutil.copy(work / WorkDir.WORKLOADS, into / WorkDir.WORKLOADS)
    lines = (work / WorkDir.RECORDS).read_text().splitlines(keepends=True)
    (into / WorkDir.RECORDS).write_text("".join(lines[:records]))
    return json_database(work_dir=str(into))


def history(work: Path, arm: str) -> tuple[list, dict, float]:
    """An arm's snapshots, its tasks' weights, and its tuning seconds (to its last measured batch)."""
    if arm == "stock":
        info = json.loads((work / "stock.json").read_text())
        log = next(iter(sorted(WorkDir(work).logs_dir.glob("*" + WorkDir.SCHEDULER_LOG))), WorkDir(work).scheduler_log)
        hist, weights = netcurves.ms_history(log, info["started"])
        return hist, weights, info["tune_s"]
    summary = json.loads((work / WorkDir.SUMMARY).read_text())
    hist = netcurves.costlab_history(work / WorkDir.PROGRESS)
    return hist, {t["name"]: t["weight"] for t in summary["tasks"]}, hist[-1][0] if hist else summary["wall_s"]


def _retime(runs: Path, net: str, args) -> None:
    """Every finished arm of one network and seed timed together (see the module's doc), into timed.json;
    skipped when these runs were timed already."""
    arms = [arm for arm in ARMS if (runs / arm / "done.json").exists()]
    if timed_already(runs, arms):
        return
    print(f"[{time.strftime('%H:%M:%S')}] timing {net} s{runs.name[1:]}: {', '.join(arms)}", flush=True)
    with cpu_lock():
        _retime_locked(runs, net, arms, args)


def timed_already(runs: Path, arms: list[str]) -> bool:
    """Whether runs/timed.json holds these arms' runs: the same arms, none of them finished after the timing
    (an arm run again, its old work dir moved aside, is timed again with the others)."""
    path = runs / "timed.json"
    if not path.exists() or json.loads(path.read_text()).get("arms") != arms:
        return False
    timed_at = path.stat().st_mtime
    return all((runs / arm / "done.json").stat().st_mtime <= timed_at for arm in arms)


def other_benchmark(old: dict, meta: dict) -> str | None:
    """Why a benchmark recorded as ``old`` is not the one ``meta`` describes (another host, budget or target),
    None when a run may continue it. Hosts compare by identity (``same_host``): the clock a host record holds
    moves with the governor between two calls of one lease."""
    if not same_host(old.get("host") or {}, meta["host"]):
        return f"host ({host_difference(old.get('host') or {}, meta['host'])})"
    for key, name in (("trials", "budget"), ("target", "target")):
        if old.get(key) != meta[key]:
            return f"{name} ({old.get(key)} vs {meta[key]})"
    if old.get("library") and meta.get("library") and old["library"] != meta["library"]:  # k runs start from it
        return f"library ({old['library']} vs {meta['library']})"
    return None


def run_database(work: Path):
    """A finished run's database, for a benchmark that reads it; one line and exit 1 when it does not load (TVM's
    parse error comes with its C++ frames). Opened before a network is extracted: that takes seconds of compiling."""
    try:
        return json_database(work_dir=str(work))
    except Exception as exc:  # noqa: BLE001  TVM raises its own errors
        raise SystemExit(f"{work}'s database does not load: {last_line(exc)}") from None


def _result_dir(work: Path) -> Path | None:
    """A costlab arm's result database (WORK/result: the programs its run chose), None when it has none."""
    result = WorkDir(work).result_dir
    return result if (result / WorkDir.RECORDS).exists() else None


def _time_together(builds: dict, inputs, rounds: int, device) -> dict:
    """Each build's end-to-end milliseconds per round on ``device``, the builds run in turn in every round."""
    from costlab.export.network import time_network

    times: dict = {k: [] for k in builds}
    for _ in range(rounds):
        for k, exe in builds.items():
            times[k].append(round(time_network(exe, inputs, device) * 1e3, 4))
    return times


def _retime_locked(runs: Path, net: str, arms: list[str], args) -> None:
    import tempfile

    from costlab.export.network import build, check_output
    from costlab.export.tasks import measuring_target
    from costlab.metaschedule.targets import device_of, target_cores

    tgt = measuring_target(args.target)
    device = device_of(tgt)
    os.environ["TVM_NUM_THREADS"] = str(target_cores(tgt))
    tasks, (mod, inputs, reference) = _network(net, tgt)
    untuned_us = _untuned_tasks(runs.parent / "untuned_tasks.json", tasks, tgt)
    builds, meta = {"untuned": build(mod, tgt)[0]}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in arms:
            work = runs / arm
            hist, weights, tune_s = history(work, arm)
            n_records = len((work / WorkDir.RECORDS).read_text().splitlines())
            offset = max(0, n_records - (hist[-1][1] if hist else 0))  # records the history does not count
            meta[arm] = dict(tune_s=tune_s, records=n_records, checkpoints=[])
            final_db = _result_dir(work) or work  # a costlab run's result: its checked choices, measured again
            exe, (hit, n) = build(mod, tgt, json_database(work_dir=str(final_db)))
            builds[arm] = exe
            meta[arm].update(tuned_functions=hit, functions=n,
                             output_check=check_output(exe, inputs, device, reference))
            curve = netcurves.estimate(hist, weights, untuned_us)
            for frac in CHECKPOINTS:
                point = netcurves.at_time(curve, frac * tune_s)
                if point is None or point[0] == 0:
                    continue
                db = _prefix_db(work, point[0] + offset, Path(tmp) / f"{arm}-{frac}")
                builds[f"{arm}@{frac}"] = build(mod, tgt, db)[0]
                meta[arm]["checkpoints"].append(dict(fraction=frac, at_s=frac * tune_s, trials=point[0]))
        times = _time_together(builds, inputs, args.rounds, device)
    for arm in arms:
        meta[arm].update(final_ms=statistics.median(times[arm]), rounds_ms=times[arm])
        for cp in meta[arm]["checkpoints"]:
            cp.update(median_ms=statistics.median(times[f"{arm}@{cp['fraction']}"]))
    res = dict(arms=arms, rounds=args.rounds, untuned_ms=statistics.median(times["untuned"]),
               untuned_tasks_us=untuned_us, timed=meta, at=time.strftime("%Y-%m-%d %H:%M:%S"))
    write_atomically(runs / "timed.json", json.dumps(res, indent=1).encode())
    print("  " + ", ".join(f"{a} {meta[a]['final_ms']:.4g} ms" for a in arms)
          + f", untuned {res['untuned_ms']:.4g} ms", flush=True)


def finals(args) -> int:
    """What the second measurement of a network's final programs (``export/finals.py``) is worth: per finished
    costlab arm with a result database, the build of its database's fastest records (what the arm built before
    that measurement existed) against the build of its result (the run's choices) and, with ``--again``, the
    builds of the contenders chosen by a second measurement made now, cold (``remeasure(cold=True)``: caches
    flushed before each run) or warm (as the search measures: the control for "made now"), timed together in
    turn, ``--rounds`` times, into OUT/runs/NET/sSEED/finals.json."""
    import tempfile

    from costlab.export.network import build, check_output
    from costlab.export.tasks import measuring_target
    from costlab.metaschedule.targets import device_of, target_cores

    if set(args.again) - {"cold", "warm"}:
        raise SystemExit(f"--again takes cold and/or warm, not {','.join(args.again)}")
    from costlab.metaschedule.targets import runnable_target

    tgt = measuring_target(args.target)
    device = device_of(tgt)
    os.environ["TVM_NUM_THREADS"] = str(target_cores(tgt))
    out = Path(args.out).resolve()
    # the finals are compared with the runs' own timings: on their host only
    _, here = check_measuring_host(out, runnable_target(args.target), "finals timed here")
    for net in args.networks:
        for seed in args.seeds:
            runs = out / "runs" / net / f"s{seed}"
            arms = [arm for arm in ARMS if arm != "stock" and _result_dir(runs / arm) is not None]
            if not arms:
                continue
            checks = {}
            with cpu_lock(), tempfile.TemporaryDirectory() as tmp:
                tasks, (mod, inputs, reference) = _network(net, tgt)
                builds = {}
                for arm in arms:
                    dbs = [("fastest-record", runs / arm), ("result", _result_dir(runs / arm))]
                    kept = _kept_tuned(runs / arm, tasks, Path(tmp) / f"{arm}-kept-tuned")
                    dbs += [("result-kept-tuned", kept)] if kept is not None else []
                    dbs += [(how, _choice_now(runs / arm, tasks, tgt, Path(tmp) / f"{arm}-{how}", how == "cold"))
                            for how in args.again]
                    for name, db in dbs:
                        builds[f"{arm}:{name}"] = build(mod, tgt, json_database(work_dir=str(db)))[0]
                        checks[f"{arm}:{name}"] = check_output(builds[f"{arm}:{name}"], inputs, device,
                                                               reference)["status"]
                times = _time_together(builds, inputs, args.rounds, device)
            res = {k: dict(median_ms=statistics.median(v), fastest_ms=min(v), rounds_ms=v, output_check=checks[k])
                   for k, v in times.items()}
            finals = dict(rounds=args.rounds, builds=res, at=time.strftime("%Y-%m-%d %H:%M:%S"), host=here)
            write_atomically(runs / "finals.json", json.dumps(finals, indent=1).encode())
            for arm in arms:
                a, b = res[f"{arm}:fastest-record"], res[f"{arm}:result"]
                parts = [f"fastest records {a['median_ms']:.4g} ms", f"result {b['median_ms']:.4g} ms"]
                if f"{arm}:result-kept-tuned" in res:
                    c = res[f"{arm}:result-kept-tuned"]
                    parts.append(f"result with its kept tasks tuned {c['median_ms']:.4g} ms (result / that "
                                 f"{b['median_ms'] / c['median_ms']:.3f})")
                parts += [f"{how} now {res[f'{arm}:{how}']['median_ms']:.4g} ms ({res[f'{arm}:{how}']['output_check']})"
                          for how in args.again]
                print(f"{net} s{seed} {arm}: {', '.join(parts)} (median of {args.rounds}; result / fastest records "
                      f"{b['median_ms'] / a['median_ms']:.3f})")
    return 0


def _kept_tuned(work: Path, tasks, into: Path) -> Path | None:
    """The arm's result with each task it kept untuned (its summary's ``"kept": "untuned"``) given its
    database's fastest record instead: what the build was before a task could keep its untuned schedule (the
    fastest record standing for the choice, which was the fastest of a second measurement). None when the run
    kept no task."""
    from tvm.s_tir import meta_schedule as ms

    from costlab.export.check import fastest_records

    summary = json.loads((WorkDir(work).summary_file).read_text())
    kept = {row["name"] for row in summary.get("tasks", []) if row.get("kept") == "untuned"}
    if not kept:
        return None
    shutil.copytree(WorkDir(work).result_dir, into)
    db, source = json_database(work_dir=str(into)), json_database(work_dir=str(work))
    for t in tasks:
        if t.name in kept and (top := fastest_records(source, t.mod, 1)):
            db.commit_tuning_record(ms.database.TuningRecord(top[0].trace, db.commit_workload(t.mod), top[0].run_secs,
                                                             top[0].target, top[0].args_info))
    return into


def _choice_now(work: Path, tasks, target, into: Path, cold: bool) -> Path:
    """A database of each task's first contender by a second measurement of the arm's records made now."""
    from tvm.s_tir import meta_schedule as ms

    from costlab.export.finals import remeasure
    from costlab.export.workdir import MeasuringStack

    source = json_database(work_dir=str(work))
    stack = MeasuringStack()
    builder, runner = stack.start(target, workers=2)
    try:
        orders, stats = remeasure(source, [t.mod for t in tasks], builder, runner, target, cold=cold)
    finally:
        stack.close()
    print(f"  {work.name}: second measurement {stats}", flush=True)
    into.mkdir(parents=True)
    db = json_database(work_dir=str(into))
    for task, order in zip(tasks, orders):
        if order and order[0][1] < float("inf"):
            rec, secs = order[0]
            db.commit_tuning_record(ms.database.TuningRecord(rec.trace, db.commit_workload(task.mod), [secs],
                                                             rec.target, rec.args_info))
    return into


def _untuned_tasks(path: Path, tasks, target) -> dict:
    """Each task's latency (µs) as the untuned build runs it (``export.network.default_rules``: DLight's CPU
    rules where they apply; on a GPU its GPU rules, every loop bound), on the target's device, once per
    network: what a task counts in a curve before its first program is measured."""
    if path.exists():
        return json.loads(path.read_text())
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from costlab.export.network import untuned_schedule
    from costlab.metaschedule.targets import device_of

    device = device_of(target)
    out = {}
    for t in tasks:
        lib = tvm.compile(untuned_schedule(t.mod, target), target=target)
        args = [tvm.runtime.tensor(np.random.rand(*[int(d) for d in a.shape]).astype(str(a.dtype)), device)
                for a in ArgInfo.from_prim_func(t.mod["main"])]
        timer = lib.jit().time_evaluator("main", device, number=3, repeat=3, min_repeat_ms=50)
        out[t.name] = round(float(np.median(timer(*args).results)) * 1e6, 3)
    write_atomically(path, json.dumps(out, indent=1).encode())
    return out


STATISTICS = {"median": statistics.median, "min": min}


def collect(out: Path, statistic: str = "median") -> tuple[dict, dict]:
    """runs[(net, seed)][arm] = dict(curve (calibrated), final_ms, tune_s), and the checkpoints timed; final_ms
    is the ``statistic`` of the arm's rounds (median, or min: the round least disturbed by anything else the
    machine ran, on 2 cores a background process slows a 2-thread network by up to a quarter)."""
    runs, checkpoints = {}, {}
    for timed in sorted(out.glob("runs/*/s*/timed.json")):
        t = json.loads(timed.read_text())
        key = (timed.parent.parent.name, int(timed.parent.name[1:]))
        runs[key], checkpoints[key] = {}, {}
        for arm, m in t["timed"].items():
            hist, weights, _ = history(timed.parent / arm, arm)
            final = STATISTICS[statistic](m["rounds_ms"])
            curve = netcurves.calibrated(netcurves.estimate(hist, weights, t["untuned_tasks_us"]), final)
            runs[key][arm] = dict(curve=curve, final_ms=final, tune_s=m["tune_s"],
                                  trials=curve[-1][1] if curve else None, output=m["output_check"]["status"],
                                  untuned_ms=t["untuned_ms"])
            checkpoints[key][arm] = m["checkpoints"]
    return runs, checkpoints


def earlier_runs(paths: list, bench: dict) -> tuple[dict, dict, dict, list[str]]:
    """Runs of earlier tables (their results.json) beside this benchmark's: the runs (curves, median finals, and
    fastest-round finals where recorded), their checkpoints, their per-run fastest-round figures, and a line per
    table saying where they come from. Refused unless measured on this host at this budget: figures of other
    machines or budgets are never summed."""
    from costlab.common.host import describe_host

    runs, checkpoints, fastest, notes = {}, {}, {}, []
    for path in paths:
        try:
            old = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"error: {path}: not a readable results.json of this benchmark ({type(exc).__name__})")
        if not isinstance(old, dict) or not all(k in old for k in ("benchmark", "runs", "figures_fastest_round")):
            raise SystemExit(f"error: {path}: not a results.json of benchmarks/networks.py table (no benchmark, runs "
                             "or figures_fastest_round)")
        was = old.get("benchmark") or {}
        if bench and (not same_host(was.get("host") or {}, bench.get("host") or {}) or was.get("trials") != bench.get("trials")):
            raise SystemExit(f"error: {path} holds runs of another host or budget ({describe_host(was.get('host') or {})}, "
                             f"{was.get('trials')} trials): only runs of one host and budget are summed")
        for key in ("model_sha256", "target"):  # runs of other weights or compiled for another target: not summed
            if bench and was.get(key) and bench.get(key) and was[key] != bench[key]:
                raise SystemExit(f"error: {path} holds runs of another {key.split('_')[0]} ({str(was[key])[:60]}, "
                                 f"not {str(bench[key])[:60]}): only runs of one model and target are summed")
        for key, run in old["runs"].items():
            net, seed = key.rsplit("/s", 1)
            runs[(net, int(seed))] = {arm: dict(r, curve=[tuple(p) for p in r["curve"]]) for arm, r in run.items()}
            checkpoints[(net, int(seed))] = old.get("checkpoints", {}).get(key, {})
            fastest[key] = old["figures_fastest_round"]["per_run"][key]
        notes.append(f"{', '.join(sorted(old['runs']))} from {path} (model {was.get('model')}"
                     + (f", weights {was['model_sha256'][:12]}" if was.get("model_sha256") else "") + ")")
    return runs, checkpoints, fastest, notes


def table(args) -> int:
    out = Path(args.out).resolve()
    bench = json.loads((out / "benchmark.json").read_text()) if (out / "benchmark.json").exists() else {}
    runs, checkpoints = collect(out)
    fastest_runs = collect(out, "min")[0]
    old_runs, old_checkpoints, old_fastest, notes = earlier_runs(getattr(args, "with_", None) or [], bench)
    old_runs = {k: v for k, v in old_runs.items() if k not in runs}  # a run of this benchmark wins
    runs, checkpoints = old_runs | runs, {k: v for k, v in old_checkpoints.items() if k in old_runs} | checkpoints
    figs = netcurves.figures(runs)
    fastest = netcurves.figures(fastest_runs, {f"{n}/s{s}": old_fastest[f"{n}/s{s}"] for n, s in old_runs})

    def fastest_ms(key, arm):  # a run timed here, or as an earlier table recorded it (None where it did not)
        return fastest_runs[key][arm]["final_ms"] if key in fastest_runs else runs[key][arm].get("fastest_ms")

    lines = ["| network | seed | arm | trials | tuning s | final ms (timed together: median / fastest round) | "
             "untuned ms | output | checkpoints: est / timed ms |", "|---|---|---|---|---|---|---|---|---|"]
    for (net, seed), run in sorted(runs.items()):
        for arm in ARMS:
            if arm in run:
                r = run[arm]
                cps = "; ".join(f"{c['at_s']:.0f} s: {netcurves.at_time(r['curve'], c['at_s'])[1]:.4g} / "
                                f"{c['median_ms']:.4g}" for c in checkpoints[(net, seed)][arm])
                least = fastest_ms((net, seed), arm)
                lines.append(f"| {net} | {seed} | {arm} | {r['trials']} | {r['tune_s']:.0f} | {r['final_ms']:.4g} / "
                             f"{'-' if least is None else format(least, '.4g')} | "
                             f"{r['untuned_ms']:.4g} | {r['output']} | {cps or '-'} |")
    lines += ["", "| figure | value (medians) | runs reached | worst run | value (fastest rounds) | target |",
              "|---|---|---|---|---|---|"]
    for name, v in figs["reach"].items():
        tgt = netcurves.TARGETS.get(name)
        arm, goal = name.split("_to_")
        lines.append(f"| seconds for {arm} to reach {goal}'s final / {goal}'s seconds (geomean; pooled "
                     f"{v['pooled']:.3f}) | {v['ratio']:.3f} | "
                     f"{v['reached']} of {v['runs']} | {v['worst']:.3f} | {fastest['reach'][name]['ratio']:.3f} "
                     f"({fastest['reach'][name]['reached']} of {v['runs']}) | {'<= %g' % tgt if tgt else '-'} |")
    for name, v in figs["final"].items():
        tgt = netcurves.TARGETS.get(name)
        lines.append(f"| final {name.replace('_over_', ' / ')} (geomean) | {v['geomean']:.3f} | {v['runs']} runs | "
                     f"{v['worst']:.3f} | {fastest['final'][name]['geomean']:.3f} | {'<= %g' % tgt if tgt else '-'} |")
    ablation = sorted(out.glob("runs/*/s*/finals.json"))
    if ablation:
        lines += ["", "| network | seed | arm | its database's fastest records, ms | its result (second measurement), ms |"
                  " result / fastest records |", "|---|---|---|---|---|---|"]
    for path in ablation:
        builds = json.loads(path.read_text())["builds"]
        for arm in ARMS:
            if f"{arm}:result" in builds:
                a, b = builds[f"{arm}:fastest-record"]["median_ms"], builds[f"{arm}:result"]["median_ms"]
                lines.append(f"| {path.parent.parent.name} | {path.parent.name[1:]} | {arm} | {a:.4g} | {b:.4g} | "
                             f"{b / a:.3f} |")
    checks = [json.loads(p.read_text()) for p in out.glob("runs/*/s*/k/library_check.json")]
    lines += ["", f"Host: {bench.get('host', {}).get('cpu_model')} ({bench.get('host', {}).get('threads')} threads); "
              f"{bench.get('trials')} trials per run; model {bench.get('model')}; library {bench.get('library')}.",
              "The library holds none of the networks' tasks: " + (
                  f"each k run's copy was checked ({len(checks)} runs, {checks[0]['how']}), 0 overlap."
                  if checks else "no k run yet.")] + [f"Earlier runs summed in: {n}." for n in notes]
    text = "\n".join(lines)
    print(text)
    dest = Path(args.to) if getattr(args, "to", None) else out
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "results.md").write_text(text + "\n")
    write_atomically(dest / "results.json", json.dumps(dict(
        benchmark=bench, figures=figs, figures_fastest_round=fastest, runs={
        f"{n}/s{s}": {a: {k: v for k, v in r.items() if k != "curve"} | dict(curve=[list(p) for p in r["curve"]],
                                                                              fastest_ms=fastest_ms((n, s), a))
                      for a, r in run.items()} for (n, s), run in runs.items()},
        checkpoints={f"{n}/s{s}": c for (n, s), c in checkpoints.items()}), indent=1).encode())
    netcurves.plot(runs, checkpoints, dest / "curves.png")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_stock"]:
        return _stock(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--library", help="the schedule library the k arm starts from (a copy per run)")
    r.add_argument("--model", default="x86-cpu")
    r.add_argument("--networks", type=lambda s: s.split(","), default=["llama", "bert", "resnet18"])
    r.add_argument("--arms", type=lambda s: s.split(","), default=list(ARMS))
    r.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1])
    r.add_argument("--trials", type=int, default=1500)
    r.add_argument("--rounds", type=int, default=5, help="rounds of timing the builds together")
    r.add_argument("--target", default="host")
    f = sub.add_parser("finals", help="time each costlab arm's result against its database's fastest records")
    f.add_argument("--out", required=True)
    f.add_argument("--networks", type=lambda s: s.split(","), default=["llama", "bert", "resnet18"])
    f.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1])
    f.add_argument("--rounds", type=int, default=5)
    f.add_argument("--again", type=lambda s: [x for x in s.split(",") if x], default=[], metavar="cold,warm",
                   help="also build each arm from a second measurement made now: cold, warm or both")
    f.add_argument("--target", default="host")
    t = sub.add_parser("table")
    t.add_argument("--out", required=True)
    t.add_argument("--to", help="write results.md/json and curves.png here (e.g. benchmarks/results/networks-HOST)")
    t.add_argument("--with", dest="with_", action="append", metavar="RESULTS_JSON",
                   help="an earlier table's results.json (same host and budget) whose runs are summed in beside these "
                        "(seeds whose work dirs are gone)")
    a = p.parse_args(argv)
    for bad in set(getattr(a, "networks", [])) - set(NETWORKS):
        p.error(f"unknown network {bad!r} (known: {', '.join(NETWORKS)})")
    for bad in set(getattr(a, "arms", [])) - set(ARMS):
        p.error(f"unknown arm {bad!r} (known: {', '.join(ARMS)})")
    return {"run": run, "finals": finals, "table": table}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
