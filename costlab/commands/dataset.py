"""``costlab dataset``: build datasets from measured logs, measure new ones, inspect, split and export."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from costlab.commands.options import builder_timeout_option, directory, int_in, positive_int
from costlab.common import jsontext
from costlab.common.errors import InputError, UsageError
from costlab.common.host import describe_host, host_difference, same_host
from costlab.datasets import DatasetWriter, make_split, open_dataset, summarize
from costlab.datasets.ansor_log import import_ansor
from costlab.datasets.extract import extract
from costlab.datasets.measure import MeasureOptions, measure
from costlab.datasets.ms_database import export_ms, import_ms
from costlab.datasets.names import check_platform_id
from costlab.datasets.pack import pack, unpack
from costlab.datasets.splits import SPLIT_KINDS
from costlab.datasets.summary import format_summary
from costlab.featurizers.psa.hardware import spec_for, spec_for_platform
from costlab.metaschedule.targets import NVIDIA_KINDS, checked_target, target_from_string


TARGET_HELP = ("TVM target: 'host' (default) is this machine's CPU by its concrete LLVM name and its cores, e.g. "
               "'llvm -mcpu=znver4 -num-cores=2'; or a JSON dict or the string form. Without -mcpu LLVM emits "
               "generic x86-64 (SSE2) code; for another machine name its CPU, e.g. "
               "'llvm -mcpu=skylake-avx512 -num-cores=8'")


def register(sub) -> None:
    p = sub.add_parser(
        "dataset",
        help="build, inspect, split and export datasets of measured programs",
        description="Build TenSet-style HDF5 datasets from MetaSchedule databases, Ansor/TenSet logs or "
        "costlab's own measurements; inspect, split and export them.",
    )
    ds = p.add_subparsers(dest="dataset_command", metavar="SUBCOMMAND", required=True)

    q = ds.add_parser("import-ms", help="import MetaSchedule tuning databases",
                      description="Import MetaSchedule databases (database_workload.json + "
                      "database_tuning_record.json in each WORK_DIR). Every record is kept with its raw "
                      "run_secs; failed ones are flagged. Re-running adds nothing twice.")
    q.add_argument("work_dirs", nargs="+", metavar="WORK_DIR", type=Path)
    q.add_argument("-o", "--output", required=True, type=Path, metavar="DATA.h5")
    q.add_argument("--platform", help="platform id (default: derived from the records' target)")
    q.add_argument("--network", metavar="NAME",
                   help="also record the imported tasks as one network called NAME, each task with weight 1 "
                   "(evaluate then reports the weighted top-k of NAME)")
    q.add_argument("--host", metavar="FILE", type=Path,
                   help="the machine that measured the records, recorded with their platform (its caches and clock "
                   "then give the platform's features): a JSON host record as costlab writes one, or a work dir's "
                   "costlab_run.json (its host)")
    q.set_defaults(func=_import_ms)

    q = ds.add_parser("import-ansor", help="import Ansor / TenSet JSON-lines logs",
                      description="Import Ansor / TenSet JSON-lines logs (log versions v0.2 to v0.6): single log files or "
                      "folders of them (TenSet's measure_records/<platform>/). No TVM needed. Bad lines are "
                      "skipped and counted.")
    q.add_argument("paths", nargs="+", metavar="PATH", type=Path)
    q.add_argument("-o", "--output", required=True, type=Path, metavar="DATA.h5")
    q.add_argument("--platform", help="platform id (default: TenSet folder name or the target's -model)")
    q.add_argument("--network-info", type=Path, metavar="PATH",
                   help="task weights per network: TenSet's network_info folder, or a JSON file "
                   "{network: {workload_key: weight}}")
    q.add_argument("--network-per-file", action="store_true",
                   help="treat each log file as one network (named after the file), each task weight 1")
    q.set_defaults(func=_import_ansor)

    q = ds.add_parser("extract", help="extract tuning tasks from networks or benchmark workloads",
                      description="Extract MetaSchedule tasks into the dataset, with each task's weight per "
                      "network: PyTorch modules (module:function returning (model, example_inputs)), "
                      "Hugging Face transformers architectures built from a config with random weights "
                      "(nothing downloaded), or TVM benchmark workloads by name (GMM, C2D, DEP, ...).")
    q.add_argument("data", type=Path, metavar="DATA.h5")
    q.add_argument("--target", default="host", help=TARGET_HELP)
    q.add_argument("--workload", action="append", default=[], metavar="NAME[:ARGS]",
                   help="a te_workload benchmark, e.g. GMM or GMM:1,128,128,128 (repeatable)")
    q.add_argument("--hf", action="append", default=[], metavar="TYPE[:KEY=VALUE,...]",
                   help="a transformers model built from its config with random weights (nothing downloaded): "
                   "bert, gpt2, vit, resnet, mobilenet_v2 (small fixed configs) or any model type of "
                   "AutoConfig.for_model (llama, t5, distilbert, convnext, swin, ...), small by default; "
                   "sizes with layers=, hidden=, heads=, intermediate=, image=, vocab= or any config "
                   "attribute, e.g. llama:layers=4,hidden=256 (repeatable)")
    q.add_argument("--torch", action="append", default=[], metavar="MODULE:FUNC",
                   help="a Python function returning (torch.nn.Module, example input tuple) (repeatable)")
    q.add_argument("--batch", type=positive_int("--batch"), default=1, help="batch size of network inputs")
    q.add_argument("--seq-len", type=positive_int("--seq-len"), default=32, help="sequence length of text models")
    q.set_defaults(func=_extract)

    q = ds.add_parser("measure", help="sample candidates per task and measure them",
                      description="Sample N diverse candidates per task (random replay of the design space "
                      "mixed with evolutionary sampling under a random cost model; no duplicate programs), "
                      "build and run them, and store the records. Interrupted and re-run, it continues "
                      "where it stopped.")
    q.add_argument("data", type=Path, metavar="DATA.h5")
    q.add_argument("--target", default="host", help=TARGET_HELP)
    q.add_argument("--per-task", type=positive_int("--per-task"), default=32, metavar="N",
                   help="candidates per task (default 32)")
    q.add_argument("--platform", help="platform id (default: derived from the target)")
    q.add_argument("--tasks", help="comma-separated task indices or names (default: all MetaSchedule tasks)")
    q.add_argument("--same-programs-as", metavar="PLATFORM",
                   help="measure exactly the programs already measured on PLATFORM (for multi-platform data)")
    q.add_argument("--batch-size", type=positive_int("--batch-size"), default=16,
                   help="candidates built and run (and saved) at once (default 16)")
    q.add_argument("--seed", type=int, default=0)
    builder_timeout_option(q)
    q.add_argument("--number", type=positive_int("--number"), default=3,
                   help="runs per measurement (averaged by the runner; default 3)")
    q.add_argument("--repeat", type=positive_int("--repeat"), default=1,
                   help="measurements per candidate (raw costs kept; default 1)")
    q.add_argument("--rpc-key", help="measure on remote devices of this key through a TVM RPC tracker")
    q.add_argument("--rpc-host", default="127.0.0.1")
    q.add_argument("--rpc-port", type=int, default=9190)
    q.add_argument("--rpc-wait", type=float, default=60.0, metavar="S",
                   help="seconds to wait for an RPC tracker or device that stopped answering; then measuring stops, "
                   "every record measured before saved")
    q.add_argument("--no-progress", action="store_true", help="no progress bar (a summary at the end)")
    q.set_defaults(func=_measure)

    q = ds.add_parser("info", help="what a dataset holds",
                      description="Tasks, networks, records and failed records per platform, records per "
                      "task, kernel classes and splits.")
    q.add_argument("data", type=Path, metavar="DATA.h5")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=_info)

    q = ds.add_parser("split", help="make a reproducible train/test split, stored in the file",
                      description="Split by task, by network (whole networks held out; name them with "
                      "--held-out) or within task, from a seed. The split is stored in the dataset.")
    q.add_argument("data", type=Path, metavar="DATA.h5")
    q.add_argument("--by", choices=list(SPLIT_KINDS),
                   help="default: task, or network with --held-out (which refuses another --by)")
    # numpy refuses a negative seed, and one beyond 63 bits is stored but cannot be packed
    q.add_argument("--seed", type=int_in("--seed", 0, 2**63 - 1), default=0)
    q.add_argument("--test-fraction", type=float, default=0.2)
    q.add_argument("--held-out", action="append", metavar="NETWORK",
                   help="a network to hold out (implies --by network; --seed and --test-fraction play no part); "
                   "repeatable, or comma-separated names. A name with commas (costlab's own: GMM:1,16,16,16) is one "
                   "network when the dataset has it")
    q.add_argument("--name", help="split name: letters, digits and . _ + - (default: derived from the options, "
                   "e.g. task-s0, task30-s0)")
    q.add_argument("--replace", action="store_true",
                   help="replace a different split stored under the same name (refused otherwise)")
    q.set_defaults(func=_split)

    q = ds.add_parser("rename-platform", help="give a platform's records another id (and target)",
                      description="Rename a platform: its records and feature caches move to the new id; "
                      "with --target its target changes too (feature caches that depend on it are then "
                      "rebuilt by the next `costlab featurize`).")
    q.add_argument("data", type=Path, metavar="DATA.h5")
    q.add_argument("old", metavar="OLD_ID")
    q.add_argument("new", metavar="NEW_ID")
    q.add_argument("--target", help="the platform's TVM target (JSON or the string form, e.g. "
                   "'llvm -mcpu=znver4 -num-cores=1')")
    q.set_defaults(func=_rename_platform)

    q = ds.add_parser("set-machine", help="state the machine a platform's records were measured on",
                      description="Record the machine that measured a platform's records, for records that came "
                      "without one (an imported MetaSchedule database or Ansor log): its host record (--host: caches, "
                      "clock, ISA flags, as costlab records a machine) or a hardware spec (--spec: a JSON spec with "
                      "\"kind\": \"cpu\" or \"gpu\", or fields replacing those of the spec the platform has now, "
                      "e.g. {\"l1_bytes\": 32768}). The platform's features (PSA, PaCM, a hardware input) then come "
                      "from it, wherever they are computed; feature caches made under another spec are rebuilt by "
                      "the next featurize. A recorded host is never replaced by another machine's.")
    q.add_argument("data", type=Path, metavar="DATA.h5")
    q.add_argument("--platform", required=True, help="the platform's id (costlab dataset info lists them)")
    g = q.add_mutually_exclusive_group(required=True)
    g.add_argument("--host", metavar="FILE", type=Path, help="a JSON host record, or a work dir's costlab_run.json")
    g.add_argument("--spec", metavar="FILE", type=Path, help="a JSON hardware spec, whole or fields to replace")
    q.set_defaults(func=_set_machine)

    q = ds.add_parser("export-ms", help="write a platform's records as a MetaSchedule database",
                      description="Write the records of one platform as database_workload.json + "
                      "database_tuning_record.json, loadable by MetaSchedule's JSONDatabase.")
    q.add_argument("data", type=Path, metavar="DATA.h5")
    q.add_argument("--platform", required=True)
    q.add_argument("-o", "--output", required=True, type=directory("--output"), metavar="WORK_DIR")
    q.add_argument("--include-failed", action="store_true",
                   help="also write failed records (with run_secs 1e10, as MetaSchedule does)")
    q.set_defaults(func=_export_ms)

    q = ds.add_parser("pack", help="write a dataset as compressed JSON files, for version control",
                      description="Write the dataset's tasks, networks, platforms, splits and records as gzip'd "
                      "JSON files in DIR (records in shards of rows). Packing again after more measuring adds "
                      "only a shard of the new records; DIR holds one dataset's pack (packing another dataset into "
                      "it is refused). `unpack` builds the same dataset again.")
    q.add_argument("data", type=Path, metavar="DATA.h5")
    q.add_argument("-o", "--output", required=True, type=directory("--output"), metavar="DIR")
    q.set_defaults(func=_pack)

    q = ds.add_parser("unpack", help="build a dataset from its packed form",
                      description="Build a new dataset from a folder written by `costlab dataset pack`.")
    q.add_argument("folder", type=Path, metavar="DIR")
    q.add_argument("-o", "--output", required=True, type=Path, metavar="DATA.h5")
    q.set_defaults(func=_unpack)


def _pack(args) -> int:
    print(pack(args.data, args.output), file=sys.stderr)
    return 0


def _unpack(args) -> int:
    print(unpack(args.folder, args.output), file=sys.stderr)
    return 0


def _finish_import(report) -> int:
    print(report.format(), file=sys.stderr)
    return 0 if report.usable else 1


def _import_ms(args) -> int:
    host = _host_record(args.host) if args.host else None
    return _finish_import(import_ms(args.work_dirs, args.output, platform=args.platform, network=args.network,
                                    host=host))


def _host_record(path: Path) -> dict:
    """The host record of ``--host``: a JSON object with ``cpu_model`` and ``caches``, or one holding such an
    object under ``host`` (a tuning work dir's costlab_run.json)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(path, f"is not a readable JSON host record ({type(exc).__name__})") from None
    if isinstance(value, dict) and isinstance(value.get("host"), dict):
        if value.get("rpc_key"):  # a run record of a remote run: its host drove the run, a device measured it
            raise InputError(path, f"is the run record of a run measured on a remote device (--rpc-key "
                                   f"{value['rpc_key']}); its host is the machine that drove the run, not the device: "
                                   "give the device's host record")
        value = value["host"]
    if not (isinstance(value, dict) and value.get("cpu_model") and isinstance(value.get("caches"), dict)):
        raise InputError(path, "is not a host record (a JSON object with cpu_model and caches, as costlab records "
                               "a machine)")
    return value


def _import_ansor(args) -> int:
    return _finish_import(import_ansor(args.paths, args.output, platform=args.platform,
                                       network_info=args.network_info, network_per_file=args.network_per_file))


def _extract(args) -> int:
    if not (args.workload or args.hf or args.torch):
        raise SystemExit("costlab dataset extract: name at least one --workload, --hf or --torch")
    summary = extract(args.data, target=args.target, workloads=args.workload, hf=args.hf, torch_fns=args.torch,
                      batch=args.batch, seq_len=args.seq_len)
    print(summary, file=sys.stderr)
    return 0


def _measure(args) -> int:
    opts = MeasureOptions(
        target=args.target, per_task=args.per_task, platform=args.platform, tasks=args.tasks,
        same_programs_as=args.same_programs_as, batch_size=args.batch_size, seed=args.seed,
        builder_timeout=args.builder_timeout, number=args.number, repeat=args.repeat,
        rpc_key=args.rpc_key, rpc_host=args.rpc_host, rpc_port=args.rpc_port, rpc_wait=args.rpc_wait, progress=not args.no_progress,
    )
    print(measure(args.data, opts), file=sys.stderr)
    return 0


def _info(args) -> int:
    with open_dataset(args.data) as ds:
        s = summarize(ds)
    print(jsontext.dumps(s, sort_keys=True) if args.json else format_summary(s))
    return 0


def _held_out(values, networks) -> list:
    """The networks ``--held-out`` names, in order, each once. A value that is a network of the dataset is that
    network, commas and all (the names costlab gives operators and networks have them); any other value is a
    comma-separated list of names. A value none of whose parts is a network stays whole, so the error names what
    was given, not its pieces (``make_split`` refuses the names the dataset lacks)."""
    held = []
    for value in values or []:
        parts = [n for n in value.split(",") if n]
        if value in networks or not any(n in networks for n in parts):
            parts = [value] if value else []
        held += [n for n in parts if n not in held]
    return held


def _split(args) -> int:
    with open_dataset(args.data) as ds:
        held = _held_out(args.held_out, ds.networks)
        # an explicit --by other than network is refused by make_split, never overridden silently
        by = args.by or ("network" if held else "task")
        split = make_split(ds, by, seed=args.seed, test_fraction=args.test_fraction, held_out=held or None,
                           name=args.name)
    with DatasetWriter(args.data) as w:
        written = split.write(w.h5.require_group("splits"), replace=args.replace, networks=w.networks)
    state = "stored" if written else "stored already, unchanged"
    print(f"split {split.name!r} ({split.describe()}): {state}", file=sys.stderr)
    return 0


def _rename_platform(args) -> int:
    check_platform_id(args.new)  # checked before the target (which needs TVM) and before any write
    try:
        if args.target and target_from_string(args.target).get("mcpu") == "native":
            # native is resolved to the CPU of the machine running the command, which need not be the platform's
            raise ValueError("-mcpu=native names this machine's CPU, not the platform's: give the CPU the records "
                             "were measured on by its name (e.g. -mcpu=znver4)")
        target = checked_target(args.target) if args.target else None
    except ValueError as exc:
        raise UsageError(f"--target {args.target!r}: {exc}") from None
    with DatasetWriter(args.data) as w:
        was = w.platforms.get(args.old)
        if target is not None and was is not None and _same_target(target, was.target):
            # the platform's own target, written otherwise (the string form lacks the keys and tag an imported
            # record's JSON holds): its feature caches stay, and so does the target as recorded
            target = None
        w.rename_platform(args.old, args.new, target)
    print(f"{args.data}: platform {args.old!r} is now {args.new!r}", file=sys.stderr)
    return 0


def _same_target(a: dict, b: dict) -> bool:
    """Whether two targets are one to TVM (its canonical form: defaults such as keys and an empty tag filled in)."""
    if a == b:
        return True
    import tvm  # lazy: TVM canonicalizes the two targets; the command line must not import it

    try:
        return str(tvm.target.Target(dict(a)).export()) == str(tvm.target.Target(dict(b)).export())
    except Exception:  # noqa: BLE001  a stored target TVM does not take: not the same
        return False


def _set_machine(args) -> int:
    with open_dataset(args.data) as ds:
        plat = ds.platforms.get(args.platform)
        if plat is None:
            raise InputError(args.data, f"no platform {args.platform!r} (platforms: "
                                        f"{', '.join(sorted(ds.platforms)) or 'none'})")
    host = spec = None
    if args.host:
        # marked as stated: a remote board's records (measured over RPC, no host recorded) may be stated so, and
        # more RPC measurements may join them (`dataset measure --rpc-key`); a host a local measurement recorded
        # is this machine's, and refuses them
        host = dict(_host_record(args.host), stated=True)
        if plat.host and not same_host(plat.host, host):
            raise InputError(args.host, f"is another machine than the one platform {args.platform!r} was measured on "
                                        f"({describe_host(plat.host)}; {host_difference(plat.host, host)}): a "
                                        "platform is one machine's records")
    else:
        try:
            given = json.loads(args.spec.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(args.spec, f"is not a readable JSON hardware spec ({type(exc).__name__})") from None
        if not isinstance(given, dict):
            raise InputError(args.spec, "is not a hardware spec (a JSON object of spec fields)")
        try:
            spec = spec_for(plat, override=dict({"name": f"{args.spec.name} (given)"}, **given)).to_json()
        except ValueError as exc:
            raise InputError(args.spec, str(exc).split(": ", 1)[-1]) from None
        kind = str((plat.target or {}).get("kind", "llvm")) if isinstance(plat.target, dict) else None
        wanted = "gpu" if kind in NVIDIA_KINDS else "cpu" if kind in ("llvm", "c") else None
        if wanted is not None and spec.get("kind") != wanted:  # PSA/PaCM would run the other kind's formula
            raise InputError(args.spec, f"is a {spec.get('kind')} spec, and platform {args.platform!r} is a {kind} "
                                        f"target: give a {wanted} spec")
    dropped = host is not None and plat.spec is not None  # a stored spec would win over the host record
    with DatasetWriter(args.data) as w:
        w.set_machine(args.platform, spec=spec, host=host)
    with open_dataset(args.data) as ds:
        now = spec_for_platform(ds.platforms[args.platform])
    print(f"{args.data}: platform {args.platform!r}'s features now use the hardware spec of {now.name}"
          + (f" (the spec stored before, {plat.spec.get('name', 'unnamed')}, is dropped)" if dropped else ""),
          file=sys.stderr)
    return 0


def _export_ms(args) -> int:
    print(export_ms(args.data, args.platform, args.output, include_failed=args.include_failed), file=sys.stderr)
    return 0

