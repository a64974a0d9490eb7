#!/usr/bin/env bash
# Builds the dataset of the ranking benchmarks in docs/training.md: 63 tasks (bert and gpt2 at sequence
# length 32, and 28 small TVM benchmark workloads), 100 candidates per task measured on 1 and on 2 threads
# of this machine (the same programs on both), and the splits the benchmarks use. About 75 minutes of
# measuring on 2 cores; re-running continues where it stopped. Usage: scripts/make_ranking_dataset.sh [OUT.h5]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-ranking.h5}"
COSTLAB="${COSTLAB:-.venv/bin/costlab}"
LOCK="${COSTLAB_CPU_LOCK:-/tmp/costlab-cpu.lock}"  # the machine lock, as costlab.common.cpu_lock takes it
WORKLOADS=(
  C1D:1,128,16,32,3,1,1 C1D:1,32,64,64,3,2,1 C1D:1,64,32,32,3,1,1 C2D:1,14,14,32,32,3,1,1
  C2D:1,16,16,16,32,1,1,0 C2D:1,28,28,16,16,3,2,1 C2D:1,7,7,64,64,3,1,1 C2D:1,8,8,64,32,1,1,0
  C3D:1,4,14,14,16,16,3,1,1 CAP:1,8,8,16,16,3,1,1 CBR:1,14,14,16,32,3,1,1 DEP:1,14,14,64,3,2,1
  DEP:1,28,28,32,3,1,1 DEP:1,56,56,16,3,1,1 DIL:1,14,14,16,16,3,1,1,2 GMM:1,128,128,128 GMM:1,32,256,64
  GMM:1,64,128,64 GMM:2,32,64,128 GMM:4,64,64,32 GMM:8,32,32,64 GRP:1,14,14,32,32,3,1,1,4 NRM:1,64,64
  SFM:128,256 SFM:64,128 T2D:1,4,4,64,32,4,2,1 T2D:1,8,8,32,16,4,2,1 TBG:1,32,4,32
)
args=()
for w in "${WORKLOADS[@]}"; do args+=(--workload "$w"); done
"$COSTLAB" dataset extract "$OUT" --target "llvm -num-cores=2" --hf bert --hf gpt2 --seq-len 32 "${args[@]}"
# candidates are sampled from the 2-core design spaces and run on 2 threads, then the same programs on 1
flock "$LOCK" "$COSTLAB" dataset measure "$OUT" --target "llvm -num-cores=2" \
    --platform llvm-x86_64-2c --per-task 100
flock "$LOCK" "$COSTLAB" dataset measure "$OUT" --target "llvm -num-cores=1" \
    --platform llvm-x86_64-1c --same-programs-as llvm-x86_64-2c
for seed in 0 1 2 9; do
  "$COSTLAB" dataset split "$OUT" --by task --seed "$seed" --test-fraction 0.3 --name "task30-s$seed"
done
for f in tlp pacm psa; do "$COSTLAB" featurize "$OUT" --featurizer "$f"; done
"$COSTLAB" dataset info "$OUT"
