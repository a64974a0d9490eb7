#!/usr/bin/env bash
# costlab end to end on this machine's NVIDIA GPU (after scripts/gpu_setup.sh; docs/gpu.md has the figures):
# extract a few tasks for a `cuda` target, measure candidates with MetaSchedule's runner on the GPU, check
# PaCM's and PSA's features of them (benchmarks/gpu.py features), train a PaCM model on the GPU through
# Lightning and evaluate it on held-out tasks beside PSA and random, export it, and tune a workload no model has
# seen with it, with PSA alone and with MetaSchedule's default, side by side (benchmarks/gpu.py tuning).
#
#   scripts/gpu_demo.sh OUT [STEP...]     steps: data features train tune (default: all, in that order)
#
# Before anything is written it checks the steps' names, that TVM (with $PY) sees a CUDA GPU (unless the steps are
# only `features`, which needs none) and that $COSTLAB runs; the first that fails is said in one line (exit 1).
# Each step logs to OUT/STEP.log and goes on from what the earlier ones left; a step that fails is reported
# and the next ones still run where they can. Re-running continues where it stopped.
set -uo pipefail
OUT=${1:-gpu_out}
shift || true
STEPS=${*:-data features train tune}
TUNE_ARMS=${TUNE_ARMS:-default model psa}   # MetaSchedule's default, the trained model, PSA alone
COSTLAB=${COSTLAB:-costlab}
PY=${PY:-python3}
NEED_GPU=""
for s in $STEPS; do
  case $s in
    features) ;;
    data|train|tune) NEED_GPU=1 ;;
    *) echo "gpu_demo: unknown step $s (data features train tune)" >&2; exit 1 ;;
  esac
done
for arm in $TUNE_ARMS; do
  case $arm in model|psa|default) ;; *) echo "gpu_demo: unknown arm $arm in TUNE_ARMS (model psa default)" >&2; exit 1 ;; esac
done
# checked outside the checkout, whose folder costlab/ would hide the installed package
if [ -n "$NEED_GPU" ]; then
  why=$(cd / && $PY -c '
import sys
try:
    import tvm
except Exception as exc:
    sys.exit(f"TVM does not import with {sys.executable} ({type(exc).__name__}: {exc})")
if not tvm.cuda(0).exist:
    sys.exit("TVM sees no CUDA GPU (tvm.cuda(0).exist is False)")
' 2>&1 | tail -1) || { echo "gpu_demo: $why: nothing run (scripts/gpu_setup.sh install, then source its env.sh; docs/gpu.md)" >&2; exit 1; }
fi
(cd / && $COSTLAB --help) > /dev/null 2>&1 ||
  { echo "gpu_demo: $COSTLAB does not run (scripts/gpu_setup.sh install, then source its env.sh): nothing run" >&2; exit 1; }
TARGET=${TARGET:-cuda}                       # this machine's GPU (arch and limits as TVM sees them)
PER_TASK=${PER_TASK:-48}
EPOCHS=${EPOCHS:-50}
TRIALS=${TRIALS:-64}
TUNE_WORKLOAD=${TUNE_WORKLOAD:-C2D:1,56,56,64,64,3,1,1}
WORKLOADS=${WORKLOADS:-GMM:1,128,128,128 GMM:1,512,512,512 GMM:1,128,1024,256 C2D:1,28,28,128,128,3,1,1 C2D:1,14,14,256,256,3,1,1 DEP:1,56,56,64,3,1,1}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA="$OUT/gpu.h5"
# Run outside the checkout: its folder costlab/ would hide the installed package from Python (and from TVM's
# worker processes, which start in the current directory).
cd "$OUT"
FAILED=()

step() {  # step NAME COMMAND...: run, time and log it
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/steps.log" >&2
  "$@" >> "$OUT/$name.log" 2>&1
  rc=$?
  printf "   %s: exit %d in %d s\n" "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$OUT/steps.log" >&2
  [ $rc -eq 0 ] || { FAILED+=("$name"); tail -5 "$OUT/$name.log" >&2; }
  return $rc
}

platform() { $COSTLAB dataset info "$DATA" --json | $PY -c 'import json,sys; print(sorted(json.load(sys.stdin)["records"])[0])'; }

for s in $STEPS; do
  case $s in
    data)
      args=()
      for w in $WORKLOADS; do args+=(--workload "$w"); done
      step extract $COSTLAB dataset extract "$DATA" --target "$TARGET" "${args[@]}"
      step measure $COSTLAB dataset measure "$DATA" --target "$TARGET" --per-task "$PER_TASK" --no-progress
      step info $COSTLAB dataset info "$DATA"
      ;;
    features)
      step features $PY "$HERE/benchmarks/gpu.py" features --data "$DATA" --json "$OUT/features.json"
      ;;
    train)
      P=$(platform)
      step split $COSTLAB dataset split "$DATA" --by task --seed 0 --test-fraction 0.34 --name gpu
      step train $COSTLAB train --model pacm --data "$DATA" --platform "$P" --split gpu --out "$OUT/run" --overwrite \
        --epochs "$EPOCHS" --no-progress
      for M in "$OUT/run" psa random; do
        step "evaluate-$(basename "$M")" $COSTLAB evaluate --model "$M" --data "$DATA" --split gpu --platform "$P" --json
      done
      step export $COSTLAB export "$OUT/run" -o "$OUT/model" --force
      ;;
    tune)
      # the arms side by side alone: none starts from the schedule library (it would start the model's and PSA's
      # runs from the default arm's best programs) or adds to this machine's
      SEARCH=(--target "$TARGET" --trials "$TRIALS" --workload "$TUNE_WORKLOAD" --no-progress --json --no-library)
      [ -z "${MAX_SECONDS:-}" ] || SEARCH+=(--max-seconds "$MAX_SECONDS")   # each run's wall-time budget
      RUNS=()
      for arm in $TUNE_ARMS; do
        case $arm in
          model) step tune-model $COSTLAB tune --model "$OUT/model" --work-dir "$OUT/tune_model" "${SEARCH[@]}" ;;
          psa) step tune-psa $COSTLAB tune --model psa --work-dir "$OUT/tune_psa" "${SEARCH[@]}" ;;
          default) step tune-default $COSTLAB tune --work-dir "$OUT/tune_default" "${SEARCH[@]}" ;;
          *) echo "gpu_demo: unknown arm $arm (model psa default)" >&2; exit 1 ;;
        esac
      done
      for arm in default model psa; do
        case $arm in
          default) name="MetaSchedule default" ;; model) name="costlab, trained PaCM" ;; psa) name="costlab, PSA alone" ;;
        esac
        [ -f "$OUT/tune_$arm/costlab_tune.json" ] && RUNS+=(--run "$name=$OUT/tune_$arm")
      done
      step tuning $PY "$HERE/benchmarks/gpu.py" tuning "${RUNS[@]}" --json "$OUT/tuning.json"
      cat "$OUT/tuning.log" >&2
      ;;
    *) echo "gpu_demo: unknown step $s (data features train tune)" >&2; exit 1 ;;
  esac
done
[ ${#FAILED[@]} -eq 0 ] || { echo "gpu_demo: failed steps: ${FAILED[*]}" >&2; exit 1; }
echo "gpu_demo: done in $OUT" >&2
