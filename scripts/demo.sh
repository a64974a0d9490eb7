#!/usr/bin/env bash
# The main job end to end on a small embedded default: extract tasks, measure candidates on this machine's
# own target, inspect, split by task, fine-tune the shipped x86-cpu model (pre-trained on the corpus's CPUs) on this
# machine's tasks and evaluate it on the held-out one beside zero-shot, PSA and random, export it, tune a
# workload no model has seen with it (model-led search) and with MetaSchedule's default at the same budget, side by side in seconds and trials, and hand the measured programs back to MetaSchedule. Re-running continues where it stopped.
set -euo pipefail
OUT=${1:-demo_out}
COSTLAB=${COSTLAB:-.venv/bin/costlab}
TARGET=${TARGET:-host}        # this machine's CPU by its LLVM name and its cores (costlab dataset measure --help)
PY=${COSTLAB%/costlab}/python
TRIALS=${TRIALS:-64}
mkdir -p "$OUT"
DATA="$OUT/demo.h5"

echo "== 1. extract tasks: three small benchmark workloads" >&2
$COSTLAB dataset extract "$DATA" --target "$TARGET" --workload GMM:1,64,64,64 --workload GMM:1,32,128,64 \
  --workload C2D:1,14,14,16,16,3,1,1

echo "== 2. measure 24 candidates per task on this machine" >&2
$COSTLAB dataset measure "$DATA" --target "$TARGET" --per-task 24 --builder-timeout 15

echo "== 3. what the dataset holds" >&2
$COSTLAB dataset info "$DATA"

echo "== 4. a reproducible split, stored in the file: one task held out" >&2
$COSTLAB dataset split "$DATA" --by task --seed 0 --test-fraction 0.3 --name demo
PLATFORM=$($COSTLAB dataset info "$DATA" --json | "$PY" -c 'import json,sys; print(sorted(json.load(sys.stdin)["records"])[0])')

echo "== 5. featurize (PaCM data-flow patterns, the shipped model's featurizer; cached in the dataset)" >&2
$COSTLAB featurize "$DATA" --featurizer pacm

echo "== 6. fine-tune the shipped x86-cpu model (pre-trained on the corpus's CPUs) on this machine's tasks; held-out task beside zero-shot, PSA, random" >&2
$COSTLAB finetune --from x86-cpu --data "$DATA" --platform "$PLATFORM" --split demo --out "$OUT/run" --overwrite  # re-run: fine-tuned again
$COSTLAB evaluate --model "$OUT/run" --data "$DATA" --report "$OUT/run/report"
for M in x86-cpu psa random; do
  echo "-- $M" >&2
  $COSTLAB evaluate --model "$M" --data "$DATA" --split demo --platform "$PLATFORM"
done

echo "== 7. export the fine-tuned model: config.json + model.safetensors" >&2
$COSTLAB export "$OUT/run" -o "$OUT/model" --force  # re-run: the model of this run replaces the last

echo "== 8. tune a workload no model has seen, $TRIALS trials each: with the fine-tuned model, and MetaSchedule's default" >&2
# the model against MetaSchedule's default alone: neither starts from the schedule library
SEARCH=(--target "$TARGET" --trials "$TRIALS" --no-progress --json --no-library)
$COSTLAB tune --workload GMM:1,96,96,96 --model "$OUT/model" --work-dir "$OUT/tune_model" "${SEARCH[@]}" > "$OUT/tune_model.json"
$COSTLAB tune --workload GMM:1,96,96,96 --work-dir "$OUT/tune_default" "${SEARCH[@]}" > "$OUT/tune_default.json"
"$PY" - "$OUT/tune_model" "$OUT/tune_default" <<'PYEOF'
import json, sys
from pathlib import Path

def run(work):
    summary = json.loads((Path(work) / "costlab_tune.json").read_text())
    hist = [json.loads(x) for x in (Path(work) / "progress.jsonl").read_text().splitlines()]
    return summary, hist

(model, mh), (default, dh) = run(sys.argv[1]), run(sys.argv[2])
target = dh[-1]["best_us"]  # MetaSchedule's final best
reach = next((h for h in mh if h["best_us"] and h["best_us"] <= target), None)
print(f"{'GMM:1,96,96,96':36} {'trials':>6} {'best us':>8} {'wall s':>7} {'first batch s':>14}")
for name, s in (("costlab tune, fine-tuned x86-cpu", model), ("MetaSchedule's default (XGBoost)", default)):
    t = s["tasks"][0]
    print(f"{name:36} {t['trials']:6d} {t['best_us']:8.1f} {s['wall_s']:7.1f} {s.get('first_batch_s', 0):14.1f}")
if reach:
    print(f"the model reached MetaSchedule's final {target:.1f} us after {reach['trials']} trials and "
          f"{reach['elapsed_s']:.0f} s, against {dh[-1]['trials']} trials and {dh[-1]['elapsed_s']:.0f} s")
else:
    print(f"the model did not reach MetaSchedule's final {target:.1f} us within {mh[-1]['trials']} trials")
print("(one seed at a small budget: benchmarks/tuning.py compares them over seeds and workloads; docs/search.md)")
PYEOF

echo "== 9. back to a MetaSchedule database" >&2
rm -rf "$OUT/ms_db"  # re-run: written again from the dataset, which holds every record of it
$COSTLAB dataset export-ms "$DATA" --platform "$PLATFORM" -o "$OUT/ms_db"
echo "demo done: $DATA, $OUT/run (model, report), $OUT/model, $OUT/tune_model, $OUT/tune_default, $OUT/ms_db" >&2
