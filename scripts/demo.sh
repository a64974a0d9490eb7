#!/usr/bin/env bash
# The main job end to end on a small embedded default: extract tasks, measure candidates, inspect, split,
# featurize, train and evaluate a TLP model, and hand the measured programs back to MetaSchedule. Re-running continues where it stopped.
set -euo pipefail
OUT=${1:-demo_out}
COSTLAB=${COSTLAB:-.venv/bin/costlab}
TARGET=${TARGET:-llvm -num-cores=2}
mkdir -p "$OUT"
DATA="$OUT/demo.h5"

echo "== 1. extract tasks: two small benchmark workloads" >&2
$COSTLAB dataset extract "$DATA" --target "$TARGET" --workload GMM:1,64,64,64 --workload C2D:1,14,14,16,16,3,1,1

echo "== 2. measure 16 candidates per task on this machine" >&2
$COSTLAB dataset measure "$DATA" --target "$TARGET" --per-task 16 --builder-timeout 15

echo "== 3. what the dataset holds" >&2
$COSTLAB dataset info "$DATA"

echo "== 4. a reproducible split, stored in the file" >&2
$COSTLAB dataset split "$DATA" --by within-task --seed 0 --test-fraction 0.25 --name demo

echo "== 5. featurize (TLP tokens, cached in the dataset)" >&2
$COSTLAB featurize "$DATA" --featurizer tlp

echo "== 6. train a small TLP model and evaluate it on the held-out programs" >&2
$COSTLAB train --model tlp --data "$DATA" --split demo --out "$OUT/run" --epochs 10 \
  --set net.d_model=64 --set net.attention_heads=4 --set data_options.list_size=8 --no-progress
$COSTLAB evaluate --model "$OUT/run" --data "$DATA" --report "$OUT/run/report"
$COSTLAB evaluate --model random --data "$DATA" --split demo

echo "== 7. back to a MetaSchedule database" >&2
PLATFORM=$($COSTLAB dataset info "$DATA" --json | .venv/bin/python -c 'import json,sys; print(sorted(json.load(sys.stdin)["records"])[0])')
$COSTLAB dataset export-ms "$DATA" --platform "$PLATFORM" -o "$OUT/ms_db"
echo "demo done: $DATA, $OUT/run (model, report), $OUT/ms_db" >&2
