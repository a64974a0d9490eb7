"""costlab on an NVIDIA GPU: what `scripts/gpu_demo.sh` measured, featurized, trained and tuned, summarised.

    python benchmarks/gpu.py features --data gpu.h5 [--json F]
        PaCM's and PSA's features of the GPU records: every number finite, the pattern tokens' memory levels
        (local / shared / L2 / global) and thread context; PSA's and random's ranking of the records (per task
        top-1 / top-5, pairwise); the GPU in PSA's hardware table.
    python benchmarks/gpu.py heldout --data DATA.h5 --work DIR [--folds 5] [--test-fraction 0.3] [--json F]
        PaCM trained on some tasks against PSA and random on the others, over several splits by task (no GPU
        needed: scripts/train_gpu_model.sh merges the committed H100 records into DATA.h5)
    python benchmarks/gpu.py startup [--target cuda] [--json F]
        where the seconds before a tuning run's first batch go: imports, the CUDA context, design spaces of a
        plain and a tensor-core task, one nvcc build (needs the GPU)
    python benchmarks/gpu.py registry [--rounds 3] [--json F]
        the tensor-intrinsic registry as costlab loads it (all of it, or the CUDA part a tensor-core task needs)
        beside the package import MetaSchedule does, in fresh processes (no GPU needed)
    python benchmarks/gpu.py tuning --run NAME=WORK_DIR [--run ...] [--json F]
        tuning runs side by side: trials, best latency, wall seconds, seconds to the first measured batch, and
        when each reached the first run's final.

Needs a GPU only for what it reads: the files can be summarised anywhere (docs/gpu.md has the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np



def _finite(values) -> tuple[int, int]:
    """(numbers, non-finite numbers) of an array or a list of arrays."""
    arrays = values if isinstance(values, list) else [values]
    total = bad = 0
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind == "f":
            total += a.size
            bad += int(a.size - np.isfinite(a).sum())
    return total, bad


def features(args) -> dict:
    from costlab.datasets import open_dataset
    from costlab.featurizers import create
    from costlab.featurizers.cache import build_cache, open_cache
    from costlab.featurizers.pacm import LEVEL_COLUMNS, PATTERN_NAMES
    from costlab.featurizers.psa.hardware import gpu_spec, spec_for_platform
    from costlab.train.evaluate import evaluate

    with open_dataset(args.data) as ds:
        platform = args.platform or ds.record_platforms()[0]
        plat = ds.platforms[platform]
        spec = spec_for_platform(plat)
        gpu = (plat.host or {}).get("gpu") or {}
    out: dict = dict(data=str(args.data), platform=platform, target=plat.target, gpu=gpu, psa_spec=spec.name)
    if gpu.get("name"):
        try:
            out["gpu_table"] = gpu_spec(gpu["name"]).name
        except ValueError as exc:
            out["gpu_table"] = f"missing: {exc}"
    for name in ("pacm", "psa"):
        build_cache(args.data, name, platform, progress=False)
    with open_dataset(args.data) as ds:
        pacm = open_cache(ds, create("pacm"), platform).get()
        psa = open_cache(ds, create("psa"), platform).get()
        table = ds.records(platform)
        ok = np.asarray(table.error) == 0
    valid = np.asarray(pacm["valid"], bool)
    checks = {}
    for source, feats in (("pacm", pacm), ("psa", {"score": psa["score"]})):
        for key, value in feats.items():
            total, bad = _finite(value)
            if total:
                checks[f"{source}.{key}"] = dict(numbers=total, non_finite=bad)
    # PSA's estimate is infinite, by design, for a launch the GPU cannot run (too many threads, registers or
    # shared memory per block): its score is 0; how many of those the GPU refused too
    impossible = ~np.isfinite(np.asarray(psa["estimate"], np.float64))
    out["psa_impossible"] = dict(records=int(impossible.sum()), failed_on_gpu=int((impossible & ~ok).sum()),
                                 failed_on_gpu_in_all=int((~ok).sum()))
    tokens = [t for t, v in zip(pacm["pattern"], valid) if v and len(t)]
    levels = {}
    if tokens:
        allt = np.concatenate(tokens)
        cols = [PATTERN_NAMES.index(c) for c in LEVEL_COLUMNS]
        names = ("local", "shared", "fragment", "L2", "global")
        which = np.asarray(allt[:, cols]).argmax(axis=1)
        levels = {names[i]: int((which == i).sum()) for i in range(len(names))}
        threads = allt[:, PATTERN_NAMES.index("log_threads")]
        out["tokens"] = dict(total=int(len(allt)), per_program=round(len(allt) / len(tokens), 1),
                             with_thread_context=int((threads > 0).sum()),
                             median_threads=float(np.median(2 ** threads[threads > 0] - 1)) if (threads > 0).any() else 0)
    out.update(records=int(len(valid)), measured_ok=int(ok.sum()), featurized=int(valid.sum()), levels=levels,
               finite=checks, all_finite=all(c["non_finite"] == 0 for c in checks.values()))
    out["ranking"] = {}
    from costlab.costmodels import kinds

    for model in kinds.untrained():
        r = evaluate(model, args.data, split=None, platform=platform)
        out["ranking"][model] = {k: r[k] for k in ("top1", "top5", "pairwise", "ndcg")}
        out["ranking"][model]["per_task"] = r.get("per_task")
    print(json.dumps(out, indent=2, default=str))
    return out


def _run(work: Path) -> tuple[dict, list]:
    """A finished run's summary and progress lines; SystemExit naming the file when one is missing or damaged."""
    from costlab.export.workdir import WorkDir

    try:
        summary = json.loads((work / WorkDir.SUMMARY).read_text())
        hist = [json.loads(x) for x in (work / WorkDir.PROGRESS).read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as exc:
        raise SystemExit(f"gpu.py: {work} is not a finished `costlab tune` work dir ({exc})") from None
    return summary, hist


def tuning(args) -> dict:
    runs = {}
    for item in args.run:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"gpu.py: --run takes NAME=WORK_DIR, not {item!r}")
        runs[name] = _run(Path(path))
    first = next(iter(runs))
    target = runs[first][1][-1]["best_us"] if runs[first][1] else None
    rows = []
    print(f"{'run':28} {'trials':>6} {'best us':>9} {'checked':>8} {'wall s':>7} {'1st batch s':>11}  reached {first}'s final")
    for name, (s, hist) in runs.items():
        t = s["tasks"][0]
        reach = next((h for h in hist if target and h.get("best_us") and h["best_us"] <= target), None)
        row = dict(run=name, task=t["name"], trials=t["trials"], best_us=t["best_us"],
                   check=(t.get("check") or {}).get("status"), wall_s=s["wall_s"], first_batch_s=s.get("first_batch_s"),
                   reached=dict(trials=reach["trials"], elapsed_s=reach["elapsed_s"]) if reach else None,
                   cost_model=s.get("cost_model"), curve=[(h["trials"], h["elapsed_s"], h["best_us"]) for h in hist])
        rows.append(row)
        when = f"{reach['trials']} trials, {reach['elapsed_s']:.0f} s" if reach else "no"
        print(f"{name:28} {row['trials']:6d} {row['best_us'] or float('nan'):9.2f} {row['check'] or '-':>8} "
              f"{row['wall_s']:7.1f} {row['first_batch_s'] or 0:11.1f}  {when}")
    return dict(target_us=target, runs=rows)


