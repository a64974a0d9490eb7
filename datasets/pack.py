"""A dataset as a folder of compressed JSON files, for version control: ``costlab dataset pack`` / ``unpack``.

    DIR/dataset.json.gz                         platforms (target, spec, host), tasks, networks, splits
    DIR/records/<platform>/<first>-<end>.jsonl.gz  one record per line, rows [first, end) of the platform:
                                                [task, program id, error, timestamp, [costs], schedule]

Packing again after more records were measured writes only a new shard for the new rows (shards already
there are never rewritten), and the files are written deterministically (gzip without a timestamp), so a
repository that commits the folder after every packing grows by the new records only. ``unpack`` builds
the same dataset again: same tasks in the same order, networks, platforms, splits and every record with
its raw costs. Feature caches are not packed (``costlab featurize`` rebuilds them). Nothing is pickled.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from pathlib import Path

import numpy as np
import orjson

from costlab.datasets.errors import InputError
from costlab.datasets.records import RecordBatch
from costlab.datasets.splits import Split
from costlab.datasets.store import DatasetWriter, open_dataset

PACK_FORMAT = 1
META = "dataset.json.gz"
SHARD_ROWS = 4096
_SHARD = re.compile(r"^(\d{9})-(\d{9})\.jsonl\.gz$")


def _write_gz(path: Path, data: bytes) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(data)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _read_gz(path: Path) -> bytes:
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:
        raise InputError(path, f"damaged packed file ({exc})") from None


def shards(folder: Path) -> list[tuple[int, int, Path]]:
    """The record shards of one platform's folder as (first row, end row, path), in row order; a gap or an
    overlap between them is an error."""
    out = []
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        m = _SHARD.match(p.name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), p))
    pos = 0
    for first, end, p in out:
        if first != pos or end <= first:
            raise InputError(p, f"shard does not continue the previous ones (rows {first}-{end}, expected {pos}-)")
        pos = end
    return out


def pack(data, out) -> str:
    """Write (or bring up to date) the packed form of a dataset; returns a summary."""
    data, out = Path(data), Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory")
    lines = []
    with open_dataset(data) as ds:
        meta = dict(
            costlab_pack=PACK_FORMAT,
            platforms={p.id: dict(target=p.target, spec=p.spec, host=p.host) for p in ds.platforms.values()},
            tasks=[dict(workload_hash=t.workload_hash, dialect=t.dialect, workload=t.workload, name=t.name,
                        kernel_class=t.kernel_class, flops=t.flops, extra=t.extra) for t in ds.tasks],
            networks={n: [[t, w] for t, w in v] for n, v in sorted(ds.networks.items())},
            splits={n: _split_json(ds.split(n)) for n in ds.split_names()},
        )
        out.mkdir(parents=True, exist_ok=True)
        for pid in ds.record_platforms():
            folder = out / "records" / pid
            folder.mkdir(parents=True, exist_ok=True)
            have = shards(folder)
            start = have[-1][1] if have else 0
            table = ds.records(pid)
            total = len(table)
            if total < start:
                raise InputError(out, f"the packed platform {pid!r} holds {start} records, the dataset only {total}: "
                                      "it was packed from another dataset (pack into an empty folder)")
            for a in range(start, total, SHARD_ROWS):
                b = min(a + SHARD_ROWS, total)
                _write_gz(folder / f"{a:09d}-{b:09d}.jsonl.gz", _records_jsonl(table, np.arange(a, b)))
            lines.append(f"  {pid}: {total} records ({total - start} new)")
        # written last: a packed folder whose records are complete is never described by a newer meta file
        _write_gz(out / META, orjson.dumps(meta, option=orjson.OPT_SORT_KEYS))
    return f"{out}: packed {data} ({len(meta['tasks'])} tasks)\n" + "\n".join(lines)


def _split_json(s: Split) -> dict:
    return dict(meta=s.meta, test_tasks=np.asarray(s.test_tasks).tolist(),
                test_programs=None if s.test_programs is None else np.asarray(s.test_programs).tolist())


def _records_jsonl(table, rows: np.ndarray) -> bytes:
    task, pid = table.column("task", rows).tolist(), table.column("program_id", rows).tolist()
    error, stamp = table.column("error", rows).tolist(), table.column("timestamp", rows).tolist()
    values, offsets = table.costs(rows)
    values, offsets = values.tolist(), offsets.tolist()
    schedules = table.schedules(rows)
    return b"".join(
        orjson.dumps([task[i], pid[i], error[i], stamp[i], values[offsets[i]: offsets[i + 1]], schedules[i]]) + b"\n"
        for i in range(len(rows)))


def unpack(folder, out) -> str:
    """Build a dataset from its packed form (the output must not exist yet); returns a summary."""
    folder, out = Path(folder), Path(out)
    meta_path = folder / META
    if not meta_path.exists():
        raise InputError(folder, f"not a packed costlab dataset (no {META})")
    if out.exists():
        raise InputError(out, "exists already: unpack builds a new dataset")
    try:
        meta = orjson.loads(_read_gz(meta_path))
    except orjson.JSONDecodeError as exc:
        raise InputError(meta_path, f"not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("costlab_pack") != PACK_FORMAT:
        raise InputError(meta_path, f"not a packed costlab dataset of format {PACK_FORMAT}")
    counts = {}
    with DatasetWriter(out) as w:
        for t in meta["tasks"]:
            w.add_task(t["workload_hash"], t["dialect"], t["workload"], name=t["name"], kernel_class=t["kernel_class"],
                       flops=t["flops"], extra=t["extra"])
        for name, pairs in meta["networks"].items():
            w.set_network(name, [(int(t), float(x)) for t, x in pairs])
        for pid, p in sorted(meta["platforms"].items()):
            w.add_platform(pid, p["target"], p.get("spec"), p.get("host"))
            for _, _, path in shards(folder / "records" / pid):
                batch = RecordBatch()
                for n, line in enumerate(_read_gz(path).splitlines(), 1):
                    try:
                        task, prog, error, stamp, costs, schedule = orjson.loads(line)
                    except (orjson.JSONDecodeError, ValueError, TypeError):
                        raise InputError(path, "damaged record line", line=n) from None
                    batch.append(task, schedule, costs, error, stamp, prog)
                w.add_records(pid, batch)
            counts[pid] = w.added.get(pid, 0)
        group = w.h5.require_group("splits")
        for name, s in meta.get("splits", {}).items():
            m = s["meta"]
            Split(name, m["by"], m["seed"], m["test_fraction"], np.asarray(s["test_tasks"], np.int64),
                  None if s["test_programs"] is None else np.asarray(s["test_programs"], np.uint64),
                  m.get("held_out_networks", [])).write(group)
    return (f"{out}: unpacked {len(meta['tasks'])} tasks from {folder}\n"
            + "\n".join(f"  {pid}: {n} records" for pid, n in counts.items()))
