#!/usr/bin/env bash
# Regenerates tests/fixtures/ms_small.h5: four tiny TVM benchmark workloads (two batch matmuls of one kernel
# class, a conv2d and a depthwise conv2d), 20 measured candidates each on `llvm -num-cores=2`.
# It measures, so it takes the CPU lock; timings depend on the machine (the file is the reference, not
# the numbers). Usage: scripts/make_fixture.sh [OUT.h5]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-tests/fixtures/ms_small.h5}"
COSTLAB="${COSTLAB:-.venv/bin/costlab}"
LOCK="${COSTLAB_CPU_LOCK:-/tmp/costlab-cpu.lock}"  # the machine lock, as costlab.common.cpu_lock takes it
rm -f "$OUT"
"$COSTLAB" dataset extract "$OUT" --target "llvm -num-cores=2" \
    --workload GMM:1,16,16,16 --workload GMM:1,32,32,16 \
    --workload C2D:1,8,8,8,16,3,1,1 --workload DEP:1,8,8,16,3,1,1
flock "$LOCK" "$COSTLAB" dataset measure "$OUT" --target "llvm -num-cores=2" \
    --per-task 20 --batch-size 10 --seed 0 --number 3 --repeat 2
"$COSTLAB" dataset info "$OUT"
