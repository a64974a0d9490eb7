#!/usr/bin/env bash
# Trains the shipped x86-cpu model from the committed corpus (corpus/, scripts/make_corpus.sh): unpacks it,
# trains PaCM on every task (10% of the tasks held out for validation pick the checkpoint) with the settings
# docs/training.md reports, and exports the model into costmodels/models/x86-cpu-$VERSION (a new version never
# replaces an older one's folder; costmodels/models/aliases.json says which version the plain name x86-cpu is).
#
# Usage: VERSION=v3 scripts/train_x86_model.sh [WORK_DIR] [all|annotate]   (default build/x86-cpu, all; EPOCHS=60)
#   annotate: only (re)write what config.json says of the corpus and of HELD_OUT, the weights untouched
#   DATA=both: the two-CPU model (x86-cpu-v2): Emerald Rapids' random samples (corpus/) and Zen 5's tuning
#     trajectories (corpus/trajectories/llvm-znver5-2c) as rows of one PaCM with the hardware input, exactly the
#     `both` kind of benchmarks/learning_curve.py at all tasks (a fifth of the trajectory tasks, by name, and
#     every task of their workloads held out), so that the curve's held-out figures are this model's;
#     KIND=both-gain8 takes that curve kind instead (LambdaRank gains steep toward each task's best).
#     The curve's scores of that kind (WORK/results.json, else CURVE_RESULTS) become its held-out figures.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-$ROOT/build/x86-cpu}"
STEP="${2:-all}"
VERSION="${VERSION:?set VERSION (v1, v2, ...): the model goes to costmodels/models/x86-cpu-VERSION}"
DEST="$ROOT/costmodels/models/x86-cpu-$VERSION"
COSTLAB="${COSTLAB:-$ROOT/.venv/bin/costlab}"
# the Python of the environment costlab is installed in (COSTLAB may be a bare name found on PATH)
PY="${PYTHON:-$(dirname "$(command -v "$COSTLAB")")/python}"
if [ "${DATA:-}" = both ] && [ -n "${HELD_OUT:-}" ]; then  # refused before hours of training, not at the annotation
  echo "train_x86_model: HELD_OUT is for the corpus model; DATA=both takes its held-out figures from the curve" \
    "(CURVE_RESULTS)" >&2
  exit 2
fi
if [ "$STEP" = all ] && [ -e "$DEST" ] && [ "${FORCE:-}" != 1 ]; then  # refused before hours of training
  echo "train_x86_model: $DEST exists (a shipped model; costmodels/models/aliases.json may name it): a new model" \
    "goes to a new VERSION; FORCE=1 replaces this one" >&2
  exit 2
fi
if [ "$STEP" = all ] && [ "${DATA:-}" = both ]; then
  "$PY" "$ROOT/benchmarks/learning_curve.py" --out "$WORK" --kinds "${KIND:-both}" --sizes 0 \
    --epochs "${EPOCHS:-60}"
  rm -rf "$DEST"
  # the run at all tasks: the largest n of the curve's runs (a WORK reused from a whole curve holds smaller ones)
  RUN="$(ls -d "$WORK/${KIND:-both}"-n*-s0 | sed 's/.*-n\([0-9]*\)-s0$/\1 &/' | sort -n | tail -1 | cut -d' ' -f2-)"
  "$COSTLAB" export "$RUN" -o "$DEST" --force
elif [ "$STEP" = all ]; then
  mkdir -p "$WORK"
  if [ ! -f "$WORK/corpus.h5" ]; then
    "$COSTLAB" dataset unpack "$ROOT/corpus" -o "$WORK/corpus.h5"
  fi
  # config.json says it trained on corpus/info.json's counts: a corpus.h5 kept from an earlier corpus is refused
  "$COSTLAB" dataset info "$WORK/corpus.h5" --json | "$PY" -c '
import json, sys
have, info = json.load(sys.stdin), json.load(open(sys.argv[1]))
got, want = (have.get("records"), have.get("tasks")), (info["records"], info["tasks"])
if got != want:
    sys.exit(f"train_x86_model: {sys.argv[2]} holds {got[0]} records of {got[1]} tasks, {sys.argv[1]} lists "
             f"{want[0]} of {want[1]}: remove it (it is unpacked again from corpus/)")
