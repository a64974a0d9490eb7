"""``costlab tune``: trained models inside MetaSchedule tuning."""

from __future__ import annotations

import sys

from costlab.commands.dataset import TARGET_HELP
from costlab.commands.exploit import task_label
from costlab.commands.options import builder_timeout_option, positive_int
from costlab.commands.signals import signals_end_cleanly
from costlab.common import jsontext
from costlab.common.errors import UsageError
from costlab.costmodels import kinds
from costlab.costmodels.recipes import ADAPT_MODES, auto_adapt_mode
from costlab.export.finals import KEEP_UNTUNED, MEASURES as FINAL_MEASURES
from costlab.export.schedulers import TASK_SCHEDULERS
from costlab.export.search import STRATEGIES, strategy_help
from costlab.export.transfer.run import usable_sources
from costlab.export.tune import MAX_TRIALS, TuneOptions, process_start, tune
from costlab.metaschedule.targets import normalize_target


def register(sub) -> None:
    q = sub.add_parser(
        "tune", help="tune workloads or a network with MetaSchedule, with a costlab model or MetaSchedule's default",
        description="Tune TVM benchmark workloads (each with its own budget of --trials) or the tasks of a network "
        "(--trials in all) with MetaSchedule. With --model, a costlab model leads the search (model-led: PSA "
        "drafts the initial pool, the model scores the genetic search, small first rounds); without, "
        "MetaSchedule's default (evolutionary search + XGBoost), so one command compares both. The work dir gets "
        "a MetaSchedule JSON database (`costlab dataset import-ms` reads it back, failed measurements included), "
        "search_rounds.jsonl (per round: candidates each stage scored and seconds it took), progress.jsonl (per "
        "measured batch: the run's seconds, trials so far, the task's best latency, and the batch's seconds of "
        "search, build and run) and costlab_tune.json (the summary, with the seconds from the command's start to "
        "the first measured batch). Interrupted and re-run with the same work dir, it continues and never "
        "measures a program of the database again.")
    q.add_argument("--workload", action="append", default=[], metavar="NAME[:ARGS]",
                   help="a te_workload benchmark, e.g. GMM:1,128,128,128 or C2D:1,28,28,128,128,3,1,1 (repeatable)")
    q.add_argument("--network", metavar="TYPE[:KEY=VALUE,...]|MODULE:FUNCTION",
                   help="a network: a transformers model type as for `dataset extract --hf` (bert, resnet, "
                   "llama:layers=4, ...) or a Python function returning (torch module, example inputs)")
    q.add_argument("--task", action="append", default=[], metavar="PATTERN", dest="task_filter",
                   help="tune only the network's tasks whose names match this shell pattern, e.g. "
                   "'fused_matmul_add*' (repeatable; a part of a network gets no end-to-end comparison)")
    q.add_argument("--batch", type=positive_int("--batch"), default=1, help="batch size of network inputs")
    q.add_argument("--seq-len", type=positive_int("--seq-len"), default=32, help="sequence length of text networks")
    q.add_argument("--target", default="host", help=TARGET_HELP)
    q.add_argument("--trials", type=int, default=200,
                   help="measured candidates per workload, or for the network (default 200)")
    q.add_argument("--max-seconds", type=float, metavar="S",
                   help="wall-time budget of this run: no round starts after S seconds (the database stays "
                   "complete); the run ends at whichever of --trials and --max-seconds comes first")
    q.add_argument("--model", metavar="MODEL",
                   help="a costlab model: model dir or archive (costlab export), training run dir, shipped model "
                   f"name (costlab models), {kinds.spoken(kinds.untrained())}; default: MetaSchedule's XGBoost model")
    q.add_argument("--strategy", choices=list(STRATEGIES), help=strategy_help())
    q.add_argument("--task-scheduler", choices=list(TASK_SCHEDULERS),
                   help="which of a network's tasks gets the next round: gain (default for a network): after every "
                   "task's first round, the task expected to save the most end-to-end time per second of tuning "
                   "(weight x best latency x predicted improvement / seconds per round); gradient, round-robin: "
                   "MetaSchedule's own (docs/search.md)")
    q.add_argument("--adapt", choices=["auto", *ADAPT_MODES], default="auto",
                   help="online adaptation of the model to the run's measurements: "
                   + "; ".join(f"{name}: {mode.help}" for name, mode in ADAPT_MODES.items())
                   + f"; auto, the default: {auto_adapt_mode(True)} for a learned model, {auto_adapt_mode(False)} for "
                   + f"{', '.join(kinds.untrained())} or a baseline")
    q.add_argument("--head", metavar="PLATFORM", help="the head of a multi-platform model to score with")
    q.add_argument("--strict", action="store_true", help="refuse a model trained for another target kind")
    q.add_argument("--seed", type=int, default=0,
                   help="MetaSchedule's random state of each task (default 0). Not a replay: the search samples on the "
                        "target's num-cores threads, each candidate drawn by whichever thread is free, and the "
                        "default XGBoost model scores at random before its first training, so two runs of one "
                        "seed measure other programs from their first batch on")
    q.add_argument("--per-iter", type=int, default=64, help="candidates measured per round (default 64)")
    q.add_argument("--first-rounds", default="8,16,32", metavar="N,N,...",
                   help="model-led: candidates measured in the first rounds, before --per-iter (default 8,16,32)")
    q.add_argument("--population", type=int,
                   help="genetic search population (default 512; 256 for model-led, whose model scores every "
                   "generation)")
    q.add_argument("--verify-fraction", type=float, default=0.1,
                   help="share of the PSA-drafted candidates that the model verifies (draft-verify; default 0.1)")
    q.add_argument("--ms-defaults", action="store_true",
                   help="MetaSchedule's own builder and runner, exactly as tune_tir uses them")
    q.add_argument("--screen", type=float, metavar="RATIO",
                   help="run every candidate once first and measure in full only those faster than RATIO x their "
                   "task's best so far; the others keep their one run as their cost (default 1.5; 0: every "
                   "candidate measured in full; off with --ms-defaults and --rpc-key)")
    q.add_argument("--full-repeats", action="store_true",
                   help="with --screen: measure the candidates that pass it with min_repeat_ms 100 whatever their "
                   "time (default: sized to their first run, 20 runs of it and 10-100 ms)")
    q.add_argument("--final-top", type=int, default=4, metavar="K",
                   help="a network's tasks: measure their K fastest programs (those within 1.15x of the best) again "
                   "together after the search and build the network from the fastest of that measurement (0: the "
                   "search's fastest as measured; default 4)")
    q.add_argument("--final-measure", choices=FINAL_MEASURES, default="cold",
                   help="how that second measurement times a program on a CPU: cold (default: the caches flushed of "
                   "its weights and output before every run, as the kernel meets them inside the network) or warm "
                   "(repeated runs, as the search measures)")
    q.add_argument("--keep-untuned", choices=KEEP_UNTUNED, default="auto",
                   help="that second measurement measures each task's untuned program (DLight's schedule, as a build "
                   "gives a function without a tuned program) too, and a task keeps it where it ran faster: auto "
                   "(default: on a GPU; a CPU's untuned programs are unscheduled loops, slow to measure), on, off")
    builder_timeout_option(q)
    q.add_argument("--rpc-key", help="run kernels on remote devices of this key through a TVM RPC tracker")
    q.add_argument("--rpc-host", default="127.0.0.1")
    q.add_argument("--rpc-port", type=int, default=9190)
    q.add_argument("--exploit", type=int, default=0, metavar="N",
                   help="after the search, N trials of Droplet exploitation in all (not per workload: the tasks "
                   "take rounds of 8 in turn, fastest first, so a small N reaches only the first) around each task's "
                   "best program (costlab exploit; with --model, neighbours screened by it)")
    q.add_argument("--transfer-from", action="append", default=[], metavar="SOURCE",
                   help="before the search, measure each task's best --transfer-top schedules of the same kernel "
                   "class from this dataset or work dir (costlab transfer; repeatable); the search starts from them")
    q.add_argument("--transfer-top", type=int, default=4, metavar="K",
                   help="programs transferred per task (from --transfer-from, and from the library), within the "
                   "task's share of --trials (a network's: --trials over its tasks, at least 1; default 4)")
    q.add_argument("--library", metavar="DIR",
                   help="the schedule library's folder (default $COSTLAB_LIBRARY, else ~/.cache/costlab/library): "
                   "each task starts from the --transfer-top best programs of its kernel class tuned before (this "
                   "platform's library and the starter shipped with costlab; replayed, ranked by the model, "
                   "measured), and the run's checked best programs are added to it when it ends (costlab library)")
    q.add_argument("--no-library", action="store_true",
                   help="neither start from the schedule library nor add to it")
    q.add_argument("--rpc-wait", type=float, default=60.0, metavar="S",
                   help="seconds to wait for an RPC tracker or device that stopped answering; then the run stops "
                   "(candidates not measured are not recorded: a re-run measures them)")
    q.add_argument("--work-dir", required=True, metavar="DIR")
    q.add_argument("--no-check", action="store_true",
                   help="report each task's fastest program without running it beside a reference build on random "
                   "inputs first (by default a program whose output differs is reported and never chosen; runs "
                   "through --rpc-key are not checked)")
    q.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(func=_tune)


