"""Transfer-tuning against MetaSchedule's default, Transfer-Tuning's protocol scaled to 2 cores.

Pairs of networks (source -> target), none in the pre-training corpus (scripts/make_corpus.sh), one pair
differing in shapes only and two in architecture. Per pair, each a `costlab tune` work dir under
OUT/runs/PAIR/ARM, kept (re-running `run` skips finished arms):

  src   the source network tuned by costlab's default with the model, SOURCE_PER_TASK trials per task
  x     the target after transfer alone: `costlab tune --transfer-from src --transfer-top K --trials 1`, so
        nothing is searched (transfer.json says what came from where); a task no source matches stays untuned
  x64   x continued by costlab's search with the model, 64 more trials per task (--more)
  full  MetaSchedule's default (evolutionary search + XGBoost) on the target, FULL_PER_TASK trials per task

Every arm's network is compiled with its database and timed end to end by `costlab tune` itself (beside the
untuned build). The table gives the share of full's gain that transfer reaches, (untuned - x) / (untuned -
full), and the ratio of speedups, (untuned / x) / (untuned / full); and the trials and seconds `full` needs
until its weighted sum of task latencies (sum of weight x best over the tasks x has a program for, from its
progress.jsonl) is no longer above x's (and x64's), against x's own seconds. Once a pair's arms are done,
`run` times the target network again for x, x64 and full together, the builds in turn five times, median
kept (each arm's network.json; the table reads it before costlab_tune.json's own timing). Runs hold
/tmp/costlab-cpu.lock while they build and measure.

    .venv/bin/python benchmarks/transfer.py run --out bench/transfer --model x86-cpu
    .venv/bin/python benchmarks/transfer.py table --out bench/transfer

Targets (issue 18): transfer alone >= 60 % of full's gain on the mean, `full` needing >= 8x transfer's
seconds to match it; transfer + 64 >= full on at least one pair.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tuning import COSTLAB, _progress, _tasks_of  # noqa: E402
from identity import check_identity  # noqa: E402

from costlab.common.children import run_or_stop  # noqa: E402
from costlab.common.cpu_lock import cpu_lock  # noqa: E402
from costlab.common.files import write_atomically  # noqa: E402
from costlab.costmodels.predictors import weights_sha256  # noqa: E402
from costlab.export.workdir import WorkDir  # noqa: E402
from costlab.metaschedule.databases import json_database  # noqa: E402

SEQ = "64"
PAIRS = {
    # shapes only: two sizes of one architecture
    "bert192-bert256": ("bert:hidden=192,heads=4,intermediate=768", "bert:hidden=256,heads=4,intermediate=1024"),
    # architecture: a text encoder's schedules on a vision transformer (attention + dense both)
    "bert256-vit256": ("bert:hidden=256,heads=4,intermediate=1024", "vit:hidden=256,heads=4,intermediate=1024,image=64"),
    # architecture: a decoder's schedules on an encoder
    "gpt2-bert192": ("gpt2:hidden=192,heads=4,intermediate=768", "bert:hidden=192,heads=4,intermediate=768"),
}
ARMS = ("src", "x", "x64", "full")


def _ntasks(network: str, target: str) -> int:
    import tvm

    from costlab.metaschedule.targets import runnable_target

    return len(_tasks_of(["--network", network, "--seq-len", SEQ], tvm.target.Target(runnable_target(target))))


def _cmd(arm: str, pair: str, args, out: Path) -> list[str]:
    source, target_net = PAIRS[pair]
    runs = out / "runs" / pair
    net = source if arm == "src" else target_net
    n = _ntasks(net, args.target)
    base = [*COSTLAB, "tune", "--network", net, "--seq-len", SEQ, "--target", args.target, "--seed", str(args.seed),
            "--work-dir", str(runs / arm), "--no-progress",
            "--no-library"]  # transfer from the named source alone, no schedule library
    if arm == "src":
        return [*base, "--model", args.model, "--trials", str(args.source_per_task * n)]
    if arm == "x":  # a budget of 1: the transferred trials fill it, nothing is searched
        return [*base, "--model", args.model, "--trials", "1", "--transfer-from", str(runs / "src"),
                "--transfer-top", str(args.top)]
    if arm == "x64":  # the trials in x's database count: 64 more per task
        transferred = sum(t["trials"] for t in _summary(runs / "x")["tasks"])
        return [*base, "--model", args.model, "--trials", str(transferred + args.more * n)]
    return [*base, "--trials", str(args.full_per_task * n)]


def run(args) -> int:
    out = Path(args.out).resolve()
    args.model = check_identity(out, args.target, args.model)  # continued: the same host, target and model
    _check_settings(out, args)  # and the same seed and budgets: arms of two settings are never one table
    for pair in args.pairs:
        _run_pair(pair, args, out)
        runs = out / "runs" / pair
        if all((runs / arm / "done.json").exists() for arm in ARMS) and not all(
                "rounds_ms" in _summary(runs / arm).get("network", {}) for arm in ARMS[1:]):
            with cpu_lock():
                _retime(runs, PAIRS[pair][1], args.target)
    return table(args)


SETTINGS = "settings.json"


def _check_settings(out: Path, args) -> None:
    """Record, or check against the record, the settings every arm's command is made of; SystemExit naming
    what differs. An --out of runs made before it recorded them: the seed and --transfer-top their done.json
    commands name are checked."""
    mine = dict(seed=args.seed, top=args.top, more=args.more, source_per_task=args.source_per_task,
                full_per_task=args.full_per_task)
    path = out / SETTINGS
    if path.exists():
        old = json.loads(path.read_text())
    else:
        old = {}
        for done in out.glob("runs/*/*/done.json"):
            cmd = json.loads(done.read_text()).get("cmd") or []
            for flag, key in (("--seed", "seed"), ("--transfer-top", "top")):
                if flag in cmd[:-1]:
                    old.setdefault(key, int(cmd[cmd.index(flag) + 1]))
    differ = [f"{k} {old[k]} (not {v})" for k, v in mine.items() if k in old and old[k] != v]
    if differ:
        raise SystemExit(f"{out} holds arms run with {', '.join(differ)}: give those, or use another --out")
    write_atomically(path, json.dumps(mine, indent=1).encode())


def _run_pair(pair: str, args, out: Path) -> None:
    """The pair's arms in order, each skipped once done; an arm that fails stops the pair."""
    for arm in ARMS:
        work = out / "runs" / pair / arm
        if (work / "done.json").exists():
            continue
        if work.exists():  # an arm cut short starts again: its seconds are those of one uninterrupted run
            shutil.rmtree(work)
        if arm == "x64":  # continues x's work dir (a copy): its transferred programs are in the database
            shutil.copytree(out / "runs" / pair / "x", work, ignore=shutil.ignore_patterns("done.json", "run.log",
                                                                                         WorkDir.LOCK))
        work.mkdir(parents=True, exist_ok=True)
        print(f"[{time.strftime('%H:%M:%S')}] {pair} {arm}", flush=True)
        with cpu_lock(), open(work / "run.log", "a") as log:
            cmd = _cmd(arm, pair, args, out)  # extracts the network's tasks: under the lock too
            t0 = time.time()
            rc = run_or_stop(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work)  # a SIGTERM ends the arm first
        if rc:
            print(f"  failed (exit {rc}); see {work / 'run.log'}", flush=True)
            break  # the arms after it depend on it
        from costlab.common.host import host_info

        write_atomically(work / "done.json", json.dumps(dict(wall_s=time.time() - t0, host=host_info(), cmd=cmd[2:],
                                                        model=args.model, model_sha256=weights_sha256(args.model),
                                                        at=time.strftime("%Y-%m-%d %H:%M:%S"))).encode())


