"""The trajectory corpus: tuning runs whose every measured record is kept, as data that teaches a model the tail
of a task's distribution (the near-best programs a search decides between), beside the random samples of
``corpus/``.

Each task of ``TASKS`` (TVM benchmark workloads at the shapes users tune: dense and matmul at hidden
512-4096, attention batch matmuls, norms, softmax, convolutions of vision nets; none of them a workload of
``benchmarks/tuning.py`` or of the network benchmark, see ``EXCLUDED``) is tuned once for ``--trials``
trials by ``costlab tune``, alternately with MetaSchedule's own search (even positions: evolutionary search +
XGBoost) and costlab's model-led search with ``x86-cpu-v1`` (odd positions), so the records are not one search's
blind spots. The seed of a task is its position. After the te workloads come Relax tasks of small networks
(``NET:FUNCTION:TASK``: a task of ``scripts/trajectory_nets.py``'s FUNCTION, at sizes no benchmark uses): dense
layers with 2-D weights, norms, softmax and activations in the form Relax gives them, which te_workload lacks.
Then, from position 230, te workloads of other nets (``_second_tasks``).

  python scripts/make_trajectories.py run  [--out bench/trajectories] [--limit N] [--trials 200] [--first A-B]
  python scripts/make_trajectories.py status [--out ...]
  python scripts/make_trajectories.py pack [--out ...] [--to corpus/trajectories]
  python scripts/make_trajectories.py library [--out ...]

``run`` is resumable: a task whose work dir holds a finished summary is skipped; an unfinished one is
continued by ``costlab tune`` itself, which never measures a program of its database again. Every task holds
``/tmp/costlab-cpu.lock`` while it builds and measures, so a test run or a benchmark that takes the same lock
pauses the job between tasks. The work dirs of one host CPU live in ``OUT/<platform>/`` with that host's
description in ``host.json``; a run on another CPU refuses that folder (a platform is one machine) and names
the folder its own platform would use.

``library`` builds the starter schedule library costlab ships (``export/library/starter/<platform>.json.gz``)
from every finished work dir: each task's checked best programs (``costlab library add``).

``pack`` imports every finished work dir into one dataset (``costlab dataset import-ms``, failed records kept
and flagged), records the platform's host, and writes ``costlab dataset pack``'s compressed files to
``corpus/trajectories/<platform>/`` with ``info.json`` beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from costlab.common.children import TERMINATED, run_to_end
from costlab.common.cpu_lock import cpu_lock
from costlab.common.files import write_atomically
from costlab.export.workdir import WorkDir

ROOT = Path(__file__).resolve().parent.parent
COSTLAB = [sys.executable, "-m", "costlab"]
DONE = "trajectory.done"
YIELD_S = 5  # after each task the lock is left free this long, so a waiting test run or benchmark gets it

# Workloads of the benchmarks, which no trajectory may hold (shapes included): benchmarks/tuning.py's
# gmm, c2d and dep, and the dense / attention shapes of BERT hidden 256 at sequence 128 (its bert-* tasks);
# the network benchmark's networks (benchmarks/nets.py: BERT-base and a Llama layer at hidden 768, sequence 128,
# and the Llama smoke size at hidden 512, sequence 32) are kept out by never using their dense shapes here.
EXCLUDED = {"GMM:1,128,128,128", "C2D:1,28,28,128,128,3,1,1", "DEP:1,56,56,64,3,1,1"}


def _tasks() -> list[str]:
    """The task list, in the order it is tuned: kinds interleaved so that any prefix is as varied as the whole.
    Append only: a position's workload never changes (its work dir and seed are named by it)."""
    dense = [f"GMM:1,{m},{n},{k}" for m in (16, 32, 64, 128) for n, k in
             ((512, 512), (1024, 1024), (2048, 512), (512, 2048), (1024, 4096), (4096, 1024), (2048, 2048),
              (1024, 2816), (2816, 1024), (4096, 512))]
    attention = [f"GMM:{h},{s},{s2},{d}" for h, s, s2, d in
                 ((8, 128, 128, 64), (8, 128, 64, 128), (16, 64, 64, 64), (16, 64, 64, 64 * 2), (12, 256, 256, 64),
                  (12, 256, 64, 256), (32, 32, 32, 128), (32, 32, 128, 32), (4, 512, 512, 64), (4, 512, 64, 512),
                  (16, 128, 128, 32), (16, 128, 32, 128), (8, 256, 256, 64), (8, 256, 64, 256), (12, 64, 64, 64),
                  (12, 64, 64, 128), (32, 128, 128, 64), (32, 128, 64, 128), (2, 1024, 1024, 64), (2, 1024, 64, 1024),
                  (8, 512, 512, 32), (16, 32, 512, 64), (16, 512, 32, 64), (4, 256, 256, 128))]
    attention += [f"TBG:1,{s},{h},{d}" for s, h, d in ((64, 8, 64), (128, 8, 64), (256, 4, 64), (64, 16, 128),
                                                       (128, 16, 32), (32, 32, 128),
                                                       (256, 8, 32), (512, 4, 64), (64, 32, 64), (128, 4, 128))]
    norms = [f"NRM:{b},{m},{n}" for b, m, n in ((1, 128, 512), (1, 128, 1024), (1, 64, 2048), (4, 64, 512), (1, 256, 4096),
                                                (8, 32, 1024), (1, 512, 512), (2, 128, 2048),
                                                (1, 32, 4096), (1, 1024, 256), (16, 16, 512), (1, 2048, 128), (4, 256, 1024),
                                                (1, 96, 1536), (2, 64, 4096), (32, 8, 256))]
    softmax = [f"SFM:{m},{n}" for m, n in ((512, 128), (1024, 256), (2048, 64), (768, 512), (4096, 128), (256, 1024),
                                           (1536, 256), (128, 2048),
                                           (2048, 128), (512, 512 + 64), (384, 384), (96, 1024), (4096, 64), (1024, 1024),
                                           (640, 160), (8192, 32))]
    convs = [f"C2D:1,{h},{h},{ci},{co},{k},{s},{k // 2}" for h, ci, co, k, s in
             ((56, 64, 64, 3, 1), (28, 128, 128, 3, 2), (14, 256, 256, 3, 1), (7, 512, 512, 3, 1), (56, 64, 128, 1, 1),
              (28, 128, 512, 1, 1), (14, 256, 1024, 1, 1), (7, 512, 2048, 1, 1), (56, 256, 64, 1, 1),
              (28, 512, 128, 1, 1), (14, 1024, 256, 1, 1), (7, 2048, 512, 1, 1), (112, 32, 64, 3, 2), (56, 128, 128, 3, 2),
              (28, 256, 256, 3, 2), (14, 512, 512, 3, 2), (32, 64, 64, 3, 1), (16, 128, 128, 3, 1), (8, 256, 256, 3, 1),
              (224, 3, 32, 3, 2), (28, 96, 160, 3, 1), (14, 160, 320, 1, 1), (56, 32, 32, 3, 1), (28, 64, 64, 3, 1),
              (14, 128, 128, 1, 1), (7, 256, 256, 3, 1), (28, 64, 256, 1, 1), (14, 128, 512, 1, 1), (7, 256, 1024, 1, 1),
              (56, 128, 64, 1, 1), (28, 256, 128, 1, 1), (14, 512, 256, 1, 1), (112, 16, 32, 3, 1), (64, 32, 64, 3, 2),
              (32, 128, 256, 3, 2), (16, 256, 512, 3, 2), (48, 48, 96, 3, 1), (24, 96, 192, 3, 1), (12, 192, 384, 3, 1),
              (112, 64, 64, 1, 1), (40, 80, 80, 3, 1), (20, 160, 160, 3, 1))]
    depthwise = [f"DEP:1,{h},{h},{c},3,{s},1" for h, c, s in
                 ((112, 64, 1), (56, 128, 1), (28, 256, 1), (14, 512, 1), (7, 1024, 1), (112, 64, 2), (56, 128, 2),
                  (28, 256, 2), (14, 512, 2), (56, 64, 2), (28, 128, 1), (14, 256, 1), (56, 32, 1), (28, 64, 1),
                  (14, 128, 1), (7, 256, 1), (112, 16, 1), (56, 48, 2), (28, 80, 1), (14, 320, 1), (7, 640, 1), (28, 40, 2))]
    other = ["C1D:1,256,64,128,3,1,1", "C1D:1,512,128,128,5,1,2", "C1D:4,128,256,256,3,1,1", "C3D:1,8,28,28,32,32,3,1,1",
             "C3D:1,4,56,56,16,32,3,1,1", "GRP:1,28,28,128,128,3,1,1,1,4", "GRP:1,14,14,256,256,3,1,1,1,32",
             "GRP:1,56,56,64,64,3,1,1,1,2", "DIL:1,28,28,64,64,3,1,1,2", "DIL:1,14,14,128,128,3,1,1,4",
             "T2D:1,16,16,128,64,4,2,1", "T2D:1,32,32,64,32,4,2,1", "CBR:1,56,56,64,64,3,1,1", "CBR:1,14,14,256,256,3,1,1",
             "CBR:1,28,28,128,128,1,1,0", "CAP:1,16,16,32,32,3,1,1",
             "C1D:1,128,256,256,3,1,1", "C1D:1,1024,32,64,3,1,1", "C3D:1,16,14,14,64,64,3,1,1", "GRP:1,28,28,256,256,3,1,1,1,8",
             "GRP:1,7,7,512,512,3,1,1,1,16", "DIL:1,56,56,32,32,3,1,1,2", "T2D:1,8,8,256,128,4,2,1", "CBR:1,28,28,64,128,3,2,1",
             "CBR:1,7,7,512,1024,1,1,0", "CAP:1,8,8,32,32,3,1,1", "GMM:1,49,512,2048", "GMM:1,196,256,1024",
             "GMM:1,50,1024,1024", "GMM:1,197,384,384", "GMM:1,77,512,2048", "GMM:1,100,2048,512"]
    seen, uniq = set(), []
    for w in _interleave([dense, attention, convs, norms, depthwise, softmax, other]):
        if w not in seen and w not in EXCLUDED:
            seen.add(w)
            uniq.append(w)
    first = uniq + _network_tasks()
    seen.update(first)
    return first + [w for w in _second_tasks() if w not in seen and w not in EXCLUDED]


