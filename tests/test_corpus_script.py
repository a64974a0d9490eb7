"""scripts/make_corpus.sh's measuring step: a task whose design space holds fewer programs than it asks for is
written to ``OUT.exhausted`` and not offered again (docs/corpus.md). ``costlab dataset measure`` prints its summary,
the notes included, on stderr (checked for real on a tiny task); the script is run with a ``costlab`` that prints
such a note, as exhausting a real design space of the corpus's sizes takes minutes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from costlab.cli import main

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

NOTE = "  note: task 0 GMM:1,64,64,64: design space gave only 5 distinct programs"


def test_measure_says_its_summary_and_notes_on_stderr(tmp_path, capsys):
    data = tmp_path / "m.h5"
    assert main(["dataset", "extract", str(data), "--workload", "GMM:1,1,1,1"]) == 0
    capsys.readouterr()
    assert main(["dataset", "measure", str(data), "--per-task", "1", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "measured 1 candidates" in err and "measured" not in out


def test_an_exhausted_task_is_noted_and_not_offered_again(tmp_path):
    data = tmp_path / "c.h5"
    assert main(["dataset", "extract", str(data), "--workload", "GMM:1,64,64,64"]) == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"  # the script runs scripts/corpus_tasks.py with it: this environment's
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    calls = tmp_path / "calls"
    costlab = bin_dir / "costlab"  # measures nothing: says, as measure does, on stderr, that task 0 is exhausted
    costlab.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\necho 'c.h5: measured 5 candidates' >&2\n"
                       f"echo '{NOTE}' >&2\n")
    costlab.chmod(0o755)
    # the suite may run under the machine's lock: the script takes a lock of its own
    env = dict(os.environ, COSTLAB=str(costlab), PER_TASK="8", TASKS="10",
               COSTLAB_CPU_LOCK=str(tmp_path / "cpu.lock"))
    for _ in range(2):
        run = subprocess.run(["bash", str(ROOT / "scripts" / "make_corpus.sh"), str(data), "measure"], env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "c.exhausted").read_text().split() == ["0"]
    assert len(calls.read_text().splitlines()) == 1  # the second run offered the exhausted task no more


def test_training_the_x86_model_into_an_existing_version_is_refused_before_it_trains(tmp_path):
    """`VERSION=v2 scripts/train_x86_model.sh` (the docs' example, before) deleted the shipped x86-cpu-v2 (what the
    plain name x86-cpu is) and wrote a corpus-only model in its place: an existing version is refused at once,
    replaced only with FORCE=1."""
    shipped = ROOT / "costmodels" / "models" / "x86-cpu-v2"
    before = {p: p.read_bytes() for p in shipped.iterdir()}
    env = dict(os.environ, VERSION="v2", COSTLAB=str(Path(sys.executable).parent / "costlab"))
    run = subprocess.run(["bash", str(ROOT / "scripts" / "train_x86_model.sh"), str(tmp_path / "work")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "x86-cpu-v2 exists" in run.stderr and "FORCE=1 replaces this one" in run.stderr
    assert {p: p.read_bytes() for p in shipped.iterdir()} == before and not (tmp_path / "work").exists()
