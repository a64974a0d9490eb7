"""TVM targets as JSON dicts, converted from the familiar string form; this machine as a target (its CPU,
the cores this process may use, its GPU); which target kinds are GPUs; platform ids derived from targets.

Pure Python where it can be: TVM 0.27 takes targets only as JSON dicts, and logs from older tools
(Ansor/TenSet) carry the string form (``llvm -keys=cpu -mcpu=icelake-server -model=platinum-8358``).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import warnings

from costlab.common.errors import last_line
from costlab.common.host import faked_llvm_cpu, host_info, usable_cores

# Target kinds whose kernels run on a GPU (a target with the key ``gpu`` is one too: ``is_gpu``)
GPU_KINDS = ("cuda", "rocm", "vulkan", "opencl", "metal", "nvptx")
# Target kinds of NVIDIA GPUs (PSA's GPU specs are theirs)
NVIDIA_KINDS = ("cuda", "nvptx")
# Target kinds costlab builds and measures programs for: a CPU (llvm) and an NVIDIA GPU (cuda)
MEASURABLE_KINDS = ("llvm", "cuda")


def _parse_value(text: str):
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def target_from_string(text: str) -> dict:
    """``"llvm -num-cores=2 -mattr=+avx2,+fma"`` -> ``{"kind": "llvm", "num-cores": 2, "mattr": ["+avx2", "+fma"]}``."""
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"target JSON is not valid ({exc.msg} at column {exc.colno}): {text!r}") from None
        if not isinstance(value, dict) or "kind" not in value:
            raise ValueError(f"target JSON must be an object with a 'kind': {text!r}")
        return value
    parts = shlex.split(text)
    if not parts or parts[0].startswith("-"):
        raise ValueError(f"target has no kind: {text!r}")
    target: dict = {"kind": parts[0]}
    for part in parts[1:]:
        if not part.startswith("-"):
            raise ValueError(f"target option must start with '-': {part!r} in {text!r}")
        key, sep, value = part.lstrip("-").partition("=")
        if not sep:
            target[key] = True
        elif key in ("keys", "mattr", "libs", "cl-opt"):  # TVM's Array<str> options
            target[key] = [v for v in value.split(",") if v]
        elif key == "host":  # a target itself (``-host='llvm -mcpu=znver4'``): TVM takes it as a JSON dict only
            target[key] = target_from_string(value)
        elif key in STRING_OPTIONS:  # names, even all digits (``-model=8358``): TVM refuses a number there
            target[key] = value
        else:
            target[key] = _parse_value(value)
    return target


STRING_OPTIONS = ("model", "mcpu", "mtriple", "mabi", "arch", "device", "tag")  # options TVM types as strings

# Target kinds, known without importing TVM: those TVM 0.27 registers (``tvm.target.Target.list_kinds()``), and
# those earlier releases registered that logs of their tuning runs (Ansor, TenSet) may name.
TARGET_KINDS = frozenset({
    "c", "composite", "cuda", "cuda_host", "ext_dev", "hexagon", "llvm", "metal", "nvptx", "opencl", "rocm",
    "test", "trn", "vulkan", "webgpu",
    "aocl", "aocl_sw_emu", "hybrid", "micro", "opengl", "sdaccel", "stackvm",
})


@functools.lru_cache(maxsize=None)
def tvm_target_kinds() -> frozenset:
    """The target kinds the TVM installed here registers; empty without TVM."""
    try:
        import tvm

        return frozenset(str(k) for k in tvm.target.Target.list_kinds())
    except Exception:  # noqa: BLE001  no TVM here, or one that does not load: the fixed list decides alone
        return frozenset()


def target_problem(target: dict) -> str | None:
    """Why a target (its JSON dict) is no target to file records under, or None: a kind that is no TVM target
    kind (``TARGET_KINDS``, or one the TVM installed here registers: TVM is imported only for a kind outside the
    list, so reading logs needs no TVM), or a ``num-cores`` that is not a positive integer. Cheap enough for
    each distinct target of an import."""
    kind = target.get("kind")
    if not isinstance(kind, str) or (kind not in TARGET_KINDS and kind not in tvm_target_kinds()):
        return f"unknown target kind {kind!r} (TVM's kinds are llvm, cuda, c, nvptx, rocm, opencl, vulkan, metal, ...)"
    cores = target.get("num-cores")
    if cores is not None and (type(cores) is not int or cores < 1):
        return f"num-cores must be a positive integer, not {cores!r}"
    for key in STRING_OPTIONS:  # ``-mcpu`` without a value reads as True: a platform "llvm-True" TVM refuses
        if key in target and not isinstance(target[key], str):
            return f"{key} must be a name, not {target[key]!r}" + (" (-mcpu without a value?)" if target[key] is True
                                                                  else "")
    return None


def tvm_target_problem(target: dict) -> str | None:
    """Why the TVM installed here refuses a target (its JSON dict) of a MetaSchedule record, or None (also
    without TVM): an option it does not know, say. MetaSchedule's loader refuses a whole database for one
    record whose target does not build. Once per distinct target of an import."""
    try:
        import tvm
    except ImportError:
        return None
    try:
        tvm.target.Target(target)
    except Exception as exc:  # noqa: BLE001  TVM refuses a target in several ways
        return f"TVM refuses it ({last_line(exc)[:160]})"
    return None


def normalize_target(target) -> dict:
    """A target given as a JSON dict, a JSON string or the string form, as a JSON dict.

    ``None`` or ``"host"`` is this machine's own CPU (``host_target``); ``mcpu=native`` is replaced by the
    host CPU's concrete name, so that a stored target means the same on every machine that reads it."""
    if target is None or (isinstance(target, str) and target.strip() == "host"):
        return host_target()
    value = stored_target(target)
    if value.get("kind") == "llvm" and value.get("mcpu") == "native":
        value["mcpu"] = host_cpu_name()
    return value


