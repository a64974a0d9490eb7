"""Hardware specs for the PSA static analyzer and PaCM's CPU memory levels.

A ``HardwareSpec`` says how fast a machine computes and moves data: for CPUs the cores, clock, SIMD width, FMA
units, vector registers and each cache level's size and bandwidth (``detect_cpu`` derives them for the local
machine from ``/proc/cpuinfo`` and ``/sys/devices/system/cpu/cpu0/cache`` as the one host parser,
``costlab.common.host``, reads them); for NVIDIA GPUs the SMs, peak fp32 FLOP/s, memory bandwidth and per-SM
limits, from a table of public data-sheet figures (``GPU_TABLE``). Every field can be overridden from a JSON
file or dict, and a spec round-trips through ``to_json`` / ``from_json`` so a dataset can store the spec of
each platform beside its target.

Pure Python: no TVM needed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from costlab.common.errors import UsageError
from costlab.common.host import cpu_mhz, read_caches, read_cpuinfo, size_bytes, usable_cores
from costlab.featurizers.base import ConfigError, shown
from costlab.metaschedule.targets import NVIDIA_KINDS, arch_number, local_gpu, normalize_target, stored_target
from costlab.metaschedule.traces import plain_json

KIB = 1024
MIB = 1024 * 1024


class NoHardwareSpec(UsageError, ValueError):
    """A platform of a target kind PSA has no machine model for (rocm, vulkan, metal, ...): its records get no PSA
    or PaCM features (one line, where any command meets it; ``costlab featurize`` goes on with the others)."""


@dataclass
class HardwareSpec:
    """Base of the CPU and GPU specs; ``kind`` picks the class in ``from_json``."""

    name: str = "unknown"

    kind = "base"
    # numeric fields where 0 stands for "not known" (the spec then falls back on another figure); every other
    # numeric field is a count, size, clock or rate that the features divide by or take the log of
    zero_unknown = ()

    def to_json(self) -> dict:
        return {"kind": self.kind, **dataclasses.asdict(self)}

    @staticmethod
    def from_json(obj) -> "HardwareSpec":
        """A spec from a dict, a JSON string or a path to a JSON file (``kind``: ``cpu`` or ``gpu``)."""
        obj, where = _load_obj(obj)
        kind = obj.get("kind")
        cls = {"cpu": CPUSpec, "gpu": GPUSpec}.get(kind)
        if cls is None:
            raise ValueError(f"{where}: hardware spec needs \"kind\": \"cpu\" or \"gpu\" (got {kind!r})")
        return cls().updated(obj, where)

    def updated(self, overrides, where: str = "hardware spec override") -> "HardwareSpec":
        """A copy with the given fields replaced; unknown fields or wrong types are an error."""
        overrides, where = _load_obj(overrides, where)
        fields = {f.name: f for f in dataclasses.fields(self)}
        changes = {}
        for key, value in overrides.items():
            if key == "kind":
                if value != self.kind:
                    raise ValueError(f"{where}: spec kind {value!r} does not match {self.kind!r}")
                continue
            if key not in fields:
                raise ValueError(f"{where}: unknown {self.kind} spec field {key!r} (known: {', '.join(fields)})")
            default = getattr(self, key)
            if isinstance(default, str):
                changes[key] = str(value)
            else:
                changes[key] = self._number(key, value, type(default), where)
        return dataclasses.replace(self, **changes)

    def _number(self, key: str, value, kind: type, where: str):
        """``value`` as the field's type (int or float), refused in one line naming the field unless it is a finite
        number above 0 (or 0 where ``zero_unknown`` allows it) and, for an int field, a whole one: NaN, infinity,
        0 or a fraction would give NaN estimates, a division by zero for every record, an overflow, or a silently
        truncated count."""
        try:
            if isinstance(value, bool):  # JSON true/false are not figures of a machine
                raise TypeError
            number = float(value)  # a JSON number, or a numeric string
        except (TypeError, ValueError):
            raise ValueError(f"{where}: field {key!r} must be a number, got {value!r}") from None
        except OverflowError:  # an int beyond a float's range, no machine's figure either
            raise ValueError(f"{where}: field {key!r} must be a finite number, got {value!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"{where}: field {key!r} must be a finite number, got {value!r}")
        if number < 0 or (number == 0 and key not in self.zero_unknown):
            least = "0 or more (0: not known)" if key in self.zero_unknown else "above 0"
            raise ValueError(f"{where}: field {key!r} must be {least}, got {value!r}")
        if kind is int:
            if not number.is_integer():
                raise ValueError(f"{where}: field {key!r} must be a whole number, got {value!r}")
            return value if isinstance(value, int) else int(number)  # an int as given, exactly
        return number


@dataclass
class CPUSpec(HardwareSpec):
    """A CPU. Bandwidths of the caches are per core per cycle; DRAM bandwidth is for the whole socket."""

    cores: int = 4
    freq_ghz: float = 2.5
    simd_bits: int = 256
    fma_units: int = 2  # FMA pipes per core (each does one vector FMA per cycle)
    vector_registers: int = 16
    cache_line: int = 64
    l1_bytes: int = 32 * KIB  # per core, data
    l2_bytes: int = 1 * MIB  # per core
    llc_bytes: int = 16 * MIB  # shared by all cores
    l1_bw: float = 64.0  # bytes per cycle per core
    l2_bw: float = 32.0
    llc_bw: float = 16.0
    dram_gbs: float = 20.0  # GB/s, whole machine

    kind = "cpu"

    def lanes(self, dtype_bytes: int = 4) -> int:
        """SIMD lanes for elements of this size."""
        return max(1, self.simd_bits // (8 * max(1, int(dtype_bytes))))

    def peak_flops(self, dtype_bytes: int = 4, cores: int | None = None) -> float:
        """Peak FLOP/s (an FMA counts 2) of ``cores`` cores (all by default)."""
        n = self.cores if cores is None else cores
        return n * self.freq_ghz * 1e9 * max(1, self.fma_units) * 2 * self.lanes(dtype_bytes)

    def levels(self) -> list[tuple[str, float]]:
        """Memory levels with their capacity in bytes, innermost first (``reg`` is the vector register file)."""
        reg = self.vector_registers * self.simd_bits // 8
        return [("reg", reg), ("L1", self.l1_bytes), ("L2", self.l2_bytes), ("LLC", self.llc_bytes),
                ("DRAM", float("inf"))]


@dataclass
class GPUSpec(HardwareSpec):
    """An NVIDIA GPU."""

    arch: str = "sm_80"
    sms: int = 108
    peak_gflops: float = 19500.0  # fp32, FMA = 2
    mem_gbs: float = 1555.0
    l2_bytes: int = 40 * MIB
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    smem_per_sm: int = 164 * KIB
    smem_per_block: int = 48 * KIB
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    max_blocks_per_sm: int = 32
    warp_size: int = 32
    tc_gflops: float = 0.0  # dense float16 tensor-core peak (FMA = 2); 0: not in the data sheet (``tensor_peak``)

    kind = "gpu"
    zero_unknown = ("tc_gflops",)  # ``tensor_peak`` then estimates the tensor-core peak from the fp32 one

    def tensor_peak(self) -> float:
        """Dense float16 tensor-core peak in GFLOP/s: the data sheet's, or for a spec without one 8x the fp32 peak
        from sm_70 on (what V100 has; later GPUs have more), 0 before sm_70 (no tensor cores)."""
        if self.tc_gflops:
            return float(self.tc_gflops)
        return 8.0 * self.peak_gflops if arch_number(self.arch) >= 70 else 0.0

    def levels(self) -> list[tuple[str, float]]:
        return [("local", self.max_regs_per_thread * 4), ("shared", self.smem_per_block), ("L2", self.l2_bytes),
                ("global", float("inf"))]


# Data-sheet figures (fp32 peak at boost clock; dense float16 tensor-core peak with float16 accumulation, set
# below). K80 is one of the board's two GK210 GPUs, as TVM sees it.
GPU_TABLE: dict[str, GPUSpec] = {
    "k80": GPUSpec("k80", "sm_37", 13, 4368.0, 240.0, int(1.5 * MIB), 131072, 255, 112 * KIB, 48 * KIB, 2048,
                   1024, 16),
    "v100": GPUSpec("v100", "sm_70", 80, 15700.0, 900.0, 6 * MIB, 65536, 255, 96 * KIB, 48 * KIB, 2048, 1024, 32),
    "t4": GPUSpec("t4", "sm_75", 40, 8141.0, 320.0, 4 * MIB, 65536, 255, 64 * KIB, 48 * KIB, 1024, 1024, 16),
    "rtx2080ti": GPUSpec("rtx2080ti", "sm_75", 68, 13450.0, 616.0, int(5.5 * MIB), 65536, 255, 64 * KIB, 48 * KIB,
                         1024, 1024, 16),
    "a100": GPUSpec("a100", "sm_80", 108, 19500.0, 1555.0, 40 * MIB, 65536, 255, 164 * KIB, 48 * KIB, 2048, 1024,
                    32),
    "h100": GPUSpec("h100", "sm_90", 132, 66900.0, 3350.0, 50 * MIB, 65536, 255, 228 * KIB, 48 * KIB, 2048, 1024,
                    32),
    "h100-pcie": GPUSpec("h100-pcie", "sm_90", 114, 51200.0, 2000.0, 50 * MIB, 65536, 255, 228 * KIB, 48 * KIB, 2048,
                         1024, 32),
    "h200": GPUSpec("h200", "sm_90", 132, 66900.0, 4800.0, 60 * MIB, 65536, 255, 228 * KIB, 48 * KIB, 2048, 1024,
                    32),
}
for _name, _tc in {"v100": 125000.0, "t4": 65000.0, "rtx2080ti": 107600.0, "a100": 312000.0, "h100": 989400.0,
                   "h100-pcie": 756000.0, "h200": 989400.0}.items():
    GPU_TABLE[_name] = dataclasses.replace(GPU_TABLE[_name], tc_gflops=_tc)
_GPU_ALIASES = {
    "tesla-k80": "k80", "tesla-v100": "v100", "tesla-t4": "t4", "2080ti": "rtx2080ti", "rtx-2080-ti": "rtx2080ti",
    "geforce-rtx-2080-ti": "rtx2080ti", "a100-sxm4": "a100", "a100-40gb": "a100", "h100-sxm": "h100",
    "h100-sxm5": "h100",
}
# The GPU assumed for a CUDA target that names only its architecture.
_GPU_BY_ARCH = {"sm_37": "k80", "sm_70": "v100", "sm_75": "t4", "sm_80": "a100", "sm_86": "a100", "sm_89": "a100",
                "sm_90": "h100", "sm_90a": "h100"}


def gpu_spec(name: str) -> GPUSpec:
    """The table's spec of a GPU by name: ``t4``, ``a100``, ``Tesla-T4``, or the name the driver reports
    (``NVIDIA H100 80GB HBM3``: the vendor and line words dropped, then the longest leading words the table
    knows, so memory sizes and types after the model do not matter)."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").split("-")
    while len(words) > 1 and words[0] in ("nvidia", "geforce", "tesla", "quadro"):
        words = words[1:]
    for n in range(len(words), 0, -1):
        for key in ("-".join(words[:n]), "".join(words[:n])):
            key = _GPU_ALIASES.get(key, key)
            if key in GPU_TABLE:
                return dataclasses.replace(GPU_TABLE[key])
    raise ValueError(f"unknown GPU {name!r} (known: {', '.join(sorted(GPU_TABLE))}); give a spec JSON instead")