def _counts(text: str) -> tuple:
    """``--first-rounds``: one or more candidate counts, comma-separated, each from 1 to MAX_TRIALS (an empty
    item, as in ``8,,16`` or ``,``, is refused, not skipped)."""
    items = [x.strip() for x in str(text).split(",")]
    if not all(x.isascii() and x.isdigit() and 1 <= int(x) <= MAX_TRIALS for x in items):
        raise UsageError(f"--first-rounds takes comma-separated candidate counts from 1 to {MAX_TRIALS:,}, e.g. "
                         f"8,16,32, not {text!r}")
    return tuple(int(x) for x in items)


def _tune(args) -> int:
    import time

    # seconds count from the command's start: the process's, unless this process has run for a while
    # already (main() called from a longer-lived Python program): then from this call
    now, began = time.time(), process_start()
    started_at = began if now - began < 30 else now

    opts = TuneOptions(work_dir=str(args.work_dir), workloads=args.workload, network=args.network,
                       task_filter=args.task_filter, batch=args.batch, max_seconds=args.max_seconds,
                       first_rounds=_counts(args.first_rounds),
                       seq_len=args.seq_len, target=args.target, trials=args.trials, model=args.model,
                       strategy=args.strategy, adapt=args.adapt, head=args.head, strict=args.strict, seed=args.seed,
                       per_iter=args.per_iter, population=args.population, verify_fraction=args.verify_fraction,
                       ms_defaults=args.ms_defaults, builder_timeout=args.builder_timeout, rpc_key=args.rpc_key,
                       rpc_host=args.rpc_host, rpc_port=args.rpc_port, rpc_wait=args.rpc_wait, exploit=args.exploit,
                       transfer_from=args.transfer_from, transfer_top=args.transfer_top, progress=not args.no_progress,
                       check_output=not args.no_check, started_at=started_at, task_scheduler=args.task_scheduler,
                       screen=args.screen, sized_repeats=False if args.full_repeats else None,
                       library=args.library, use_library=not args.no_library, final_top=args.final_top,
                       final_measure=args.final_measure, keep_untuned=args.keep_untuned)
    if args.transfer_from:  # sources that hold nothing to start from: refused before the work dir is made
        usable_sources(args.transfer_from, exclude=[args.work_dir], kind=_target_kind(args.target))
    with signals_end_cleanly():
        summary = tune(opts)
    if summary.get("unchanged"):  # its seconds, stop and exploitation lines are the earlier command's
        print(f"the run in {args.work_dir} is finished: nothing more to measure for these options (what follows "
              f"is its summary, {args.work_dir}/costlab_tune.json)", file=sys.stderr)
        if not args.json:
            summary = {k: v for k, v in summary.items() if k not in ("stopped", "exploit", "first_batch_s", "wall_s",
                                                                     "skipped_lines")}
    skipped = summary.get("skipped_lines") or []
    if skipped:
        print(f"skipped {len(skipped)} bad line(s) of the database, moved to database_tuning_record.bad-lines.jsonl: "
              + "; ".join(skipped[:3]) + (" ..." if len(skipped) > 3 else ""), file=sys.stderr)
    if summary.get("stopped"):
        print(f"stopped: {summary['stopped']}", file=sys.stderr)
    failed = (summary.get("network") or {}).get("error")
    if failed:  # tuning is complete and recorded; only the end-to-end comparison is missing
        print(f"error: the tuned network did not build or run end to end ({failed}); the database and "
              f"{args.work_dir}/costlab_tune.json are complete", file=sys.stderr)
    check = (summary.get("network") or {}).get("output_check") or {}
    if check.get("status") == "differs":  # timed, but not a tuned network: its output is wrong
        diff = check.get("max_abs_diff")  # None: a NaN, written to JSON by an earlier costlab as null
        why = check.get("reason") or (f"largest difference {diff:.3g}" if diff is not None else "not a number")
        print(f"error: the tuned network's output differs from PyTorch's on the same inputs ({why}); it is not "
              f"reported as tuned; the database and {args.work_dir}/costlab_tune.json are complete", file=sys.stderr)
        failed = failed or "output differs"
        if not args.json:
            return 1
    if args.json:
        print(jsontext.dumps(summary))
        return 1 if failed else 0
    for t in summary["tasks"]:
        best = f"{t['best_us']:.2f} us" if t["best_us"] is not None else "no valid program"
        if t["best_us"] is None and t.get("failure"):
            best += f" (the last failure: {t['failure']})"
        check = t.get("check", {})
        note = {"ok": " (output checked)", "replaced": " (output checked; a faster program computed a wrong "
                "result and was not chosen)", "wrong": " (every checked program computed a wrong result: "
                + "; ".join(c["result"] for c in check.get("checked", [])) + ")"}.get(check.get("status"), "")
        if t.get("kept") == "untuned":
            note += f"; its untuned schedule kept, faster in the second measurement ({t['untuned_us']:.2f} us)"
        print(f"{t['name']}: {t['trials']} trials, best {best}{note}")
    for line in _exploit_lines(summary.get("exploit")):
        print(line, file=sys.stderr)
    screening = summary.get("screening")
    if screening:
        print(f"screened out {screening['screened_out']} of {screening['candidates']} candidates (a first run at "
              f"least {screening['ratio']:g}x their task's best; not measured further)", file=sys.stderr)
    if summary.get("first_batch_s") is not None:
        parts = summary.get("first_batch") or {}
        said = (f": start-up {parts['start_up_s']:.1f} s, search {parts['search_s']:.1f} s, build "
                f"{parts['build_s']:.1f} s, run {parts['run_s']:.1f} s" if parts else "")
        print(f"first measured batch {summary['first_batch_s']:.1f} s after the command started{said}",
              file=sys.stderr)

    if "network" in summary and not failed:
        n = summary["network"]
        checked = " (output checked against PyTorch's)" if (n.get("output_check") or {}).get("status") == "ok" else ""
        print(f"network end to end: tuned {n['tuned_ms']:.3f} ms, untuned {n['untuned_ms']:.3f} ms "
              f"({n['speedup']}x){checked}")
    if "wall_s" in summary:
        print(f"work dir: {args.work_dir} ({summary['wall_s']:.0f} s)", file=sys.stderr)
    return 1 if failed else 0


def _target_kind(target) -> str | None:
    """The kind (``llvm``, ``cuda``, ...) of ``--target``; None for one that does not read (the run says why)."""
    try:
        return str(normalize_target(target).get("kind")) or None
    except Exception:  # noqa: BLE001  refused with its reason by the run itself
        return None


def _exploit_lines(exploited: dict | None) -> list[str]:
    """What ``--exploit`` did, for the text output: skipped and why, or its trials and each task's round that
    failed (the task is left to a re-run)."""
    if not exploited:
        return []
    if exploited.get("skipped"):
        return [f"exploitation skipped: {exploited['skipped']}"]
    lines = [f"exploitation: {exploited['trials']} trials in {exploited['wall_s']:.0f} s"]
    lines += [f"  error: task {task_label(t)}: a round failed ({t['error']}); the task is not done, "
              "a re-run continues it" for t in exploited.get("tasks", []) if t.get("error")]
    return lines
