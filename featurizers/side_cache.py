"""Features of a dataset's platform in a file of their own (a training run's folder), where the dataset's own cache
cannot hold them: a dataset keeps one cache per featurizer and platform, of its own fit, and a fine-tuned model's
featurizer keeps the fit (TLP's vocabulary) of the dataset it was first trained on. Held in memory instead, the
features of a large dataset took gigabytes for as long as the training ran.

The file holds one group, ``features``, laid out as a dataset's cache group (``FeatureCache`` reads it), with the
program ids of the rows done: it is computed again when the featurizer's fingerprint (config, hardware spec) or the
dataset's records differ, and continued where it stopped, with rows the dataset gained since appended. A chunk of rows
is appended whole (a Ctrl-C or SIGTERM is held back meanwhile); arrays longer than ``n_done`` (a process killed
mid-chunk) are cut back to it, and a file HDF5 cannot open (killed mid-write) is made anew. One process writes at a
time (a lock beside the file: every rank of a multi-process training makes the same file).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import h5py
import numpy as np

from costlab.common.errors import InputError
from costlab.common.files import signals_deferred
from costlab.common.locks import take_lock
from costlab.datasets.store import ensure_room
from costlab.featurizers.cache import FeatureCache, append_output

GROUP = "features"


def side_cache(ds, featurizer, platform: str, path, chunk: int = 256, progress: bool = False) -> Path:
    """Make ``path`` hold the features of every record of ``platform`` of the open dataset ``ds``, as ``featurizer``
    computes them; returns the path (``open_side_cache`` reads it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fingerprint = featurizer.platform_fingerprint(ds, platform)
    ids = ds.records(platform).program_id
    with take_lock(path.with_name(f".{path.name}.lock")):
        if _complete(path, fingerprint, ids):  # read only: another process (a rank that made it) may be reading it
            return path
        with _open(path) as f:
            done = _rows_of_these(f, fingerprint, ids)
            if done is None:  # none yet, or of another featurizer config or spec, or of other records
                for name in (GROUP, "program_id"):
                    if name in f:
                        del f[name]
                g = f.create_group(GROUP)
                g.attrs.update(n_done=0, config=_json(featurizer.config), fingerprint=fingerprint)
                f.create_dataset("program_id", shape=(0,), maxshape=(None,), dtype=np.uint64, chunks=(4096,))
                done = 0
            _cut_to(f, done)
            _compute(path, f, ds, featurizer, platform, ids, done, chunk, progress)
    return path


def open_side_cache(path) -> FeatureCache:
    """The features ``side_cache`` wrote to ``path``, read as a dataset's cache is (the file stays open with it)."""
    return FeatureCache(h5py.File(path, "r")[GROUP])


def _rows_of_these(f, fingerprint: str, ids: np.ndarray) -> int | None:
    """The rows the file holds of these records under this fingerprint; None when it holds features of others."""
    g = f.get(GROUP)
    if g is None or "program_id" not in f or g.attrs.get("fingerprint") != fingerprint:
        return None
    done = int(g.attrs["n_done"])
    if done > len(ids) or not np.array_equal(f["program_id"][:done], ids[:done]):
        return None
    return done


def _complete(path: Path, fingerprint: str, ids: np.ndarray) -> bool:
    try:
        with h5py.File(path, "r") as f:
            return _rows_of_these(f, fingerprint, ids) == len(ids)
    except OSError:  # none yet, or one HDF5 cannot open
        return False


def _compute(path, f, ds, featurizer, platform: str, ids: np.ndarray, done: int, chunk: int, progress: bool) -> None:
    from tqdm import tqdm

    g = f[GROUP]
    total = len(ids)
    bar = tqdm(total=total, initial=done, unit="rec", desc=f"featurize {featurizer.key} {platform} (run's own copy)",
               disable=not progress or done >= total)
    space = functools.partial(ensure_room, path, path.parent, kept="the rows computed so far are kept")
    try:
        for a in range(done, total, chunk):
            rows = np.arange(a, min(a + chunk, total))
            feats = featurizer.featurize_records(ds, platform, rows)
            with signals_deferred():  # the chunk whole in every array before n_done counts it
                for key, value in feats.items():
                    append_output(space, g, key, value)
                pid = f["program_id"]
                pid.resize((rows[-1] + 1,))
                pid[a:] = ids[rows]
                g.attrs["n_done"] = int(rows[-1]) + 1
                f.flush()
            bar.update(len(rows))
    finally:
        bar.close()


def _open(path: Path) -> h5py.File:
    """The side file for writing; made anew when HDF5 cannot open it (a process killed while it wrote), never when
    another process has it open (HDF5's own lock: a second training run in the same folder)."""
    try:
        return h5py.File(path, "a")
    except BlockingIOError:
        raise InputError(path, "another process has this file open (a second training run in the same folder?); "
                               "it is left as it is") from None
    except OSError:
        if not path.exists():
            raise
        os.unlink(path)
        return h5py.File(path, "a")


def _cut_to(f, n: int) -> None:
    """Every array of the file back to its first ``n`` rows (what ``n_done`` counts): a chunk appended in part by a
    process killed mid-way is computed again."""
    for obj in [f["program_id"], *f[GROUP].values()]:
        if isinstance(obj, h5py.Group):  # a ragged output: values up to the n-th row's end, n + 1 offsets
            offsets = obj["offsets"]
            end = int(offsets[n]) if offsets.shape[0] > n else int(offsets[-1])
            if offsets.shape[0] > n + 1:
                offsets.resize((n + 1,))
            if obj["values"].shape[0] > end:
                obj["values"].resize((end,) + obj["values"].shape[1:])
        elif obj.shape[0] > n:
            obj.resize((n,) + obj.shape[1:])


def _json(config: dict) -> str:
    return json.dumps(config, sort_keys=True, default=str)
