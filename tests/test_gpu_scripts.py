"""scripts/gpu_setup.sh and scripts/gpu_demo.sh, run with bash in temporary folders: no GPU (CUDA_VISIBLE_DEVICES
is emptied), no network, nothing installed outside the test's folders. `pack`'s download is a stand-in Python
that makes a small wheel where pip would download them; everything else is the scripts' own."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SETUP = REPO / "scripts" / "gpu_setup.sh"
DEMO = REPO / "scripts" / "gpu_demo.sh"
BENCH = REPO / "scripts" / "gpu_bench.sh"
ARCHIVE = "costlab-wheels.tar.xz"
MANIFEST = "costlab-wheels.json"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("xz") is None,
                                reason="needs bash and xz")

# `python -m pip download ... -d DIR`: one wheel of 1.5 MiB of random bytes (two parts of 1 MiB), else Python
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1 $2 $3" = "-m pip download" ]; then
  d=""
  while [ $# -gt 0 ]; do [ "$1" = -d ] && d=$2; shift; done
  exec {py} - "$d" <<'PYEOF'
import os, sys, zipfile
from pathlib import Path

d = Path(sys.argv[1])
d.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(d / "fakepkg-1.0-py3-none-any.whl", "w") as z:
    z.writestr("fakepkg/__init__.py", "VALUE = 42\\n")
    z.writestr("fakepkg/blob.bin", os.urandom(3 << 19))
    z.writestr("fakepkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: fakepkg\\nVersion: 1.0\\n")
    z.writestr("fakepkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    z.writestr("fakepkg-1.0.dist-info/RECORD", "")
PYEOF
fi
exec {py} "$@"
"""


