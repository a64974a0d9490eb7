"""Interrupted, killed and failing writes: the dataset stays as it was (or as committed), no temporary copy
is left behind, permissions are kept, and a full disk is one line of error, never a crash."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, REPO, sigterm_once_started, slow_to_stop
from costlab.cli import main
from costlab.datasets import open_dataset

MLP = FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"
BERT = FIXTURES / "ansor" / "2080ti-bert-B1-head128.json"


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _debris(path) -> list:
    return sorted(p.name for p in path.parent.glob(f".{path.name}.tmp*"))


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.h5"
    assert main(["dataset", "import-ansor", str(MLP), "-o", str(path)]) == 0
    return path


# a `costlab dataset split` whose transaction stops at a given point until it is signalled
SLOW_COMMAND = """
import sys, time
from costlab.cli import main
from costlab.datasets import store
where = sys.argv[2]
if where == "body":
    import costlab.commands.dataset as cmd
    def slow_split(args):
        with store.DatasetWriter(args.data) as w:
            w.h5.require_group("splits").create_group("x")
            print("ready", flush=True)
            time.sleep(60)
    cmd._split = slow_split
else:
    commit = store.DatasetWriter._commit
    def slow_commit(self):
        print("ready", flush=True)
        time.sleep(2)
        commit(self)
    store.DatasetWriter._commit = slow_commit
sys.exit(main(["dataset", "split", sys.argv[1]]))
"""


def _start(data, where):
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"))
    # the child gets Ctrl-C's default disposition whatever this process has: a shell starts background jobs
    # with SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen([sys.executable, "-c", SLOW_COMMAND, str(data), where], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_transaction_leaves_no_copy(data, sig, code):
    before = _digest(data)
    proc = _start(data, "body")
    assert _debris(data)  # the transaction's copy exists while it runs
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert err.strip() == "costlab: interrupted; data written before is kept"
    assert _digest(data) == before and _debris(data) == []


def test_signal_at_commit_is_not_swallowed(data):
    proc = _start(data, "commit")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    # the commit completes (the signal is held back while it runs), then the interrupt is reported
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err
    with open_dataset(data) as ds:
        assert ds.split_names() == ["task-s0"]
    assert _debris(data) == []


def test_killed_writer_debris_is_removed_by_the_next(data):
    before = _digest(data)
    proc = _start(data, "body")
    proc.kill()
    proc.wait(timeout=60)
    assert _debris(data) and _digest(data) == before  # SIGKILL cannot be caught: the copy stays ...
    assert main(["dataset", "split", str(data)]) == 0  # ... until the next writer of the file
    assert _debris(data) == []
    with open_dataset(data) as ds:
        assert ds.split_names() == ["task-s0"] and ds.num_records("platinum-8358") == 128


def test_rewrite_keeps_the_file_mode(data):
    os.chmod(data, 0o600)
    assert main(["dataset", "split", str(data)]) == 0
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o600
    os.chmod(data, 0o640)
    assert main(["dataset", "import-ansor", str(BERT), "-o", str(data), "--platform", "other"]) == 0
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o640


def test_a_write_through_a_symbolic_link_updates_its_target_and_keeps_the_link(data, tmp_path):
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "link.h5"
    link.symlink_to("../d.h5")  # relative to the link's folder, not to the working directory
    assert main(["dataset", "import-ansor", str(BERT), "-o", str(link), "--platform", "other"]) == 0
    assert link.is_symlink() and os.readlink(link) == "../d.h5"
    with open_dataset(data) as ds:
        assert ds.record_platforms() == ["other", "platinum-8358"]
    assert _debris(data) == [] and _debris(link) == []
    # a link whose target does not exist yet: the dataset is created there
    fresh = tmp_path / "links" / "fresh.h5"
    fresh.symlink_to(tmp_path / "new.h5")
    assert main(["dataset", "import-ansor", str(MLP), "-o", str(fresh)]) == 0
    assert fresh.is_symlink()
    with open_dataset(tmp_path / "new.h5") as ds:
        assert ds.num_records("platinum-8358") == 128


@pytest.fixture
def small_disk(tmp_path):
    """A real 24 MB file system (tmpfs), for writes that run out of space; skipped where mounting is not allowed."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", str(mnt)], capture_output=True)


def _fill(disk, leave: int) -> None:
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    (disk / "filler").write_bytes(b"\0" * max(free - leave, 0))