def _summary(work: Path) -> dict:
    """The arm's costlab_tune.json, its end-to-end timing replaced by network.json's where it was re-timed."""
    path = work / WorkDir.SUMMARY
    out = json.loads(path.read_text()) if path.exists() else {}
    if (work / "network.json").exists():
        out["network"] = json.loads((work / "network.json").read_text())
    return out


def _retime(runs: Path, network: str, target: str, rounds: int = 5) -> None:
    """Time the target network end to end again for every finished arm of a pair, with each task's fastest
    program of the arm's database (costlab tune's own choice when every task's program passed its output
    check), into each arm's network.json: the builds timed in turn, ``rounds`` times, and the median kept,
    so that arms whose programs are about as fast are compared under the same conditions (one timing per
    arm, taken minutes apart at the end of each run, differs by up to 15 % between runs of one build).
    Arms timed before `costlab tune --network` applied the programs of fused tasks need it too: those
    timings are of builds where every fused task ran untuned."""
    import os
    import statistics
    from types import SimpleNamespace

    import tvm

    from costlab.export.network import build, time_network
    from costlab.export.tasks import measuring_target, workload_tasks
    from costlab.metaschedule.targets import target_cores

    tgt = measuring_target(target)
    os.environ["TVM_NUM_THREADS"] = str(target_cores(tgt))
    opts = SimpleNamespace(workloads=[], network=network, batch=1, seq_len=int(SEQ), task_filter=[])
    _tasks, (mod, inputs, _reference) = workload_tasks(opts, tgt)
    arms = [arm for arm in ARMS[1:] if (runs / arm / "done.json").exists()]
    built = {"untuned": build(mod, tgt)}
    for arm in arms:
        built[arm] = build(mod, tgt, json_database(work_dir=str(runs / arm)))
    times: dict = {k: [] for k in built}
    for _ in range(rounds):
        for k, (exe, _m) in built.items():
            times[k].append(time_network(exe, inputs, tvm.cpu(0)) * 1e3)
    untuned = statistics.median(times["untuned"])
    for arm in arms:
        hit, n = built[arm][1]
        res = dict(tuned_ms=round(statistics.median(times[arm]), 4), untuned_ms=round(untuned, 4),
                   speedup=round(untuned / statistics.median(times[arm]), 3), threads=target_cores(tgt),
                   tuned_functions=hit, functions=n, rounds_ms=[round(t, 4) for t in times[arm]],
                   untuned_rounds_ms=[round(t, 4) for t in times["untuned"]],
                   retimed=time.strftime("%Y-%m-%d %H:%M:%S"))
        write_atomically(runs / arm / "network.json", json.dumps(res, indent=1).encode())
        print(f"  {runs.name} {arm}: tuned {res['tuned_ms']} ms (rounds {res['rounds_ms']}), untuned "
              f"{res['untuned_ms']} ms, {hit} of {n} functions tuned", flush=True)


