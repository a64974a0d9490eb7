"""The machine a measurement runs on: CPU model, ISA flags, cache sizes and threads, read from
``/proc/cpuinfo`` and sysfs (pure Python, no TVM).

A platform's records are only comparable when one machine measured them all: ``measure`` stores the host
with the platform and refuses to add records measured on a different one (see ``same_host``). The host
is also printed beside every benchmark figure.
"""

from __future__ import annotations

import os
import platform as _platform
from pathlib import Path

IDENTITY = ("cpu_model", "vendor", "family", "model", "stepping", "flags", "caches", "threads")


def _read(path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpuinfo(path="/proc/cpuinfo") -> dict:
    kv = {}
    for line in _read(path).split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            kv[key.strip().lower()] = value.strip()
    return kv


def _caches(cache_dir="/sys/devices/system/cpu/cpu0/cache") -> dict:
    out = {}
    base = Path(cache_dir)
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        level, kind = _read(idx / "level").strip(), _read(idx / "type").strip()
        size = _read(idx / "size").strip()
        if level and size:
            out[f"L{level}{'i' if kind == 'Instruction' else 'd' if kind == 'Data' else ''}"] = size
    return out


def host_info() -> dict:
    """This machine: ``cpu_model``, ``vendor``, ``family`` / ``model`` / ``stepping``, ``flags`` (sorted ISA
    flags), ``caches`` (per level, per core), ``threads`` (cores this process may use), ``machine``."""
    kv = _cpuinfo()
    try:
        threads = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        threads = os.cpu_count() or 1
    return dict(
        cpu_model=kv.get("model name") or _platform.processor() or "unknown",
        vendor=kv.get("vendor_id", ""), family=kv.get("cpu family", ""), model=kv.get("model", ""),
        stepping=kv.get("stepping", ""), flags=sorted(set((kv.get("flags") or kv.get("features") or "").split())),
        caches=_caches(), threads=threads, machine=_platform.machine(),
    )


def same_host(a: dict, b: dict) -> bool:
    """Whether two host records describe the same machine (CPU, ISA flags, caches and threads; not its name)."""
    return all(a.get(k) == b.get(k) for k in IDENTITY)


def describe_host(h: dict) -> str:
    """One line: ``AMD EPYC (family 25 model 17), 2 threads, L1d 32K L2 1024K L3 32768K, avx512f``."""
    caches = " ".join(f"{k} {v}" for k, v in sorted((h.get("caches") or {}).items()) if not k.endswith("i"))
    isa = ", ".join(f for f in ("avx512f", "avx2", "avx", "sse2", "asimd") if f in (h.get("flags") or []))
    return (f"{h.get('cpu_model', 'unknown')} (family {h.get('family', '?')} model {h.get('model', '?')}), "
            f"{h.get('threads', '?')} threads, {caches or 'caches unknown'}, {isa.split(',')[0] if isa else 'no SIMD flags'}")


def host_difference(a: dict, b: dict) -> str:
    """What differs between two hosts, for error messages."""
    diffs = []
    for k in IDENTITY:
        if a.get(k) != b.get(k):
            if k == "flags":
                fa, fb = set(a.get(k) or []), set(b.get(k) or [])
                diffs.append(f"ISA flags (+{' +'.join(sorted(fb - fa)[:5]) or ''} -{' -'.join(sorted(fa - fb)[:5]) or ''})")
            else:
                diffs.append(f"{k} {a.get(k)!r} vs {b.get(k)!r}")
    return "; ".join(diffs)
