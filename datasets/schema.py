"""The HDF5 layout of a costlab dataset: names, format version, and the ragged-column helpers.

    /                         attrs: costlab_format (int), costlab_version
    /platforms/<id>           attrs: target (JSON), spec (JSON or "")
    /tasks/<column>           one row per task: workload_hash, dialect, workload, name, kernel_class,
                              extra (JSON) as UTF-8 strings; flops (float64)
    /networks/                names (str), and the pairs network (index), task (index), weight (float64)
    /records/<platform>/      task (int32), program_id (uint64), error (int16), timestamp (float64),
                              costs/{values,offsets} (float64 + uint64), schedule/{values,offsets}
                              (UTF-8 bytes + uint64): columnar, chunked, compressed, appendable
    /splits/<name>            attrs: meta (JSON); test_tasks (int64) and, within-task, test_programs (uint64)
    /features/<featurizer>@<version>/<platform>/...   caches keyed by record index (featurizers)

A ragged column stores all values of all rows end to end, plus ``offsets`` (n + 1 entries, starting at 0),
so that variable-length rows compress and read in slices.
"""

from __future__ import annotations

import h5py
import numpy as np

FORMAT_VERSION = 1
FORMAT_ATTR = "costlab_format"

TASK_STR_COLUMNS = ("workload_hash", "dialect", "workload", "name", "kernel_class", "extra")
STR = h5py.string_dtype("utf-8")

CHUNK_ROWS = 1 << 16
CHUNK_BYTES = 1 << 20
COMPRESSION = dict(compression="gzip", compression_opts=1)


def create_column(group: h5py.Group, name: str, dtype, chunk: int = CHUNK_ROWS) -> h5py.Dataset:
    return group.create_dataset(
        name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(chunk,), shuffle=True, **COMPRESSION
    )


def append_column(ds: h5py.Dataset, values: np.ndarray) -> None:
    n = ds.shape[0]
    ds.resize((n + len(values),))
    if len(values):
        ds[n:] = values


def create_ragged(group: h5py.Group, name: str, dtype, chunk: int) -> h5py.Group:
    g = group.create_group(name)
    create_column(g, "values", dtype, chunk)
    off = create_column(g, "offsets", np.uint64)
    append_column(off, np.zeros(1, np.uint64))
    return g


def append_ragged(g: h5py.Group, flat: np.ndarray, lengths: np.ndarray) -> None:
    off = g["offsets"]
    start = int(off[-1])
    ends = start + np.cumsum(lengths, dtype=np.uint64)
    append_column(g["values"], flat)
    append_column(off, ends.astype(np.uint64))


def read_ragged(g: h5py.Group, rows=None) -> tuple[np.ndarray, np.ndarray]:
    """Values and offsets (re-based at 0) of the given rows (all rows when None).

    Rows are read as runs of consecutive indices, so a task whose records lie together costs one read; only the
    offsets between the first and the last row asked for are read (a chunk of records, a batch of one task's, costs
    what its rows do, not a read of the whole column's offsets: that made featurizing and the training batches of a
    large dataset quadratic in its records).
    """
    values = g["values"]
    if rows is None:
        return values[...], g["offsets"][...]
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == 0:
        return np.zeros((0,) + values.shape[1:], values.dtype), np.zeros(1, np.uint64)
    lo, hi = int(rows.min()), int(rows.max())
    offsets = g["offsets"][lo : hi + 2]
    starts, ends = offsets[rows - lo], offsets[rows - lo + 1]
    lengths = (ends - starts).astype(np.int64)
    out = np.empty((int(lengths.sum()),) + values.shape[1:], values.dtype)
    # split into runs of consecutive rows
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    pos = 0
    for run in np.split(np.arange(rows.size), breaks):
        a, b = int(starts[run[0]]), int(ends[run[-1]])
        out[pos : pos + b - a] = values[a:b]
        pos += b - a
    new_off = np.zeros(rows.size + 1, np.uint64)
    new_off[1:] = np.cumsum(lengths)
    return out, new_off


def decode_strings(flat: np.ndarray, offsets: np.ndarray) -> list[str]:
    raw = flat.tobytes()
    off = offsets.tolist()
    return [raw[off[i] : off[i + 1]].decode("utf-8") for i in range(len(off) - 1)]