def _second_tasks() -> list[str]:
    """Positions 230-: the layers of other nets (MobileNetV2 and EfficientNet inverted residuals with their 5x5
    depthwise convolutions, Inception's odd sizes, ResNeXt's groups, GPT-style dense shapes at hidden 640-1280,
    longer attention), kinds interleaved as in ``_tasks``; no hidden size of the network benchmark (768)."""
    pointwise = [f"C2D:1,{h},{h},{ci},{co},1,1,0" for h, ci, co in
                 ((112, 32, 16), (56, 24, 144), (28, 32, 192), (14, 64, 384), (14, 96, 576), (7, 160, 960),
                  (7, 320, 1280), (56, 144, 24), (28, 192, 32), (14, 384, 64), (73, 64, 80), (35, 192, 64))]
    depthwise = [f"DEP:1,{h},{h},{c},{k},{s},{k // 2}" for h, c, k, s in
                 ((112, 96, 3, 2), (56, 144, 3, 1), (28, 192, 3, 1), (14, 384, 3, 1), (14, 576, 3, 1), (7, 960, 3, 1),
                  (28, 240, 5, 1), (14, 480, 5, 1), (14, 672, 5, 2), (56, 144, 5, 2))]
    convs = [f"C2D:1,{h},{h},{ci},{co},{k},{s},{p}" for h, ci, co, k, s, p in
             ((35, 64, 96, 3, 1, 1), (35, 48, 64, 5, 1, 2), (17, 160, 192, 3, 1, 1), (8, 384, 384, 3, 1, 1),
              (71, 80, 192, 3, 2, 0), (35, 96, 96, 3, 2, 0), (17, 192, 192, 3, 2, 0), (28, 128, 128, 3, 1, 2))]
    dense = [f"GMM:1,{m},{n},{k}" for m, n, k in
             ((256, 640, 640), (256, 640, 2560), (256, 2560, 640), (64, 1280, 1280), (64, 1280, 5120),
              (64, 5120, 1280), (384, 384, 1536), (384, 1536, 384))]
    attention = [f"GMM:{h},{s},{s2},{d}" for h, s, s2, d in
                 ((10, 256, 256, 64), (10, 256, 64, 256), (20, 64, 64, 64), (20, 64, 64, 128), (6, 384, 384, 64),
                  (6, 384, 64, 384))]
    rest = ["GRP:1,56,56,128,128,3,1,1,1,32", "GRP:1,28,28,256,256,3,1,1,1,32", "GRP:1,14,14,512,512,3,1,1,1,32",
            "NRM:1,256,640", "NRM:1,64,1280", "SFM:2560,256", "SFM:1280,64", "SFM:2304,384",
            "C1D:1,512,64,64,7,1,3", "C3D:1,4,28,28,32,32,3,1,1", "DIL:1,28,28,128,128,3,1,2,2",
            "T2D:1,16,16,64,32,4,2,1", "CBR:1,56,56,128,128,3,2,1"]
    return _interleave([pointwise, depthwise, convs, dense, attention, rest])