def _timed(what: str, fn, out: dict) -> None:
    import time

    t0 = time.perf_counter()
    try:
        fn()
        out[what] = round(time.perf_counter() - t0, 3)
    except Exception as exc:  # noqa: BLE001  a step that fails is reported, the others still timed
        out[what] = f"failed after {time.perf_counter() - t0:.1f} s: {type(exc).__name__}: {str(exc)[-200:]}"
    print(f"{what:44} {out[what]}", flush=True)


def startup(args) -> dict:
    """Where the seconds before a GPU tuning run's first batch go, the steps in turn, once, in one fresh process
    (each counts what the earlier ones left to do): importing TVM (with MetaSchedule and PyTorch, which TVM's FFI
    imports) and costlab's tuning, the CUDA context, the runner's worker started with its own, a pool of workers
    started costlab's way and TVM's, one design space of a plain and of a tensor-core task (the intrinsic
    registry), and one nvcc build."""
    import time

    t0 = time.perf_counter()
    import tvm

    out: dict = {"import tvm": round(time.perf_counter() - t0, 3)}
    state: dict = {}
    _timed("import costlab.export.tune", lambda: __import__("costlab.export.tune"), out)
    _timed("CUDA context (tvm.cuda(0), a first array)",
           lambda: tvm.runtime.tensor(np.zeros(4, "float32"), device=tvm.cuda(0)), out)

    def runner():
        from costlab.datasets.measure import MeasureOptions
        from costlab.metaschedule.runners import close_runner, make_runner
        from costlab.metaschedule.targets import runnable_target

        target = tvm.target.Target(runnable_target(args.target, local=bool(tvm.cuda(0).exist)))
        local = make_runner(MeasureOptions(target=target.export()), target)
        try:
            local.ready()
        finally:
            close_runner(local)

    # what a run no longer waits for before its search (metaschedule/runners.StartingRunner)
    _timed("the runner's worker (TVM, the device's context)", runner, out)

    # the workers of every builder, runner and check: costlab's (TVM without PyTorch) beside TVM's own, a pool of
    # the machine's cores each, started once each way (benchmarks/workers.py); their figures under "workers"
    from costlab.common.host import usable_cores

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from workers import pool_start

    from costlab.metaschedule.worker import WITH_TORCH

    cores, workers = usable_cores(), out.setdefault("workers", {})
    # env.sh of a machine whose workers see the GPU only with PyTorch sets it: costlab's workers then import it too
    workers["costlab_imports_torch"] = os.environ.get(WITH_TORCH) == "1"
    for way in ("costlab", "tvm"):
        _timed(f"a pool of {cores} workers ({way}'s)", lambda way=way: workers.update({way: pool_start(way, cores)}),
               out)

    def space(spec):
        from costlab.datasets.extract import te_workload_task
        from costlab.metaschedule.targets import runnable_target
        from costlab.metaschedule.tune_context import tune_context

        _, prim = te_workload_task(spec)
        target = tvm.target.Target(runnable_target(args.target, local=bool(tvm.cuda(0).exist)))
        ctx = tune_context(prim, target, num_threads=1)
        state[spec] = (ctx.mod, ctx.generate_design_space(), target, ctx.space_generator.postprocs)

    _timed("design space, float32 GMM (no registry)", lambda: space("GMM:1,512,512,512"), out)
    _timed("design space, float16 GMM (registry import)", lambda: space("GMM:1,512,512,512,float16,float16"), out)

    def build():
        from costlab.metaschedule.traces import replay

        from tvm.s_tir.schedule import Trace

        mod, spaces, target, postprocs = state["GMM:1,512,512,512"]
        for seed in range(1, 200):  # a program of the space that its postprocessors (VerifyGPUCode) accept
            try:
                sch = replay(mod, Trace(spaces[seed % len(spaces)].trace.insts, {}), seed, postprocs)
                break
            except ValueError:
                continue
        else:
            raise ValueError("no program of the space passed its postprocessors in 200 draws")
        tvm.compile(sch.mod, target=target)

    _timed("one nvcc build of a float32 GMM program", build, out)
    from costlab.common.host import host_info
    from costlab.metaschedule.targets import local_gpu

    out["host"] = host_info(gpu=local_gpu())  # the machine, and the GPU it ran on (None: none here)
    return out


