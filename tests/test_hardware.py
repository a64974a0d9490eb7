"""Hardware specs: CPU detection from Linux files, JSON round trip and overrides, GPU table, targets."""

import json
import re
from pathlib import Path

import pytest

from costlab.featurizers.psa.hardware import (CPU_TABLE, GPU_TABLE, CPUSpec, GPUSpec, HardwareSpec, detect_cpu,
                                          gpu_spec, spec_for_target)

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8272CL CPU @ 2.60GHz
cpu MHz\t\t: 2593.906
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8272CL CPU @ 2.60GHz
"""


def _cache_dir(tmp_path, entries):
    root = tmp_path / "cache"
    for i, (level, ctype, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{ctype}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "coherency_line_size").write_text("64\n")
    return root


def test_detect_cpu_reads_cpuinfo_and_caches(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    cache = _cache_dir(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                  (3, "Unified", "36608K")])
    spec = detect_cpu(cpuinfo_path=info, cache_dir=cache, cpufreq_path=tmp_path / "none")
    assert spec.name.startswith("Intel(R) Xeon(R) Platinum 8272CL")
    assert spec.simd_bits == 512 and spec.vector_registers == 32 and spec.fma_units == 2
    assert spec.l1_bytes == 48 * 1024  # the data cache, not the instruction cache
    assert spec.l2_bytes == 1024 * 1024 and spec.llc_bytes == 36608 * 1024
    assert abs(spec.freq_ghz - 2.593906) < 1e-6
    assert spec.lanes(4) == 16 and spec.lanes(2) == 32


def test_one_host_parser_serves_the_host_record_and_the_spec(tmp_path):
    """detect_cpu and host_info read the same files through costlab.common.host: cpuinfo keys lower-cased,
    cache sizes kept as sysfs writes them for the host record and turned into bytes for the spec."""
    from costlab.common.host import read_caches, read_cpuinfo, size_bytes

    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    kv = read_cpuinfo(info)
    assert kv["model name"].startswith("Intel(R) Xeon(R) Platinum 8272CL") and kv["cpu mhz"] == "2593.906"
    assert read_cpuinfo(tmp_path / "missing") == {}
    cache = _cache_dir(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                  (3, "Unified", "32M")])
    caches = read_caches(cache)
    assert {c.name: c.size for c in caches} == {"L1d": "48K", "L1i": "32K", "L2": "1024K", "L3": "32M"}
    assert [size_bytes(c.size) for c in caches] == [48 * 1024, 32 * 1024, 1024 * 1024, 32 * 1024 * 1024]
    assert size_bytes("48 KiB") == 48 * 1024 and size_bytes("bogus") is None and read_caches(tmp_path / "no") == []
    spec = detect_cpu(cpuinfo_path=info, cache_dir=cache, cpufreq_path=tmp_path / "none")
    assert (spec.l1_bytes, spec.l2_bytes, spec.llc_bytes) == (48 * 1024, 1024 * 1024, 32 * 1024 * 1024)


def test_detect_cpu_defaults_when_linux_tells_nothing(tmp_path):
    spec = detect_cpu(cpuinfo_path=tmp_path / "missing", cache_dir=tmp_path / "missing-dir",
                      cpufreq_path=tmp_path / "missing")
    default = CPUSpec()
    assert spec.simd_bits == default.simd_bits and spec.l1_bytes == default.l1_bytes
    assert spec.llc_bytes == default.llc_bytes and spec.freq_ghz == default.freq_ghz
    assert spec.cores >= 1


def test_detect_cpu_on_this_machine_is_sane():
    spec = detect_cpu()
    assert spec.cores >= 1 and spec.freq_ghz > 0.1
    assert spec.l1_bytes < spec.l2_bytes <= spec.llc_bytes
    assert spec.peak_flops() > 1e9


def test_json_round_trip_and_file_override(tmp_path):
    spec = detect_cpu()
    again = HardwareSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec and isinstance(again, CPUSpec)
    override = tmp_path / "spec.json"
    override.write_text(json.dumps({"cores": 64, "l2_bytes": 2097152, "dram_gbs": 140}))
    big = detect_cpu(override=override)
    assert big.cores == 64 and big.l2_bytes == 2097152 and big.dram_gbs == 140.0
    assert big.l1_bytes == spec.l1_bytes  # untouched fields kept
    gpu = gpu_spec("Tesla-T4")
    assert HardwareSpec.from_json(gpu.to_json()) == gpu


def test_bad_override_names_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"corez": 8}))
    with pytest.raises(ValueError, match=r"bad\.json.*unknown cpu spec field 'corez'"):
        detect_cpu(override=bad)
    bad.write_text(json.dumps({"cores": "many"}))
    with pytest.raises(ValueError, match=r"bad\.json.*'cores' must be a number"):
        detect_cpu(override=bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json: not valid JSON"):
        detect_cpu(override=bad)
    with pytest.raises(ValueError, match="kind"):
        HardwareSpec.from_json({"cores": 2})


@pytest.mark.parametrize("cls,field,value,says", [
    (CPUSpec, "freq_ghz", float("nan"), "'freq_ghz' must be a finite number, got nan"),
    (CPUSpec, "l2_bytes", float("inf"), "'l2_bytes' must be a finite number, got inf"),
    (CPUSpec, "llc_bytes", 10 ** 400, "'llc_bytes' must be a finite number"),
    (CPUSpec, "cores", 0, "'cores' must be above 0, got 0"),
    (CPUSpec, "dram_gbs", 0.0, "'dram_gbs' must be above 0, got 0.0"),
    (CPUSpec, "cores", 2.9, "'cores' must be a whole number, got 2.9"),
    (GPUSpec, "sms", 80.5, "'sms' must be a whole number, got 80.5"),
    (CPUSpec, "fma_units", True, "'fma_units' must be a number, got True"),
    (GPUSpec, "warp_size", 0, "'warp_size' must be above 0, got 0"),
    (GPUSpec, "mem_gbs", float("inf"), "'mem_gbs' must be a finite number, got inf"),
    (GPUSpec, "tc_gflops", float("nan"), "'tc_gflops' must be a finite number, got nan"),
])
def test_spec_fields_must_be_finite_and_positive_and_counts_whole(cls, field, value, says):
    """NaN gave NaN estimates on valid records, 0 a division by zero for every record, infinity an OverflowError
    traceback and a fraction of a count was truncated: each is refused in one line naming the field and value."""
    with pytest.raises(ValueError, match=f"^spec: field {re.escape(says)}"):
        cls().updated({field: value}, "spec")


def test_spec_check_keeps_what_is_valid_and_every_shipped_spec(tmp_path):
    """0 stays allowed where it means "not known" (tc_gflops), below 0 never; whole floats and numeric strings become
    ints; a spec file with NaN is refused naming the file; and every spec costlab ships passes the check."""
    gpu = GPUSpec().updated({"tc_gflops": 0})
    assert gpu.tc_gflops == 0.0 and gpu.tensor_peak() == 8 * gpu.peak_gflops
    cpu = CPUSpec().updated({"cores": 16.0, "l1_bytes": "49152", "freq_ghz": 3})
    assert (cpu.cores, cpu.l1_bytes, cpu.freq_ghz) == (16, 49152, 3.0) and type(cpu.cores) is int
    bad = tmp_path / "bad.json"
    bad.write_text('{"freq_ghz": NaN}')  # Python's json reads NaN and Infinity
    with pytest.raises(ValueError, match=r"bad\.json: field 'freq_ghz' must be a finite number, got nan"):
        detect_cpu(override=bad)
    with pytest.raises(ValueError, match=re.escape("'tc_gflops' must be 0 or more (0: not known), got -1")):
        GPUSpec().updated({"tc_gflops": -1})
    with pytest.raises(ValueError, match="'vector_registers' must be above 0, got -16"):
        CPUSpec().updated({"vector_registers": -16})
    shipped = [*GPU_TABLE.values(), CPUSpec(), GPUSpec()]
    shipped += [spec_for_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2}, host={}) for mcpu in CPU_TABLE]
    for spec in shipped:
        assert HardwareSpec.from_json(spec.to_json()) == spec, spec.name


def test_gpu_table_has_the_platforms_and_plausible_numbers():
    for name in ("k80", "v100", "t4", "rtx2080ti", "a100", "h100"):
        g = GPU_TABLE[name]
        assert isinstance(g, GPUSpec)
        assert 10 <= g.sms <= 200 and 1000 < g.peak_gflops < 100000 and 100 < g.mem_gbs < 5000
        assert g.regs_per_sm >= 65536 and g.smem_per_sm >= g.smem_per_block
    assert GPU_TABLE["h100"].peak_gflops > GPU_TABLE["a100"].peak_gflops > GPU_TABLE["t4"].peak_gflops
    with pytest.raises(ValueError, match="unknown GPU"):
        gpu_spec("voodoo2")


def test_spec_for_target():
    assert spec_for_target({"kind": "cuda", "arch": "sm_75"}).name == "t4"
    assert spec_for_target({"kind": "cuda", "arch": "sm_80"}).sms == 108
    assert spec_for_target("cuda -model=h100").name == "h100"
    a100 = spec_for_target({"kind": "cuda", "arch": "sm_80", "max_shared_memory_per_block": 65536})
    assert a100.smem_per_block == 65536
    cpu = spec_for_target({"kind": "llvm", "num-cores": 3})
    assert cpu.cores == 3
    # no -mcpu / -mattr: LLVM emits generic 128-bit vector code whatever this machine has
    assert cpu.simd_bits == 128
    assert spec_for_target("llvm -mcpu=skylake-avx512 -num-cores=4").simd_bits == 512
    assert spec_for_target("llvm -mattr=+avx2,+fma").simd_bits == 256
    assert spec_for_target({"kind": "llvm"}, override={"cores": 7}).cores == 7
    with pytest.raises(ValueError, match="no hardware spec"):
        spec_for_target({"kind": "hexagon"})


X86_CPUS = ["znver2", "znver3", "znver4", "znver5", "skylake-avx512", "icelake-server", "sapphirerapids",
            "graniterapids", "tigerlake", "cascadelake", "haswell", "broadwell", "skylake", "alderlake",
            "x86-64-v3", "x86-64-v4"]


@pytest.mark.parametrize("mcpu", X86_CPUS)
def test_simd_width_of_cpu_names_matches_llvm(mcpu):
    """PSA's vector width for an -mcpu is LLVM's (AVX-512 for znver4/znver5, not 256), and the table used
    without TVM agrees with LLVM on every name listed."""
    import re

    import tvm
    from tvm.target import codegen

    from costlab.featurizers.psa.hardware import _SIMD_BY_MCPU, mcpu_simd_bits

    features = codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": mcpu}))
    want = 512 if "avx512f" in features else 256
    assert mcpu_simd_bits(mcpu) == want
    assert spec_for_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2}).simd_bits == want
    table = next(bits for pattern, bits in _SIMD_BY_MCPU if re.search(pattern, mcpu))
    assert table == want


def test_host_target_names_this_cpu(monkeypatch):
    from tvm.target import codegen

    from costlab.common.host import FAKE_HOST_ENV
    from costlab.metaschedule.targets import host_target, normalize_target

    monkeypatch.delenv(FAKE_HOST_ENV, raising=False)  # LLVM's own detection, whatever the suite fakes
    t = host_target()
    assert t["kind"] == "llvm" and t["mcpu"] == codegen.llvm_get_system_cpu() and t["mcpu"] != "native"
    assert t["num-cores"] >= 1
    assert normalize_target("host") == t and normalize_target(None) == t
    assert normalize_target("llvm -mcpu=native -num-cores=1")["mcpu"] == t["mcpu"]


def test_runnable_target_checks_the_cpu_and_completes_the_cores():
    from costlab.common.host import usable_cores
    from costlab.metaschedule.targets import runnable_target

    assert runnable_target("llvm -mcpu=skylake-avx512") == {"kind": "llvm", "mcpu": "skylake-avx512",
                                                             "num-cores": usable_cores()}
    assert runnable_target("llvm -mcpu=znver4 -num-cores=8")["num-cores"] == 8
    with pytest.raises(ValueError, match="LLVM does not know -mcpu=nosuchcpu"):
        runnable_target("llvm -mcpu=nosuchcpu -num-cores=2")
    with pytest.raises(ValueError, match="needs its num-cores"):
        runnable_target("llvm -mcpu=znver4", local=False)
    assert runnable_target({"kind": "cuda", "arch": "sm_90"}, local=False)["arch"] == "sm_90"  # tests/test_gpu.py



def test_a_remote_target_is_the_devices_own_never_this_machines():
    """Kernels that run on another machine (RPC) are compiled for its target: ``host``, no target, or
    ``-mcpu=native`` named this machine's CPU and cores, and a remote board's timings were filed as this machine's
    platform; its ``-mcpu`` is one LLVM knows for its own ``-mtriple``, not for this machine's."""
    from costlab.metaschedule.targets import runnable_target

    for target in ("host", None, "llvm -mcpu=native -num-cores=4"):
        with pytest.raises(ValueError, match="this machine, not the device kernels run on"):
            runnable_target(target, local=False)
    arm = runnable_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -num-cores=4", local=False)
    assert arm["mcpu"] == "cortex-a72" and arm["num-cores"] == 4
    with pytest.raises(ValueError, match="LLVM does not know -mcpu=znver4 for aarch64-linux-gnu"):
        runnable_target("llvm -mtriple=aarch64-linux-gnu -mcpu=znver4 -num-cores=4", local=False)


