"""The machine a measurement runs on: CPU model, ISA flags, cache sizes and threads, read from
``/proc/cpuinfo`` and sysfs (pure Python, no TVM).

A platform's records are only comparable when one machine measured them all: ``measure`` stores the host
with the platform and refuses to add records measured on a different one (see ``same_host``). The host
is also printed beside every benchmark figure.

The host is parsed here only: ``read_cpuinfo`` (the first processor block of ``/proc/cpuinfo``) and
``read_caches`` (cpu0's caches in sysfs, with ``size_bytes`` for their sizes) serve both ``host_info`` and
the hardware spec PSA and PaCM assume for the local CPU (``featurizers.psa.hardware.detect_cpu``).
"""

from __future__ import annotations

import os
import platform as _platform
import re
from pathlib import Path
from typing import NamedTuple

IDENTITY = ("cpu_model", "vendor", "family", "model", "stepping", "flags", "caches", "threads", "gpu")
# Flags of /proc/cpuinfo that say no instruction the code may use: Linux's own (its cpufeatures.h "Linux defined"
# words), the mitigations and what microcode and the hypervisor's version add. They come and go with a kernel
# update, a boot option or a microcode update, so the same machine after a reboot would read as another.
NON_ISA_FLAGS = frozenset((
    "constant_tsc", "up", "art", "arch_perfmon", "pebs", "bts", "rep_good", "acc_power", "nopl", "xtopology",
    "tsc_reliable", "nonstop_tsc", "cpuid", "extd_apicid", "amd_dcm", "aperfmperf", "rapl", "nonstop_tsc_s3",
    "tsc_known_freq", "ring3mwait", "cpuid_fault", "cpb", "epb", "invpcid_single", "hw_pstate", "proc_feedback",
    "sme", "sev", "sev_es", "pti", "kernel_ibrs", "ibrs", "ibpb", "stibp", "ibrs_enhanced", "ssbd", "virt_ssbd",
    "zen", "l1tf_pteinv", "retpoline", "retpoline_amd", "user_shstk", "flush_l1d", "md_clear", "arch_capabilities",
    "amd_ibpb_ret", "ibpb_exit_to_user", "ibpb_brtype", "srso_no", "tsa_sq_no", "tsa_l1_no", "tpr_shadow",
    "flexpriority", "ept", "vpid", "vnmi", "ept_ad", "vmmcall", "hypervisor", "xenpv", "amd_ssbd", "amd_stibp",
    "amd_ppin", "ppin", "split_lock_detect", "bus_lock_detect", "tme", "intel_ppin", "pconfig", "lbrv",
    "amd_lbr_v2", "amd_lbr_pmc_freeze", "perfmon_v2", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total",
    "cqm_mbm_local", "cat_l3", "cat_l2", "cdp_l3", "cdp_l2", "mba", "rdt_a", "intel_pt", "dtherm", "ida",
    "arat", "pln", "pts", "hwp", "hwp_notify", "hwp_act_window", "hwp_epp", "hwp_pkg_req", "hfi",
))
CPUINFO = "/proc/cpuinfo"
CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"
CPUFREQ = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"
# A folder standing in for this machine's files (``cpuinfo``, ``cache/indexN/...``, ``cpuinfo_max_freq``): with
# it set, costlab reads another CPU's description, so the suite can be run as if on that CPU
FAKE_HOST_ENV = "COSTLAB_HOST_FILES"


def host_paths() -> tuple[str, str, str]:
    """Where this machine's CPU description is read: ``/proc/cpuinfo``, cpu0's cache folder in sysfs and its
    maximum clock; or the files of the folder ``$COSTLAB_HOST_FILES`` names."""
    root = os.environ.get(FAKE_HOST_ENV)
    if root:
        return str(Path(root) / "cpuinfo"), str(Path(root) / "cache"), str(Path(root) / "cpuinfo_max_freq")
    return CPUINFO, CACHE_DIR, CPUFREQ


def faked_llvm_cpu() -> str | None:
    """LLVM's name of the CPU the folder ``$COSTLAB_HOST_FILES`` describes (its file ``llvm_cpu``), or None when
    no folder is set or it names none: then LLVM's detection of this machine stands."""
    root = os.environ.get(FAKE_HOST_ENV)
    return (_read(Path(root) / "llvm_cpu").strip() or None) if root else None


