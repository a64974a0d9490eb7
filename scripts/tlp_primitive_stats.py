"""Which MetaSchedule primitives carry information for the TLP tokenizer: measured, per task.

For every primitive kind K, over the programs of each task: does K's token (its keys and numbers, with
decisions folded and variables as ordinals) vary at all, and how much does it tell beyond the tokens kept
without the bookkeeping kinds? The second is the conditional entropy H(K | rest) in bits, averaged over
tasks, and the number of programs that only K tells apart. A kind with H(K | rest) = 0 everywhere is implied
by the kept tokens and is dropped (``tlp_tokens.DEFAULT_MS_DROP``).

Traces come from a costlab dataset (its ``ms`` records) or are sampled here the way MetaSchedule's
evolutionary search draws its initial population (random decisions on each design space, then the
post-processors), for TVM's benchmark workloads on a CPU and a GPU target (sampling needs TVM but no GPU):

    .venv/bin/python scripts/tlp_primitive_stats.py --sample 200            # sampled traces
    .venv/bin/python scripts/tlp_primitive_stats.py --data DATA.h5          # a dataset's records
    .venv/bin/python scripts/tlp_primitive_stats.py --traces traces.jsonl   # traces saved by --save
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
from pathlib import Path

import numpy as np
import orjson

from costlab.featurizers.tlp_tokens import DEFAULT_MS_DROP, ms_tokens

BOOKKEEPING = ("GetSBlock", "GetLoops", "GetChildBlocks", "GetConsumers", "GetProducers", "EnterPostproc",
               "Unannotate")


def sample_traces(per_task: int, target_kind: str):
    """(task name, trace JSON) pairs sampled like EvolutionarySearch's initial population."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.testing.te_workload import CONFIGS, create_te_workload
    from tvm.s_tir.schedule import Trace

    from costlab.metaschedule.traces import trace_json

    if target_kind == "cpu":
        target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    else:
        target = tvm.target.Target({"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 1024,
                                    "max_shared_memory_per_block": 49152, "thread_warp_size": 32})
    for name in CONFIGS:
        for idx in (0, 1):
            try:
                mod = tvm.IRModule({"main": create_te_workload(name, idx)})
            except Exception as exc:  # noqa: BLE001 - workloads this TVM no longer builds (e.g. winograd)
                print(f"skipped {name}/{idx}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name=name,
                                 num_threads=1)
            spaces = [s.trace.simplified(True) for s in ctx.generate_design_space()]
            postprocs = ctx.space_generator.postprocs
            got = tries = 0
            while got < per_task and tries < 20 * per_task:
                tries += 1
                sch = Schedule(mod, seed=tries, debug_mask=0)
                try:
                    Trace(spaces[tries % len(spaces)].insts, {}).apply_to_schedule(sch, remove_postproc=True)
                    sch.enter_postproc()
                    if not all(p.apply(sch) for p in postprocs):
                        continue
                except tvm.TVMError:
                    continue
                got += 1
                if got == per_task:
                    print(f"{target_kind}:{name}/{idx}: {got} traces in {tries} tries", file=sys.stderr)
                yield f"{target_kind}:{name}/{idx}", trace_json(sch.trace)


def dataset_traces(path: Path):
    from costlab.datasets import open_dataset

    with open_dataset(path) as ds:
        for pid in ds.record_platforms():
            for tr in ds.iter_tasks(pid):
                if tr.task.dialect != "ms":
                    continue
                for s in tr.schedules:
                    yield f"{pid}:{tr.task.index}", orjson.loads(s)


def entropy(counter) -> float:
    n = sum(counter.values())
    return -sum(c / n * math.log2(c / n) for c in counter.values())


