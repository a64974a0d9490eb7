"""PSA's two ways of reading a program, side by side on the same records: the trace simulator (``mode: trace``)
against the replay + TIR walk (``mode: tir``). Per dataset (its platform with the most records, or
``--records N`` of them drawn with a fixed seed): how many records' estimates differ, by more than 1 %, and the
largest relative difference; with ``--list``, each differing record. No measurement: the figures are the same
on any machine for the same dataset.

    .venv/bin/python benchmarks/psa_modes.py tests/fixtures/h100/cuda_sm90.h5 [MORE.h5 ...] [--records 400]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from costlab.datasets import open_dataset
from costlab.featurizers import create


def compare(path, records: int | None = None) -> dict:
    """The two modes' estimates of one dataset's records, and how far apart they are."""
    with open_dataset(path) as ds:
        platform = max(ds.record_platforms(), key=ds.num_records)
        n = ds.num_records(platform)
        rows = np.arange(n) if not records or records >= n else \
            np.sort(np.random.default_rng(0).choice(n, records, replace=False))
        est = {mode: create("psa", {"mode": mode}).featurize_records(ds, platform, rows)["estimate"]
               for mode in ("trace", "tir")}
    trace, tir = est["trace"], est["tir"]
    both = np.isfinite(trace) & np.isfinite(tir) & (tir > 0)
    rel = np.zeros(len(rows))
    rel[both] = np.abs(trace[both] - tir[both]) / tir[both]
    return dict(path=str(path), platform=platform, records=int(len(rows)), compared=int(both.sum()),
                differ=int(np.count_nonzero(rel > 1e-9)), over_1pct=int(np.count_nonzero(rel > 0.01)),
                max_rel=float(rel.max(initial=0.0)), rows=rows, rel=rel)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="+", help="costlab datasets")
    p.add_argument("--records", type=int, help="records drawn per dataset (seed 0; default: all)")
    p.add_argument("--list", action="store_true", help="each differing record: its row and relative difference")
    args = p.parse_args(argv)
    print("| dataset | platform | records | compared | differ | over 1 % | largest difference |")
    print("|---|---|---|---|---|---|---|")
    for path in args.data:
        r = compare(path, args.records)
        print(f"| {r['path']} | {r['platform']} | {r['records']} | {r['compared']} | {r['differ']} | "
              f"{r['over_1pct']} | {r['max_rel']:.1%} |")
        if args.list:
            for i in np.flatnonzero(r["rel"] > 1e-9):
                print(f"  row {int(r['rows'][i])}: {r['rel'][i]:+.3%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