def _many_records(path, copies: int = 60):
    """The records of a real log as ``copies`` distinct tasks each (more than the small disk has room for)."""
    import orjson

    out = []
    for c in range(copies):
        for line in BERT.read_bytes().splitlines():
            rec = orjson.loads(line)
            key = orjson.loads(rec["i"][0][0])
            key[0] = f"{key[0]}-{c}"
            rec["i"][0][0] = orjson.dumps(key).decode()
            out.append(orjson.dumps(rec))
    path.write_bytes(b"\n".join(out) + b"\n")
    return path


def test_full_disk_is_one_line_and_the_dataset_is_unchanged(small_disk, tmp_path):
    data = small_disk / "d.h5"
    assert main(["dataset", "import-ansor", str(MLP), "-o", str(data)]) == 0
    before = _digest(data)
    big = _many_records(tmp_path / "big.json")
    _fill(small_disk, leave=4_000_000)
    res = subprocess.run([sys.executable, "-m", "costlab", "dataset", "import-ansor", str(big), "-o", str(data),
                          "--platform", "other"], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().startswith(f"costlab: error: {data}: no space left on the device")
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert _digest(data) == before and _debris(data) == []


def test_full_disk_during_hdf5_write_does_not_crash(small_disk, tmp_path):
    """Where HDF5 itself meets the full disk (the space check bypassed), the process ends with the error
    line and exit 2, not a segmentation fault, and the dataset is unchanged."""
    data = small_disk / "d.h5"
    assert main(["dataset", "import-ansor", str(MLP), "-o", str(data)]) == 0
    before = _digest(data)
    big = _many_records(tmp_path / "big.json")
    _fill(small_disk, leave=200_000)
    script = ("import sys; from costlab.datasets import store; store.SPACE_MARGIN = -(1 << 40); "
              "from costlab.cli import main; sys.exit(main(sys.argv[1:]))")
    res = subprocess.run([sys.executable, "-c", script, "dataset", "import-ansor", str(big), "-o", str(data),
                          "--platform", "other"], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert "No space left" in res.stderr  # HDF5's own report: this run met the full disk inside HDF5
    assert res.stderr.strip().splitlines()[-1].startswith(f"costlab: error: {data}: no space left on the device")
    assert _digest(data) == before and _debris(data) == []


def test_sigterm_inside_a_tvm_callback_is_the_interruption(monkeypatch, capsys):
    """SIGTERM that arrives while TVM runs a Python function (a runner waiting for its workers) reaches the
    command as TVM's RuntimeError, not as the interrupt: it still ends as one (one line, exit 143)."""
    import argparse

    import tvm_ffi

    from costlab import cli

    def in_callback():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted by the handler's raise

    callback = tvm_ffi.convert(in_callback)

    class Parser:
        def parse_args(self, argv):
            return argparse.Namespace(func=lambda args: callback())

    monkeypatch.setattr(cli, "build_parser", Parser)
    assert cli.main([]) == 143
    assert capsys.readouterr().err.strip() == "costlab: interrupted; data written before is kept"
    with pytest.raises(RuntimeError):  # without a signal, an error from a callback is the error
        monkeypatch.setattr(Parser, "parse_args", lambda self, argv: argparse.Namespace(
            func=lambda args: tvm_ffi.convert(lambda: 1 / 0)()))
        cli.main([])


def test_a_child_run_to_its_end_through_sigterm(tmp_path):
    """``run_to_end``: a command's own exit status when it ends by itself; on SIGTERM to the caller the command
    gets it, is waited out (it ends after a second here) and the status is 143 though the command exited 0; on
    Ctrl-C the same before the interruption goes on."""
    from costlab.common.children import TERMINATED, run_to_end

    assert run_to_end([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    child = slow_to_stop(tmp_path, 0)
    driver = ("import signal, sys\nfrom costlab.common.children import run_to_end\n"
              # Ctrl-C's handler installed: a suite started in the background has SIGINT ignored, and passes that on
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"print(run_to_end([sys.executable, '-c', {child!r}]), flush=True)\n")
    proc = sigterm_once_started(driver, tmp_path / "started")
    assert proc.wait(timeout=60) == 0
    assert proc.stdout.read().strip() == str(TERMINATED) and (tmp_path / "ended").exists()
    # Ctrl-C to the caller (KeyboardInterrupt while waiting): the command is stopped and waited out, then it is
    # raised
    (tmp_path / "started").unlink()
    (tmp_path / "ended").unlink()
    proc = sigterm_once_started(driver, tmp_path / "started", signal.SIGINT)
    assert proc.wait(timeout=60) != 0 and (tmp_path / "ended").exists()


def test_a_full_disk_is_one_line_naming_the_file_it_could_not_write(tmp_path, capsys, monkeypatch):
    """A write or sync that fails for space (ENOSPC, a quota, a file size limit) names no file: the command ended
    in a traceback. One line names the file, which is as it was (no temporary left)."""
    import errno
    import shutil

    import costlab.common.files as files
    from conftest import FIXTURES, error_line
    from costlab.cli import main

    shutil.copy(FIXTURES / "ms_small.h5", tmp_path / "d.h5")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    assert main(["dataset", "pack", str(tmp_path / "d.h5"), "-o", str(tmp_path / "pack")]) == 2
    line = error_line(capsys)
    assert f"cannot write {tmp_path / 'pack'}" in line and "No space left on device" in line, line
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]


def test_a_second_ctrl_c_while_the_child_stops_leaves_no_child_running(tmp_path):
    """Ctrl-C to the caller of ``run_to_end`` alone (kill -INT, a job manager): the child is told to stop and waited
    out; a second Ctrl-C during that wait ended the caller with the child still measuring. It is told again and
    waited out."""
    import signal
    import subprocess
    import time

    child = ("import signal, sys, time, pathlib\n"
             "n = [0]\n"
             "def h(s, f):\n"
             "    n[0] += 1\n"
             "    if n[0] >= 2: sys.exit(7)\n"  # the first signal finishes its round, the second ends it
             "signal.signal(signal.SIGTERM, h)\n"
             "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             f"pathlib.Path({str(tmp_path / 'pid')!r}).write_text(str(__import__('os').getpid()))\n"
             "t = time.time()\n"
             "while time.time() - t < 20: time.sleep(0.05)\n")
    driver = ("import signal, sys\nfrom costlab.common.children import run_to_end\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"run_to_end([sys.executable, '-c', {child!r}], start_new_session=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", driver], stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (tmp_path / "pid").exists() and time.time() < deadline:
        time.sleep(0.05)
    pid = int((tmp_path / "pid").read_text())
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) != 0
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the child outlived the caller"


def test_a_file_size_limit_while_featurizing_is_a_write_failure_not_a_damaged_dataset(tmp_path):
    """HDF5 meeting the process's file size limit (``ulimit -f``) while writing a feature cache: the error names
    the limit, not a damaged dataset (HDF5's failed filter after the failed write read as one, and told the user to
    restore a healthy file from a copy); the dataset is unchanged."""
    import resource

    data = tmp_path / "d.h5"
    assert main(["dataset", "import-ansor", str(MLP), "-o", str(data)]) == 0
    before = _digest(data)
    limit = data.stat().st_size + 8192  # room for the transaction's copy, not for its features

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    res = subprocess.run([sys.executable, "-m", "costlab", "featurize", str(data), "--featurizer", "tlp",
                          "--no-progress"], capture_output=True, text=True, preexec_fn=limited)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"costlab: error: {data}: the file grew past this process's file size limit while writing (File too large); "
        "the dataset is unchanged"), res.stderr[-2000:]
    assert _digest(data) == before and _debris(data) == []


def _tune(work, preexec_fn=None):
    return subprocess.run([sys.executable, "-m", "costlab", "tune", "--workload", "GMM:1,8,8,8", "--trials", "8",
                           "--per-iter", "2", "--population", "32", "--no-library", "--no-progress", "--work-dir",
                           str(work)], capture_output=True, text=True, preexec_fn=preexec_fn, timeout=900)


def test_a_tuning_database_cut_short_by_a_file_size_limit_stops_the_run_in_one_line(tmp_path):
    """MetaSchedule never checks its database writes: under a file size limit the workload's line was cut short,
    the run said it succeeded (exit 0), and the next run moved every record aside. The cut is seen after the
    batch that made it: the run stops there, one line names the file, exit 2."""
    import resource

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20480, 20480))  # less than the workload's line

    work = tmp_path / "w"
    res = _tune(work, limited)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1].startswith(
        f"costlab: error: {work / 'database_workload.json'}: its last line was cut short while the run wrote it")
    assert len((work / "progress.jsonl").read_text().splitlines()) == 1  # stopped after the batch that cut it


def test_a_full_disk_while_tuning_is_one_line(small_disk):
    """A full disk under a tuning run: one line naming the file that could not be written, exit 2 (it was 550
    lines of logging errors and chained tracebacks, exit 1)."""
    _fill(small_disk, leave=20_000)
    work = small_disk / "w"
    res = _tune(work)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("costlab: error: ") and "No space left on device" in lines[0], lines