# -- CPU detection ---------------------------------------------------------------------------------------

def _read(path) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def detect_cpu(override=None, cpuinfo_path=None, cache_dir=None, cpufreq_path=None) -> CPUSpec:
    """The local CPU, as far as Linux tells; fields it does not tell keep ``CPUSpec``'s defaults.

    ``cpuinfo_path`` and ``cache_dir`` are read by ``costlab.common.host`` (the parser ``host_info`` uses too):
    its first processor block, and the data and unified caches of levels 1 to 3 (without an L3, the L2 is the
    LLC). ``override`` (a dict, JSON string or path to a JSON file) replaces any field afterwards.
    """
    spec = CPUSpec(name="local-cpu")
    changes: dict = {}
    kv = read_cpuinfo(cpuinfo_path)
    if kv.get("model name"):
        changes["name"] = kv["model name"]
    changes["cores"] = usable_cores()
    mhz = cpu_mhz(kv, cpufreq_path)
    if mhz:
        changes["freq_ghz"] = mhz / 1000.0
    flags = set((kv.get("flags") or kv.get("features") or "").split())
    if flags:
        if "avx512f" in flags:
            changes.update(simd_bits=512, vector_registers=32, l1_bw=128.0, l2_bw=64.0)
        elif "avx2" in flags or "avx" in flags:
            changes.update(simd_bits=256, vector_registers=16)
        elif "asimd" in flags or "neon" in flags:
            changes.update(simd_bits=128, vector_registers=32, l1_bw=32.0)
        elif "sse2" in flags:
            changes.update(simd_bits=128, vector_registers=16, l1_bw=32.0)
        changes["fma_units"] = 2 if ({"fma", "asimd"} & flags) else 1
    for cache in read_caches(cache_dir):
        size = size_bytes(cache.size)
        if not size or cache.type == "Instruction":
            continue
        if cache.line.isdigit() and int(cache.line) > 0:  # 0: the kernel does not know it; the default stays
            changes["cache_line"] = int(cache.line)
        if cache.level == "1":
            changes["l1_bytes"] = size
        elif cache.level == "2":
            changes["l2_bytes"] = size
        elif cache.level == "3":
            changes["llc_bytes"] = size
    if "llc_bytes" not in changes and "l2_bytes" in changes:
        changes["llc_bytes"] = changes["l2_bytes"]  # no L3: the L2 is the last level
    cores = changes.get("cores", spec.cores)
    changes["dram_gbs"] = float(min(10.0 * cores, 200.0))
    spec = spec.updated(changes, "detected CPU")
    if override is not None:
        spec = spec.updated(override)
    return spec