def stored_target(target) -> dict:
    """A dataset's target (a JSON dict, a JSON string or the string form) as a JSON dict, as it was recorded:
    ``mcpu=native`` stays ``native`` (the machine reading a dataset is not the one that measured it)."""
    return dict(target) if isinstance(target, dict) else target_from_string(str(target))


def checked_target(target) -> dict:
    """``normalize_target(target)``, checked by TVM itself: an unknown kind, an unknown option or a value of the
    wrong type is a ValueError saying which (TVM's reason, without its C++ trace). Needs TVM."""
    value = normalize_target(target)
    import tvm

    try:
        tvm.target.Target(value)
    except Exception as exc:  # TVM raises ValueError or its own error types, message first
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        reason = lines[-1] if lines else type(exc).__name__
        raise ValueError(f"not a TVM target: {reason.split('. Target creation')[0]}") from None
    return value


def runnable_target(target, local: bool = True) -> dict:
    """A target to compile and run with, checked: an LLVM ``mcpu`` must be a CPU LLVM knows (LLVM itself only
    warns and falls back to generic code), and ``num-cores`` (which MetaSchedule requires) is this machine's
    when kernels run here, and must be given when they run elsewhere. Raises ValueError."""
    if not local and (target is None or (isinstance(target, str) and target.strip() == "host")
                      or isinstance(target, (str, dict)) and stored_target(target).get("mcpu") == "native"):
        # "host" and -mcpu=native name this machine's CPU and cores, not the remote device's
        raise ValueError("'host' and -mcpu=native are this machine, not the device kernels run on: give the "
                         "device's target (e.g. llvm -mcpu=cortex-a72 -mtriple=aarch64-linux-gnu -num-cores=4)")
    value = normalize_target(target)
    if value.get("kind") == "cuda":
        return cuda_target(value, local)
    if value.get("kind") != "llvm":
        return value
    mcpu = value.get("mcpu")
    if "mcpu" in value and not mcpu:  # an unset $CPU, say: LLVM would say "Error" and compile generic code
        raise ValueError("-mcpu is empty: give a CPU LLVM knows, or leave it out for generic x86-64")
    cores = value.get("num-cores")
    if cores is not None and (type(cores) is not int or cores < 1):  # 0 is no count of cores: not "this machine's"
        raise ValueError(f"num-cores must be at least 1, not {cores!r}")
    if mcpu:
        import tvm
        from tvm.target import codegen

        # the CPUs of the target's own triple (an ARM board's through RPC), not this machine's
        triple = {"mtriple": str(value["mtriple"])} if value.get("mtriple") else {}
        known = {str(c) for c in codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm", **triple}))}
        if str(mcpu) not in known:
            where = f"for {triple['mtriple']}" if triple else f"(this machine is {host_cpu_name()})"
            raise ValueError(f"LLVM does not know -mcpu={mcpu} {where}; "
                             f"LLVM knows e.g. {', '.join(sorted(known)[:6])}, ...")
        if local and not triple:
            missing = instructions_missing_here(str(mcpu))
            if missing:
                warnings.warn(f"-mcpu={mcpu} lets LLVM use instructions this machine's CPU ({host_cpu_name()}) "
                              f"lacks ({', '.join(missing)}): a program that uses one fails to run here "
                              f"(illegal instruction); measure on such a CPU, or give -mcpu={host_cpu_name()}",
                              stacklevel=2)
    if not value.get("num-cores"):
        if not local:
            raise ValueError("a target run on another machine needs its num-cores (e.g. -num-cores=4)")
        value["num-cores"] = usable_cores()
    return value


# What MetaSchedule's CUDA rules need of a target beside its arch (``AutoBind`` refuses a target without
# max_threads_per_block), and what every NVIDIA GPU since sm_30 allows: 1024 threads and 48 KiB of static
# shared memory per block, warps of 32.
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 48 * 1024, "thread_warp_size": 32}


