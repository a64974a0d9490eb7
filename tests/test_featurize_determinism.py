"""benchmarks/featurize_determinism.py: two fresh featurizations of a dataset compared bit for bit, and what it
reports when an array differs."""

from __future__ import annotations

import json
import shutil
import sys

import h5py
import numpy as np

from conftest import FIXTURES, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import featurize_determinism as fd  # noqa: E402


def test_two_fresh_featurizations_of_a_dataset_are_identical(tmp_path):
    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    assert fd.main([str(data), "--featurizers", "pacm,psa", "--work", str(tmp_path / "w")]) == 0
    result = json.loads((tmp_path / "w" / "results.json").read_text())
    names = list(result["arrays"])
    assert any(n.startswith("features/pacm") for n in names) and any(n.startswith("features/psa") for n in names)
    assert all(r["identical"] for r in result["arrays"].values())


def test_a_differing_row_and_a_missing_array_are_named(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    x[1, 0] = np.nan  # NaN in both copies is no difference
    y = x.copy()
    y[3, 2] += 1
    with h5py.File(a, "w") as f:
        f["features/k@1/p/values"] = x
        f["features/k@1/p/only"] = np.zeros(2)
    with h5py.File(b, "w") as f:
        f["features/k@1/p/values"] = y
    r = fd.compare(a, b)
    assert r["features/k@1/p/values"]["rows"] == 1 and r["features/k@1/p/values"]["first_rows"] == [3]
    assert not r["features/k@1/p/only"]["identical"] and "first copy" in r["features/k@1/p/only"]["why"]
    assert fd.compare(a, a)["features/k@1/p/values"]["identical"]