# -- targets ---------------------------------------------------------------------------------------------

# LLVM CPU names by the vector width LLVM's code for them uses: AVX-512 ones first (znver4 and znver5 are
# AVX-512, older znver are AVX2), then AVX2, then Arm
_SIMD_BY_MCPU = [(r"avx512|skylake-server|skylake-avx512|skx|cascadelake|cooperlake|cannonlake|icelake|tigerlake|"
                  r"rocketlake|sapphirerapids|emeraldrapids|graniterapids|diamondrapids|znver[4-9]|x86-64-v4|knl|knm",
                  512),
                 (r"haswell|broadwell|skylake|znver|core-avx2|alderlake|raptorlake|x86-64-v3", 256),
                 (r"neoverse|cortex|apple|graviton|aarch64|arm|a64fx", 128)]  # TVM's code for them: NEON


DEFAULT_TRIPLE = "x86_64-unknown-linux-gnu"  # what a -mcpu name without -mtriple is read for, on every machine


def mcpu_simd_bits(mcpu: str, mtriple: str | None = None) -> int | None:
    """The vector width LLVM compiles for with ``-mcpu=NAME``: looked up in ``_SIMD_BY_MCPU`` (the same on every
    machine), else asked of TVM's LLVM (its feature list of that CPU, for ``mtriple`` when the target names one,
    else for x86-64: never the triple of the machine asking, which would make a dataset's features depend on
    it; an ARM name unknown to the x86 tables comes out as 128 bits, NEON's width, either way); None for a
    name neither knows."""
    for pattern, bits in _SIMD_BY_MCPU:
        if re.search(pattern, mcpu):
            return bits
    if mcpu == "native":
        return None
    try:
        import tvm
        from tvm.target import codegen

        target = {"kind": "llvm", "mcpu": mcpu, "mtriple": mtriple or DEFAULT_TRIPLE}
        features = codegen.llvm_get_cpu_features(tvm.target.Target(target))
        if "avx512f" in features:
            return 512
        if "avx2" in features or "avx" in features:
            return 256
        if "sse2" in features or "neon" in features:
            return 128
    except Exception:  # noqa: BLE001  no TVM, or a CPU name this LLVM does not know
        pass
    return None