# Relax tasks of scripts/trajectory_nets.py's layers (``NET:FUNCTION:TASK``): dense matmuls with 2-D weights
# (with and without bias), norms, softmax and activations as Relax fuses them, the forms te_workload lacks.
NETWORK_TASKS = {
    "llama_1024": ("matmul", "matmul3", "fused_softmax_broadcast_to",
                   "fused_reshape6_tir_sigmoid_multiply3_reshape6_multiply3_reshape7"),
    "bert_1024": ("fused_matmul_add", "fused_matmul2_add2", "fused_matmul3_add", "layer_norm",
                  "fused_reshape6_gelu_reshape7"),
    "llama_2048": ("matmul", "matmul3", "matmul4", "fused_mean_add_tir_rsqrt_multiply_multiply1",
                   "fused_softmax_broadcast_to2"),
    "bert_512": ("fused_matmul_add", "fused_matmul3_add2", "fused_matmul4_add", "layer_norm",
                 "fused_softmax_broadcast_to2", "fused_reshape9_gelu_reshape10"),
    "llama_512": ("matmul", "matmul3", "matmul4", "matmul1", "fused_mean_add_tir_rsqrt_multiply_multiply1",
                  "fused_softmax_broadcast_to2", "fused_reshape9_tir_sigmoid_multiply3_reshape9_multiply3_reshape10",
                  "fused_reshape1_reshape2_transpose1_strided_slice_tir_negative_strided_slice1_concatenate_"
                  "multiply2_multiply2_add1_broadcast_to_reshape3"),
}


