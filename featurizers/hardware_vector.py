"""The hardware vector: a CPU platform's description as a few numbers, the input that lets one net rank programs
of several CPUs.

``hardware_vector(spec)`` reads a ``CPUSpec`` (``featurizers/psa/hardware.py``): cache sizes, cores, clock,
SIMD width and vector registers as log2, and the FMA pipes, each relative to the generic ``CPUSpec()``, so
that a typical CPU's entries are small numbers (the generic one is all zeros). Its spec is resolved as every
hardware-dependent feature's is: a dataset platform's from its stored spec, host record or ``-mcpu``
(``platform_vector``, never the machine computing it); a live tuning target's from the machine tuning now
(``target_vector``: that machine is the one that measures). ``VERSION`` travels with every model that reads
the vector; a model made for another version is refused, since its numbers would mean other things.

Pure numpy: no TVM, no torch.
"""

from __future__ import annotations

import math

import numpy as np

from costlab.featurizers.psa.hardware import CPUSpec, spec_for, spec_for_target, target_dict

VERSION = 1
FIELDS = ("log2_l1", "log2_l2", "log2_llc", "log2_cores", "log2_clock", "log2_simd", "fma_units", "log2_vregs")
DIM = len(FIELDS)
# the entries a spec perturbation moves in training (``hardware_jitter``): cache sizes and clock, which differ
# between parts of one CPU family and between a host record and the -mcpu table
JITTERED = tuple(FIELDS.index(f) for f in ("log2_l1", "log2_l2", "log2_llc", "log2_clock"))


def _raw(spec: CPUSpec) -> np.ndarray:
    log2 = lambda x: math.log2(max(float(x), 1e-3))  # noqa: E731
    return np.array([log2(spec.l1_bytes), log2(spec.l2_bytes), log2(spec.llc_bytes), log2(spec.cores),
                     log2(spec.freq_ghz), log2(spec.simd_bits), spec.fma_units, log2(spec.vector_registers)],
                    np.float64)


def hardware_vector(spec) -> np.ndarray:
    """The ``DIM`` numbers (float32, named by ``FIELDS``) of a CPU spec, relative to the generic CPU."""
    if not isinstance(spec, CPUSpec):
        raise ValueError(f"the hardware vector describes CPUs; {getattr(spec, 'name', spec)!r} is a "
                         f"{getattr(spec, 'kind', type(spec).__name__)} spec")
    return (_raw(spec) - _raw(CPUSpec())).astype(np.float32)


def platform_vector(platform) -> np.ndarray:
    """The vector of a dataset platform (its stored spec, host record or ``-mcpu``; never the local CPU)."""
    return hardware_vector(spec_for(platform))


def target_vector(target) -> np.ndarray:
    """The vector of a live tuning target: this machine's CPU with the target's cores and SIMD width."""
    return hardware_vector(spec_for_target(target_dict(target)))


def check_version(hardware: dict | None) -> str | None:
    """What makes a model's recorded hardware vector (``{"version", "fields"}``) unfit for this costlab's, or
    None when it is this one."""
    hardware = hardware or {}
    if not isinstance(hardware, dict):
        return f"its hardware record is not a JSON object ({str(hardware)[:60]!r})"
    recorded = hardware.get("fields") or []
    if hardware.get("version") != VERSION or not isinstance(recorded, list) or recorded != list(FIELDS):
        fields = ", ".join(map(str, recorded)) if isinstance(recorded, list) else repr(recorded)[:60]
        return (f"it reads hardware vector version {hardware.get('version')!r} ({fields}); this costlab makes "
                f"version {VERSION} ({', '.join(FIELDS)})")
    return None


def describe() -> dict:
    """What a model with a hardware input records of it: ``{"version", "fields"}``."""
    return {"version": VERSION, "fields": list(FIELDS)}


__all__ = ["VERSION", "FIELDS", "DIM", "JITTERED", "hardware_vector", "platform_vector", "target_vector",
           "check_version", "describe"]