# Known LLVM CPU names (``-mcpu``): per-core L1d and L2, the shared last-level cache, a nominal clock and the FMA
# pipes of the server parts of that core, for a platform whose records came without a host record (an imported
# MetaSchedule database). The figures are the data sheets' (base clock of the common server SKU); what matters
# is that they are the same on every machine that featurizes the data.
CPU_TABLE = {
    "znver5": dict(l1_bytes=48 * KIB, l2_bytes=1 * MIB, llc_bytes=32 * MIB, freq_ghz=2.6, fma_units=2),
    "znver4": dict(l1_bytes=32 * KIB, l2_bytes=1 * MIB, llc_bytes=32 * MIB, freq_ghz=2.45, fma_units=2),
    "znver3": dict(l1_bytes=32 * KIB, l2_bytes=512 * KIB, llc_bytes=32 * MIB, freq_ghz=2.45, fma_units=2),
    "znver2": dict(l1_bytes=32 * KIB, l2_bytes=512 * KIB, llc_bytes=16 * MIB, freq_ghz=2.35, fma_units=2),
    "emeraldrapids": dict(l1_bytes=48 * KIB, l2_bytes=2 * MIB, llc_bytes=260 * MIB, freq_ghz=2.1, fma_units=2),
    "sapphirerapids": dict(l1_bytes=48 * KIB, l2_bytes=2 * MIB, llc_bytes=105 * MIB, freq_ghz=2.0, fma_units=2),
    "graniterapids": dict(l1_bytes=48 * KIB, l2_bytes=2 * MIB, llc_bytes=480 * MIB, freq_ghz=2.0, fma_units=2),
    "icelake-server": dict(l1_bytes=48 * KIB, l2_bytes=1280 * KIB, llc_bytes=48 * MIB, freq_ghz=2.3, fma_units=2),
    "cascadelake": dict(l1_bytes=32 * KIB, l2_bytes=1 * MIB, llc_bytes=38 * MIB, freq_ghz=2.5, fma_units=2),
    "skylake-avx512": dict(l1_bytes=32 * KIB, l2_bytes=1 * MIB, llc_bytes=38 * MIB, freq_ghz=2.5, fma_units=2),
    "alderlake": dict(l1_bytes=48 * KIB, l2_bytes=1280 * KIB, llc_bytes=30 * MIB, freq_ghz=3.0, fma_units=2),
    "skylake": dict(l1_bytes=32 * KIB, l2_bytes=256 * KIB, llc_bytes=8 * MIB, freq_ghz=3.4, fma_units=2),
    "broadwell": dict(l1_bytes=32 * KIB, l2_bytes=256 * KIB, llc_bytes=30 * MIB, freq_ghz=2.3, fma_units=2),
    "haswell": dict(l1_bytes=32 * KIB, l2_bytes=256 * KIB, llc_bytes=30 * MIB, freq_ghz=2.3, fma_units=2),
}
CPU_TABLE["core-avx2"] = CPU_TABLE["haswell"]
CPU_TABLE["skx"] = CPU_TABLE["skylake-avx512"]