def _env(tmp_path, **extra):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmpdir), CUDA_VISIBLE_DEVICES="", PIP_NO_INDEX="1")
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def _run(script, args, env, cwd):
    return subprocess.run(["bash", str(script), *map(str, args)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _lines(text):
    return [line for line in text.splitlines() if line.strip()]


def _stand_ins(tmp_path, **extra):
    """The bench's environment with ``costlab`` and ``python`` stand-ins that write the arguments they were
    given, a line a call, to the file returned beside it."""
    ran = tmp_path / "ran"
    for name in ("costlab", "python"):
        tool = tmp_path / name
        tool.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {ran}\n")
        tool.chmod(0o755)
    return ran, _env(tmp_path, COSTLAB=str(tmp_path / "costlab"), PY=str(tmp_path / "python"), **extra)


def _fake_checkout(tmp_path):
    """A checkout of a tiny `costlab` with the script in it, and a build/ of its own (with a stale module)."""
    repo = tmp_path / "checkout"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(SETUP, repo / "scripts" / SETUP.name)
    (repo / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                         'build-backend = "setuptools.build_meta"\n')
    (repo / "setup.cfg").write_text("[metadata]\nname = costlab\nversion = 0.0.1\n\n"
                                    "[options]\npackage_dir =\n    costlab = costlab\npackages = costlab\n")
    (repo / "costlab").mkdir()
    (repo / "costlab" / "__init__.py").write_text("")
    (repo / "build" / "lib" / "costlab").mkdir(parents=True)
    (repo / "build" / "lib" / "costlab" / "stale.py").write_text("STALE = True\n")
    (repo / "build" / "notes.txt").write_text("mine\n")
    return repo


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A fake checkout and the parts and manifest its gpu_setup.sh pack made of one small wheel."""
    tmp_path = tmp_path_factory.mktemp("packed")
    repo = _fake_checkout(tmp_path)
    fake_python = tmp_path / "python"
    fake_python.write_text(FAKE_PYTHON.format(py=sys.executable))
    fake_python.chmod(0o755)
    env = _env(tmp_path, PYTHON=str(fake_python))
    done = _run(repo / "scripts" / SETUP.name, ["pack", tmp_path / "parts", "--part-mb", "1"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert not list((tmp_path / "tmpdir").iterdir())
    manifest = json.loads((tmp_path / "parts" / MANIFEST).read_text())
    assert len(manifest["parts"]) == 2 and manifest["wheels"] == ["fakepkg-1.0-py3-none-any.whl"]
    return repo, tmp_path / "parts"


def _install(tmp_path, repo, parts, manifest):
    """gpu_setup.sh install of a copy of the parts with the given manifest into tmp_path/site."""
    dir_ = tmp_path / "in"
    shutil.copytree(parts, dir_)
    (dir_ / MANIFEST).write_text(json.dumps(manifest))
    env = _env(tmp_path, PYTHON=sys.executable)
    args = ["install", dir_, "--site", tmp_path / "site", "--stash", tmp_path / "stash"]
    return _run(repo / "scripts" / SETUP.name, args, env, tmp_path), dir_


def _corrupt(dir_, manifest):
    """Flip a byte in the first part, and give the manifest that part's new size and sum (but not the archive's)."""
    part = dir_ / manifest["parts"][0]["name"]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    manifest["parts"][0].update(size=len(data), sha256=hashlib.sha256(bytes(data)).hexdigest())


@pytest.mark.parametrize("args, option", [
    (["install", "DIR", "--site"], "--site"),
    (["install", "DIR", "--stash"], "--stash"),
    (["install", "DIR", "--site", "--stash", "S"], "--site"),
    (["install", "DIR", "--site", ""], "--site"),
    (["pack", "DIR", "--part-mb"], "--part-mb"),
    (["pack", "DIR", "--python"], "--python"),
    (["pack", "DIR", "--part-mb", "30", "--python"], "--python"),
])
def test_an_option_without_its_value_is_said_in_one_line(tmp_path, args, option):
    args = [str(tmp_path / "d") if a == "DIR" else a for a in args]
    done = _run(SETUP, args, _env(tmp_path, PYTHON=sys.executable), tmp_path)
    assert done.returncode == 2, done.stderr
    assert _lines(done.stderr) == [f"gpu_setup: {option} needs a value"]
    assert not (tmp_path / "d").exists()
    assert not list((tmp_path / "tmpdir").iterdir())


def test_install_refuses_parts_that_match_the_manifest_but_not_the_archive(tmp_path, packed):
    repo, parts = packed
    manifest = json.loads((parts / MANIFEST).read_text())
    dir_ = tmp_path / "bad"
    shutil.copytree(parts, dir_)
    _corrupt(dir_, manifest)
    done, _ = _install(tmp_path, repo, dir_, manifest)
    assert done.returncode == 1, done.stderr
    (line,) = [ln for ln in _lines(done.stderr) if "unpacking" not in ln]
    assert line.startswith("gpu_setup: ") and "SHA-256 differs" in line
    assert not list((tmp_path / "tmpdir").iterdir())  # the joined archive's folder is gone
    assert not (tmp_path / "site" / "fakepkg").exists()


def test_an_old_manifest_without_the_archives_sum_is_said_and_a_corrupt_archive_refused(tmp_path, packed):
    repo, parts = packed
    manifest = json.loads((parts / MANIFEST).read_text())
    del manifest["sha256"]
    dir_ = tmp_path / "bad"
    shutil.copytree(parts, dir_)
    _corrupt(dir_, manifest)
    done, _ = _install(tmp_path, repo, dir_, manifest)
    assert done.returncode == 1, done.stderr
    lines = [ln for ln in _lines(done.stderr) if "unpacking" not in ln]
    assert len(lines) == 2 and "no SHA-256 of the whole archive" in lines[0], done.stderr
    assert lines[1].startswith("gpu_setup: the archive does not unpack")
    assert not list((tmp_path / "tmpdir").iterdir())
    assert not (tmp_path / "site" / "fakepkg").exists()


def test_install_leaves_the_checkouts_build_folder_alone(tmp_path, packed):
    """An old manifest (no archive sum) with good parts goes on: the wheel and costlab are installed (then the
    check stops at the missing GPU), costlab built outside the checkout, whose build/ is left as it was."""
    repo, parts = packed
    manifest = json.loads((parts / MANIFEST).read_text())
    del manifest["sha256"]
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    done, _ = _install(tmp_path, repo, parts, manifest)
    assert (repo / "build" / "notes.txt").read_text() == "mine\n", done.stderr
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before  # nothing written in the checkout
    assert (tmp_path / "site" / "fakepkg" / "__init__.py").read_text() == "VALUE = 42\n", done.stderr
    assert (tmp_path / "site" / "costlab" / "__init__.py").exists(), done.stderr
    assert not (tmp_path / "site" / "costlab" / "stale.py").exists()  # not from the checkout's build/
    assert done.returncode == 1 and "TVM sees no CUDA GPU" in done.stderr, done.stderr
    assert "no SHA-256 of the whole archive" in done.stderr
    assert not list((tmp_path / "tmpdir").iterdir())


@pytest.mark.parametrize("steps", [[], ["data"], ["features", "tune"]])
def test_the_demo_stops_at_its_first_check_without_a_gpu(tmp_path, steps):
    ran = tmp_path / "costlab-ran"
    costlab = tmp_path / "costlab"
    costlab.write_text(f"#!/bin/sh\necho \"$@\" >> {ran}\nexit 1\n")
    costlab.chmod(0o755)
    env = _env(tmp_path, PY=sys.executable, COSTLAB=str(costlab))
    done = _run(DEMO, [tmp_path / "out", *steps], env, tmp_path)
    assert done.returncode != 0
    assert _lines(done.stderr) == [
        "gpu_demo: TVM sees no CUDA GPU (tvm.cuda(0).exist is False): nothing run (scripts/gpu_setup.sh install, "
        "then source its env.sh; docs/gpu.md)"], done.stderr
    assert not (tmp_path / "out").exists() and not ran.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["costlab", "tmpdir"]


def test_the_demo_refuses_an_unknown_step_before_anything(tmp_path):
    env = _env(tmp_path, PY=sys.executable, COSTLAB=str(tmp_path / "no-costlab"))
    done = _run(DEMO, [tmp_path / "out", "data", "bogus"], env, tmp_path)
    assert done.returncode == 1
    assert _lines(done.stderr) == ["gpu_demo: unknown step bogus (data features train tune)"]
    assert not (tmp_path / "out").exists()


def test_every_part_damaged_in_transfer_is_removed_from_the_stash(tmp_path, packed):
    """Two parts whose bytes differ from the manifest's sums: both are named and both removed, so the next
    transfer brings them again (their names went to rm as one path before)."""
    repo, parts = packed
    manifest = json.loads((parts / MANIFEST).read_text())
    dir_ = tmp_path / "bad"
    shutil.copytree(parts, dir_)
    for p in manifest["parts"]:
        f = dir_ / p["name"]
        f.write_bytes(f.read_bytes()[:-1] + b"\0")
    done, _ = _install(tmp_path, repo, dir_, manifest)
    assert done.returncode == 1, done.stderr
    (line,) = _lines(done.stderr)
    assert "damaged in transfer" in line and all(p["name"] in line for p in manifest["parts"])
    assert not any((tmp_path / "stash" / p["name"]).exists() for p in manifest["parts"])


@pytest.mark.parametrize("extra, message", [
    (dict(STEPS="data bogus"),
     "gpu_bench: unknown step bogus (startup data train tuning network network-finals checks keep-untuned "
     "first-batch)"),
    (dict(STEPS="tuning", RESERVE="1m"), "gpu_bench: RESERVE must be whole seconds, not 1m")])
def test_the_bench_refuses_an_unknown_step_or_reserve_before_anything(tmp_path, extra, message):
    env = _env(tmp_path, COSTLAB=str(tmp_path / "no-costlab"), **extra)
    done = _run(BENCH, [tmp_path / "out"], env, tmp_path)
    assert done.returncode == 1
    assert _lines(done.stderr) == [message]
    assert not (tmp_path / "out").exists()


def test_the_bench_tunes_alone_with_the_shipped_model_and_packs_what_it_made(tmp_path):
    """STEPS=tuning: no dataset, no training; arm c tunes with the shipped cuda-sm90, and the output is packed
    (the commands are stand-ins that say what they were asked)."""
    ran, env = _stand_ins(tmp_path, STEPS="tuning")
    done = _run(BENCH, [tmp_path / "out", "60"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = ran.read_text().splitlines()
    assert [ln.split()[2] for ln in lines] == ["run", "retime", "table"]  # python benchmarks/tuning.py CMD
    assert "--model cuda-sm90 --arms a,c" in lines[0] and "--target cuda --no-remeasure" in lines[0]
    assert (tmp_path / "out" / "gpu_bench.tgz").is_file()


@pytest.mark.parametrize("reserve, steps", [("0", ["run", "table"]), ("40", ["run", "retime", "table"])])
def test_the_bench_keeps_what_reserve_says_for_the_retime(tmp_path, reserve, steps):
    """RESERVE=0: the runs get the time and no retime runs (a next call retimes them all; the table costs nothing
    and takes what the runs left); RESERVE=S: S seconds kept from the
    runs for the retime (4/5 of them) and the table (stand-in commands that say what they were asked)."""
    ran, env = _stand_ins(tmp_path, STEPS="tuning", RESERVE=reserve)
    done = _run(BENCH, [tmp_path / "out", "100"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert [ln.split()[2] for ln in ran.read_text().splitlines()] == steps
    log = (tmp_path / "out" / "steps.log").read_text()
    share = 100 - int(reserve) - 20  # the 20 s a stopped run may take to end kept too; a second may have gone
    assert f"== tuning (at most {share} s)" in log or f"== tuning (at most {share - 1} s)" in log
    run = ran.read_text().splitlines()[0].split()  # no run started that would not end in the share, less 5 s
    assert run[run.index("--seconds") + 1] in (str(share - 5), str(share - 6))
    if reserve != "0":
        assert "== retime (at most 32 s)" in log


def test_the_bench_tunes_one_network_with_the_shipped_model(tmp_path):
    """STEPS=network: benchmarks/networks.py runs MetaSchedule's search (a) and the model-led one with the shipped
    cuda-sm90 (k-nolib) on a BERT layer for the GPU, then its table (stand-in commands)."""
    ran, env = _stand_ins(tmp_path, STEPS="network")
    done = _run(BENCH, [tmp_path / "out", "200"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = ran.read_text().splitlines()
    assert [ln.split()[1].rsplit("/", 1)[-1] + " " + ln.split()[2] for ln in lines] == [
        "networks.py run", "networks.py table"]
    assert ("--networks bert --arms a,k-nolib --model cuda-sm90 --trials 200 --seeds 0 --rounds 3 --target cuda"
            in lines[0])


def test_the_bench_times_a_networks_finals_of_the_seed_it_is_given(tmp_path):
    """STEPS="network network-finals" with NET_SEED=1: the runs of seed 1, their table, then their finals (each
    arm's result against its fastest records and against its kept tasks tuned) timed on the GPU."""
    ran, env = _stand_ins(tmp_path, STEPS="network network-finals", NET_SEED="1")
    done = _run(BENCH, [tmp_path / "out", "400"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = ran.read_text().splitlines()
    assert [ln.split()[1].rsplit("/", 1)[-1] + " " + ln.split()[2] for ln in lines] == [
        "networks.py run", "networks.py table", "networks.py finals"]
    assert "--seeds 1 --rounds 3 --target cuda" in lines[0]
    assert lines[2].endswith(f"finals --out {tmp_path / 'out' / 'networks'} --networks bert --seeds 1 --rounds 3 "
                             "--target cuda")


def test_the_bench_times_the_first_batch_both_ways_on_request(tmp_path):
    """STEPS=first-batch: benchmarks/first_batch.py with the shipped model on the GPU, FB_ROUNDS rounds, its
    results beside the others (stand-in commands)."""
    ran, env = _stand_ins(tmp_path, STEPS="first-batch", FB_ROUNDS="3")
    done = _run(BENCH, [tmp_path / "out", "400"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    [line] = ran.read_text().splitlines()
    assert line.split()[1].endswith("benchmarks/first_batch.py")
    assert "--model cuda-sm90 --target cuda --workload C2D:1,56,56,64,64,3,1,1 --rounds 3" in line
    assert f"--json {tmp_path / 'out' / 'first_batch.json'}" in line
    assert "== first-batch (at most 270 s)" in (tmp_path / "out" / "steps.log").read_text()



def test_the_bench_rehearses_a_lease_on_the_cpu_with_the_target_it_is_given(tmp_path):
    """TARGET=host: every step's command measures on the host, with the model it is given (stand-in commands)."""
    ran, env = _stand_ins(tmp_path, STEPS="tuning network network-finals", TARGET="host", MODEL="x86-cpu")
    done = _run(BENCH, [tmp_path / "out", "600"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = ran.read_text().splitlines()
    measuring = [ln for ln in lines if " table " not in ln + " "]  # the tables measure nothing
    assert len(lines) == 6 and len(measuring) == 4, lines
    assert all("--target host" in ln and "--target cuda" not in ln for ln in measuring), measuring
    assert "--model x86-cpu" in lines[0] and "--model x86-cpu" in lines[3]


def test_the_bench_times_the_checks_and_the_untuned_programs_on_a_copy_of_arm_a(tmp_path):
    """STEPS="checks keep-untuned": each benchmark on a copy of the network step's arm-a run of NET_SEED (the run
    itself untouched, the copy gone after); without a finished run, each step is skipped and said (stand-ins)."""
    ran, env = _stand_ins(tmp_path, STEPS="checks keep-untuned", NET_SEED="1")
    out = tmp_path / "out"
    done = _run(BENCH, [out, "600"], env, tmp_path)
    assert done.returncode == 0 and not ran.exists(), done.stderr
    assert "checks: skipped, no finished network run" in (out / "steps.log").read_text()
    arm = out / "networks" / "runs" / "bert" / "s1" / "a"
    arm.mkdir(parents=True)
    (arm / "done.json").write_text("{}")
    done = _run(BENCH, [out, "600"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = ran.read_text().splitlines()
    assert [ln.split()[1].rsplit("/", 1)[-1] for ln in lines] == ["checks.py", "keep_untuned.py"]
    for line, name in zip(lines, ("checks", "keep_untuned")):
        assert line.endswith(f"--work {out / (name.replace('_', '-') + '-work')} --network bert --target cuda "
                             f"--rounds 1 --json {out / (name + '.json')}")
    assert sorted(p.name for p in arm.iterdir()) == ["done.json"]
    assert not (out / "checks-work").exists() and not (out / "keep-untuned-work").exists()
