#!/usr/bin/env bash
# The GPU benchmark of one short lease (after scripts/gpu_setup.sh install and its env.sh; docs/gpu.md has the
# figures): where the start-up seconds go, a GPU dataset of float32 and float16 (tensor-core) tasks, a PaCM model
# trained on it and evaluated on held-out tasks beside PSA and random, and tuning runs of MetaSchedule's default
# (arm a) against that model, model-led and adapted online (arm c), on workloads in no dataset, finals retimed
# together (benchmarks/tuning.py). Everything it made is packed into OUT/gpu_bench.tgz, also when a step fails
# or the time runs out.
#
#   scripts/gpu_bench.sh OUT [SECONDS]      SECONDS: the time it may take in all (default 480)
#
# STEPS (default "startup data train tuning"; `network`, `network-finals`, `checks`, `keep-untuned` and
# `first-batch` on request) picks the parts to run;
# without `train`, arm c tunes with MODEL (default the shipped cuda-sm90), so a lease can spend all its time on
# tuning, or on one network (NETWORK, default bert, NET_TRIALS trials, default 200):
#   STEPS=tuning SEEDS=0 scripts/gpu_bench.sh OUT 540
#   STEPS=network scripts/gpu_bench.sh OUT 540
# NET_SEED (default 0) is the network runs' seed. `network-finals` times each finished arm's result against its
# database's fastest records and against the result with the tasks that kept their untuned schedule given their
# tuned programs (benchmarks/networks.py finals, 3 rounds).
# `checks` and `keep-untuned` (after a network step) time, on a copy of that seed's arm-a work dir, the checks of its
# tasks' programs (benchmarks/checks.py: all at once against one worker a task) and what the untuned programs add
# to the second measurement (benchmarks/keep_untuned.py), one round each, into OUT/checks.json and
# OUT/keep_untuned.json.
# `first-batch` times arm c's first batch with the runner's worker started in the background against the same
# run waiting for it (benchmarks/first_batch.py, FB_ROUNDS rounds, default 2, of about 40 s each way).
# TARGET (default cuda) is what every step measures on: TARGET=host rehearses a lease's steps on the CPU, with a
# CPU model (MODEL=x86-cpu) and few trials, before device time is spent on them.
# RESERVE (seconds) is what the tuning step leaves for the retime and the table (default a quarter, at most 75).
#
# Each step gets what is left of SECONDS, up to its own share, and is stopped (TERM: a measurement keeps every
# finished batch) when that runs out; a step that fails is logged and the next one runs. Every step logs to
# OUT/STEP.log; OUT/steps.log says what ran, its exit status and its seconds. Re-running continues where it
# stopped (the dataset and the tuning runs are resumable).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_bench.sh OUT [SECONDS]}
BUDGET=${2:-480}
COSTLAB=${COSTLAB:-costlab}
PY=${PY:-python3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PER_TASK=${PER_TASK:-32}
TRIALS=${TRIALS:-32}
SEEDS=${SEEDS:-0}
STEPS=${STEPS:-startup data train tuning}
NETWORK=${NETWORK:-bert}  # the network step's: a BERT-base encoder layer (benchmarks/nets.py), or llama
NET_TRIALS=${NET_TRIALS:-200}
NET_ARMS=${NET_ARMS:-a,k-nolib}  # benchmarks/networks.py's arms; stock (tune_relax as users call it) on request
NET_SEED=${NET_SEED:-0}
TARGET=${TARGET:-cuda}
KNOWN="startup data train tuning network network-finals checks keep-untuned first-batch"
for s in $STEPS; do
  [[ " $KNOWN " == *" $s "* ]] || { echo "gpu_bench: unknown step $s ($KNOWN)" >&2; exit 1; }
done
case ${RESERVE:-} in
  *[!0-9]*) echo "gpu_bench: RESERVE must be whole seconds, not $RESERVE" >&2; exit 1 ;;