def _network_tasks() -> list[str]:
    """``NET:FUNCTION:TASK`` entries, networks interleaved like the te kinds. Append only, as ``_tasks``."""
    return _interleave([[f"NET:{net}:{task}" for task in tasks] for net, tasks in NETWORK_TASKS.items()])


def _interleave(lists: list[list[str]]) -> list[str]:
    """One item of each list in turn, so that any prefix is as varied as the whole."""
    out: list[str] = []
    while any(lists):
        for one in lists:
            if one:
                out.append(one.pop(0))
    return out


TASKS = _tasks()


def arm_of(position: int) -> str:
    """``ms`` (MetaSchedule's evolutionary search + XGBoost) at even positions, ``model`` (costlab's model-led
    search) at odd ones."""
    return "ms" if position % 2 == 0 else "model"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def work_dir(out: Path, position: int) -> Path:
    return out / "runs" / f"{position:03d}-{_slug(TASKS[position])}"


def finished(work: Path, trials: int) -> bool:
    """Whether a work dir holds a finished run: ``costlab tune`` ended well (``DONE``, written after it; a design
    space smaller than the trials ends sooner) or its summary counts at least ``trials`` trials."""
    try:
        summary = json.loads((work / WorkDir.SUMMARY).read_text())
    except (OSError, ValueError):
        return False
    if (work / DONE).exists():  # ended well at the trials it was given: finished for those and fewer, not more
        given = (summary.get("options") or {}).get("trials")
        return given is None or given >= trials
    tasks = summary.get("tasks") or []
    return bool(tasks) and all((t.get("trials") or 0) >= trials for t in tasks)