def registry(args) -> dict:
    """The tensor-intrinsic registry loaded three ways, each in fresh processes, in turn, ``--rounds`` times (no GPU
    needed): the package imported as MetaSchedule imports it (``import tvm.s_tir.tensor_intrin``, the baseline),
    all of it by ``intrinsics.load("all")``, and the CUDA part a tensor-core task needs (``intrinsics.load("cuda")``);
    each after ``import tvm`` alone, and after torch, Lightning and transformers too (a tuning command's process
    holds thousands of modules, which the package's import scans for every intrinsic it parses). The median
    seconds of each, and each costlab way's ratio to the package import in the same kind of process."""
    import subprocess
    import time

    code = ("import sys, time, tvm\n{}\nt = time.perf_counter()\n{}\nprint(time.perf_counter() - t)")
    ways = {"package": "import tvm.s_tir.tensor_intrin",
            "load all": "from costlab.metaschedule import intrinsics; intrinsics.load('all')",
            "load cuda": "from costlab.metaschedule import intrinsics; intrinsics.load('cuda')"}
    processes = {"tvm": "", "torch": "import torch, lightning, transformers"}
    if args.rounds < 1:
        raise SystemExit(f"gpu.py registry: --rounds must be at least 1, not {args.rounds}")
    secs: dict = {(p, w): [] for p in processes for w in ways}
    keys = sorted(secs)
    for i in range(args.rounds):
        for key in keys[i % len(keys):] + keys[:i % len(keys)]:  # each round starts one later
            text = code.format(processes[key[0]], ways[key[1]])
            res = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, cwd="/")
            if res.returncode:
                said = res.stderr.strip().splitlines() or [f"exit status {res.returncode}"]
                raise SystemExit(f"gpu.py registry: {key}: {said[-1]}")
            secs[key].append(float(res.stdout.strip().splitlines()[-1]))
    from costlab.common.host import describe_host, host_info

    out: dict = {"rounds": args.rounds, "host": host_info(), "at": time.strftime("%Y-%m-%d %H:%M:%S")}
    lines = [describe_host(out["host"]), f"tensor-intrinsic registry, median seconds of {args.rounds} fresh processes"]
    for proc in processes:
        row = {w: round(float(np.median(secs[proc, w])), 2) for w in ways}
        row.update({f"{w} / package": round(row[w] / row["package"], 3) for w in ways if w != "package"})
        out[f"after import {proc}"] = row
        lines.append(f"  after import {proc:5s}: package import {row['package']:6.2f}, load('all') "
                     f"{row['load all']:5.2f} ({row['load all / package']:.3f}), load('cuda') "
                     f"{row['load cuda']:5.2f} ({row['load cuda / package']:.3f})")
    print("\n".join(lines))
    return out