esac
has() { [[ " $STEPS " == *" $1 "* ]]; }
# the dataset: float32 and float16 (tensor-core) matmuls and convolutions
DATA_WORKLOADS=${DATA_WORKLOADS:-GMM:1,512,512,512,float16,float16 GMM:1,512,512,512 C2D:1,14,14,256,256,3,1,1,1,1,float16,float16 C2D:1,14,14,256,256,3,1,1 GMM:1,128,768,3072,float16,float16 GMM:1,128,1024,256 C2D:1,56,56,64,64,1,1,0,1,1,float16,float16 GMM:1,256,2048,512,float16,float16}
# the tuning workloads, none of them (shapes and types) in the dataset: two on tensor cores; the float32 matmul
# first, as no lease has run it to its end (a lease's time runs out before the last)
TUNE_WORKLOADS=${TUNE_WORKLOADS:-GMM:1,1024,1024,1024 GMM:1,1024,1024,1024,float16,float16 C2D:1,56,56,64,64,3,1,1 C2D:1,28,28,128,128,3,1,1,1,1,float16,float16}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA="$OUT/gpu.h5"
cd "$OUT"  # outside the checkout: its folder costlab/ would hide the installed package
pack() { tar czf "$OUT/gpu_bench.tgz" --exclude=gpu_bench.tgz --exclude='checkpoints' --exclude='*.ckpt' -C "$OUT" . 2>/dev/null; }
trap pack EXIT

left() { echo $(( BUDGET - SECONDS )); }
KILL_AFTER=20  # a step still running this long after its TERM is killed, its process group with it
step() {  # step NAME SHARE COMMAND...: run it for at most SHARE seconds (or what is left), timed and logged
  local name=$1 share=$2 limit rc t0
  shift 2
  limit=$(left)
  [ "$share" -lt "$limit" ] && limit=$share
  if [ "$limit" -lt 5 ]; then
    echo "   $name: skipped, no time left" | tee -a "$OUT/steps.log" >&2
    return 1
  fi
  t0=$SECONDS
  echo "== $name (at most $limit s): $*" | tee -a "$OUT/steps.log" >&2
  # FG=--foreground: TERM to the command alone, which ends itself (a costlab command keeps its finished work);
  # else to its whole process group (a benchmark's own costlab commands too)
  timeout ${FG:-} -s TERM -k "$KILL_AFTER" "$limit" "$@" >> "$OUT/$name.log" 2>&1
  rc=$?
  printf "   %s: exit %d in %d s\n" "$name" "$rc" "$(( SECONDS - t0 ))" | tee -a "$OUT/steps.log" >&2
  [ $rc -eq 0 ] || tail -4 "$OUT/$name.log" >&2
  return $rc
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nproc; lscpu | head -20
  # set by gpu_setup's env.sh where costlab's workers see the GPU only with PyTorch imported (as TVM's workers do)
  echo "COSTLAB_WORKERS_IMPORT_TORCH=${COSTLAB_WORKERS_IMPORT_TORCH:-}"; } \
  > "$OUT/machine.txt" 2>&1
has startup && step startup 60 $PY "$HERE/benchmarks/gpu.py" startup --json "$OUT/startup.json"
MODEL=${MODEL:-cuda-sm90}  # arm c's model (and first-batch's); the train step replaces it with the one it trains
has first-batch && step first-batch $(( ${FB_ROUNDS:-2} * 90 )) $PY "$HERE/benchmarks/first_batch.py" \
  --model "$MODEL" --target "$TARGET" --workload C2D:1,56,56,64,64,3,1,1 --rounds "${FB_ROUNDS:-2}" \
  --json "$OUT/first_batch.json"

if has data; then
  args=()
  for w in $DATA_WORKLOADS; do args+=(--workload "$w"); done
  step extract 60 $COSTLAB dataset extract "$DATA" --target "$TARGET" "${args[@]}"
  # a first pass of a few programs a task, so that every task has some when the time runs out. TERM to `measure`
  # alone, which shuts its own worker pools down (the first lease's measure2, TERM sent to the whole group,
  # outlived the 20 s grace and was killed before its summary; the cause was not established)
  FG=--foreground step measure1 150 $COSTLAB dataset measure "$DATA" --target "$TARGET" --per-task 12 --no-progress
  FG=--foreground step measure2 60 $COSTLAB dataset measure "$DATA" --target "$TARGET" --per-task "$PER_TASK" --no-progress
  step info 20 $COSTLAB dataset info "$DATA"
