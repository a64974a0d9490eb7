#!/usr/bin/env bash
# Trains the shipped cuda-sm90 model (PaCM) from the H100 records committed with costlab: tests/fixtures/h100
# (float32 matmuls and convolutions) and tests/fixtures/h100_tc (float16 tensor-core and float32 ones). The two
# are merged into one dataset (export-ms, then import-ms: a program measured in both is kept once), PaCM is
# trained on every task but the fifth (two of ten, drawn by the training's seed) that validation holds to pick
# the checkpoint, and exported
# into costmodels/models/cuda-sm90-$VERSION, its config annotated with the held-out figures that
# `benchmarks/gpu.py heldout --data WORK/h100.h5 --json benchmarks/results/gpu-h100-tc/heldout.json` gives on the
# same records (docs/gpu.md).
#
# Usage: VERSION=v1 scripts/train_gpu_model.sh [WORK_DIR] [merge|all]    (default build/cuda-sm90, all; EPOCHS=50)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-$ROOT/build/cuda-sm90}"
STEP="${2:-all}"
COSTLAB="${COSTLAB:-$ROOT/.venv/bin/costlab}"
# the Python of the environment costlab is installed in (COSTLAB may be a bare name found on PATH)
PY="${PYTHON:-$(dirname "$(command -v "$COSTLAB")")/python}"
DATA="$WORK/h100.h5"
mkdir -p "$WORK"
if [ ! -f "$DATA" ]; then
  rm -rf "$WORK/parts"
  mkdir -p "$WORK/parts"
  "$COSTLAB" dataset unpack "$ROOT/tests/fixtures/h100_tc" -o "$WORK/parts/tc.h5"
  for src in "$ROOT/tests/fixtures/h100/cuda_sm90.h5" "$WORK/parts/tc.h5"; do
    name=$(basename "$src" .h5)
    "$COSTLAB" dataset export-ms "$src" --platform cuda-sm_90 -o "$WORK/parts/$name" --include-failed
  done
  "$COSTLAB" dataset import-ms -o "$DATA.partial" --platform cuda-sm_90 "$WORK/parts/cuda_sm90" "$WORK/parts/tc"
  mv "$DATA.partial" "$DATA"
fi
[ "$STEP" = merge ] && exit 0
VERSION="${VERSION:?set VERSION (v1, v2, ...): the model goes to costmodels/models/cuda-sm90-VERSION}"
DEST="$ROOT/costmodels/models/cuda-sm90-$VERSION"
"$COSTLAB" train --model pacm --data "$DATA" --platform cuda-sm_90 --out "$WORK/run" --overwrite \
  --set data_options.val_fraction=0.2 --epochs "${EPOCHS:-50}" --no-progress
rm -rf "$DEST"
"$COSTLAB" export "$WORK/run" -o "$DEST" --force
# what `costlab models` prints: the records it trained on and the held-out figures of benchmarks/gpu.py heldout
# (HELDOUT: its --json) on the same dataset
"$PY" - "$DEST" "$DATA" "${HELDOUT:-$ROOT/benchmarks/results/gpu-h100-tc/heldout.json}" <<'PY'
import json, sys
from pathlib import Path
from costlab.costmodels.artifact import ship_config
from costlab.datasets import open_dataset
dest, data, heldout = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
path = dest / "config.json"
config = json.loads(path.read_text())
pid = config["platforms"][0]
with open_dataset(data) as ds:
    gpu = ((ds.platforms[pid].host or {}).get("gpu") or {}).get("name")
    records = ds.num_records(pid)
    tasks = len(set(ds.records(pid).task.tolist()))
config["corpus"] = dict(tasks=tasks, records=records, platform=pid, host=gpu or "NVIDIA H100 80GB HBM3",
                        files="tests/fixtures/h100/ and tests/fixtures/h100_tc/")
runs = json.loads(heldout.read_text())
config["held_out"] = dict(
    splits=[f"heldout{f['seed']}" for f in runs["folds"]],
    held_out=f"30% of the {tasks} tasks per split (by task), one split per seed (benchmarks/gpu.py heldout)",
    note="PaCM trained on each split's training tasks, mean over the splits; the shipped model itself trained on "
         "every task but the two that validated",
    mean=runs["mean"], per_split={f"heldout{f['seed']}": {k: f[k]["top1"] for k in runs["mean"]} for f in runs["folds"]})
path.write_text(json.dumps(ship_config(config), indent=1, sort_keys=True))
PY
"$COSTLAB" models