def spec_from_host(host: dict | None, target) -> CPUSpec:
    """The CPU a dataset's records were measured on, from its host record (``costlab.common.host``: caches,
    ISA flags, threads, clock when recorded), else from ``CPU_TABLE`` by the target's ``-mcpu``, else
    ``CPUSpec``'s generic figures; never from the machine computing it. The ``name`` says which it was."""
    t = stored_target(target)
    mcpu = str(t.get("mcpu") or "")
    host = host or {}
    known = CPU_TABLE.get(mcpu)
    changes: dict = dict(known or {})
    caches = {k: size_bytes(v) for k, v in (host.get("caches") or {}).items()}
    # a machine that exposes no cache sizes (some VMs) still records its clock, threads and ISA flags
    if host and (caches or any(host.get(k) for k in ("mhz", "threads", "flags"))):
        name = f"{host.get('cpu_model') or 'unknown CPU'} (host record)"
        for level, field in (("L1d", "l1_bytes"), ("L2", "l2_bytes"), ("L3", "llc_bytes")):
            if caches.get(level):
                changes[field] = caches[level]
        if "L3" not in caches and caches.get("L2"):
            changes["llc_bytes"] = caches["L2"]
        if host.get("mhz"):
            changes["freq_ghz"] = float(host["mhz"]) / 1000.0
        if host.get("threads"):
            changes["cores"] = int(host["threads"])
        flags = set(host.get("flags") or [])
        if flags:
            changes["fma_units"] = 2 if ({"fma", "asimd"} & flags) else 1
            # the width of the recorded CPU, which code for ``-mcpu=native`` uses (``_target_changes`` sets the
            # width of code for a named CPU or for none)
            simd = 512 if "avx512f" in flags else 256 if {"avx2", "avx"} & flags else 128
            changes.update(_simd_fields(simd, arm=bool({"asimd", "neon"} & flags)))
    elif known:
        name = f"{mcpu} (table of -mcpu names)"
    else:
        name = f"generic CPU (no host record, -mcpu {mcpu or 'none'} not in the table)"
    cores = int(changes.get("cores", CPUSpec.cores))
    changes["dram_gbs"] = float(min(10.0 * cores, 200.0))
    return CPUSpec(name=name).updated(changes, "host record")