def _read(path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def read_cpuinfo(path=None) -> dict:
    """The first processor block of ``/proc/cpuinfo`` as a dict: keys lower-cased (``model name``,
    ``vendor_id``, ``cpu mhz``, ``flags``), values stripped; empty when the file cannot be read."""
    kv = {}
    for line in _read(path or host_paths()[0]).split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            kv[key.strip().lower()] = value.strip()
    return kv


class Cache(NamedTuple):
    """One cache of a CPU as sysfs tells it (an ``indexN`` folder): each field the file's text, stripped,
    ``""`` where the file is missing."""

    level: str  # "1", "2", "3"
    type: str  # "Data", "Instruction" or "Unified"
    size: str  # as sysfs writes it: "48K", "1024K", "32M"
    line: str  # coherency_line_size, in bytes: "64"

    @property
    def name(self) -> str:
        """``L1d``, ``L1i``, ``L2``, ``L3``: the level, with ``d`` / ``i`` for a data / instruction cache."""
        return f"L{self.level}{'i' if self.type == 'Instruction' else 'd' if self.type == 'Data' else ''}"


def read_caches(cache_dir=None) -> list[Cache]:
    """The caches in ``cache_dir`` (cpu0's by default), in the order of their ``index*`` folders; empty when
    there is no such folder."""
    base = Path(cache_dir or host_paths()[1])
    return [Cache(*(_read(idx / f).strip() for f in ("level", "type", "size", "coherency_line_size")))
            for idx in (sorted(base.glob("index*")) if base.is_dir() else [])]


def size_bytes(text: str) -> int | None:
    """A cache size as sysfs writes it (``48K``, ``1024K``, ``32M``; ``KiB`` / ``KB`` and a space accepted) in
    bytes; None for text that is not a size."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text or "", re.I)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}[m.group(2).upper()]


def cpu_mhz(cpuinfo: dict, cpufreq_path=None) -> float | None:
    """The clock in MHz: the maximum cpufreq reports, else ``/proc/cpuinfo``'s ``cpu MHz``; None when neither
    says."""
    khz = _read(cpufreq_path or host_paths()[2]).strip()
    if khz.isdigit():
        return int(khz) / 1000.0
    try:
        return float(cpuinfo["cpu mhz"])
    except (KeyError, ValueError):
        return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (a container or
    ``taskset`` limits it), else every core of the machine. The one count costlab uses for threads, worker
    pools and a target's ``num-cores``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def host_info(gpu: dict | None = None) -> dict:
    """This machine: ``cpu_model``, ``vendor``, ``family`` / ``model`` / ``stepping``, ``flags`` (sorted ISA
    flags), ``caches`` (per level, per core), ``threads`` (cores this process may use), ``mhz`` (the clock, not
    part of the machine's identity: it moves with the governor), ``machine``; and
    ``gpu`` (``metaschedule.targets.local_gpu``: name, arch, SMs, limits) when the kernels measured run on one."""
    kv = read_cpuinfo()
    threads = usable_cores()
    # an Arm CPU says no model name, vendor, family or model: its implementer, architecture, part, variant and
    # revision say which core it is (a Cortex-A53 and a Cortex-A72 have the same Features)
    arm_stepping = (f"r{kv['cpu variant']}p{kv['cpu revision']}" if "cpu variant" in kv and "cpu revision" in kv
                    else "")
    return dict(
        cpu_model=kv.get("model name") or _platform.processor() or "unknown",
        vendor=kv.get("vendor_id") or kv.get("cpu implementer", ""),
        family=kv.get("cpu family") or kv.get("cpu architecture", ""),
        model=kv.get("model") or kv.get("cpu part", ""),
        stepping=kv.get("stepping") or arm_stepping, flags=sorted(set((kv.get("flags") or kv.get("features") or "").split())),
        caches={c.name: c.size for c in read_caches() if c.level and c.size}, threads=threads,
        **({"mhz": round(mhz)} if (mhz := cpu_mhz(kv)) else {}), machine=_platform.machine(), **({"gpu": dict(gpu)} if gpu else {}),
    )


def same_host(a: dict, b: dict) -> bool:
    """Whether two host records describe the same machine (CPU, ISA flags, caches and threads; not its name)."""
    return all(_identity(a, k) == _identity(b, k) for k in IDENTITY)


def _identity(h: dict, key: str):
    """``h[key]`` as the machine's identity compares it: its flags without those of ``NON_ISA_FLAGS``."""
    value = h.get(key)
    if key == "flags" and value is not None:
        return sorted(set(value) - NON_ISA_FLAGS)
    return value


def describe_host(h: dict) -> str:
    """One line: ``AMD EPYC (family 25 model 17), 2 threads, L1d 32K L2 1024K L3 32768K, avx512f``."""
    caches = " ".join(f"{k} {v}" for k, v in sorted((h.get("caches") or {}).items()) if not k.endswith("i"))
    isa = ", ".join(f for f in ("avx512f", "avx2", "avx", "sse2", "asimd") if f in (h.get("flags") or []))
    gpu = h.get("gpu") or {}
    return ((f"{gpu.get('name', 'GPU')} ({gpu.get('arch', '?')}, {gpu.get('sms', '?')} SMs) on " if gpu else "")
            + f"{h.get('cpu_model', 'unknown')} (family {h.get('family', '?')} model {h.get('model', '?')}), "
            f"{h.get('threads', '?')} threads, {caches or 'caches unknown'}, {isa.split(',')[0] if isa else 'no SIMD flags'}")


def host_difference(a: dict, b: dict) -> str:
    """What differs between two hosts, for error messages."""
    diffs = []
    for k in IDENTITY:
        if _identity(a, k) != _identity(b, k):
            if k == "flags":
                fa, fb = set(_identity(a, k) or []), set(_identity(b, k) or [])
                diffs.append(f"ISA flags (+{' +'.join(sorted(fb - fa)[:5]) or ''} -{' -'.join(sorted(fa - fb)[:5]) or ''})")
            else:
                diffs.append(f"{k} {a.get(k)!r} vs {b.get(k)!r}")
    return "; ".join(diffs)