fi
if has train; then
  P=$($COSTLAB dataset info "$DATA" --json 2>/dev/null | $PY -c 'import json,sys; print(sorted(json.load(sys.stdin)["records"])[0])')
  step split 20 $COSTLAB dataset split "$DATA" --by task --seed 0 --test-fraction 0.34 --name gpu
  step train 150 $COSTLAB train --model pacm --data "$DATA" --platform "$P" --split gpu --out "$OUT/run" --overwrite \
    --epochs 50 --no-progress
  step export 20 $COSTLAB export "$OUT/run" -o "$OUT/model" --force && MODEL="$OUT/model"
fi
if has tuning; then
  # the runs get all but RESERVE seconds (default a quarter, at most 75) kept for the retime and the table, and
  # the KILL_AFTER seconds a stopped run may take to end (its round in flight is lost: the run gets TERM from the
  # group and again from the benchmark, and stops at once); each run's best programs are measured once, by the
  # retime of all runs of its workload together. RESERVE=0: runs only, for a lease whose next call retimes them
  if [ -z "${RESERVE:-}" ]; then
    RESERVE=$(( $(left) / 4 ))
    [ "$RESERVE" -gt 75 ] && RESERVE=75
  fi
  # a run that would not end within the step's time is not started (its round would be lost at the TERM):
  # tuning.py's --seconds, a little less than the step's share, which its own start-up takes from
  share=$(( $(left) - RESERVE - KILL_AFTER ))
  step tuning $share $PY "$HERE/benchmarks/tuning.py" run --out "$OUT/tuning" --model "$MODEL" \
    --arms a,c --workloads $TUNE_WORKLOADS --seeds "$SEEDS" --trials "$TRIALS" --target "$TARGET" --no-remeasure \
    --seconds $(( share > 10 ? share - 5 : 5 ))
  [ "$RESERVE" -gt 0 ] && step retime $(( RESERVE * 4 / 5 )) $PY "$HERE/benchmarks/tuning.py" retime --out "$OUT/tuning" --target "$TARGET" --rounds 3
  step table 20 $PY "$HERE/benchmarks/tuning.py" table --out "$OUT/tuning"
fi
if has network; then
  # one network end to end (benchmarks/networks.py): MetaSchedule's search (arm a) against the model-led one with
  # MODEL (k-nolib), NET_TRIALS trials over its tasks, seed NET_SEED, their final builds timed together
  step network $(( $(left) - 40 - KILL_AFTER )) $PY "$HERE/benchmarks/networks.py" run --out "$OUT/networks" \
    --networks "$NETWORK" --arms "$NET_ARMS" --model "$MODEL" --trials "$NET_TRIALS" --seeds "$NET_SEED" --rounds 3 \
    --target "$TARGET"
  step network-table 30 $PY "$HERE/benchmarks/networks.py" table --out "$OUT/networks"
fi
has network-finals && step network-finals 240 $PY "$HERE/benchmarks/networks.py" finals --out "$OUT/networks" \
  --networks "$NETWORK" --seeds "$NET_SEED" --rounds 3 --target "$TARGET"
ARM_A="$OUT/networks/runs/$NETWORK/s$NET_SEED/a"  # the network step's arm-a run, copied: the benchmarks only read it
for s in checks keep-untuned; do
  has $s || continue
  if [ ! -f "$ARM_A/done.json" ]; then
    echo "   $s: skipped, no finished network run in $ARM_A" | tee -a "$OUT/steps.log" >&2
    continue
  fi
  rm -rf "$OUT/$s-work" && cp -r "$ARM_A" "$OUT/$s-work"
  step $s 240 $PY "$HERE/benchmarks/${s/-/_}.py" --work "$OUT/$s-work" --network "$NETWORK" --target "$TARGET" \
    --rounds 1 --json "$OUT/${s/-/_}.json"
  rm -rf "$OUT/$s-work"
done
echo "gpu_bench: done in $SECONDS s" >&2
