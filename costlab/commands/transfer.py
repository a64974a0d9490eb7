"""``costlab transfer``: start a new workload from the schedules already tuned for kernels of its class."""

from __future__ import annotations

import sys

from costlab.commands.dataset import TARGET_HELP
from costlab.commands.options import add_to_library, builder_timeout_option, int_in, library_options, positive_int
from costlab.commands.signals import signals_end_cleanly
from costlab.common import jsontext
from costlab.costmodels import kinds
from costlab.export.stop import stop_requested
from costlab.export.transfer.run import TransferOptions, transfer
from costlab.metaschedule.repair import moved_aside_note


def register(sub) -> None:
    q = sub.add_parser(
        "transfer", help="measure, per task, the best schedules of the same kernel class tuned before (warm start)",
        description="Transfer-tuning: for each task of a workload or network, the measured programs of tasks of "
        "the same kernel class (the same anchor computation; same or other fused blocks) in the sources are "
        "replayed with their tile factors adapted to the new loop extents, ranked by --model "
        f"({kinds.create(kinds.draft()).title} without one), "
        "and the best --top built and measured into the work dir's MetaSchedule database, from which a later "
        "`costlab tune --work-dir DIR` (or MetaSchedule's own search) starts. transfer.json says what was "
        "transferred from where, and why programs failed; re-run, finished tasks are skipped.")
    q.add_argument("--from", dest="sources", action="append", required=True, metavar="SOURCE",
                   help="a costlab dataset (.h5), a MetaSchedule work dir (costlab tune's), or a folder of work dirs "
                   "(repeatable)")
    q.add_argument("--workload", action="append", default=[], metavar="NAME[:ARGS]",
                   help="a te_workload benchmark, e.g. GMM:1,128,128,128 (repeatable)")
    q.add_argument("--network", metavar="TYPE[:KEY=VALUE,...]|MODULE:FUNCTION", help="a network, as for costlab tune")
    q.add_argument("--task", action="append", default=[], metavar="PATTERN", dest="task_filter",
                   help="only the network's tasks whose names match this shell pattern (repeatable)")
    q.add_argument("--batch", type=positive_int("--batch"), default=1, help="batch size of network inputs")
    q.add_argument("--seq-len", type=positive_int("--seq-len"), default=32, help="sequence length of text networks")
    q.add_argument("--target", default=None,
                   help="TVM target; default: the target of the run in --work-dir (of its records when no run "
                        "made it), or 'host' for a new work dir. "
                        + TARGET_HELP.split(": ", 1)[1].replace(" (default)", ""))
    q.add_argument("--model", metavar="MODEL",
                   help=f"rank the replayed programs with this costlab model (default {kinds.draft()})")
    q.add_argument("--top", type=positive_int("--top"), default=4, help="programs measured per task")
    q.add_argument("--per-source", type=positive_int("--per-source"), default=4,
                   help="fastest programs taken from each matching source task")
    q.add_argument("--max-candidates", type=positive_int("--max-candidates"), default=128,
                   help="programs replayed per task at most")
    q.add_argument("--seed", type=int_in("--seed", 0, 2**31 - 2), default=0)
    builder_timeout_option(q)
    q.add_argument("--work-dir", required=True, metavar="DIR")
    q.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    q.add_argument("--no-progress", action="store_true")
    library_options(q)
    q.set_defaults(func=_transfer)


def _transfer(args) -> int:
    opts = TransferOptions(work_dir=args.work_dir, sources=args.sources, workloads=args.workload, network=args.network,
                           task_filter=args.task_filter, batch=args.batch, seq_len=args.seq_len, target=args.target,
                           model=args.model, top=args.top, per_source=args.per_source,
                           max_candidates=args.max_candidates, seed=args.seed, builder_timeout=args.builder_timeout,
                           progress=not args.no_progress)
    with signals_end_cleanly():
        summary = transfer(opts, should_stop=lambda: stop_requested() is not None)
    if stop_requested() is None:  # a finished run's checked best programs go to the library
        add_to_library(args, summary)
    if summary.get("skipped_lines"):
        print(moved_aside_note(args.work_dir, summary["skipped_lines"]), file=sys.stderr)
    if args.json:
        print(jsontext.dumps(summary))
        return 0
    print(f"{args.work_dir}: {summary.get('source_tasks', 0)} source tasks", file=sys.stderr)
    for problem in summary.get("source_problems") or []:
        print(f"  skipped {problem}", file=sys.stderr)
    for note in summary.get("source_notes") or []:
        print(f"  note: {note}", file=sys.stderr)
    this_run = summary.get("this_run") or {}
    for key, row in summary["tasks"].items():
        if this_run and key not in this_run:  # an earlier command's task, not asked for now
            continue
        counts = row.get("counts", {})
        failed = sum(v for k, v in counts.items() if k.startswith("failed"))
        known = counts.get("already measured", 0) + counts.get("duplicate", 0)
        measured = row.get("measured", [])
        errors = [m["error"] for m in measured if m.get("error")]
        # a program that failed its measurement is measured (a re-run never measures it again): the line says why
        ran = f"{len(measured)} measured" + (f" ({len(errors)} failed: {errors[0][:120]})" if errors else "")
        best = f"best {row['best_us']} us" if row.get("best_us") is not None else "no program ran"
        # tried = replayed + did not apply + already measured or duplicates (row["replayed"]: the new programs)
        print(f"  {row['name']}: {counts.get('source_tasks', 0)} matching source tasks, {counts.get('tried', 0)} "
              f"tried, {row.get('replayed', 0)} replayed ({failed} did not apply, {known} already measured or "
              f"duplicates), {ran}, {best}"
              + (" (done by an earlier transfer: nothing measured now)" if this_run.get(key) else ""))
    return 0
