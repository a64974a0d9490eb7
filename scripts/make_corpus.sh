#!/usr/bin/env bash
# Builds the x86 pretraining corpus from nothing with `costlab dataset extract` + `measure` alone: the tasks
# of many transformers networks (text and vision, two sizes or sequence lengths each) and TVM benchmark
# workloads at several shapes, 64 programs per task measured on this machine's own target (its concrete
# -mcpu, all its cores). Measuring takes hours on 2 cores: re-running continues where it stopped, and
# `costlab dataset pack` turns the progress into the compact files committed under corpus/.
#
# The workloads of benchmarks/tuning.py (GMM:1,128,128,128, C2D:1,28,28,128,128,3,1,1, DEP:1,56,56,64,3,1,1
# and the dense layers of bert:hidden=256 at sequence length 128) are left out, shapes included.
#
# Usage: scripts/make_corpus.sh [OUT.h5] [extract|measure|pack|all]
#   pack: the dataset into corpus/ (committed), with corpus/info.json (`costlab dataset info --json` of the
#         dataset packed: tests/test_corpus.py unpacks corpus/ and checks the counts against it)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-corpus.h5}"
STEP="${2:-all}"
COSTLAB="${COSTLAB:-$ROOT/.venv/bin/costlab}"
PER_TASK="${PER_TASK:-64}"
LOCK="${COSTLAB_CPU_LOCK:-/tmp/costlab-cpu.lock}"  # the machine lock, as costlab.common.cpu_lock takes it

TEXT_S32=(bert gpt2 llama t5 distilbert opt bloom phi gemma mobilebert squeezebert albert falcon bart)
TEXT_S64=(bert:hidden=128,heads=4,intermediate=512 gpt2:hidden=128,heads=4,intermediate=512
          llama:hidden=128,heads=4,intermediate=352 t5:hidden=128,heads=4,intermediate=256
          opt:hidden=96,heads=2,intermediate=384)
TEXT_B4=(bert distilbert)
VISION=(vit deit resnet mobilenet_v2 mobilenet_v1 convnext regnet segformer poolformer dinov2 beit convnextv2
        mobilevit levit swin efficientnet vit:hidden=96,heads=2,intermediate=192,image=64
        resnet:hidden=32,image=96 convnext:hidden=48,image=96 mobilenet_v2:image=96)
WORKLOADS=(
  GMM:1,64,64,64 GMM:1,32,256,64 GMM:1,64,128,64 GMM:2,32,64,128 GMM:4,64,64,32 GMM:8,32,32,64
  GMM:1,256,128,64 GMM:1,96,192,96 GMM:1,512,32,512 GMM:1,256,256,256 GMM:1,192,64,320
  C2D:1,14,14,32,32,3,1,1 C2D:1,16,16,16,32,1,1,0 C2D:1,28,28,16,16,3,2,1 C2D:1,7,7,64,64,3,1,1
  C2D:1,8,8,64,32,1,1,0 C2D:1,56,56,32,32,3,1,1 C2D:1,14,14,64,128,3,1,1 C2D:1,28,28,64,64,1,1,0
  C2D:1,14,14,128,128,3,1,1 C2D:1,28,28,32,64,3,2,1
  DEP:1,14,14,64,3,2,1 DEP:1,28,28,32,3,1,1 DEP:1,56,56,16,3,1,1 DEP:1,112,112,32,3,1,1
  DEP:1,28,28,128,3,2,1 DEP:1,14,14,256,3,1,1
  C1D:1,128,16,32,3,1,1 C1D:1,32,64,64,3,2,1 C1D:1,64,32,32,3,1,1 C3D:1,4,14,14,16,16,3,1,1
  CAP:1,8,8,16,16,3,1,1 CBR:1,14,14,16,32,3,1,1 CBR:1,28,28,32,32,3,1,1 DIL:1,14,14,16,16,3,1,1,2
  GRP:1,14,14,32,32,3,1,1,4 GRP:1,28,28,64,64,3,1,1,8 NRM:1,64,64 NRM:1,256,256 SFM:128,256 SFM:64,128
  SFM:256,512 T2D:1,4,4,64,32,4,2,1 T2D:1,8,8,32,16,4,2,1 TBG:1,32,4,32 TBG:1,64,8,64
)

extract() {
  local args=()
  for s in "${TEXT_S32[@]}"; do args+=(--hf "$s"); done
  "$COSTLAB" dataset extract "$OUT" --seq-len 32 "${args[@]}"
  args=(); for s in "${TEXT_S64[@]}"; do args+=(--hf "$s"); done
  "$COSTLAB" dataset extract "$OUT" --seq-len 64 "${args[@]}"
  args=(); for s in "${TEXT_B4[@]}"; do args+=(--hf "$s"); done
  "$COSTLAB" dataset extract "$OUT" --seq-len 32 --batch 4 "${args[@]}"
  args=(); for s in "${VISION[@]}"; do args+=(--hf "$s"); done
  "$COSTLAB" dataset extract "$OUT" "${args[@]}"
  args=(); for w in "${WORKLOADS[@]}"; do args+=(--workload "$w"); done
  "$COSTLAB" dataset extract "$OUT" "${args[@]}"
}

measure() {
  # the tasks of scripts/corpus_tasks.py, in chunks of 8: each chunk holds the machine alone (timings are
  # noisy when anything else builds or measures), and other jobs taking the same lock run between chunks.
  # Tasks whose design space `measure` found exhausted (fewer distinct programs than PER_TASK) are noted in
  # OUT.exhausted and not offered again (each would cost ~30 s of sampling that finds nothing new).
  local py="${COSTLAB%/costlab}/python" exhausted="${OUT%.h5}.exhausted" report
  "$py" "$ROOT/scripts/corpus_tasks.py" "$OUT" --limit "${TASKS:-200}" --chunk 8 --skip "$exhausted" |
  while read -r chunk; do
    # `measure` prints its summary (and the notes read below) on stderr: capture both streams
    if ! report="$(flock "$LOCK" "$COSTLAB" dataset measure "$OUT" --per-task "$PER_TASK" --tasks "$chunk" \
                   --no-progress 2>&1)"; then
      echo "$report" >&2
      exit 1
    fi
    echo "$report" >&2
    echo "$report" | sed -n 's/^ *note: task \([0-9][0-9]*\) .*design space gave only .*/\1/p' >> "$exhausted"
  done
}

pack() (
  # under the lock, both steps: no chunk is measured (written) between the pack and its counts
  exec 9>"$LOCK"
  flock 9
  "$COSTLAB" dataset pack "$OUT" -o "$ROOT/corpus"
  "$COSTLAB" dataset info "$OUT" --json | "${COSTLAB%/costlab}/python" -c '
import json, sys
info = json.load(sys.stdin)
info.pop("path", None)
print(json.dumps(info, indent=1, sort_keys=True))' > "$ROOT/corpus/info.json"
)

case "$STEP" in
  extract) extract ;;
  measure) measure ;;
  pack) pack ;;
  all) extract; measure; pack; "$COSTLAB" dataset info "$OUT" ;;
  *) echo "usage: $0 [OUT.h5] [extract|measure|pack|all]" >&2; exit 2 ;;
esac
