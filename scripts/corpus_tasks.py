"""The tasks of the corpus that get measured, in the order they are measured: every non-injective task
(injective ones have a handful of programs at most) of 0.05-300 MFLOP (smaller ones are all launch
overhead; larger ones take minutes per candidate on 2 cores), taken round-robin over kernel classes so that
any prefix of the list is as varied as the whole. Deterministic: the same dataset gives the same list.

Usage: python scripts/corpus_tasks.py CORPUS.h5 [--limit N] [--chunk K] [--skip FILE]  (prints
comma-separated task indices, one line per chunk of K; FILE lists task indices to leave out, one per line:
those whose design space `measure` found exhausted)
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from costlab.datasets import open_dataset


def corpus_tasks(path, limit: int = 200, min_mflops: float = 0.05, max_mflops: float = 300.0) -> list[int]:
    with open_dataset(path) as ds:
        by_class: dict[str, list] = {}
        for t in ds.tasks:
            if t.dialect != "ms" or t.kernel_class.startswith("injective"):
                continue
            if not min_mflops <= t.flops / 1e6 <= max_mflops:
                continue
            by_class.setdefault(t.kernel_class, []).append(t)
    for tasks in by_class.values():  # a fixed shuffle within each class: by a hash of the workload
        tasks.sort(key=lambda t: hashlib.sha256(t.workload_hash.encode()).hexdigest())
    out: list[int] = []
    while len(out) < limit and any(by_class.values()):
        for cls in sorted(by_class):
            if by_class[cls] and len(out) < limit:
                out.append(by_class[cls].pop(0).index)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--chunk", type=int, default=0)
    p.add_argument("--skip", help="file of task indices to leave out, one per line (a missing file: none)")
    args = p.parse_args()
    skip = set()
    if args.skip and Path(args.skip).exists():
        skip = {int(x) for x in Path(args.skip).read_text().split() if x.strip().isdigit()}
    tasks = [t for t in corpus_tasks(args.data, args.limit) if t not in skip]
    k = args.chunk or len(tasks)
    for a in range(0, len(tasks), k):
        print(",".join(map(str, tasks[a: a + k])))


if __name__ == "__main__":
    main()
