"""Whether featurizing a dataset twice gives the same features: every feature array compared bit for bit.

A model's inputs must be a function of the dataset alone; anything that varies from one process to the next
(an ordering by memory address, a hash seed, a thread race) makes the same records score differently. This
copies a dataset twice, drops any feature cache the copies hold, featurizes each copy in a fresh
``costlab featurize`` process per featurizer, and compares every array under ``features/``. Where an array
differs it counts the differing positions along its first axis (record rows, or positions in a ragged
array's values) and names the first of them.

    .venv/bin/python benchmarks/featurize_determinism.py DATA.h5 --featurizers tlp,pacm,psa --work bench/determinism

Prints one line per array (identical, or which positions differ) and writes ``results.json`` in ``--work``;
exits 1 when any array differs. For the corpus, unpack it first (``costlab dataset unpack corpus -o
corpus.h5``); it featurizes under the CPU lock's rules (nothing else measuring), and a test runs it on a small
fixture.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np

COSTLAB = [sys.executable, "-m", "costlab"]


def fresh_copy(data: Path, path: Path) -> Path:
    """``data`` copied to ``path`` without its feature caches."""
    shutil.copy(data, path)
    with h5py.File(path, "a") as f:
        if "features" in f:
            del f["features"]
    return path


def arrays(path: Path) -> dict[str, np.ndarray]:
    """Every dataset under ``features/`` by its name in the file."""
    out = {}
    with h5py.File(path, "r") as f:
        if "features" in f:
            f["features"].visititems(lambda name, obj: out.__setitem__(f"features/{name}", obj[()])
                                     if isinstance(obj, h5py.Dataset) else None)
    return out


def differing_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices along the first axis where two arrays of one shape differ (NaN equal to NaN)."""
    if a.ndim == 0:
        return np.zeros(0, np.int64) if np.array_equal(a, b, equal_nan=a.dtype.kind == "f") else np.zeros(1, np.int64)
    same = (a == b) | ((a != a) & (b != b)) if a.dtype.kind == "f" else a == b
    return np.flatnonzero(~same.reshape(len(a), -1).all(axis=1))


def compare(first: Path, second: Path) -> dict:
    """Per feature array: ``identical``, or the differing row count and the first of them (rows of a cache's
    ragged values are positions in that array, not record rows)."""
    a, b = arrays(first), arrays(second)
    out = {}
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            out[name] = dict(identical=False, why=f"only in the {'first' if name in a else 'second'} copy")
        elif a[name].shape != b[name].shape or a[name].dtype != b[name].dtype:
            out[name] = dict(identical=False, why=f"shape/dtype {a[name].shape}/{a[name].dtype} against "
                                                  f"{b[name].shape}/{b[name].dtype}")
        else:
            rows = differing_rows(a[name], b[name])
            out[name] = dict(identical=not rows.size, rows=int(rows.size), first_rows=rows[:10].tolist(),
                             sha256=hashlib.sha256(np.ascontiguousarray(a[name]).tobytes()).hexdigest()[:16])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", type=Path)
    p.add_argument("--featurizers", default="tlp,pacm,psa")
    p.add_argument("--work", required=True, type=Path, help="folder for the two copies and results.json")
    args = p.parse_args(argv)
    from costlab.common.files import write_atomically
    from costlab.common.host import describe_host, host_info

    if not args.data.is_file():
        raise SystemExit(f"error: {args.data}: no such dataset")
    args.work.mkdir(parents=True, exist_ok=True)
    copies = [fresh_copy(args.data, args.work / f"copy{i}.h5") for i in (1, 2)]
    seconds = {}
    for name in [f for f in args.featurizers.split(",") if f]:
        for copy in copies:
            started = time.time()
            res = subprocess.run([*COSTLAB, "featurize", str(copy), "--featurizer", name, "--no-progress"],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(f"error: costlab featurize {copy} --featurizer {name} failed:\n{res.stderr[-2000:]}")
            seconds.setdefault(name, []).append(round(time.time() - started, 1))
    result = compare(*copies)
    write_atomically(args.work / "results.json", json.dumps(
        dict(data=str(args.data), host=host_info(), seconds=seconds, at=time.strftime("%Y-%m-%d %H:%M:%S"),
             arrays=result), indent=1).encode())
    print(f"host: {describe_host(host_info())}; {args.data}; featurize seconds per copy {seconds}")
    for name, r in result.items():
        print(f"{name}: " + ("identical" if r["identical"] else r.get("why") or
                             f"{r['rows']} rows differ (first {r['first_rows']})"))
    return 0 if all(r["identical"] for r in result.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