def _target_changes(t: dict) -> dict:
    """What an LLVM target fixes of a CPU spec whatever the machine: ``num-cores`` and the SIMD width the code
    is compiled for (``mattr`` / ``mcpu`` when it names them, 128 bits when it names neither: LLVM's generic
    x86-64 / aarch64 code; the machine's own for ``-mcpu=native``)."""
    changes: dict = {}
    if t.get("num-cores"):
        changes["cores"] = int(t["num-cores"])
        changes["dram_gbs"] = float(min(10.0 * int(t["num-cores"]), 200.0))
    text = " ".join([str(t.get("mcpu") or ""), str(t.get("mtriple") or ""), " ".join(t.get("mattr") or [])])
    simd = None
    if "+avx512f" in text:
        simd = 512
    elif "+avx2" in text or "+avx" in text:
        simd = 256
    elif t.get("mcpu"):
        simd = mcpu_simd_bits(str(t["mcpu"]), t.get("mtriple"))
    if str(t.get("mcpu") or "") == "native":
        simd = None  # the CPU's own width: the spec's (detected here, or its host record's)
    elif simd is None:
        # No -mcpu / -mattr: LLVM compiles for the generic triple (x86-64: SSE2, aarch64: NEON), so the
        # code uses 128-bit vectors whatever the machine has.
        simd = 128
    if simd is not None:
        changes.update(_simd_fields(simd, arm=bool(re.search(r"aarch64|arm", text))))
    return changes


def _simd_fields(simd: int, arm: bool) -> dict:
    """What a code's vector width fixes of a CPU spec: the width, the vector registers, and two vector loads per
    cycle from L1, one vector line per cycle from L2."""
    return dict(simd_bits=simd, vector_registers=32 if simd == 512 or arm else 16, l1_bw=simd / 4.0,
                l2_bw=simd / 8.0)


