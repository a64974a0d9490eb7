"""How two platforms of one dataset differ on the same programs (records lined up by program id).

Per task with at least --min-records programs valid on both: the median latency ratio A/B, the Spearman
correlation of the two latency orders, and whether the fastest program is the same. A check that two
"platforms" are really two (a 1-thread and a 2-thread run of the same machine should be ~2x apart and
disagree on the fastest program in many tasks); and the side-by-side figures behind the MTL / MoA benchmarks.

    .venv/bin/python benchmarks/platforms.py ranking.h5 llvm-x86_64-1c llvm-x86_64-2c
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from costlab.datasets import open_dataset
from psa_recall import _spearman


def compare(data, a: str, b: str, min_records: int = 10) -> dict:
    with open_dataset(data) as ds:
        ta, tb = ds.records(a), ds.records(b)
        ia, ib = np.argsort(ta.program_id), np.argsort(tb.program_id)
        common = np.intersect1d(ta.program_id, tb.program_id)
        ia = ia[np.isin(ta.program_id[ia], common)]
        ib = ib[np.isin(tb.program_id[ib], common)]
        task, la, lb = ta.task[ia], ta.latency()[ia], tb.latency()[ib]
    ratios, rhos, same = [], [], 0
    for t in np.unique(task):
        m = (task == t) & np.isfinite(la) & np.isfinite(lb)
        if m.sum() < min_records:
            continue
        ratios.append(float(np.median(la[m] / lb[m])))
        rhos.append(_spearman(la[m], lb[m]))
        same += int(np.argmin(la[m]) == np.argmin(lb[m]))
    return dict(programs=int(common.size), tasks=len(ratios), ratio_median=float(np.median(ratios)),
                ratio_p10=float(np.percentile(ratios, 10)), ratio_p90=float(np.percentile(ratios, 90)),
                spearman_median=float(np.median(rhos)), spearman_min=float(np.min(rhos)), same_best=same)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("a", metavar="PLATFORM_A")
    p.add_argument("b", metavar="PLATFORM_B")
    p.add_argument("--min-records", type=int, default=10)
    args = p.parse_args(argv)
    r = compare(args.data, args.a, args.b, args.min_records)
    print(f"{args.data}: {r['programs']} programs on both {args.a} and {args.b}; {r['tasks']} tasks with "
          f">= {args.min_records} valid on both")
    print(f"  latency {args.a} / {args.b}: median {r['ratio_median']:.2f}x "
          f"(10-90%: {r['ratio_p10']:.2f}-{r['ratio_p90']:.2f}x)")
    print(f"  Spearman of the two latency orders per task: median {r['spearman_median']:+.2f}, "
          f"worst {r['spearman_min']:+.2f}")
    print(f"  same fastest program on both: {r['same_best']} of {r['tasks']} tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