def analyse(pairs) -> dict:
    by_task = collections.defaultdict(list)
    traces = collections.defaultdict(set)
    cut = collections.defaultdict(set)  # kept tokens with their numbers cut to the default 16 slots
    n_tokens, n_numbers = [], []
    for task, trace in pairs:
        traces[task].add(orjson.dumps(trace))
        kept = ms_tokens(trace)
        n_tokens.append(len(kept))
        n_numbers.extend(len(n) for _, n in kept)
        cut[task].add(tuple((k[0], tuple(n[:16])) for k, n in kept))
        tokens = ms_tokens(trace, drop=frozenset())
        sig = collections.defaultdict(list)
        for keys, nums in tokens:
            base = keys[-1]
            group = base if base in BOOKKEEPING or base.startswith("Sample") else "rest"
            sig[group].append((keys[0], tuple(nums)))
        by_task[task].append({k: tuple(v) for k, v in sig.items()})
    kinds = sorted({k for progs in by_task.values() for p in progs for k in p if k != "rest"})
    out = {"tasks": len(by_task), "programs": sum(map(len, by_task.values())), "kinds": {}}
    for k in kinds:
        varying = present = 0
        h_sum = 0.0
        extra = 0
        for progs in by_task.values():
            seen = [p for p in progs if k in p]
            if not seen:
                continue
            present += 1
            if len({p[k] for p in progs if k in p}) > 1:
                varying += 1
            joint = collections.Counter((p.get("rest"), p.get(k)) for p in progs)
            rest = collections.Counter(p.get("rest") for p in progs)
            h_sum += entropy(joint) - entropy(rest)
            extra += len(joint) - len(rest)
        out["kinds"][k] = dict(tasks_with=present, tasks_varying=varying,
                               h_given_rest=h_sum / max(present, 1), programs_only_it_separates=extra)
    distinct = sum(len({p.get("rest") for p in progs}) for progs in by_task.values())
    out["distinct_programs_kept_tokens"] = distinct
    out["distinct_traces"] = sum(map(len, traces.values()))
    out["distinct_kept_16_slots"] = sum(map(len, cut.values()))
    out["tokens_per_program"] = {q: float(np.percentile(n_tokens, q)) for q in (50, 99, 100)}
    out["numbers_per_token"] = {q: float(np.percentile(n_numbers, q)) for q in (50, 99, 100)}
    out["tokens_over_16_numbers"] = float(np.mean(np.asarray(n_numbers) > 16))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, help="a costlab dataset: use its MetaSchedule records")
    p.add_argument("--sample", type=int, default=0, metavar="N", help="sample N traces per workload and target")
    p.add_argument("--targets", default="cpu,gpu")
    p.add_argument("--traces", type=Path, metavar="JSONL",
                   help="read (task, trace) lines from this file instead (as --save writes them)")
    p.add_argument("--save", type=Path, metavar="JSONL", help="also write the traces, one {task, trace} a line")
    args = p.parse_args(argv)
    if not (args.data or args.sample or args.traces):
        p.error("give --data, --sample or --traces")
    if args.data:
        pairs = list(dataset_traces(args.data))
    elif args.traces:
        pairs = [(r["task"], r["trace"]) for r in map(orjson.loads, args.traces.read_bytes().splitlines())]
    else:
        pairs = [x for t in args.targets.split(",") for x in sample_traces(args.sample, t)]
    if args.save:
        args.save.write_bytes(b"".join(orjson.dumps({"task": t, "trace": tr}) + b"\n" for t, tr in pairs))
    res = analyse(pairs)
    print(f"{res['programs']} programs in {res['tasks']} tasks: {res['distinct_traces']} distinct traces, "
          f"{res['distinct_programs_kept_tokens']} distinct by the kept tokens alone")
    print(f"with numbers cut to 16 slots: {res['distinct_kept_16_slots']} distinct; kept tokens per program "
          f"p50/p99/max {'/'.join(f'{v:.0f}' for v in res['tokens_per_program'].values())}; numbers per token "
          f"p50/p99/max {'/'.join(f'{v:.0f}' for v in res['numbers_per_token'].values())}, "
          f"{100 * res['tokens_over_16_numbers']:.1f}% of tokens over 16")
    print(f"{'kind':24s} {'dropped':>7s} {'tasks':>6s} {'varying':>8s} {'H(K|rest)':>10s} {'only-K':>7s}")
    for k, v in res["kinds"].items():
        print(f"{k:24s} {'yes' if k in DEFAULT_MS_DROP else 'no':>7s} {v['tasks_with']:6d} "
              f"{v['tasks_varying']:8d} {v['h_given_rest']:10.4f} {v['programs_only_it_separates']:7d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