def spec_for_target(target, override=None, gpu_name: str = "", host: dict | None = None) -> HardwareSpec:
    """The spec PSA should assume for a TVM target (a JSON dict, or the string form).

    CUDA: from ``GPU_TABLE`` by the target's ``model`` or ``tag`` name, else by ``gpu_name`` (or, for a live
    target, this machine's GPU when it is of the target's arch), else by ``arch``. LLVM: with ``host`` (a dataset's host record, ``{}``
    for a dataset without one) the CPU that record or the target's ``-mcpu`` names (``spec_from_host``);
    without, this machine's CPU (``detect_cpu``: the machine tuning now); then ``num-cores`` and the SIMD width
    the code is compiled for from the target (``_target_changes``). ``override`` replaces fields at the end.
    """
    # a dataset's target as recorded; a live one with ``native`` read as this machine's CPU, and its GPU
    t = normalize_target(target) if host is None else stored_target(target)
    kind = str(t.get("kind", "llvm"))
    if kind in NVIDIA_KINDS:
        spec = None
        local = _local_gpu_name(t) if host is None else ""
        for name in (str(t.get("model") or ""), str(t.get("tag") or ""), gpu_name or local):
            if name and name != "unknown":
                try:
                    spec = gpu_spec(name.split("/")[-1])
                    break
                except ValueError:
                    pass
        if spec is None:
            arch = str(t.get("arch") or "sm_80")
            spec = gpu_spec(_GPU_BY_ARCH.get(arch, "a100"))
            spec = dataclasses.replace(spec, arch=arch)
        if t.get("max_shared_memory_per_block"):
            spec = dataclasses.replace(spec, smem_per_block=int(t["max_shared_memory_per_block"]))
        if t.get("max_threads_per_block"):
            spec = dataclasses.replace(spec, max_threads_per_block=int(t["max_threads_per_block"]))
    elif kind == "llvm" or kind == "c":
        spec = detect_cpu() if host is None else spec_from_host(host, t)
        spec = spec.updated(_target_changes(t), "target")
    else:
        raise NoHardwareSpec(f"no hardware spec for target kind {kind!r} (PSA and PaCM know llvm and cuda)")
    if override is not None:
        spec = spec.updated(override)
    return spec


def _local_gpu_name(target: dict) -> str:
    """The name of this machine's GPU when it is of the target's arch (a target of this GPU), else ''."""
    gpu = local_gpu()
    return gpu["name"] if gpu and gpu["arch"] == str(target.get("arch") or "") else ""


def spec_for_platform(platform) -> HardwareSpec:
    """The spec of a dataset platform: the one stored with it, else its host record's CPU or GPU (``costlab
    dataset measure`` records it), else the target's ``-mcpu`` in ``CPU_TABLE``; never the machine that
    computes it, so a dataset's features are the same wherever they are computed."""
    if getattr(platform, "spec", None):
        try:
            return HardwareSpec.from_json(platform.spec)
        except ValueError as exc:  # stored before the check refused NaN, 0 or infinity: one line, and the way out
            problem = str(exc).split(": ", 1)[-1]
            raise NoHardwareSpec(f"its stored hardware spec is refused ({problem}); `costlab dataset set-machine` "
                                 "with --host or a whole --spec (with \"kind\") replaces it") from None
    host = getattr(platform, "host", None) or {}
    gpu = host.get("gpu") or {}
    return spec_for_target(platform.target, gpu_name=str(gpu.get("name") or ""), host=host)


def spec_for(platform=None, target=None, override=None) -> HardwareSpec:
    """The spec PSA and PaCM assume for a dataset platform (``spec_for_platform``) or, without one, for a target
    (``spec_for_target``), with a featurizer config's ``spec`` applied: a whole spec when it has a ``"kind"``
    (fields it does not name take the class defaults), else fields to replace."""
    if override and "kind" in override and getattr(platform, "spec", None):
        # a whole spec replaces a stored one without reading it, so that one the check refuses can be replaced
        return HardwareSpec.from_json(override)
    spec = spec_for_platform(platform) if platform is not None else spec_for_target(target)
    if override:
        spec = HardwareSpec.from_json(override) if "kind" in override else spec.updated(override)
    return spec


