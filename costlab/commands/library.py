"""``costlab library``: the schedule library every run starts from (list, add, prune, export)."""

from __future__ import annotations

import json
import sys

from costlab.commands.options import positive_int
from costlab.common.errors import CostlabError, InputError, UsageError
from costlab.common.host import describe_host
from costlab.export.library.add import add_work_dirs
from costlab.export.library.store import FILE, default_root, open_library, read_library, starter_library
from costlab.metaschedule.targets import host_target, platform_id_for

LIBRARY_HELP = ("the libraries' folder (default $COSTLAB_LIBRARY, else ~/.cache/costlab/library); each host "
                "platform's library is a folder in it")


def register(sub) -> None:
    q = sub.add_parser(
        "library", help="the schedule library: tuned programs every run starts from",
        description="Every finished costlab tune, exploit and transfer run adds its checked best programs per task "
        "to the library of its host platform; every run starts each task from the library's tasks of the same "
        "kernel class (their programs replayed with tilings adapted, ranked by the model, measured like any "
        "candidate). A library entry is a start, never a measurement.")
    verbs = q.add_subparsers(dest="verb", required=True, metavar="{list,add,prune,export}")
    ls = verbs.add_parser("list", help="what the libraries hold (this host's platform, or --platform)",
                          description="Per library (one per host platform) and per task: its programs, how many "
                          "were checked against a reference build, the fastest, and the host that measured them.")
    ls.add_argument("--platform", help="one platform's library (default: every library in the folder)")
    ls.add_argument("--starter", action="store_true", help="also the starter library shipped with costlab")
    ls.add_argument("--json", action="store_true")
    add = verbs.add_parser("add", help="a tuned work dir's checked best programs per task into its platform's library",
                           description="Each task's fastest programs of a work dir's MetaSchedule database, the first "
                           "that computes the right result checked here, into the library of its records' platform "
                           "(--platform: another's); another host's run is refused by a library holding this one's.")
    add.add_argument("work_dirs", nargs="+", metavar="WORK_DIR",
                     help="a MetaSchedule work dir (costlab tune's, tune_tir's; .gz files too), or an exported "
                     "library folder (library.json)")
    add.add_argument("--per-task", type=positive_int("--per-task"), default=4, help="programs kept per task")
    add.add_argument("--platform", help="the platform whose library they go to (default: their records' target's, "
                     "e.g. llvm-znver5-2c; a run of this host's target reads `costlab library list`'s first)")
    add.add_argument("--no-check", action="store_true",
                     help="add without running the programs beside a reference build (they are added unchecked)")
    add.add_argument("--no-progress", action="store_true")
    pr = verbs.add_parser("prune", help="drop programs and tasks from a platform's library",
                          description="Keep the fastest --per-task programs per task, the --max-tasks tasks added "
                          "most recently, and drop the tasks whose name matches --remove.")
    pr.add_argument("--platform", help="the platform's library (default: this host's)")
    pr.add_argument("--per-task", type=positive_int("--per-task"), help="keep this many fastest programs per task")
    pr.add_argument("--max-tasks", type=positive_int("--max-tasks"), help="keep the tasks added most recently")
    pr.add_argument("--remove", action="append", default=[], metavar="PATTERN",
                    help="drop the tasks whose name matches this shell pattern (repeatable)")
    ex = verbs.add_parser("export", help="a platform's library as a MetaSchedule database folder (with library.json)",
                          description="Write a platform's library as a MetaSchedule JSON database (tune_tir, "
                          "--transfer-from and dataset import-ms read it) with its library.json beside it "
                          "(costlab library add merges it into another library).")
    ex.add_argument("out", metavar="OUT_DIR")
    ex.add_argument("--platform", help="the platform's library (default: this host's)")
    for p in (ls, add, pr, ex):
        p.add_argument("--library", metavar="DIR", help=LIBRARY_HELP)
    q.set_defaults(func=_library)


def _this_platform() -> str:
    return platform_id_for(host_target())


def _library(args) -> int:
    return {"list": _list, "add": _add, "prune": _prune, "export": _export}[args.verb](args)


