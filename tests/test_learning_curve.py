"""benchmarks/learning_curve.py's sets: held-out trajectory tasks chosen by name (stable as the corpus grows),
never among a model's training tasks, and other datasets' tasks of the same workload kept out of training too."""

from __future__ import annotations

import shutil
import sys

import numpy as np

from conftest import FIXTURES, REPO, another_cpu_than_this

from costlab.datasets import open_dataset

sys.path.insert(0, str(REPO / "benchmarks"))
import learning_curve as lc  # noqa: E402


def test_a_fifth_of_task_names_is_held_out_whatever_else_the_corpus_holds():
    names = [f"GMM:1,{m},{n},64" for m in range(1, 41) for n in (64, 128, 256)]
    picked = [n for n in names if lc.held_out(n)]
    assert 0.1 < len(picked) / len(names) < 0.3
    assert picked == [n for n in names[::-1] if lc.held_out(n)][::-1]  # by name alone, not by position


def test_held_out_tasks_are_never_trained_on(tmp_path, monkeypatch):
    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    with open_dataset(data) as ds:
        names = {t.index: t.name for t in ds.tasks}
        measured = set(np.unique(ds.records(ds.record_platforms()[0]).task).tolist())
    chosen = names[min(measured)]
    monkeypatch.setattr(lc, "held_out", lambda name: name == chosen)
    order, heldout, hashes = lc.training_tasks(data, set(), seed=0)
    assert heldout == [min(measured)] and len(hashes) == 1
    assert set(order) | set(heldout) == measured and not set(order) & set(heldout)
    assert all(lc.held_out(names[i]) for i in heldout) and not any(lc.held_out(names[i]) for i in order)
    assert sorted(order) == sorted(lc.training_tasks(data, set(), seed=1)[0])  # a seed permutes, never picks
    # another dataset: no held-out set of its own, and the banned workloads left out of its training tasks
    with open_dataset(data) as ds:
        ban = {ds.tasks[order[0]].workload_hash}
    other, none, _ = lc.training_tasks(data, ban, seed=0)
    assert none == [] and order[0] not in other and min(measured) in other


def test_rows_of_another_host_are_refused_before_anything_is_unpacked(tmp_path):
    """The rows of an earlier invocation were kept when only the CPU model's name matched ("AMD EPYC": a Zen 4's
    rows labelled as this Zen 5's); another host is refused, at once, naming the difference."""
    import json

    import pytest

    other = another_cpu_than_this()  # a fixed Zen 4 was this machine on a Zen 4: the whole benchmark ran
    (tmp_path / "results.json").write_text(json.dumps(dict(host=other, scores=[{"kind": "x"}])))
    with pytest.raises(SystemExit, match="holds rows of another host"):
        lc.main(["--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
