#!/usr/bin/env bash
# costlab on an NVIDIA GPU machine that reaches no package registry (docs/gpu.md).
#
#   scripts/gpu_setup.sh pack DIR [--part-mb N] [--python X.Y]      on a machine with pip and a registry
#   scripts/gpu_setup.sh install DIR [--site SITE] [--stash STASH]   on the GPU machine, from costlab's checkout
#
# pack: downloads the wheels of what costlab needs beyond a CUDA PyTorch image (TVM built with CUDA, its FFI,
#   orjson, tornado, xgboost), unpacks them and packs them into one xz archive (a third smaller than the wheels
#   themselves: TVM's wheel is 100 MB), cut into parts of at most N MiB for transfers of limited size (default
#   23: three parts, each fitting a 64 MiB transfer beside the checkout's 36 MB), with a manifest of their sizes
#   and SHA-256 sums and the whole archive's SHA-256.
# install: collects the parts it finds in DIR into STASH (default /tmp/costlab-gpu-parts), so that they can come
#   over several transfers: run it once per transfer; while parts are missing it names them and exits 3. With all
#   parts checked (each, then the archive they join into), it rebuilds the wheels, installs them and costlab into
#   SITE (default /tmp/costlab-site) with pip (no index, no dependencies: the machine's own PyTorch, h5py,
#   Lightning and transformers are used), writes
#   SITE/env.sh (PYTHONPATH, PATH, the directories of the CUDA libraries TVM's runtime needs), and checks that
#   costlab's requirements import (their versions beside the pins), that TVM sees the GPU (tvm.cuda(0).exist),
#   its compute capability, that one of costlab's workers (TVM without PyTorch) makes the GPU's context (else,
#   with PyTorch, env.sh then setting COSTLAB_WORKERS_IMPORT_TORCH=1), and nvcc. Exit 0: installed and checked;
#   1: an error, said in one line; 2: an option without its value.
# Nothing in the checkout is written or removed: costlab is built from a copy of its sources in a temporary folder.
# Temporary folders are removed however the script ends.
set -euo pipefail