def platform_dir(base: Path) -> tuple[Path, dict, str]:
    """This host's folder under ``base`` (``base/<platform>``), its host record and its target's text."""
    from costlab.common.host import host_info
    from costlab.metaschedule.targets import host_target, platform_id_for

    target = host_target()
    return base / platform_id_for(target), host_info(), json.dumps(target)


def packed_host(dest: Path) -> dict | None:
    """The host recorded with the pack in ``dest`` (its platform's), None without a pack."""
    from costlab.datasets.pack import pack_platforms

    return ((pack_platforms(dest) or {}).get(dest.name) or {}).get("host")


def check_host(folder: Path, host: dict, pack: Path | None = None) -> None:
    """Refuse a folder measured on another CPU, or, on a fresh checkout, the platform of a committed pack
    (``pack``) measured on another CPU; record this host in a new folder."""
    from costlab.common.host import describe_host, host_difference, same_host

    path = folder / "host.json"
    # both: the work dirs' host (host.json) and the committed pack's, which a folder made with another --to (or
    # before the pack existed) was never compared with; its tasks could then never be packed into this --to
    known = [(path, json.loads(path.read_text()))] if path.exists() else []
    packed = packed_host(pack) if pack else None  # read once: the pack's meta is a compressed file of every task
    if packed is not None:
        known.append((pack, packed))
    for where, theirs in known:
        if not same_host(theirs, host):
            raise SystemExit(f"{where} holds trajectories measured on "
                             f"{describe_host(theirs)}; this host is "
                             f"{describe_host(host)} ({host_difference(theirs, host)}): a platform is one machine, "
                             f"so this host's trajectories go to a folder of their own (--out and --to another base)")
    if path.exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(host, indent=1, sort_keys=True))
    tmp.replace(path)


def task_options(task: str) -> list[str]:
    """``costlab tune``'s options naming one task: a te workload, or one task of a trajectory network."""
    if task.startswith("NET:"):
        _, net, name = task.split(":", 2)
        return ["--network", f"trajectory_nets:{net}", "--task", name]
    return ["--workload", task]