def cuda_target(value: dict, local: bool = True) -> dict:
    """A CUDA target completed for compiling and running: ``arch`` (``sm_90``) and the per-block limits the
    target does not give are this machine's GPU's when its kernels run here (``local``; ``--target cuda`` is
    this GPU), else ``arch`` must be given and the limits are ``CUDA_LIMITS``. Raises ValueError where kernels
    should run here and TVM sees no GPU."""
    value = dict(value)
    gpu = local_gpu() if local else None
    if local and gpu is None:
        raise ValueError("TVM sees no CUDA GPU on this machine, so kernels of a cuda target cannot run here: "
                         "measure or tune on the machine with the GPU, or through its RPC tracker (--rpc-key)")
    if not value.get("arch"):
        if gpu is None:  # kernels run on another machine
            raise ValueError("a cuda target needs its arch (e.g. -arch=sm_90) where its kernels run on another "
                             "machine")
        value["arch"] = gpu["arch"]
    for key, default in CUDA_LIMITS.items():
        if not value.get(key):
            value[key] = int((gpu or {}).get(key) or default)
    return value


def local_gpu(index: int = 0) -> dict | None:
    """This machine's CUDA GPU ``index`` as TVM sees it (``name``, ``arch``, ``sms``, per-block limits), or
    None when TVM sees none (no GPU, no driver, or a TVM built without CUDA)."""
    try:
        import tvm

        dev = tvm.cuda(index)
        if not dev.exist:
            return None
        major, minor = str(dev.compute_version).split(".")
        return {"name": str(dev.device_name), "arch": f"sm_{major}{minor}", "sms": int(dev.multi_processor_count),
                "max_threads_per_block": int(dev.max_threads_per_block),
                "max_shared_memory_per_block": int(dev.max_shared_memory_per_block),
                "thread_warp_size": int(dev.warp_size)}
    except Exception:  # noqa: BLE001  TVM's CUDA runtime absent or unusable here: no GPU for costlab
        return None


def host_cpu_name() -> str:
    """LLVM's concrete name of this machine's CPU (``znver4``, ``sapphirerapids``, ...), as TVM's LLVM
    detects it: the same name ``-mcpu=native`` would resolve to here, written out. A folder of faked host files
    (``$COSTLAB_HOST_FILES``) names its CPU in its file ``llvm_cpu``, so that the suite sees another CPU's name
    as it sees that CPU's caches and flags."""
    faked = faked_llvm_cpu()
    if faked:
        return faked
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


# LLVM CPU features that are instruction sets (a program compiled with one may execute its instructions), by
# prefix; LLVM's other features of a CPU model are tuning hints (``fast-gather``, ``prefer-256-bit``) that
# change which code is emitted, never whether a CPU can run it.
ISA_FEATURE_PREFIXES = ("avx", "amx", "sse", "fma", "f16c", "bmi", "gfni", "vaes", "vpclmulqdq", "sha", "aes",
                        "xop", "tbm", "lzcnt", "popcnt", "movbe", "adx", "clzero", "cx16", "pclmul")


def instructions_missing_here(mcpu: str) -> tuple:
    """The instruction-set features LLVM's model of ``mcpu`` has and its model of this machine's CPU lacks
    (x86 names, e.g. ``('amx-tile', 'avx512fp16')`` for ``sapphirerapids`` on a Zen 5); empty for this CPU."""
    here = host_cpu_name()
    if mcpu in (here, "native"):  # native: this CPU (LLVM warns that it is no name of a model)
        return ()
    return tuple(sorted(f for f in cpu_features(mcpu) - cpu_features(here) if f.startswith(ISA_FEATURE_PREFIXES)))