class PlatformSpecs:
    """What a featurizer whose features depend on the hardware (PSA, PaCM) shares: the spec of a dataset platform
    or a live target, with the featurizer config's ``spec`` applied, resolved once per platform; and a cache
    fingerprint that names that spec, so a cache made under one spec is never read under another."""

    def check_config(self) -> None:
        """The config's ``spec``, checked when the featurizer is made: null, or a JSON object that is a whole spec
        (with ``"kind"``, every field valid for that kind) or fields every one of which a CPU spec or every one
        of which a GPU spec has, each of the field's type (which kind applies is known only per platform)."""
        super().check_config()
        spec = self.config.get("spec")
        if spec is None:
            return
        if not isinstance(spec, dict):
            raise ConfigError(self.name, "spec", 'spec must be a JSON object of hardware spec fields ({"cores": 16}) '
                              f'or a whole spec (with "kind"), not {shown(spec)}')
        if "kind" in spec:
            cls = {"cpu": CPUSpec, "gpu": GPUSpec}.get(spec["kind"])
            if cls is None:
                raise ConfigError(self.name, "spec", f'spec kind must be "cpu" or "gpu", not {shown(spec["kind"])}')
        else:
            kinds = [c for c in (CPUSpec, GPUSpec) if set(spec) <= {f.name for f in dataclasses.fields(c)}]
            if not kinds:
                known = {f.name for c in (CPUSpec, GPUSpec) for f in dataclasses.fields(c)}
                odd = sorted(set(spec) - known)
                raise ConfigError(self.name, "spec",
                                  f"spec has no hardware spec field {', '.join(map(repr, odd))}" if odd else
                                  f"spec mixes CPU and GPU fields ({', '.join(map(repr, sorted(spec)))})")
            cls = kinds[0]
        try:
            cls().updated(spec, "spec")
        except ValueError as exc:
            raise ConfigError(self.name, "spec", str(exc)) from None

    def spec_for(self, platform=None, target=None) -> HardwareSpec:
        specs = self.__dict__.setdefault("_specs", {})
        # a platform by what its spec comes from: another dataset's platform of the same id is another machine
        key = (json.dumps([platform.id, platform.target, getattr(platform, "spec", None),
                           getattr(platform, "host", None)], sort_keys=True, default=str)
               if platform is not None else repr(target))
        if key not in specs:
            spec, override = spec_for(platform, target), self.config.get("spec")
            if override:  # applied as spec_for applies it; here a field of the other kind (CPU fields, a GPU) fails
                where = f"platform {platform.id}" if platform is not None else f"target {target}"
                try:
                    spec_kind = spec.kind
                    spec = HardwareSpec.from_json(override) if "kind" in override else spec.updated(override, "spec")
                except ValueError as exc:
                    raise ConfigError(self.name, "spec", f"{exc} (for {where})") from None
                if spec.kind != spec_kind:  # a whole GPU spec for a CPU platform, or the reverse: the wrong formula
                    raise ConfigError(self.name, "spec", f"spec kind {spec.kind!r} does not match the {spec_kind} "
                                      f"of {where}")
            specs[key] = spec
        return specs[key]

    def platform_fingerprint(self, ds, platform: str) -> str:
        text = json.dumps(self.spec_for(ds.platforms[platform]).to_json(), sort_keys=True)
        return f"{self.fingerprint}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def target_dict(target) -> dict:
    """A target (``tvm.target.Target``, dict or string) as a plain JSON dict, as ``spec_for`` reads it."""
    if isinstance(target, dict):
        return dict(target)
    if hasattr(target, "export"):
        return plain_json(target.export())

    return normalize_target(str(target))


def _load_obj(obj, where: str = "hardware spec"):
    if isinstance(obj, HardwareSpec):
        return obj.to_json(), where
    if isinstance(obj, dict):
        return dict(obj), where
    if isinstance(obj, Path) or (isinstance(obj, str) and not obj.lstrip().startswith("{")):
        path = Path(obj)
        text = _read(path)
        if text is None:
            raise ValueError(f"{path}: cannot read hardware spec file")
        where = str(path)
    else:
        text = str(obj)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: a hardware spec must be a JSON object")
    return value, where


__all__ = ["HardwareSpec", "CPUSpec", "GPUSpec", "GPU_TABLE", "gpu_spec", "detect_cpu", "spec_for", "spec_for_target",
           "spec_for_platform", "spec_from_host", "CPU_TABLE", "PlatformSpecs", "target_dict"]
