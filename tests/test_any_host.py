"""The same data gives the same features on any machine: a dataset platform's hardware spec comes from its host
record or its ``-mcpu``, never from the CPU computing the features; the CPU description can be faked
(``COSTLAB_HOST_FILES``, here a Zen 4's files) so that the suite runs as if on another x86 host; a feature
cache made under one spec is not read under another."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from costlab.cli import main
from costlab.common.host import FAKE_HOST_ENV, host_info
from costlab.datasets import DatasetWriter, open_dataset
from costlab.featurizers.base import create
from costlab.featurizers.cache import build_cache, open_cache
from costlab.featurizers.psa.hardware import CPU_TABLE, CPUSpec, detect_cpu, spec_for_platform, spec_from_host

ZEN4 = Path(__file__).parent / "fixtures" / "hosts" / "zen4"
ZEN5_DB = Path(__file__).parent / "fixtures" / "zen5_small"
PLATFORM = "llvm-znver5-2c"


@pytest.fixture(scope="module")
def zen5(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("anyhost") / "zen5.h5"
    assert main(["dataset", "import-ms", str(ZEN5_DB), "-o", str(data)]) == 0
    return data


def test_fake_host_files_are_read_in_place_of_this_machines(monkeypatch):
    monkeypatch.setenv(FAKE_HOST_ENV, str(ZEN4))
    h = host_info()
    assert (h["family"], h["model"], h["caches"]["L1d"], h["mhz"]) == ("25", "17", "32K", 2750)
    spec = detect_cpu()
    assert (spec.l1_bytes, spec.l2_bytes, spec.llc_bytes, spec.freq_ghz) == (32 * 1024, 1 << 20, 32 << 20, 2.749998)


def test_a_platform_without_host_record_takes_its_mcpus_spec_whatever_the_local_cpu(zen5, monkeypatch):
    """The Zen 5 records came from a MetaSchedule database (no host record): their spec is znver5's from the
    table, on this machine and on a faked Zen 4 alike (its L1 of 32 KB is what changed the features before)."""
    with open_dataset(zen5) as ds:
        plat = ds.platforms[PLATFORM]
        assert not plat.host
        here = spec_for_platform(plat)
        monkeypatch.setenv(FAKE_HOST_ENV, str(ZEN4))
        faked = spec_for_platform(plat)
    assert here == faked and here.l1_bytes == CPU_TABLE["znver5"]["l1_bytes"] == 48 * 1024
    assert here.name == "znver5 (table of -mcpu names)" and here.cores == 2 and here.simd_bits == 512


def test_a_host_record_decides_the_spec():
    zen4 = {"cpu_model": "AMD EPYC 9454P", "family": "25", "model": "17", "flags": ["avx512f", "fma"],
            "caches": {"L1d": "32K", "L1i": "32K", "L2": "1024K", "L3": "32768K"}, "threads": 2, "mhz": 2750}
    target = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
    spec = spec_from_host(zen4, target)
    assert (spec.l1_bytes, spec.l2_bytes, spec.llc_bytes, spec.freq_ghz, spec.cores) == (32768, 1 << 20, 32 << 20, 2.75, 2)
    old = {k: v for k, v in zen4.items() if k != "mhz"}  # records made before the clock was recorded
    assert spec_from_host(old, target).freq_ghz == CPU_TABLE["znver4"]["freq_ghz"]
    unknown = spec_from_host({}, {"kind": "llvm", "mcpu": "no-such-cpu"})
    assert unknown.name.startswith("generic CPU") and unknown.l1_bytes == 32 * 1024
    # a machine that exposes no cache sizes (some VMs): its clock and threads still decide, the caches the table's
    bare = dict(zen4, caches={}, mhz=3700, threads=8)
    spec = spec_from_host(bare, {"kind": "llvm", "mcpu": "znver4"})
    assert (spec.freq_ghz, spec.cores, spec.l1_bytes) == (3.7, 8, CPU_TABLE["znver4"]["l1_bytes"])
    assert spec.name == "AMD EPYC 9454P (host record)"


def test_a_platform_measured_with_mcpu_native_is_its_host_records_cpu_whatever_the_local_cpu(monkeypatch):
    """``-mcpu=native`` in a dataset names the CPU that measured it: its host record's caches and vector width
    (AVX-512 here), the same on this machine and on a faked Zen 4; without a host record, the generic CPU, never
    the local one. The spec of a platform is resolved from what it holds: another dataset's platform of the same id
    (another host record) gets its own."""
    from types import SimpleNamespace

    from costlab.featurizers.psa.hardware import PlatformSpecs

    host = {"cpu_model": "Intel Xeon Platinum 8358", "flags": ["avx512f", "avx2", "fma"], "threads": 2,
            "caches": {"L1d": "48K", "L2": "1280K", "L3": "49152K"}, "mhz": 2600}
    native = SimpleNamespace(id="box", target={"kind": "llvm", "mcpu": "native", "num-cores": 2}, spec=None,
                             host=host)
    here = spec_for_platform(native)
    monkeypatch.setenv(FAKE_HOST_ENV, str(ZEN4))
    assert spec_for_platform(native) == here
    assert (here.simd_bits, here.l1_bytes, here.llc_bytes, here.cores) == (512, 48 * 1024, 48 << 20, 2)
    bare = spec_for_platform(SimpleNamespace(id="box", target=native.target, spec=None, host={}))
    assert bare.name.startswith("generic CPU") and bare.l1_bytes == 32 * 1024
    specs = SimpleNamespace(config={}, spec_for=PlatformSpecs.spec_for)
    assert specs.spec_for(specs, native) == here and specs.spec_for(specs, SimpleNamespace(
        id="box", target=native.target, spec=None, host={})) == bare


def test_a_gpu_platform_without_a_gpu_record_is_its_archs_gpu_whatever_the_local_one(monkeypatch):
    """A CUDA dataset without a host GPU record: the spec of its ``arch`` from the table, never this machine's
    GPU (of the same arch, a faked H100 PCIe here)."""
    from types import SimpleNamespace

    import costlab.featurizers.psa.hardware as hardware

    plat = SimpleNamespace(id="gpu", target={"kind": "cuda", "arch": "sm_90"}, spec=None, host={})
    table = spec_for_platform(plat)
    monkeypatch.setattr(hardware, "local_gpu", lambda index=0: {"name": "NVIDIA H100 PCIe", "arch": "sm_90"})
    assert spec_for_platform(plat) == table
    assert hardware.spec_for_target({"kind": "cuda", "arch": "sm_90"}) != table  # a live target: this GPU's


@pytest.mark.slow
@pytest.mark.parametrize("name", ["psa", "pacm"])
def test_features_of_a_dataset_are_the_same_on_another_host(zen5, monkeypatch, name):
    rows = np.arange(48)
    with open_dataset(zen5) as ds:
        here = create(name).featurize_records(ds, PLATFORM, rows)
        monkeypatch.setenv(FAKE_HOST_ENV, str(ZEN4))
        faked = create(name).featurize_records(ds, PLATFORM, rows)
    assert here.keys() == faked.keys()
    for key in here:
        a, b = here[key], faked[key]
        if isinstance(a, list):
            assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), key
        else:
            assert np.array_equal(a, b), key


def test_a_cache_made_under_one_spec_is_not_read_under_another(zen5, tmp_path):
    data = tmp_path / "z.h5"
    data.write_bytes(zen5.read_bytes())
    build_cache(data, "psa", PLATFORM, progress=False)
    with open_dataset(data) as ds:
        assert open_cache(ds, create("psa"), PLATFORM) is not None
        target = ds.platforms[PLATFORM].target
    with DatasetWriter(data) as w:  # the platform's CPU as the user states it (another L1)
        w.add_platform(PLATFORM, target, spec=dict(spec_from_host({}, target).to_json(), l1_bytes=32 * 1024))
    with open_dataset(data) as ds:
        assert open_cache(ds, create("psa"), PLATFORM) is None
    assert build_cache(data, "psa", PLATFORM, progress=False)["cached_before"] == 0


def test_a_cache_made_before_a_featurizers_revision_is_rebuilt_and_its_models_still_load(zen5, tmp_path,
                                                                                          monkeypatch):
    """A fix that changes some records' features (PSA's revision 1: buffers of one name told apart) makes the
    caches made before it stale; the version, which a trained model is checked against, stays."""
    from costlab.featurizers import from_json
    from costlab.featurizers.psa.featurizer import PSA

    data = tmp_path / "z.h5"
    data.write_bytes(zen5.read_bytes())
    build_cache(data, "psa", PLATFORM, progress=False)
    saved = create("psa").to_json()
    monkeypatch.setattr(PSA, "revision", PSA.revision + 1)
    with open_dataset(data) as ds:
        assert open_cache(ds, create("psa"), PLATFORM) is None
    assert build_cache(data, "psa", PLATFORM, progress=False)["cached_before"] == 0
    assert from_json(saved).version == PSA.version


def test_import_ms_records_the_host_that_measured_the_records(tmp_path, capsys):
    """`import-ms --host FILE` records the measuring machine with the platform, so its features are that
    machine's (its L1 of 32 KB here, not the -mcpu table's 48 KB); records of another machine for the same
    platform are refused in one line, nothing added."""
    zen4 = {"cpu_model": "AMD EPYC 9454P", "family": "25", "model": "17", "flags": ["avx512f", "fma"],
            "caches": {"L1d": "32K", "L2": "1024K", "L3": "32768K"}, "threads": 2, "mhz": 2750}
    (tmp_path / "run.json").write_text(__import__("json").dumps({"host": zen4, "trials": 8}))
    data = tmp_path / "d.h5"
    assert main(["dataset", "import-ms", str(ZEN5_DB), "-o", str(data), "--host", str(tmp_path / "run.json")]) == 0
    with open_dataset(data) as ds:
        plat = ds.platforms[PLATFORM]
        assert plat.host["cpu_model"] == "AMD EPYC 9454P"
        spec = spec_for_platform(plat)
        n = ds.num_records(PLATFORM)
    assert spec.l1_bytes == 32 * 1024 and spec.freq_ghz == 2.75 and spec.name.endswith("(host record)")
    other = dict(zen4, cpu_model="Other CPU", caches={"L1d": "48K", "L2": "1024K", "L3": "32768K"})
    (tmp_path / "other.json").write_text(__import__("json").dumps(other))
    capsys.readouterr()
    assert main(["dataset", "import-ms", str(ZEN5_DB), "-o", str(data), "--host", str(tmp_path / "other.json")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "import them as another --platform" in err[0]
    with open_dataset(data) as ds:
        assert ds.num_records(PLATFORM) == n and ds.platforms[PLATFORM].host["cpu_model"] == "AMD EPYC 9454P"
    # records imported without a host: a host given later would be stated for them too
    assert main(["dataset", "import-ms", str(ZEN5_DB), "-o", str(tmp_path / "n.h5")]) == 0
    capsys.readouterr()
    assert main(["dataset", "import-ms", str(ZEN5_DB), "-o", str(tmp_path / "n.h5"), "--host",
                 str(tmp_path / "run.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds records of an unknown machine" in err[0] and "set-machine" in err[0]
    with open_dataset(tmp_path / "n.h5") as ds:
        assert ds.platforms[PLATFORM].host is None
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert main(["dataset", "import-ms", str(ZEN5_DB), "-o", str(tmp_path / "e.h5"), "--host",
                 str(tmp_path / "bad.json")]) != 0
    assert "is not a host record" in capsys.readouterr().err


def test_set_machine_states_the_spec_or_host_of_records_that_came_without_one(zen5, tmp_path, capsys):
    """`dataset set-machine` records the machine of an imported platform (a spec's fields, or a host record), so
    its features are that machine's; a cache made before is rebuilt; another machine's host, a bad spec or an
    unknown platform is one error line, the dataset unchanged."""
    from conftest import error_line

    data = tmp_path / "z.h5"
    data.write_bytes(zen5.read_bytes())
    build_cache(data, "psa", PLATFORM, progress=False)
    (tmp_path / "s.json").write_text('{"l1_bytes": 32768}')
    assert main(["dataset", "set-machine", str(data), "--platform", PLATFORM, "--spec", str(tmp_path / "s.json")]) == 0
    assert "s.json (given)" in capsys.readouterr().err
    with open_dataset(data) as ds:
        spec = spec_for_platform(ds.platforms[PLATFORM])
        assert open_cache(ds, create("psa"), PLATFORM) is None  # made under znver5's table spec
    table = CPU_TABLE["znver5"]
    assert (spec.l1_bytes, spec.l2_bytes, spec.simd_bits) == (32768, table["l2_bytes"], 512)

    zen4 = {"cpu_model": "AMD EPYC 9454P", "family": "25", "model": "17", "flags": ["avx512f", "fma"],
            "caches": {"L1d": "48K", "L2": "1024K", "L3": "32768K"}, "threads": 2, "mhz": 2750}
    (tmp_path / "h.json").write_text(__import__("json").dumps({"host": zen4}))
    # a host stated after a spec: the host decides (48K, not the spec's 32K), the spec dropped and said so
    assert main(["dataset", "set-machine", str(data), "--platform", PLATFORM, "--host", str(tmp_path / "h.json")]) == 0
    assert "s.json (given), is dropped" in capsys.readouterr().err
    with open_dataset(data) as ds:
        assert spec_for_platform(ds.platforms[PLATFORM]).l1_bytes == 48 * 1024

    data.write_bytes(zen5.read_bytes())
    zen4["caches"]["L1d"] = "32K"
    (tmp_path / "h.json").write_text(__import__("json").dumps({"host": zen4}))
    assert main(["dataset", "set-machine", str(data), "--platform", PLATFORM, "--host", str(tmp_path / "h.json")]) == 0
    capsys.readouterr()
    with open_dataset(data) as ds:
        spec = spec_for_platform(ds.platforms[PLATFORM])
    assert spec.name == "AMD EPYC 9454P (host record)" and spec.l1_bytes == 32768 and spec.freq_ghz == 2.75
    before = data.read_bytes()
    (tmp_path / "o.json").write_text(__import__("json").dumps(dict(zen4, cpu_model="Other", model="99")))
    (tmp_path / "bad.json").write_text('{"l1_bites": 1}')
    for argv, says in ((["--host", str(tmp_path / "o.json")], "is another machine"),
                       (["--spec", str(tmp_path / "bad.json")], "unknown cpu spec field 'l1_bites'"),
                       (["--spec", str(tmp_path / "missing.json")], "is not a readable JSON hardware spec")):
        assert main(["dataset", "set-machine", str(data), "--platform", PLATFORM, *argv]) != 0
        line = error_line(capsys)
        assert says in line and argv[1] in line, line
    assert main(["dataset", "set-machine", str(data), "--platform", "nope", "--spec", str(tmp_path / "s.json")]) != 0
    assert "no platform 'nope'" in error_line(capsys)
    assert data.read_bytes() == before


@pytest.mark.parametrize("given, says", [
    ('{"l1_bytes": Infinity}', "field 'l1_bytes' must be a finite number, got inf"),
    ('{"freq_ghz": NaN}', "field 'freq_ghz' must be a finite number, got nan"),
    ('{"kind": "cpu", "cores": 0}', "field 'cores' must be above 0, got 0"),
])
def test_set_machine_refuses_a_spec_of_nan_infinity_or_zero(zen5, tmp_path, capsys, given, says):
    """`set-machine --spec` goes through the same check as a featurizer's spec: infinity was an OverflowError
    traceback, and NaN or 0 was stored, every later featurize then giving NaN estimates or no readable record."""
    from conftest import error_line

    data = tmp_path / "z.h5"
    data.write_bytes(zen5.read_bytes())
    before = data.read_bytes()
    (tmp_path / "s.json").write_text(given)
    assert main(["dataset", "set-machine", str(data), "--platform", PLATFORM, "--spec", str(tmp_path / "s.json")]) != 0
    line = error_line(capsys)
    assert "s.json" in line and says in line, line
    assert data.read_bytes() == before


def test_a_spec_stored_before_the_check_is_refused_in_one_line_and_can_be_replaced(zen5, tmp_path, capsys):
    """A spec stored with NaN (as set-machine took it before) gave cached valid rows of NaN estimates; now featurize
    says in one line that it is refused and how to replace it, and a whole spec replaces it."""
    from conftest import error_line

    data = tmp_path / "z.h5"
    data.write_bytes(zen5.read_bytes())
    with DatasetWriter(data) as w:
        w.set_machine(PLATFORM, spec=dict(CPUSpec().to_json(), freq_ghz=float("nan")), host=None)
    assert main(["featurize", str(data), "--featurizer", "psa", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"platform {PLATFORM!r}: its stored hardware spec is refused (field " \
        "'freq_ghz' must be a finite number, got nan); `costlab dataset set-machine` with --host or a whole" in err
    (tmp_path / "s.json").write_text('{"kind": "cpu", "freq_ghz": 3.0}')
    assert main(["dataset", "set-machine", str(data), "--platform", PLATFORM, "--spec", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    with open_dataset(data) as ds:
        assert spec_for_platform(ds.platforms[PLATFORM]).freq_ghz == 3.0


def test_a_kernels_own_cpuinfo_flags_do_not_make_the_same_machine_another(monkeypatch):
    """Flags Linux adds or drops with a kernel, a boot option or microcode (user_shstk, md_clear, ...) say no
    instruction: the same machine after an update is the same host. An ISA flag gone is another machine."""
    from costlab.common.host import host_difference, same_host

    monkeypatch.setenv(FAKE_HOST_ENV, str(Path(__file__).parent / "fixtures" / "hosts" / "zen4"))
    here = host_info()
    updated = dict(here, flags=sorted(set(here["flags"]) | {"user_shstk", "md_clear"} - {"ibpb"}))
    assert same_host(here, updated)
    fewer = dict(here, flags=[f for f in here["flags"] if f != "avx2"])
    assert not same_host(here, fewer) and "avx2" in host_difference(here, fewer)


def test_two_arm_cores_of_the_same_features_are_two_machines(tmp_path, monkeypatch):
    """An Arm cpuinfo has no model name, family or model: its implementer, architecture, part, variant and revision
    name the core. A Cortex-A53 and a Cortex-A72 of the same Features were one host."""
    from costlab.common.host import host_difference, same_host

    hosts = {}
    for name, part in (("a53", "0xd03"), ("a72", "0xd08")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "cpuinfo").write_text("".join(
            f"processor\t: {i}\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU implementer\t: 0x41\n"
            f"CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: {part}\nCPU revision\t: 3\n\n" for i in range(2)))
        monkeypatch.setenv(FAKE_HOST_ENV, str(folder))
        hosts[name] = host_info()
    assert hosts["a53"]["model"] == "0xd03" and hosts["a53"]["vendor"] == "0x41"
    assert not same_host(hosts["a53"], hosts["a72"]) and "0xd03" in host_difference(hosts["a53"], hosts["a72"])