@functools.lru_cache(maxsize=None)
def cpu_features(mcpu: str) -> frozenset:
    """LLVM's features of an x86 CPU model (``avx512f``, ``amx-tile``, ``fast-gather``, ...)."""
    import tvm
    from tvm.target import codegen

    return frozenset(str(f) for f in codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})))


def host_target(num_cores: int | None = None) -> dict:
    """This machine as a TVM target: ``{"kind": "llvm", "mcpu": <its CPU>, "num-cores": <its cores>}``.

    Without ``mcpu`` LLVM compiles for generic x86-64 (SSE2 only), several times slower code on any CPU with
    AVX2 or AVX-512; to tune for another machine, give that machine's target instead (e.g.
    ``{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 8}``, or ``--target "llvm -mcpu=... -num-cores=..."``).
    """
    return {"kind": "llvm", "mcpu": host_cpu_name(), "num-cores": int(num_cores or usable_cores())}


def host_target_text() -> str:
    """The host target in the command line's string form, for help texts and messages."""
    t = host_target()
    return f"llvm -mcpu={t['mcpu']} -num-cores={t['num-cores']}"


def platform_id_for(target: dict) -> str:
    """A short, stable platform id for a target, e.g. ``llvm-icelake-server-2c`` or ``cuda-sm_75``.

    A ``model`` option (as TenSet and TLCBench logs carry, ``-model=platinum-8358``) names the machine and wins.
    """
    if target.get("model") and target["model"] != "unknown":
        return sanitize_platform_id(str(target["model"]))
    kind = str(target.get("kind", "unknown"))
    parts = [kind]
    if kind == "llvm":
        if target.get("mcpu"):
            parts.append(str(target["mcpu"]))
        elif target.get("mtriple"):
            parts.append(str(target["mtriple"]).split("-")[0])
        if target.get("num-cores"):
            parts.append(f"{target['num-cores']}c")
    elif kind in GPU_KINDS:
        if target.get("arch"):
            parts.append(str(target["arch"]))
    return sanitize_platform_id("-".join(parts))


IDENTITY_KEYS = ("kind", "mcpu", "mtriple", "mattr", "num-cores", "arch", "model")  # what code, and for what


def target_identity(target: dict) -> dict:
    """The options of a target (its JSON dict) that make its programs' timings another platform's: the kind, CPU or
    GPU architecture and its features, cores and machine model (not the flags that leave the code as it is; a
    ``model`` of ``unknown`` names none, as for ``platform_id_for``)."""
    return {k: str(target[k]) for k in IDENTITY_KEYS
            if target.get(k) not in (None, "", []) and not (k == "model" and target[k] == "unknown")}


def sanitize_platform_id(text: str) -> str:
    """``text`` made a valid platform id (``datasets.names``): letters, digits and ``. _ + -``, beginning with a
    letter or digit, at most 200 characters; ``unknown`` when nothing of it is left."""
    out = re.sub(r"[^A-Za-z0-9._+-]+", "-", text)
    out = re.sub(r"^[^A-Za-z0-9]+", "", out)[:200].rstrip("-")
    return out or "unknown"


def target_cores(target) -> int:
    """The threads a program runs on for ``target`` (a ``tvm.target.Target``): its ``num-cores``, else this
    machine's cores (a GPU target's: the threads the search and the featurizer use on the host)."""
    return int(target.attrs.get("num-cores", 0) or 0) or usable_cores()


def arch_number(arch) -> int:
    """A CUDA arch's number: ``sm_90`` and ``sm_90a`` -> 90; 0 for none."""
    match = re.fullmatch(r"sm_(\d+)[a-z]?", str(arch or ""))
    return int(match.group(1)) if match else 0


def device_of(target):
    """The device here that runs ``target``'s programs (a ``tvm.target.Target``): device 0 of its kind (the CPU
    for llvm, the first GPU for cuda)."""
    import tvm

    return tvm.runtime.device(target.get_target_device_type(), 0)


def measuring_host(target: dict) -> dict:
    """The host record of what is measured here for ``target`` (its JSON dict): this machine, with the GPU
    that runs the kernels (``local_gpu``) when the target is a GPU's."""
    return host_info(gpu=local_gpu() if is_gpu(target) else None)


def is_gpu(target: dict) -> bool:
    """Whether a target (its JSON dict) compiles for a GPU."""
    return str(target.get("kind", "")) in GPU_KINDS or "gpu" in (target.get("keys") or [])