def test_a_string_target_with_llvm_options_converts_to_what_tvm_takes():
    """``-cl-opt`` is a list of LLVM options in TVM's schema (as ``-mattr``): given as a string it was refused by
    TVM ("expected type 'Array<str>'")."""
    from costlab.metaschedule.targets import checked_target

    target = checked_target("llvm -mcpu=znver4 -cl-opt=-unroll-threshold=10 -num-cores=2")
    assert target["cl-opt"] == ["-unroll-threshold=10"]

def test_faked_host_files_name_their_llvm_cpu(monkeypatch):
    """A folder of faked host files names its CPU for LLVM too (``llvm_cpu``), so a host target made under the
    fake is that CPU's, as on the machine itself."""
    from pathlib import Path

    from costlab.common.host import FAKE_HOST_ENV
    from costlab.metaschedule.targets import host_target

    monkeypatch.setenv(FAKE_HOST_ENV, str(Path(__file__).parent / "fixtures" / "hosts" / "zen4"))
    assert host_target()["mcpu"] == "znver4"


def test_a_cpu_name_outside_the_table_is_read_for_one_triple_on_every_machine(monkeypatch):
    """``-mcpu=arrowlake`` (not in the table) without ``-mtriple``: TVM's LLVM is asked for x86-64, not for the
    triple of the machine featurizing (an aarch64 machine would read the name as 128-bit code); with a triple,
    for that one."""
    from tvm.target import codegen

    from costlab.featurizers.psa.hardware import mcpu_simd_bits

    asked = []
    real = codegen.llvm_get_cpu_features

    def spy(target):
        asked.append(str(target.attrs.get("mtriple")))
        return real(target)

    monkeypatch.setattr(codegen, "llvm_get_cpu_features", spy)
    assert mcpu_simd_bits("arrowlake") == 256 and asked == ["x86_64-unknown-linux-gnu"]
    assert mcpu_simd_bits("arrowlake", "aarch64-linux-gnu") == 128 and asked[-1] == "aarch64-linux-gnu"