WHEELS=(apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post0 orjson==3.13.0 tornado==6.6.1 xgboost-cpu==3.2.0)
ARCHIVE=costlab-wheels.tar.xz
MANIFEST=costlab-wheels.json
PY=${PYTHON:-python3}
REPO=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "gpu_setup: $*" >&2; exit 1; }
value() {  # value OPTION ARGS...: OPTION must have a value (the next argument), else one line and exit 2
  if [ $# -lt 2 ] || [ -z "$2" ] || [[ $2 == --* ]]; then
    echo "gpu_setup: $1 needs a value" >&2
    exit 2
  fi
}
TMPS=()
tmpdir() {  # tmpdir VAR: a new temporary folder in VAR, removed when the script exits
  local d
  d=$(mktemp -d)
  TMPS+=("$d")
  printf -v "$1" %s "$d"
}
trap 'rm -rf ${TMPS[@]+"${TMPS[@]}"}' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pack() {
  local dir=$1 part_mb=23 pyver=3.12
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --part-mb) value "$@"; part_mb=$2; shift 2 ;;
      --python) value "$@"; pyver=$2; shift 2 ;;
      *) die "pack: unknown option $1" ;;
    esac
  done
  [[ $part_mb =~ ^[0-9]+$ && $part_mb -ge 1 ]] || die "--part-mb must be a whole number of MiB, not $part_mb"
  mkdir -p "$dir"
  local tmp
  tmpdir tmp
  echo "gpu_setup: downloading ${WHEELS[*]} for CPython $pyver" >&2
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux1_x86_64 -d "$tmp/wheels" "${WHEELS[@]}"
  mkdir -p "$tmp/exploded"
  for w in "$tmp"/wheels/*.whl; do
    "$PY" -m zipfile -e "$w" "$tmp/exploded/$(basename "$w")"
  done
  echo "gpu_setup: packing $(du -sh "$tmp/exploded" | cut -f1) into $ARCHIVE (xz -9, a few minutes)" >&2
  tar -C "$tmp/exploded" -cf - . | xz -9 -T0 > "$tmp/$ARCHIVE"
  rm -f "$dir/$ARCHIVE".part* "$dir/$MANIFEST"
  split -b "${part_mb}M" -d -a 2 "$tmp/$ARCHIVE" "$dir/$ARCHIVE.part"
  "$PY" - "$dir" "$tmp/$ARCHIVE" "$tmp/wheels" <<'PYEOF'
import hashlib, json, sys
from pathlib import Path

out, archive, wheels = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
parts = sorted(out.glob(archive.name + ".part*"))
manifest = dict(archive=archive.name, size=archive.stat().st_size, sha256=sha(archive),
                parts=[dict(name=p.name, size=p.stat().st_size, sha256=sha(p)) for p in parts],
                wheels=sorted(w.name for w in wheels.glob("*.whl")))
(out / "costlab-wheels.json").write_text(json.dumps(manifest, indent=2))
print(f"gpu_setup: {len(parts)} part(s) of {archive.stat().st_size / 2**20:.1f} MiB in all in {out}, "
      f"with costlab-wheels.json", file=sys.stderr)
PYEOF
}

install() {
  local dir=$1 site=/tmp/costlab-site stash=/tmp/costlab-gpu-parts
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --site) value "$@"; site=$2; shift 2 ;;
      --stash) value "$@"; stash=$2; shift 2 ;;
      *) die "install: unknown option $1" ;;
    esac
  done
  mkdir -p "$stash" "$site"
  # absolute: env.sh's PYTHONPATH and PATH are read from other directories (the check's /, gpu_bench's OUT)
  site=$(cd "$site" && pwd)
  if [ -d "$dir" ]; then
    find "$dir" -maxdepth 1 -name "$ARCHIVE.part*" -exec cp -f {} "$stash"/ \;
    [ -f "$dir/$MANIFEST" ] && cp -f "$dir/$MANIFEST" "$stash/"
  fi
  [ -f "$stash/$MANIFEST" ] || die "no $MANIFEST in $dir or $stash (make the parts with: $0 pack DIR)"
  if cmp -s "$stash/$MANIFEST" "$site/.costlab-wheels.json" 2>/dev/null; then
    echo "gpu_setup: the wheels of $MANIFEST are installed in $site already; installing costlab again" >&2
  else
    install_wheels "$stash" "$site"
  fi
  echo "gpu_setup: installing costlab from $REPO into $site" >&2
  # built from a copy of its sources (setuptools writes build/ and costlab.egg-info beside them, and would install
  # whatever a stale build/ of the checkout holds)
  local src
  tmpdir src
  copy_sources "$REPO" "$src"
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
    --target "$site" "$src"
  write_env "$site"
  check "$site"
  echo "gpu_setup: done; source $site/env.sh" >&2
}

install_wheels() {  # install_wheels STASH SITE: the wheels of the parts in STASH, into SITE
  local stash=$1 site=$2
  # every part present with its size and sum, else say which are missing (exit 3: bring them and run again)
  local state
  state=$("$PY" - "$stash" <<'PYEOF'
import hashlib, json, sys
from pathlib import Path

stash = Path(sys.argv[1])
m = json.loads((stash / "costlab-wheels.json").read_text())
missing, bad = [], []
for p in m["parts"]:
    f = stash / p["name"]
    if not f.exists():
        missing.append(p["name"])
    elif f.stat().st_size != p["size"] or hashlib.sha256(f.read_bytes()).hexdigest() != p["sha256"]:
        bad.append(p["name"])
if bad:
    print("bad " + " ".join(bad))
elif missing:
    print(f"missing {len(m['parts']) - len(missing)} of {len(m['parts'])} parts here; still to come: " + " ".join(missing))
else:
    print("complete")
PYEOF
)
  case $state in
    complete) ;;
    bad*)  # each damaged part removed by its own path (their names are space-separated, none has a space)
      local name
      for name in ${state#bad }; do rm -f "$stash/$name"; done
      die "damaged in transfer (size or SHA-256 differs), removed: ${state#bad }" ;;
    *) echo "gpu_setup: $state" >&2; exit 3 ;;
  esac
  local tmp
  tmpdir tmp
  echo "gpu_setup: all parts here; unpacking" >&2
  cat "$stash/$ARCHIVE".part* > "$tmp/$ARCHIVE"
  # the whole archive's SHA-256 (pack records it beside the parts'): parts that each match the manifest can
  # still make another archive (a manifest edited, or of another pack)
  local sum
  sum=$("$PY" - "$stash/$MANIFEST" "$tmp/$ARCHIVE" <<'PYEOF'
import hashlib, json, sys

want = json.loads(open(sys.argv[1]).read()).get("sha256")
h = hashlib.sha256()
with open(sys.argv[2], "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
print("absent" if not want else "ok" if h.hexdigest() == want else "differs")
PYEOF
)
  case $sum in
    ok) ;;
    absent) echo "gpu_setup: $MANIFEST has no SHA-256 of the whole archive (made by an older pack): not checked" >&2 ;;
    *) die "the joined parts are not the archive $MANIFEST names (its SHA-256 differs, though each part matches): nothing installed; pack again and empty $stash" ;;
  esac
  mkdir -p "$tmp/exploded" "$tmp/wheels"
  if ! xz -dc -T0 "$tmp/$ARCHIVE" 2> "$tmp/unpack.err" | tar -C "$tmp/exploded" -xf - 2>> "$tmp/unpack.err"; then
    die "the archive does not unpack ($(head -1 "$tmp/unpack.err")): nothing installed; pack again and empty $stash"
  fi
  rm -f "$tmp/$ARCHIVE"
  # the wheels again (stored, not compressed: pip only unpacks them), installed by pip as any wheel
  "$PY" - "$tmp/exploded" "$tmp/wheels" <<'PYEOF'
import os, sys, zipfile
from pathlib import Path

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for wheel in sorted(p for p in src.iterdir() if p.is_dir()):
    with zipfile.ZipFile(dst / wheel.name, "w", zipfile.ZIP_STORED) as z:
        for root, _, files in os.walk(wheel):
            for f in sorted(files):
                path = Path(root) / f
                z.write(path, path.relative_to(wheel).as_posix())
PYEOF
  echo "gpu_setup: installing $(ls "$tmp/wheels" | tr '\n' ' ')into $site" >&2
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$tmp"/wheels/*.whl
  cp "$stash/$MANIFEST" "$site/.costlab-wheels.json"
}

copy_sources() {  # copy_sources REPO DST: what building costlab reads (setup.cfg's package folders and files)
  "$PY" - "$1" "$2" <<'PYEOF'
import configparser, shutil, sys
from pathlib import Path

repo, dst = Path(sys.argv[1]), Path(sys.argv[2])
cfg = configparser.ConfigParser()
cfg.read(repo / "setup.cfg")
package_dir = cfg.get("options", "package_dir", fallback="")
folders = {line.split("=", 1)[1].strip() for line in package_dir.splitlines() if "=" in line}
if not folders:
    sys.exit(f"gpu_setup: {repo / 'setup.cfg'} names no package folders (options.package_dir): is {repo} costlab's checkout?")
for name in ("pyproject.toml", "setup.cfg", "setup.py", "README.md", "LICENSE"):
    if (repo / name).is_file():
        shutil.copy2(repo / name, dst / name)
for folder in sorted(folders):
    shutil.copytree(repo / folder, dst / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
PYEOF
}

write_env() {  # write_env SITE: SITE/env.sh, sourced here too
  local site=$1
  # the libraries TVM's CUDA runtime links that the loader does not find (libcudart of the CUDA it was built
  # with): from the CUDA toolkit or the nvidia-* wheels of the machine's PyTorch
  local libdirs="" lib found
  for lib in $(ldd "$site/tvm/lib/libtvm_runtime_cuda.so" 2>/dev/null | awk '/not found/ {print $1}'); do
    case $lib in libtvm*) continue ;; esac
    found=$( { ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib /usr/local/nvidia/lib64 2>/dev/null
               "$PY" -c 'import site; print("\n".join(site.getsitepackages()))'; } |
             while read -r d; do find "$d" -maxdepth 4 -name "$lib" 2>/dev/null; done | head -1)
    if [ -z "$found" ]; then
      echo "gpu_setup: warning: TVM's CUDA runtime needs $lib, which is not on this machine" >&2
      continue
    fi
    libdirs="$libdirs:$(dirname "$found")"
  done
  local nvcc_dir=""
  command -v nvcc >/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && nvcc_dir=/usr/local/cuda/bin; }
  # the paths quoted (a --site or library folder may hold a space)
  local q_site q_path q_libs
  printf -v q_site %q "$site"
  printf -v q_path %q "$site/bin${nvcc_dir:+:$nvcc_dir}"
  cat > "$site/env.sh" <<EOF
# costlab on this GPU machine: source this file
export PYTHONPATH=$q_site\${PYTHONPATH:+:"\$PYTHONPATH"}
export PATH=$q_path:"\$PATH"
EOF
  if [ -n "$libdirs" ]; then
    printf -v q_libs %q "${libdirs#:}"
    echo "export LD_LIBRARY_PATH=$q_libs\${LD_LIBRARY_PATH:+:\"\$LD_LIBRARY_PATH\"}" >> "$site/env.sh"
  fi
  # shellcheck disable=SC1091
  . "$site/env.sh"
}

check() {  # check SITE: costlab's requirements, TVM and the GPU, torch, nvcc (outside the checkout, whose
  # folder costlab/ would hide the installed package)
  cd /
  "$PY" - "$1/env.sh" <<'PYEOF'  # (SITE is absolute: install made it so)
import importlib.metadata as md
import subprocess
import sys

from packaging.requirements import Requirement

print("costlab", md.version("costlab"), "from", md.distribution("costlab").locate_file("costlab"))
missing = []
for text in md.requires("costlab") or []:
    req = Requirement(text)
    if req.marker and not req.marker.evaluate({"extra": ""}):
        continue
    have = None
    for name in (req.name, {"xgboost-cpu": "xgboost"}.get(req.name, req.name)):  # either build of xgboost
        try:
            have = md.version(name)
            break
        except md.PackageNotFoundError:
            pass
    if have is None:
        missing.append(req.name)
        print(f"  {req.name:16} MISSING (wanted {req.specifier})")
        continue
    fits = not req.specifier or req.specifier.contains(have.split("+")[0], prereleases=True)
    print(f"  {req.name:16} {have:24} {'fits' if fits else 'differs from ' + str(req.specifier) + ' (the machine' + chr(39) + 's own)'}")
if missing:
    sys.exit(f"gpu_setup: missing on this machine and not in the wheels brought along: {', '.join(missing)}")
import tvm

dev = tvm.cuda(0)
if not dev.exist:
    sys.exit("gpu_setup: TVM sees no CUDA GPU (tvm.cuda(0).exist is False): is the driver there, and LD_LIBRARY_PATH "
             "as env.sh sets it?")
import os

from costlab.metaschedule.pools import shutdown_pool, worker_pool
from costlab.metaschedule.worker import WITH_TORCH


def workers_see_the_gpu():
    pool = worker_pool(max_workers=1, timeout=120)
    try:
        # the device's context and a first array, as the runner's worker makes them (runners._start_worker)
        return pool.submit(eval, "__import__('tvm').runtime.empty((1,), 'float32', "
                                 "__import__('tvm').runtime.device('cuda', 0)).shape[0] == 1").result()
    except Exception as exc:  # noqa: BLE001  the worker could not start or import TVM: said below
        return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1]}"
    finally:
        shutdown_pool(pool)


# costlab's builder, runner and check workers run TVM without PyTorch (metaschedule/worker.py), so they find the
# CUDA runtime by the loader's path alone, not through the libraries PyTorch loaded first; where that finds none,
# they import PyTorch as TVM's own workers do (env.sh says so)
os.environ.pop(WITH_TORCH, None)  # not as a shell that sourced an earlier env.sh has it: this machine decides
seen = workers_see_the_gpu()
if seen is not True:
    os.environ[WITH_TORCH] = "1"
    if workers_see_the_gpu() is not True:
        sys.exit(f"gpu_setup: costlab's worker processes see no CUDA GPU ({seen}): is LD_LIBRARY_PATH as env.sh "
                 "sets it?")
    with open(sys.argv[1], "a") as fh:
        fh.write(f"export {WITH_TORCH}=1  # the workers see the GPU only with PyTorch imported\n")
    print(f"gpu_setup: warning: costlab's worker processes see the GPU only with PyTorch imported ({seen}); "
          f"env.sh sets {WITH_TORCH}=1")
else:
    print("costlab's worker processes (TVM without PyTorch) see the GPU too")
from costlab.metaschedule.targets import local_gpu
from costlab.featurizers.psa.hardware import gpu_spec

gpu = local_gpu()
print(f"TVM {tvm.__version__} sees {gpu['name']}: compute capability {dev.compute_version} ({gpu['arch']}), "
      f"{gpu['sms']} SMs, {gpu['max_threads_per_block']} threads and {gpu['max_shared_memory_per_block']} B shared "
      "memory per block")
try:
    print("PSA's GPU table:", gpu_spec(gpu["name"]).name)
except ValueError as exc:
    print("PSA's GPU table does not have it (PSA assumes the GPU of its arch):", exc)
import torch

print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees {torch.cuda.device_count()} GPU(s)")
try:
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
except OSError:  # not on PATH (a CUDA runtime image without the toolkit)
    nvcc = ""
print("nvcc:", (nvcc.strip().splitlines() or ["not found"])[-1])
PYEOF
}

case ${1:-} in
  pack) shift; [ $# -ge 1 ] || die "usage: $0 pack DIR [--part-mb N] [--python X.Y]"; pack "$@" ;;
  install) shift; [ $# -ge 1 ] || die "usage: $0 install DIR [--site SITE] [--stash STASH]"; install "$@" ;;
  *) die "usage: $0 pack DIR [--part-mb N] [--python X.Y] | $0 install DIR [--site SITE] [--stash STASH]" ;;
esac