def _costlab(*argv) -> str:
    """Run a costlab command; its output, or SystemExit with the command and the end of what it said."""
    import subprocess

    res = subprocess.run([sys.executable, "-m", "costlab", *map(str, argv)], capture_output=True, text=True)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"gpu.py: costlab {' '.join(map(str, argv[:2]))} failed (exit {res.returncode}): {tail[0]}")
    return res.stdout


def heldout(args) -> dict:
    """PaCM against PSA and random on tasks it was not trained on: ``--folds`` splits by task (seeds 0, 1, ...,
    ``--test-fraction`` of the tasks held out), PaCM trained on each fold's training tasks (``--epochs``; a tenth
    of them validate), every kind evaluated on the fold's held-out tasks; the folds' figures and their means,
    written to ``--json`` after every fold."""
    if args.folds < 1:
        raise SystemExit("gpu.py: --folds must be 1 or more")
    from costlab.common.host import host_info  # lazy: the other steps need no costlab import at start

    platform = args.platform or "cuda-sm_90"
    # the machine that trained (the records' own GPU and host are in the dataset)
    out: dict = {"folds": [], "data": str(args.data), "platform": platform, "host": host_info()}
    metrics = ("top1", "top5", "pairwise", "ndcg")
    for seed in range(args.folds):
        split = f"heldout{seed}"
        _costlab("dataset", "split", args.data, "--by", "task", "--seed", seed, "--test-fraction", args.test_fraction,
                 "--name", split, "--replace")
        run = args.work / f"run{seed}"
        _costlab("train", "--model", "pacm", "--data", args.data, "--platform", platform, "--split", split, "--out",
                 run, "--overwrite", "--epochs", args.epochs, "--no-progress")
        fold = {"seed": seed}
        for name, model in (("pacm", run), ("psa", "psa"), ("random", "random")):
            r = json.loads(_costlab("evaluate", "--model", model, "--data", args.data, "--split", split, "--platform",
                                    platform, "--json").strip().splitlines()[-1])
            fold[name] = {k: round(float(r[k]), 4) for k in metrics}
            fold.setdefault("tasks", r.get("tasks"))
        out["folds"].append(fold)
        out["mean"] = {n: {k: round(float(np.mean([f[n][k] for f in out["folds"]])), 4) for k in metrics}
                       for n in ("pacm", "psa", "random")}
        if args.json:
            args.json.write_text(json.dumps(out, indent=2, default=str))
        print(f"fold {seed}: " + "  ".join(f"{n} top-1 {fold[n]['top1']:.3f}" for n in ("pacm", "psa", "random")),
              flush=True)
    for n, m in out["mean"].items():
        print(f"mean {n:7}" + "".join(f"  {k} {v:.3f}" for k, v in m.items()))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("features")
    f.add_argument("--data", type=Path, required=True)
    f.add_argument("--platform")
    f.add_argument("--json", type=Path)
    t = sub.add_parser("tuning")
    t.add_argument("--run", action="append", required=True, metavar="NAME=WORK_DIR")
    t.add_argument("--json", type=Path)
    h = sub.add_parser("heldout")
    h.add_argument("--data", type=Path, required=True)
    h.add_argument("--platform")
    h.add_argument("--work", type=Path, required=True, help="where each fold's training run goes")
    h.add_argument("--folds", type=int, default=5)
    h.add_argument("--test-fraction", type=float, default=0.3)
    h.add_argument("--epochs", type=int, default=50)
    h.add_argument("--json", type=Path)
    u = sub.add_parser("startup")
    u.add_argument("--target", default="cuda")
    u.add_argument("--json", type=Path)
    r = sub.add_parser("registry")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    from costlab.common.errors import CostlabError

    try:
        out = {"features": features, "tuning": tuning, "startup": startup, "heldout": heldout,
               "registry": registry}[args.cmd](args)
    except CostlabError as exc:  # a missing or unreadable dataset: costlab's one-line message
        raise SystemExit(f"gpu.py: {exc}") from None
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