@pytest.mark.parametrize("host, mcpu, lacks", [("zen4", "sapphirerapids", "amx-tile"),
                                                ("emeraldrapids", "znver4", "sse4a")])
def test_a_local_target_for_a_cpu_with_instructions_this_one_lacks_is_warned_of(monkeypatch, host, mcpu, lacks):
    """Kernels compiled for a newer CPU than this one may fail to run here (illegal instruction): the target is
    taken (a float32 program seldom uses AMX), with a warning naming the instructions this CPU lacks; this CPU's
    own name, an older CPU's, or a remote target's is taken silently."""
    import warnings

    from costlab.common.host import FAKE_HOST_ENV
    from costlab.metaschedule.targets import runnable_target

    monkeypatch.setenv(FAKE_HOST_ENV, str(Path(__file__).parent / "fixtures" / "hosts" / host))
    with pytest.warns(UserWarning, match=f"-mcpu={mcpu} lets LLVM use instructions .*{lacks}.*illegal instruction"):
        assert runnable_target(f"llvm -mcpu={mcpu} -num-cores=2")["mcpu"] == mcpu
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runnable_target(f"llvm -mcpu={'znver4' if host == 'zen4' else 'emeraldrapids'} -num-cores=2")
        runnable_target("llvm -mcpu=haswell -num-cores=2")
        runnable_target(f"llvm -mcpu={mcpu} -num-cores=2", local=False)