def tune_env() -> dict:
    """``trajectory_nets`` (and the ``nets`` module it builds on) importable by ``costlab tune --network``."""
    paths = [str(ROOT / "scripts"), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


def tune_command(position: int, work: Path, trials: int, model: str, target: str) -> list[str]:
    cmd = [*COSTLAB, "tune", *task_options(TASKS[position]), "--trials", str(trials), "--seed", str(position),
           "--target", target, "--work-dir", str(work), "--no-progress", "--no-check",
           # the corpus is the searches' own trajectories, every candidate measured in full, as its first tasks were
           "--no-library", "--screen", "0"]
    if arm_of(position) == "model":
        cmd += ["--model", model, "--strategy", "model-led"]
    else:
        cmd += ["--strategy", "evolutionary"]
    return cmd


def run_order(limit: int, first: str | None) -> list[int]:
    """Positions below ``limit`` in the order they are tuned: those of ``first`` (``A-B``, both ends included;
    ``A-`` to the end) before the rest, each part in list order."""
    if not first:
        return list(range(limit))
    lo, _, hi = first.partition("-")
    try:
        head = range(int(lo), min(int(hi) + 1, limit) if hi else limit)
    except ValueError:
        raise SystemExit(f"--first wants A-B or A- (task positions), got {first!r}") from None
    return [*head, *(p for p in range(limit) if p not in head)]


def packed_tasks(dest: Path) -> list[str]:
    """The task entries the pack in ``dest`` holds already, in their packed order (none without a pack)."""
    info = dest / "info.json"
    return json.loads(info.read_text())["trajectories"]["tasks"] if info.exists() else []


def run(args) -> int:
    folder, host, target = platform_dir(Path(args.out))
    check_host(folder, host, Path(args.to) / folder.name)
    packed = set(packed_tasks(Path(args.to) / folder.name))  # a fresh checkout has the pack, not its work dirs
    limit = min(args.limit, len(TASKS))
    for position in run_order(limit, args.first):
        work = work_dir(folder, position)
        if finished(work, args.trials) or TASKS[position] in packed:
            continue
        work.mkdir(parents=True, exist_ok=True)
        started = time.time()
        try:
            with cpu_lock():
                with open(work / "run.log", "a") as log:
                    code = run_to_end(tune_command(position, work, args.trials, args.model, target),
                                      stdout=log, stderr=subprocess.STDOUT, env=tune_env())
        except KeyboardInterrupt:  # run_to_end stopped the tuning run; its records are kept, the task continues
            print(f"[{time.strftime('%H:%M:%S')}] {position:3d} {TASKS[position]}: interrupted; the same command "
                  "continues it", flush=True)
            return 130
        if code == 0 and (work / WorkDir.SUMMARY).exists():
            (work / DONE).write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
        state = "done" if finished(work, args.trials) else f"exit {code}"
        print(f"[{time.strftime('%H:%M:%S')}] {position:3d} {TASKS[position]} ({arm_of(position)}): {state}, "
              f"{time.time() - started:.0f} s", flush=True)
        if code < 0 or code in (130, TERMINATED):  # interrupted: stop here, resume later
            return 1
        time.sleep(YIELD_S)
    return 0


def status(args) -> int:
    folder, _, _ = platform_dir(Path(args.out))
    packed = set(packed_tasks(Path(args.to) / folder.name))
    done = [p for p in range(len(TASKS)) if finished(work_dir(folder, p), args.trials) or TASKS[p] in packed]
    print(f"{folder}: {len(done)} of {len(TASKS)} tasks finished ({args.trials} trials each; {len(packed)} packed)")
    return 0


def pack(args) -> int:
    from costlab.costmodels.predictors import pinned_name

    folder, _, _ = platform_dir(Path(args.out))
    works = [work_dir(folder, p) for p in range(len(TASKS)) if finished(work_dir(folder, p), args.trials)]
    if not works or not (folder / "host.json").exists():
        raise SystemExit(f"{folder}: no finished task to pack")
    host = json.loads((folder / "host.json").read_text())
    dest = Path(args.to) / folder.name
    works = packed_first(works, dest)
    packed = packed_tasks(dest)
    before = json.loads((dest / "info.json").read_text())["trajectories"] if packed else {}
    tuned_with = before.get("model")  # a versioned name (an alias would move to other weights)
    model = pinned_name(args.model)  # an alias as the version it stands for now
    if before and tuned_with != model:  # refused before anything is written
        raise SystemExit(f"{dest} was tuned with --model {tuned_with}, not {model}: pack into another --to")
    for w in works:  # what each work dir was tuned with (its run record), not what this command is told
        run_opts = json.loads((w / "costlab_run.json").read_text())
        if arm_of(int(w.name[:3])) == "model" and run_opts.get("model") != model:
            raise SystemExit(f"{w} was tuned with --model {run_opts.get('model')}, not {model}: pack it with that "
                             "--model into another --to")
    data = folder / "trajectories.h5"
    with cpu_lock():  # no task writes its database while it is read
        data.unlink(missing_ok=True)
        if packed:  # the pack's records first, as packed (its tasks' work dirs may be on another checkout)
            subprocess.run([*COSTLAB, "dataset", "unpack", str(dest), "-o", str(data)], check=True)
        # import-ms adds nothing twice: a packed task's own work dir, where it is here, adds no record
        subprocess.run([*COSTLAB, "dataset", "import-ms", *map(str, works), "-o", str(data), "--platform", folder.name,
                        "--host", str(folder / "host.json")], check=True)
    subprocess.run([*COSTLAB, "dataset", "pack", str(data), "-o", str(dest)], check=True)
    info = json.loads(subprocess.run([*COSTLAB, "dataset", "info", str(data), "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    info.pop("path", None)
    tasks = packed + [TASKS[int(w.name[:3])] for w in works if TASKS[int(w.name[:3])] not in packed]
    arms = dict(before.get("arms") or {}, **{w.name: arm_of(int(w.name[:3])) for w in works})
    info["trajectories"] = {"tasks": tasks, "trials": args.trials, "arms": arms, "model": model}
    write_atomically(dest / "info.json", json.dumps(info, indent=1, sort_keys=True).encode())
    print(f"{dest}: {len(tasks)} tasks packed (host {host.get('cpu_model')})")
    return 0


def packed_first(works: list[Path], dest: Path) -> list[Path]:
    """The work dirs in the order a pack is continued in: the tasks ``dest`` holds already, in their packed
    order, then the newly finished ones. A pack only ever grows at its end (``costlab dataset pack`` refuses a
    dataset whose first tasks are not the packed ones), and tasks finish out of position order."""
    info = dest / "info.json"
    if not info.exists():
        return works
    order = {task: i for i, task in enumerate(json.loads(info.read_text())["trajectories"]["tasks"])}
    return sorted(works, key=lambda w: (order.get(TASKS[int(w.name[:3])], len(order)), w.name))


def library(args) -> int:
    """The starter schedule library shipped with costlab: every finished task's checked best programs
    (``costlab library add``, checked on this host), gzipped to ``export/library/starter/<platform>.json.gz``."""
    import gzip
    import tempfile

    folder, _, _ = platform_dir(Path(args.out))
    works = [work_dir(folder, p) for p in range(len(TASKS)) if finished(work_dir(folder, p), args.trials)]
    if not works:
        raise SystemExit(f"{folder}: no finished task to build a library from")
    dest = ROOT / "export" / "library" / "starter" / f"{folder.name}.json.gz"
    with tempfile.TemporaryDirectory() as tmp, cpu_lock():  # the checks build and run programs
        subprocess.run([*COSTLAB, "library", "add", *map(str, works), "--library", tmp, "--platform", folder.name,
                        "--no-progress"], check=True, stdout=subprocess.DEVNULL)
        dest.write_bytes(gzip.compress((Path(tmp) / folder.name / "library.json").read_bytes(), 9, mtime=0))
    print(f"{dest}: the starter library of {len(works)} tasks")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=["run", "status", "pack", "library"])
    p.add_argument("--out", default=str(ROOT / "bench" / "trajectories"), help="base folder of the work dirs")
    p.add_argument("--to", default=str(ROOT / "corpus" / "trajectories"),
                   help="where the packed files go (pack), and whose packed tasks are not tuned again (run, status)")
    p.add_argument("--limit", type=int, default=len(TASKS), help="tune the first N tasks of the list")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--first", metavar="A-B", help="run: tune these positions before the others (e.g. 202-)")
    p.add_argument("--model", default="x86-cpu-v1",
                   help="the model of the model-led arm (the one every packed task of the corpus was tuned with)")
    args = p.parse_args(argv)
    return {"run": run, "status": status, "pack": pack, "library": library}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