' "$ROOT/corpus/info.json" "$WORK/corpus.h5"
  "$COSTLAB" train --model pacm --data "$WORK/corpus.h5" --out "$WORK/run" --epochs "${EPOCHS:-60}" \
    --set net.d_model=128 --set data_options.lists_per_batch=4 --set data_options.val_fraction=0.1 --no-progress --overwrite
  rm -rf "$DEST"
  "$COSTLAB" export "$WORK/run" -o "$DEST" --force
fi
# what `costlab models` prints: the corpus it trained on (tasks, records, the measuring host) and, when
# HELD_OUT names the JSON of benchmarks/ranking.py --section models on the corpus's splits (its --json), those
# figures: each model's mean over the splits and its top-1 per split
"$PY" - "$ROOT" "${HELD_OUT:-}" "$DEST" "${DATA:-}" "$WORK" "${KIND:-both}" \
  "${CURVE_RESULTS:-$WORK/results.json}" <<'PY'
import json, sys
from pathlib import Path
root, held_out, dest, data = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]
kind, curve = sys.argv[6], Path(sys.argv[7])
path = dest / "config.json"
config = json.loads(path.read_text())
if data == "both" and curve.exists():  # the curve's zero-shot scores of this model (its kind at all tasks)
    from costlab.common.host import describe_host
    results = json.loads(curve.read_text())
    rows = [r for r in results["scores"] if r["kind"] == kind]
    rows = [r for r in rows if r["tasks"] == max(r["tasks"] for r in rows)]
    keys = ("top1", "pairwise", "pairwise_q25", "pairwise_q10", "pick8")
    per_set = {r["on"]: {k: round(r[k], 4) for k in keys if r.get(k) is not None} for r in rows}
    config["held_out"] = dict(
        splits=["traj-heldout"], mean={config["kind"]: per_set["traj-heldout"]}, per_set=per_set,
        held_out=f"zero-shot on the {results['heldout_tasks']} trajectory tasks held out of training "
                 "(benchmarks/learning_curve.py, traj-heldout); per_set adds the six tuning-benchmark workloads' "
                 "MetaSchedule runs (a: 200 trials, a1000: 1000)",
        host=describe_host(results.get("host") or {}))
if data == "both" and (Path(sys.argv[5]) / "cpus.h5").exists():  # each row platform's share of training
    import numpy as np
    from costlab.datasets import open_dataset
    parts = []
    with open_dataset(Path(sys.argv[5]) / "cpus.h5") as ds:
        split = ds.split(config["split"])
        for pid in config["training"]["row_platforms"]:
            task = ds.records(pid).task.astype(np.int64)
            train = task[~split.is_test(task, np.zeros(len(task), np.int64))]
            host = ds.platforms[pid].host or {}
            pack = "corpus/trajectories/" + pid if (root / "corpus/trajectories" / pid).is_dir() else "corpus"
            parts.append(dict(platform=pid, tasks=int(len(np.unique(train))), records=int(len(train)),
                              host=host.get("cpu_model"), threads=host.get("threads"), files=pack + "/"))
    config["corpus"] = dict(tasks=sum(p["tasks"] for p in parts), records=sum(p["records"] for p in parts),
                            platforms=parts, held_out="a fifth of the trajectory tasks by name "
                            "(benchmarks/learning_curve.py held_out) and every task of their workloads")
elif data != "both":
    info = json.loads((root / "corpus" / "info.json").read_text())
    pid = config["platforms"][0]
    host = (config.get("hosts") or {}).get(pid) or {}
    config["corpus"] = dict(tasks=info["records_per_task"][pid]["tasks"], records=info["records"][pid], platform=pid,
                            host=host.get("cpu_model"), threads=host.get("threads"), files="corpus/")
if held_out:
    runs = json.loads(Path(held_out).read_text())["models"]
    splits = [k for k in runs if k != "mean"]
    mean = runs["mean"] if "mean" in runs else runs[splits[0]]
    tasks = info["records_per_task"][pid]["tasks"]
    config["held_out"] = dict(
        splits=splits, held_out=f"30% of the corpus's {tasks} tasks per split (by task), one split per seed",
        note="models trained on those splits, mean over the splits; the shipped model itself trained on every task",
        mean={r["model"]: {k: round(r[k], 4) for k in ("top1", "top5", "pairwise", "ndcg")} for r in mean},
        per_split={s: {r["model"]: round(r["top1"], 4) for r in runs[s]} for s in splits})
from costlab.costmodels.artifact import ship_config  # machine paths left out, config_sha256 (the weights' hash kept)
path.write_text(json.dumps(ship_config(config), indent=1, sort_keys=True))
PY
"$COSTLAB" models