def _weighted(summary: dict) -> tuple[float, dict] | None:
    """A run's sum of weight x best latency over the tasks it has a program for, and those tasks' weights."""
    rows = [r for r in summary.get("tasks", []) if r.get("best_us") is not None]
    if not rows:
        return None
    return sum(r["weight"] * r["best_us"] for r in rows), {r["name"]: r["weight"] for r in rows}


def _reach(work: Path, goal) -> tuple[int, float] | None:
    """Trials and seconds at which a run's weighted sum of task bests, over the tasks ``goal`` covers, first got
    to ``goal``'s or below (from the run's progress.jsonl)."""
    if goal is None:
        return None
    total, weights = goal
    best: dict = {}
    for row in _progress(work):
        if row["task"] in weights:
            best[row["task"]] = min(best.get(row["task"], math.inf), row.get("best_us") or math.inf)
        if len(best) == len(weights) and sum(weights[t] * best[t] for t in weights) <= total:
            return row["trials"], row["elapsed_s"]
    return None


def table(args) -> int:
    out = Path(args.out).resolve()
    rows = {}
    print(f"{'pair':18}{'untuned ms':>11}{'x ms':>8}{'x64 ms':>8}{'full ms':>8}{'gain %':>8}{'speedup %':>10}"
          f"{'x s':>7}{'full to x':>16}{'full to x64':>16}")
    for pair in PAIRS:
        runs = out / "runs" / pair
        s = {arm: _summary(runs / arm) for arm in ARMS}
        net = {arm: s[arm].get("network", {}) for arm in ARMS}
        if not net["x"] or not net["full"]:
            continue
        untuned = net["full"]["untuned_ms"]
        x, x64, full = net["x"]["tuned_ms"], net["x64"].get("tuned_ms"), net["full"]["tuned_ms"]
        gain = (untuned - x) / (untuned - full) if untuned > full else None
        speed = (untuned / x) / (untuned / full)
        reach = {k: _reach(runs / "full", _weighted(s[k])) for k in ("x", "x64")}
        row = dict(untuned_ms=untuned, x_ms=x, x64_ms=x64, full_ms=full, gain_share=gain, speedup_share=speed,
                   x_s=s["x"].get("wall_s"), x64_s=s["x64"].get("wall_s"), full_s=s["full"].get("wall_s"),
                   full_reach_x=reach["x"], full_reach_x64=reach["x64"], transfer=s["x"].get("transfer"))
        rows[pair] = row

        def cell(r):
            return f"{r[0]} tr {r[1]:.0f} s" if r else "not reached"
        print(f"{pair:18}{untuned:11.3f}{x:8.3f}{(x64 or math.nan):8.3f}{full:8.3f}"
              f"{(gain or math.nan) * 100:8.1f}{speed * 100:10.1f}{row['x_s'] or 0:7.0f}{cell(reach['x']):>16}"
              f"{cell(reach['x64']):>16}")
    write_atomically(out / "table.json", json.dumps(rows, indent=1).encode())
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--model", default="x86-cpu")
    r.add_argument("--pairs", nargs="+", default=list(PAIRS))
    r.add_argument("--top", type=int, default=4, help="programs transferred per task")
    r.add_argument("--more", type=int, default=64, help="trials per task of costlab's search after the transfer (x64)")
    r.add_argument("--source-per-task", type=int, default=32, help="trials per task tuning the source")
    r.add_argument("--full-per-task", type=int, default=200, help="MetaSchedule's default's trials per task")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--target", default="host")
    t = sub.add_parser("table")
    t.add_argument("--out", required=True)
    a = p.parse_args(argv)
    return run(a) if a.cmd == "run" else table(a)


if __name__ == "__main__":
    sys.exit(main())
