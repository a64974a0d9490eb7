"""What is in a dataset: tasks, networks, records and failures per platform, kernel classes."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np


def summarize(ds) -> dict:
    records, failed, per_task = {}, {}, {}
    for p in ds.record_platforms():
        table = ds.records(p)
        records[p] = len(table)
        failed[p] = int(np.count_nonzero(~np.isfinite(table.latency())))
        # checked: a task index outside the task table (a damaged file) is one error, not a task counted
        counts = np.bincount(table.checked_task(), minlength=len(ds.tasks)) if len(table) else np.zeros(0, int)
        counts = counts[counts > 0]
        per_task[p] = (
            dict(tasks=int(counts.size), min=int(counts.min()), median=float(np.median(counts)), max=int(counts.max()))
            if counts.size else dict(tasks=0, min=0, median=0.0, max=0)
        )
    return dict(
        path=str(ds.path),
        format=ds.format_version,
        tasks=len(ds.tasks),
        dialects=dict(Counter(t.dialect for t in ds.tasks)),
        networks={n: len(ts) for n, ts in sorted(ds.networks.items())},
        platforms={pid: p.target for pid, p in sorted(ds.platforms.items())},
        records=records,
        failed=failed,
        records_per_task=per_task,
        kernel_classes=dict(Counter(t.kernel_class or "unknown" for t in ds.tasks).most_common()),
        splits=ds.split_names(),
    )


def format_summary(s: dict) -> str:
    lines = [f"{s['path']}  (costlab format {s['format']})",
             f"tasks: {s['tasks']}  " + ", ".join(f"{k}: {v}" for k, v in s["dialects"].items())]
    if s["networks"]:
        lines.append(f"networks: {len(s['networks'])}")
        lines += [f"  {n}: {k} tasks" for n, k in s["networks"].items()]
    else:
        lines.append("networks: none")
    lines.append("platforms:")
    for pid in sorted(set(s["platforms"]) | set(s["records"])):
        n, bad = s["records"].get(pid, 0), s["failed"].get(pid, 0)
        pt = s["records_per_task"].get(pid)
        line = f"  {pid}: {n} records, {bad} failed"
        if pt and pt["tasks"]:
            line += f"; per task (over {pt['tasks']} tasks) min {pt['min']} / median {pt['median']:g} / max {pt['max']}"
        lines.append(line)
    lines.append("kernel classes: " + (", ".join(f"{k} ({v})" for k, v in s["kernel_classes"].items()) or "none"))
    lines.append("splits: " + (", ".join(s["splits"]) or "none"))
    return "\n".join(lines)


def dataset_tasks(ds) -> dict:
    """What tells a dataset's tasks apart whatever file holds them (a copy, a fresh unpack of the same pack): their
    count and a SHA-256 of their dialects and workload hashes in order. A split holds out task indices (and program
    ids), so a dataset whose first ``count`` tasks are these (the same, or grown since) is the one a split of it
    meant."""
    return dict(count=len(ds.tasks), sha256=tasks_sha256(ds, len(ds.tasks)))


def tasks_sha256(ds, count: int) -> str:
    """A SHA-256 of the dialects and workload hashes of the dataset's first ``count`` tasks, in order."""
    h = hashlib.sha256()
    for t in ds.tasks[:count]:
        h.update(f"{t.dialect}:{t.workload_hash}\n".encode())
    return h.hexdigest()
