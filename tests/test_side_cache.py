"""A training run's own copy of features no dataset cache holds (``featurizers.side_cache``): the features a
fine-tuned model's featurizer computes, read from a file in the run's folder instead of held in memory."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest

from costlab.datasets import open_dataset
from costlab.featurizers import create
from costlab.featurizers.cache import append_output, build_cache, features_of, fitted_featurizer
from costlab.featurizers.side_cache import open_side_cache, side_cache

from conftest import FIXTURES

PLATFORM = "llvm-x86_64-2c"


@pytest.fixture()
def data(tmp_path):
    path = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", path)
    return path


def _other_fit(ds):
    """TLP fitted on this dataset with other settings than its cache's (as a model trained elsewhere has)."""
    return fitted_featurizer(ds, create("tlp", {"max_seq_len": 8}))


def _same(a: dict, b: dict) -> bool:
    if set(a) != set(b):
        return False
    for k in a:
        if isinstance(a[k], list):
            if len(a[k]) != len(b[k]) or not all(np.array_equal(x, y) for x, y in zip(a[k], b[k])):
                return False
        elif not np.array_equal(a[k], b[k]):
            return False
    return True


def _holds_every_record(path, ds, featurizer) -> bool:
    """Whether the side file at ``path`` holds the features ``featurizer`` computes for every record of ``ds``."""
    cache = open_side_cache(path)
    try:
        return _same(cache.get(), features_of(ds, featurizer, PLATFORM, np.arange(ds.num_records(PLATFORM))))
    finally:
        cache.close()


class _Counting:
    """A featurizer that counts the records it featurizes, and raises KeyboardInterrupt at its ``stop_at``-th chunk."""

    def __init__(self, inner, stop_at: int | None = None):
        self.inner, self.stop_at, self.rows, self.calls = inner, stop_at, 0, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def featurize_records(self, ds, platform, rows):
        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        self.rows += len(rows)
        return self.inner.featurize_records(ds, platform, rows)


def test_the_side_cache_holds_what_the_featurizer_computes_and_resumes_where_it_stopped(data, tmp_path):
    """PaCM's outputs, ragged (per statement, per pattern token) and fixed: computed in chunks, a Ctrl-C keeps the
    chunks done, a chunk half appended by a killed process is computed again, a complete file nothing again."""
    path = tmp_path / "run" / "features" / f"{PLATFORM}.h5"
    with open_dataset(data) as ds:
        f = create("pacm")
        n = ds.num_records(PLATFORM)
        want = features_of(ds, f, PLATFORM, np.arange(n))
        counting = _Counting(f, stop_at=3)
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C in the third chunk: two chunks of 16 kept
            side_cache(ds, counting, PLATFORM, path, chunk=16)
        with h5py.File(path, "r") as h5:
            assert int(h5["features"].attrs["n_done"]) == 32
        # a process killed half-way through a chunk: arrays longer than n_done, cut back when it goes on
        with h5py.File(path, "a") as h5:
            part = f.featurize_records(ds, PLATFORM, np.arange(32, 40))
            for key in ("stmt", "pattern", "program"):
                append_output(lambda nbytes: None, h5["features"], key, part[key])
        counting = _Counting(f)
        side_cache(ds, counting, PLATFORM, path, chunk=16)
        assert counting.rows == n - 32  # only the rows not done before
        cache = open_side_cache(path)
        try:
            assert cache.n_done == n and _same(cache.get(), want)
            rows = np.array([70, 3, 3, 41])
            assert _same(cache.get(rows), features_of(ds, f, PLATFORM, rows))
        finally:
            cache.close()
        counting = _Counting(f)
        side_cache(ds, counting, PLATFORM, path)
        assert counting.rows == 0  # complete: nothing computed again
    assert sorted(p.name for p in path.parent.iterdir()) == [f".{path.name}.lock", path.name]


