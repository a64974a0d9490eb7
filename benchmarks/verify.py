"""The verify stage's cost per program: the model's featurizer on a tuning run's live candidates, TVM's
per-store extraction on one thread (as before) against the run's cores (``featurizers.pacm.live_threads``),
side by side on the same population of each workload, in one process.

For each workload of ``benchmarks/tuning.py`` a population of fresh programs is sampled from its design
space (MetaSchedule's ``SampleInitPopulation``, as the model-led search's draft samples them); both ways
featurize it (each after one warm-up batch, per-task set-up included once), the features are checked
equal (program by program), and the script prints ms per program and the ratio. The model's net
(``predict``) is timed too: it is the rest of the verify stage.

    flock /tmp/costlab-cpu.lock .venv/bin/python benchmarks/verify.py --model x86-cpu
    .venv/bin/python benchmarks/verify.py --workloads gmm c2d --population 128
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def population(task, target, size: int, seed: int) -> list:
    """``size`` fresh programs of the task's design space, sampled as the model-led search samples them."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

    from costlab.export.search.common import evolution_ffi
    from costlab.metaschedule.targets import target_cores
    from costlab.metaschedule.tune_context import tune_context

    ctx = tune_context(task.mod, target, EvolutionarySearch(population_size=size), rand_state=seed,
                       num_threads=target_cores(target))
    inner = ctx.search_strategy
    inner.pre_tuning(size, size, ctx.space_generator.generate_design_space(ctx.mod), ms.database.MemoryDatabase(),
                     ms.cost_model.RandomModel())
    return list(evolution_ffi("SampleInitPopulation")(inner, size))


def _differing(a: dict, b: dict) -> int:
    """Programs whose features differ between two featurizations of the same batch (NaN equal to NaN)."""
    bad = np.zeros(len(a["valid"]), bool)
    for key in a:
        x, y = a[key], b[key]
        for i in range(len(bad)):
            p, q = np.asarray(x[i]), np.asarray(y[i])
            bad[i] |= p.shape != q.shape or not np.array_equal(p, q, equal_nan=p.dtype.kind == "f")
    return int(bad.sum())


def time_workload(predictor, task, target, size: int, seed: int) -> dict:
    """Seconds per program of the featurizer on one thread and on the run's cores, and of the net."""
    import tvm_ffi

    from costlab.featurizers.ms_records import named_apart
    from costlab.featurizers.pacm import candidate_arrays, live_threads
    from costlab.featurizers.psa import target_dict
    from costlab.metaschedule.targets import is_gpu

    f = predictor.featurizer
    tdict = target_dict(target)
    schedules = population(task, target, size, seed)
    warm, rest = schedules[:8], schedules[8:]
    spec, gpu, key = f.spec_for(target=tdict), is_gpu(tdict), ("bench-1", int(tvm_ffi.structural_hash(task.mod)))

    def one_thread(batch):  # what featurize_candidates did before: the config's one extraction thread, on the
        mod, batch = named_apart(task.mod, batch)  # workload with its buffers named apart, as featurize_candidates
        return candidate_arrays(f._features(key, mod, tdict, batch, spec, gpu, 1))

    one_thread(warm)
    f.featurize_candidates(task.mod, target, warm)
    t0 = time.perf_counter()
    base = one_thread(rest)
    t1 = time.perf_counter()
    live = f.featurize_candidates(task.mod, target, rest)
    t2 = time.perf_counter()
    predictor.predict(live)
    t3 = time.perf_counter()
    n = len(rest)
    return dict(programs=n, threads=live_threads(tdict, int(f.config.get("num_threads", 1))),
                one_thread_ms=1e3 * (t1 - t0) / n, live_ms=1e3 * (t2 - t1) / n, predict_ms=1e3 * (t3 - t2) / n,
                differing=_differing(base, live))


def main(argv=None) -> int:
    from tuning import WORKLOADS, _tasks_of

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="x86-cpu", help="a PaCM model (name or artifact path)")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--population", type=int, default=256, help="programs per workload (default 256)")
    ap.add_argument("--target", default="host")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)

    import tvm

    from costlab.common.host import host_info
    from costlab.costmodels.predictors import load
    from costlab.metaschedule.targets import runnable_target
    from costlab.metaschedule.workloads import unique_buffer_names

    target = tvm.target.Target(runnable_target(args.target))
    predictor = load(args.model)
    if getattr(predictor.featurizer, "name", None) != "pacm":
        print(f"{args.model}: not a PaCM model; this benchmark times PaCM's extraction", file=sys.stderr)
        return 2
    predictor.use_target(target)  # a hardware input scores the machine tuning now
    rows = {}
    print(f"{'workload':<14}{'programs':>9}{'threads':>8}{'1 thread ms':>13}{'live ms':>9}{'speed-up':>10}"
          f"{'net ms':>8}  features")
    for name in args.workloads:
        (task,) = _tasks_of(WORKLOADS.get(name, ["--workload", name]), target)
        # the workload as `costlab tune` searches it, its buffers named apart (dep's two `placeholder`s): its
        # candidates are featurized as they come, not replayed on a renamed module first (7 ms a program more)
        task = dataclasses.replace(task, mod=unique_buffer_names(task.mod))
        r = rows[name] = time_workload(predictor, task, target, args.population, args.seed)
        same = f"{r['differing']} differ" if r['differing'] else "same"
        print(f"{name:<14}{r['programs']:>9}{r['threads']:>8}{r['one_thread_ms']:>13.2f}{r['live_ms']:>9.2f}"
              f"{r['one_thread_ms'] / r['live_ms']:>9.2f}x{r['predict_ms']:>8.3f}  {same}")
    ratios = [r["one_thread_ms"] / r["live_ms"] for r in rows.values()]
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"geomean speed-up of the featurizer: {geo:.2f}x; programs whose features differ: "
          f"{sum(r['differing'] for r in rows.values())} of {sum(r['programs'] for r in rows.values())}")
    if args.json:
        args.json.write_text(json.dumps(dict(host=host_info(), target=str(target), model=args.model,
                                             workloads=rows, geomean_speedup=geo), indent=2))
    return 0 if not any(r["differing"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
