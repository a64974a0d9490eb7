"""benchmarks/noise_ceiling.py's arithmetic: which programs it re-measures (each task's best quarter by the
recorded latency, thinned evenly, the best tenth marked) and how a re-measurement is scored against the labels."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import noise_ceiling as nc  # noqa: E402


def test_picks_are_each_tasks_best_quarter_with_its_best_tenth_marked():
    task = np.array([0] * 40 + [1] * 20)
    latency = np.concatenate([np.arange(40, 0, -1.0), np.arange(1, 21.0)])  # task 0 reversed: best rows last
    latency[5] = np.inf  # a failed program is never picked
    rows, in_q10 = nc.picks(task, latency, limit=100)
    assert sorted(rows[task[rows] == 0].tolist()) == list(range(30, 40))  # 10 of 39 valid (ceil of a quarter)
    assert sorted(rows[task[rows] == 1].tolist()) == list(range(40, 45))
    assert sorted(rows[in_q10].tolist()) == [36, 37, 38, 39, 40, 41]  # ceil of a tenth, at least two


def test_a_limit_thins_the_quarter_evenly_from_best_to_worst():
    task = np.zeros(400, int)
    latency = np.arange(1, 401.0)
    rows, in_q10 = nc.picks(task, latency, limit=11)
    assert rows.tolist() == [0, 10, 20, 30, 40, 50, 59, 69, 79, 89, 99]  # ranks 0..99, ends kept
    assert in_q10.tolist() == [True, True, True, True, False, False, False, False, False, False, False]


def test_a_prediction_that_is_the_label_scores_one_and_its_reverse_zero():
    task = np.array([0, 0, 0, 0, 1, 1, 1])
    lat = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    q10 = np.array([True, True, False, False, True, True, False])
    same = nc.pair_scores(task, -lat, lat, q10)
    assert same == pytest.approx(dict(pairwise_q25=1.0, top1_q25=1.0, pairwise_q10=1.0, top1_q10=1.0))
    rev = nc.pair_scores(task, lat, lat, q10)
    assert rev["pairwise_q25"] == 0.0 and rev["pairwise_q10"] == 0.0
    assert rev["top1_q25"] == pytest.approx(np.mean([1 / 4, 5 / 7]))  # picks the slowest of each task


def test_scores_leave_out_programs_that_failed_a_round_and_report_the_spread():
    m = dict(task=np.array([0, 0, 0, 0]), recorded=np.array([1.0, 1.1, 1.2, 1.3]),
             first=np.array([1.0, 1.2, 1.1, np.inf]), second=np.array([1.0, 1.1, 1.2, 1.3]),
             in_q10=np.array([True, True, False, False]), names=np.array(["w"] * 4))
    s = nc.scores(m)
    assert (s["programs"], s["failed"], s["tasks"]) == (3, 1, 1)
    assert s["spread_q25"] == pytest.approx(0.2)
    assert s["oracle"]["pairwise_q25"] == pytest.approx(2 / 3)  # (1.1, 1.2) swapped by the re-measurement
    assert s["repeat"]["pairwise_q25"] == pytest.approx(2 / 3)
    assert s["oracle"]["pairwise_q10"] == 1.0


def test_a_kept_measurement_is_read_back_and_new_settings_measure_again(tmp_path, monkeypatch):
    m = dict(row=np.array([3, 1]), task=np.array([0, 0]), recorded=np.array([1.0, 2.0]), first=np.array([1.1, 2.1]),
             second=np.array([1.2, 2.2]), in_q10=np.array([True, False]), names=np.array(["gmm", "gmm"]))
    calls = []
    monkeypatch.setattr(nc, "measure", lambda *a: calls.append(a) or m)
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "lock"))  # a test run holds the machine's own lock
    args = nc.argparse.Namespace(limit=96, number=3, repeat=1, min_repeat_ms=100, again=False)
    saved = tmp_path / "measured-a.npz"
    first = nc.load_or_measure(tmp_path / "d.h5", saved, args)
    again = nc.load_or_measure(tmp_path / "d.h5", saved, args)
    assert len(calls) == 1 and saved.exists()
    assert all(np.array_equal(again[k], first[k]) for k in m) and again["names"].tolist() == ["gmm", "gmm"]
    args.limit = 48  # other settings: the kept one does not answer for them
    nc.load_or_measure(tmp_path / "d.h5", saved, args)
    args.again = True
    nc.load_or_measure(tmp_path / "d.h5", saved, args)
    assert len(calls) == 3


def test_a_model_scored_against_labels_that_did_not_move_scores_the_same(tmp_path):
    import shutil

    from conftest import FIXTURES

    from costlab.datasets import open_dataset

    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    with open_dataset(data) as ds:
        table = ds.records(ds.record_platforms()[0])
        task, latency = table.task, table.latency()
    rows, in_q10 = nc.picks(task, latency, limit=100)
    lat = latency[rows]
    m = dict(row=rows, task=task[rows], recorded=lat, first=lat, second=lat, in_q10=in_q10)
    s = nc.model_scores("psa", data, m)
    assert s["recorded"] == s["remeasured"] and 0.0 <= s["recorded"]["pairwise_q25"] <= 1.0
    # re-measurements that reverse each task's order (picks keeps a task's rows together, fastest first):
    # every pair the model got right against the recorded labels it gets wrong against these
    flipped = lat.copy()
    for t in np.unique(task[rows]):
        where = np.flatnonzero(task[rows] == t)
        flipped[where] = lat[where][::-1]
    m["first"] = m["second"] = flipped
    assert len(np.unique(lat)) == len(lat)  # no tied labels, so the pairs are the same in both
    assert s["recorded"]["pairwise_q25"] + nc.model_scores("psa", data, m)["remeasured"]["pairwise_q25"] == (
        pytest.approx(1.0))