def test_a_side_cache_of_other_settings_or_other_records_is_computed_again(data, tmp_path):
    from costlab.cli import main

    path = tmp_path / "f.h5"
    with open_dataset(data) as ds:
        side_cache(ds, _other_fit(ds), PLATFORM, path)
        longer = fitted_featurizer(ds, create("tlp", {"max_seq_len": 12}))
        counting = _Counting(longer)
        side_cache(ds, counting, PLATFORM, path)  # another config: computed again
        assert counting.rows == ds.num_records(PLATFORM)
    # the same path for another dataset whose platform has the same id (other programs): computed again for it
    other = tmp_path / "other.h5"
    assert main(["dataset", "import-ansor", str(FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"),
                 "-o", str(other)]) == 0
    with open_dataset(other) as ds:
        old_id = ds.record_platforms()[0]
    assert main(["dataset", "rename-platform", str(other), old_id, PLATFORM]) == 0
    with open_dataset(other) as ds:
        counting = _Counting(longer)
        side_cache(ds, counting, PLATFORM, path)
        assert counting.rows == ds.num_records(PLATFORM)
        assert _holds_every_record(path, ds, longer)


def test_a_side_file_hdf5_cannot_open_is_made_anew(data, tmp_path):
    path = tmp_path / "f.h5"
    path.write_bytes(b"not an HDF5 file, as one a killed write can leave")
    with open_dataset(data) as ds:
        f = _other_fit(ds)
        side_cache(ds, f, PLATFORM, path)
        assert _holds_every_record(path, ds, f)


def test_training_reads_a_models_own_fit_from_its_run_folder_not_memory(data, tmp_path):
    """The DataModule of a fine-tune whose featurizer is of another fit than the dataset's cache: its features
    are the same as held in memory, read from the run's folder."""
    from costlab.train.data import CostDataModule, DataConfig

    build_cache(data, "tlp", PLATFORM, progress=False)  # the dataset's own fit
    with open_dataset(data) as ds:
        f = _other_fit(ds)
    dms = [CostDataModule(DataConfig(data=str(data), featurizer="tlp", val_fraction=0.0, features_in_memory_mb=mb),
                          featurizer=f.to_json(), feature_dir=where)
           for where, mb in ((tmp_path / "run" / "features", 0), (tmp_path / "run2" / "features", 1024), (None, 0))]
    for dm in dms:
        dm.setup()
    side, loaded, memory = dms
    assert not side._mem_feats and (tmp_path / "run" / "features" / f"{PLATFORM}.h5").exists()
    assert loaded._mem_feats and (tmp_path / "run2" / "features" / f"{PLATFORM}.h5").exists()  # within the budget
    rows = np.array([5, 0, 63, 5, 17])
    try:
        for dm in (side, loaded):
            assert _same(dm.read_features(rows), memory.read_features(rows))
            assert np.array_equal(dm.readable(rows), memory.readable(rows))
    finally:
        side.teardown()
        loaded.teardown()


def test_a_side_file_another_process_has_open_is_left_alone(data, tmp_path):
    """A second training run in the same folder, reading the file while this one finds it incomplete (its dataset
    gained records), gets one clear error: the file is neither made anew nor changed."""
    import subprocess
    import sys

    from costlab.common.errors import InputError

    path = tmp_path / "f.h5"
    with open_dataset(data) as ds:
        f = _other_fit(ds)
        side_cache(ds, f, PLATFORM, path, chunk=16)
    with h5py.File(path, "a") as h5:  # as if the dataset had 16 records more than the file holds
        h5["features"].attrs["n_done"] = 64
    size = path.stat().st_size
    reader = subprocess.Popen([sys.executable, "-c", f"import h5py, sys; f = h5py.File({str(path)!r}, 'r'); "
                               "print('open', flush=True); sys.stdin.read()"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        with open_dataset(data) as ds, pytest.raises(InputError, match="another process has this file open"):
            side_cache(ds, f, PLATFORM, path)
    finally:
        reader.communicate("", timeout=60)
    assert path.stat().st_size == size


def test_training_on_a_dataset_no_transaction_can_write_featurizes_into_the_run_folder(data, tmp_path, monkeypatch,
                                                                                       capsys):
    """A dataset in a folder this user cannot write (a team's read-only corpus) and without a cache of the featurizer:
    training featurizes into its run's folder, fitted as `costlab featurize` fits it, where it stopped with "cannot
    write"; the dataset is not touched, and the run's copy is removed once the model is written."""
    import os

    from conftest import TINY
    from costlab.cli import main
    from costlab.train.predict import load_predictor

    real = os.access

    def access(path, mode, *args, **kwargs):  # the folder as a read-only mount has it (root passes permissions)
        if os.path.realpath(path) == os.path.realpath(data.parent) and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    before = data.read_bytes()
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--out", str(out), "--epochs", "1", "--no-progress", *TINY]) == 0
    assert "into " + str(out / "features") + " (the dataset cannot be written)" in capsys.readouterr().err
    assert data.read_bytes() == before and not (out / "features").exists()
    pred = load_predictor(str(out))
    with open_dataset(data) as ds:
        assert pred.featurizer.config == fitted_featurizer(ds, "tlp").config
        rows = np.arange(8)
        assert pred.predict(features_of(ds, pred.featurizer, PLATFORM, rows)).shape == (8, 1)


def test_a_cache_within_the_memory_budget_is_loaded_whole_and_trains_the_same(data, tmp_path):
    """The dataset's cache is loaded into memory when it fits ``features_in_memory_mb`` (batches read from the file
    decompress chunks each time), read from the file above it; the batches, and so the trained model, are the same."""
    from conftest import TINY
    from costlab.cli import main
    from costlab.train.data import CostDataModule, DataConfig

    build_cache(data, "tlp", PLATFORM, progress=False)
    dms = [CostDataModule(DataConfig(data=str(data), featurizer="tlp", val_fraction=0.0, features_in_memory_mb=mb))
           for mb in (1024, 0.001, 0)]
    for dm in dms:
        dm.setup()
    loaded, over, disk = dms
    assert loaded._mem_feats and not over._mem_feats and not disk._mem_feats
    rows = np.array([5, 0, 63, 5, 17])
    try:
        assert _same(loaded.read_features(rows), disk.read_features(rows))
    finally:
        for dm in dms:
            dm.teardown()
    for mb in (1024, 0):
        assert main(["train", "--data", str(data), "--out", str(tmp_path / f"run{mb}"), "--epochs", "2", "--no-progress",
                     *TINY, "--set", f"data_options.features_in_memory_mb={mb}"]) == 0
    assert ((tmp_path / "run1024" / "model" / "model.safetensors").read_bytes()
            == (tmp_path / "run0" / "model" / "model.safetensors").read_bytes())


def test_features_come_from_the_opening_the_labels_came_from_when_a_featurize_replaces_the_file_meanwhile(
        data, monkeypatch):
    """A `costlab featurize` of other settings that renames a new file over the dataset while training sets up
    (its labels being built): the features loaded are of the file the labels and the featurizer were taken from (a
    second opening found no cache of this featurizer there, and the set-up ended in a traceback)."""
    import costlab.train.data as tdata
    from costlab.cli import main
    from costlab.train.data import CostDataModule, DataConfig

    build_cache(data, "tlp", PLATFORM, progress=False)
    real = tdata.build_label_table

    def meanwhile(*args, **kwargs):
        assert main(["featurize", str(data), "--featurizer", "tlp", "--config", '{"num_slots": 20}',
                     "--no-progress"]) == 0
        return real(*args, **kwargs)

    monkeypatch.setattr(tdata, "build_label_table", meanwhile)
    dm = CostDataModule(DataConfig(data=str(data), featurizer="tlp", val_fraction=0.0))
    dm.setup()
    try:
        assert dm._mem_feats and dm.featurizer.config["num_slots"] == 16
        assert dm.read_features(np.arange(4))["numeric"].shape[2] == 16
    finally:
        dm.teardown()