def _list(args) -> int:
    from pathlib import Path

    root = Path(args.library) if args.library else default_root()
    platforms = [_existing(root, args.platform)] if args.platform else _platforms(root)
    libs, unread = [], []
    for p in platforms:
        try:
            libs.append(read_library(root, p))
        except CostlabError as exc:  # a damaged library, or a folder holding another's: one line each, the others
            if args.platform:  # listed, exit 2
                raise
            unread.append(exc)
    libs += starter_library() if args.starter else []
    for exc in unread:
        print(f"costlab: error: {exc}", file=sys.stderr)
    if args.json:
        print(json.dumps([dict(path=str(lib.path), platform=lib.platform, host=lib.host, rows=lib.rows())
                          for lib in libs]))
        return 2 if unread else 0
    if not libs and not unread:
        print(f"{root}: no library yet (every finished costlab tune adds one)", file=sys.stderr)
    for lib in libs:
        host = describe_host(lib.host) if lib.host else "host not recorded"
        print(f"{lib.path} ({lib.platform}; {host}): {len(lib)} tasks, {lib.programs()} programs"
              + (" [read-only starter]" if lib.read_only else ""))
        for r in lib.rows():
            best = f"{r['best_us']:.2f} us" if r["best_us"] is not None else "-"
            print(f"  {r['name'][:48]:48s} {r['programs']:2d} programs ({r['checked']} checked), best {best}")
    return 2 if unread else 0


def _add(args) -> int:
    from pathlib import Path

    root = Path(args.library) if args.library else default_root()
    for row in add_work_dirs(args.work_dirs, root, per_task=args.per_task, check=not args.no_check,
                             platform=args.platform, progress=not args.no_progress):
        print(f"{row['source']}: {row['added']} programs of {row['tasks']} tasks added to {row['library']}"
              + (f" ({row['note']})" if row.get("note") else ""))
        skipped = row.get("skipped_lines") or []
        if skipped:
            print(f"{row['source']}: skipped {len(skipped)} bad line(s) of its database: {skipped[0]}"
                  + (" ..." if len(skipped) > 1 else ""), file=sys.stderr)
    return 0


def _platforms(root) -> list[str]:
    """The platforms whose libraries ``root`` holds."""
    return sorted(p.name for p in root.iterdir() if (p / FILE).exists()) if root.is_dir() else []


def _existing(root, platform: str) -> str:
    """``platform``, when ``root`` holds its library; else one error naming the folder and the libraries there
    (a mistyped --platform never makes an empty library, nor lists one)."""
    if not (root / platform / FILE).exists():
        raise InputError(root / platform, f"holds no schedule library of platform {platform!r} (libraries here: "
                                          f"{', '.join(_platforms(root)) or 'none'})")
    return platform


def _prune(args) -> int:
    from pathlib import Path

    if args.per_task is None and args.max_tasks is None and not args.remove:
        raise UsageError("say what to prune: --per-task K, --max-tasks N and/or --remove PATTERN")
    root = Path(args.library) if args.library else default_root()
    with open_library(root, _existing(root, args.platform or _this_platform())) as lib:
        gone = lib.prune(args.per_task, args.max_tasks, args.remove)
        left = (len(lib), lib.programs())
    print(f"{root / lib.platform}: removed {gone['workloads']} tasks and {gone['programs']} programs; "
          f"{left[0]} tasks, {left[1]} programs left")
    return 0


def _export(args) -> int:
    from pathlib import Path

    root = Path(args.library) if args.library else default_root()
    platform = _existing(root, args.platform or _this_platform())
    # an export there would be read as the library of a platform named for its folder
    if root.resolve() in (Path(args.out).resolve(), Path(args.out).resolve().parent):
        raise InputError(Path(args.out), f"is the libraries' root {root}, or a folder of it, where each folder is "
                                         "a platform's library: export into another folder")
    lib = read_library(root, platform)
    out = lib.export_database(args.out)
    print(f"{out}: {len(lib)} tasks, {lib.programs()} programs (database_workload.json, "
          "database_tuning_record.json, library.json)")
    return 0
