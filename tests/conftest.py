"""Shared test helpers: paths of the committed fixtures and of the real public logs in ../shared/data."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def another_host(monkeypatch) -> Path:
    """A folder of a real CPU's description (``COSTLAB_HOST_FILES``) that is not this machine's: a Zen 4's, or an
    Emerald Rapids' where this machine is that Zen 4, so that a test of what another machine is refused holds on
    every host. The test sets the variable where the other machine should begin."""
    from costlab.common.host import FAKE_HOST_ENV, host_info, same_host

    here = host_info()
    for name in ("zen4", "emeraldrapids"):
        with monkeypatch.context() as m:
            m.setenv(FAKE_HOST_ENV, str(FIXTURES / "hosts" / name))
            if not same_host(host_info(), here):
                return FIXTURES / "hosts" / name
    raise AssertionError("both faked hosts describe this machine")



def another_cpu_than_this() -> dict:
    """This machine's host description under another CPU's family and model: a Zen 4's (25, 17), or a Zen 5's
    (26, 2) where this machine is that Zen 4. Another host to ``same_host`` on every machine, the model name kept
    (it alone does not tell two CPUs apart: "AMD EPYC")."""
    from costlab.common.host import host_info, same_host

    here = host_info()
    zen4 = (str(here.get("family")), str(here.get("model"))) == ("25", "17")
    other = dict(here, family="26" if zen4 else "25", model="2" if zen4 else "17")
    assert not same_host(other, here)
    return other


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"the public logs in {SHARED_DATA} are not beside this checkout")
    return SHARED_DATA


def error_line(capsys) -> str:
    """The one ``costlab: error:`` line a refused command wrote to stderr (no traceback, no second error)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("costlab: error:")]
    assert len(lines) == 1, err
    return lines[0]


# a TLP net small enough to train in seconds, every record in training
TINY = ["--set", "net.d_model=16", "--set", "net.attention_heads=2", "--set", "data_options.val_fraction=0"]


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """The measured MetaSchedule fixture (``ms_small.h5``, no split) with its TLP features, and a tiny TLP model
    trained one epoch on it: ``BASE/d.h5`` and the run dir ``BASE/run``. Tests copy what they change."""
    from costlab.cli import main

    base = tmp_path_factory.mktemp("trained")
    shutil.copy(FIXTURES / "ms_small.h5", base / "d.h5")
    assert main(["featurize", str(base / "d.h5"), "--featurizer", "tlp", "--no-progress"]) == 0
    assert main(["train", "--data", str(base / "d.h5"), "--out", str(base / "run"), "--epochs", "1",
                 "--no-progress", *TINY]) == 0
    return base


def _fixture_files() -> dict:
    """Each file under tests/fixtures with its size and modification time (a rename over it changes them too)."""
    return {str(p.relative_to(FIXTURES)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in FIXTURES.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(autouse=True)
def committed_fixtures_stay():
    """No test writes into the committed fixtures (a feature cache trained into ms_small.h5, a lock file beside it):
    the next test, and the next clone's, would read another file than the one committed. Tests work on copies."""
    before = _fixture_files()
    yield
    after = _fixture_files()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the test wrote into committed fixtures under {FIXTURES}: {changed} (work on a copy)"


@pytest.fixture(autouse=True)
def own_library(tmp_path_factory, monkeypatch):
    """Every test's tuning runs start from, and add to, a schedule library of their own, empty, and no starter
    library: a test's results never depend on what earlier tests (or the user's own runs) tuned. Tests of the
    library itself name theirs with --library or these variables."""
    monkeypatch.setenv("COSTLAB_LIBRARY", str(tmp_path_factory.mktemp("library")))
    monkeypatch.setenv("COSTLAB_STARTER_LIBRARY", "none")


def copy_platform(path, source: str, platform: str, target: dict, costs=None, rows=None) -> int:
    """Add ``platform`` (``target``) to the dataset at ``path``, holding the programs of ``source``'s records
    ``rows`` (default all), each with its raw costs through ``costs(record index, costs)`` (default as they are):
    another machine that measured the same programs. Returns the records added."""
    from costlab.datasets import DatasetWriter, RecordBatch, open_dataset

    with open_dataset(path) as ds:
        t = ds.records(source)
        task, pid, err, sched = t.task, t.program_id, t.error, t.schedules()
        values, offsets = t.costs()
    batch = RecordBatch()
    for i in (range(len(task)) if rows is None else rows):
        raw = values[offsets[i]:offsets[i + 1]]
        batch.append(int(task[i]), sched[i], list(map(float, raw if costs is None else costs(i, raw))), int(err[i]),
                     0.0, int(pid[i]))
    with DatasetWriter(path) as w:
        w.add_platform(platform, target)
        w.add_records(platform, batch)
    return len(batch)


def slow_to_stop(folder: Path, code: int) -> str:
    """A stand-in tuning run (Python source): it writes FOLDER/started, and on SIGTERM takes a second (the round
    in flight), writes FOLDER/ended and exits with ``code``."""
    return (f"import pathlib, signal, sys, time\n"
            f"def end(signum, frame):\n    time.sleep(1.0)\n"
            f"    pathlib.Path({str(folder / 'ended')!r}).write_text('')\n    sys.exit({code})\n"
            f"signal.signal(signal.SIGTERM, end)\n"
            f"pathlib.Path({str(folder / 'started')!r}).write_text('')\ntime.sleep(120)\n")


def sigterm_once_started(driver: str, started: Path, sig=signal.SIGTERM) -> subprocess.Popen:
    """Python source ``driver`` run in a process (stdout piped) that is sent SIGTERM (or ``sig``), itself alone,
    once the file ``started`` is there."""
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not started.exists():
        assert proc.poll() is None and time.time() < deadline, "the stand-in run never started"
        time.sleep(0.1)
    proc.send_signal(sig)
    return proc
