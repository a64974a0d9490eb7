"""A dataset as a folder of compressed JSON files, for version control: ``costlab dataset pack`` / ``unpack``.

    DIR/dataset.json.gz                         platforms (target, spec, host), tasks, networks, splits,
                                                and per platform the count and digest of its packed records
    DIR/records/<platform>/<first>-<end>.jsonl.gz  one record per line, rows [first, end) of the platform:
                                                [task, program id, error, timestamp, [costs], schedule]

Packing again after more records were measured writes only a new shard for the new rows (shards already
there are never rewritten), and the files are written deterministically (gzip without a timestamp), so a
repository that commits the folder after every packing grows by the new records only. A folder holds the
pack of one dataset: packing another into it is refused, and so is a pack whose shards do not hold what
their names and the meta file say; a platform the dataset renamed since it was packed is recognised by its
packed records, and its shards move to the new id's folder unchanged, also where the dataset made a new
platform under the old id since (its records are packed anew). ``unpack`` builds
the same dataset again: same tasks in the same order, networks, platforms, splits and every record with
its raw costs. Feature caches are not packed (``costlab featurize`` rebuilds them). Nothing is pickled.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import sys
from pathlib import Path

import numpy as np
import orjson

from costlab.common.errors import InputError, UsageError
from costlab.common.files import write_atomically
from costlab.common.locks import take_lock
from costlab.datasets.names import check_name
from costlab.datasets.records import ERROR_MAX, ERROR_MIN, RecordBatch
from costlab.datasets.splits import SPLIT_KINDS, Split
from costlab.datasets.store import DatasetWriter, open_dataset

PACK_FORMAT = 1
META = "dataset.json.gz"
SHARD_ROWS = 4096
_SHARD = re.compile(r"^(\d{9})-(\d{9})\.jsonl\.gz$")


def _write_gz(path: Path, data: bytes) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(data)
    write_atomically(path, buf.getvalue())


def _read_gz(path: Path) -> bytes:
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:
        raise InputError(path, f"damaged packed file ({exc})") from None


def shards(folder: Path) -> list[tuple[int, int, Path]]:
    """The record shards of one platform's folder as (first row, end row, path), in row order; a gap or an
    overlap between them is an error."""
    out = []
    for p in _shard_files(folder):
        m = _SHARD.match(p.name)
        if not m:
            raise InputError(p, "not a shard's name (FIRST-END.jsonl.gz, the rows as 9 digits each)")
        out.append((int(m.group(1)), int(m.group(2)), p))
    pos = 0
    for first, end, p in out:
        if first != pos or end <= first:
            raise InputError(p, f"shard does not continue the previous ones (rows {first}-{end}, expected {pos}-)")
        pos = end
    return out


def pack(data, out) -> str:
    """Write (or bring up to date) the packed form of a dataset; returns a summary.

    A folder holds the pack of one dataset. Its meta file records, per platform, how many records are
    packed and a digest of them (``_RowDigest``); packing into a folder that holds another dataset's pack
    (other tasks, other platforms, or other records in the rows already packed) is refused before anything
    is written. One pack at a time per folder: a second waits on ``.<folder>.lock`` beside it (two packs of the
    dataset read at different moments would both write rows 0-n shards, and neither a pack nor an unpack of the
    folder would read it again)."""
    data, out = Path(data), Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = take_lock(out.parent / f".{out.name}.lock", on_wait=lambda: print(
            f"costlab: waiting for another command packing into {out} ...", file=sys.stderr))
    except OSError as exc:
        raise InputError(out, f"cannot be written ({exc.strerror or exc})") from None
    with lock:
        return _pack(data, out)


def _pack(data: Path, out: Path) -> str:
    lines = []
    with open_dataset(data) as ds:
        meta = dict(
            costlab_pack=PACK_FORMAT,
            platforms={p.id: dict(target=p.target, spec=p.spec, host=p.host) for p in ds.platforms.values()},
            tasks=[dict(workload_hash=t.workload_hash, dialect=t.dialect, workload=t.workload, name=t.name,
                        kernel_class=t.kernel_class, flops=t.flops, extra=t.extra) for t in ds.tasks],
            networks={n: [[t, w] for t, w in v] for n, v in sorted(ds.networks.items())},
            splits={n: _split_json(ds.split(n)) for n in ds.split_names()},
            records={},
        )
        _check_serialisable(meta, data)
        columns = {pid: (ds.records(pid).task, ds.records(pid).program_id) for pid in ds.record_platforms()}
        starts, renamed = _continued(ds, data, out, columns)
        out.mkdir(parents=True, exist_ok=True)
        for was, pid in renamed.items():
            _move_renamed(out / "records", was, pid)
        if renamed:
            # the meta file of the folder as moved, before any new shard: where the dataset made an old id again
            # (renamed A to B, then a new A), a packing interrupted after some of the new A's shards would leave
            # them under a meta file listing the packed A, and packing again would refuse them
            _write_gz(out / META, orjson.dumps(_moved_meta(_read_meta(out / META), renamed),
                                               option=orjson.OPT_SORT_KEYS))
        for pid, (task, prog) in columns.items():
            folder = out / "records" / pid
            folder.mkdir(parents=True, exist_ok=True)
            table = ds.records(pid)
            start, total = starts[pid], len(task)
            for a in range(start, total, SHARD_ROWS):
                b = min(a + SHARD_ROWS, total)
                _write_gz(folder / f"{a:09d}-{b:09d}.jsonl.gz", _records_jsonl(table, np.arange(a, b)))
            meta["records"][pid] = dict(count=total, digest=_RowDigest().update(task, prog).hexdigest())
            was = next((w for w, p in renamed.items() if p == pid), None)
            lines.append(f"  {pid}: {total} records ({total - start} new)"
                         + (f", packed before as platform {was!r} (renamed)" if was else "")
                         + (f", a new platform (the one packed as {pid!r} is {renamed[pid]!r} now)"
                            if pid in renamed else ""))
        # written last: a packed folder whose records are complete is never described by a newer meta file
        _write_gz(out / META, orjson.dumps(meta, option=orjson.OPT_SORT_KEYS))
    return f"{out}: packed {data} ({len(meta['tasks'])} tasks)\n" + "\n".join(lines)


class _RowDigest:
    """SHA-256 of the (task index, program id) pairs of records in row order: the identity of a platform's
    packed records, by which a pack is only ever continued from the dataset it was packed from, and unpack
    knows its shards are the ones that were packed."""

    def __init__(self):
        self._h = hashlib.sha256()

    def update(self, task, prog) -> "_RowDigest":
        rows = np.empty((len(task), 2), "<u8")
        rows[:, 0] = np.asarray(task, np.int64)
        rows[:, 1] = np.asarray(prog, np.uint64)
        self._h.update(rows.tobytes())
        return self

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _continued(ds, data: Path, out: Path, columns: dict) -> tuple[dict[str, int], dict[str, str]]:
    """Per platform, the first row of ``data`` that ``out`` does not hold yet (0 in a new folder), once it is
    checked that what ``out`` holds was packed from ``data``: its tasks are the dataset's first tasks, its
    platforms are the dataset's, and its records are the dataset's first rows; and the platforms of the pack
    that ``data`` renamed since (``costlab dataset rename-platform``), as {packed id: id in data}, each found
    by its packed records (``_renamed``). A packed id that ``data`` still has is renamed too where another
    platform, new to the pack, holds its packed records and the platform of that id does not (``_holds``):
    renamed, then made again (`rename-platform A B`, then `measure --platform A`); the new one's records are
    packed from its first row. Reads only, writes nothing."""
    def foreign(why: str) -> InputError:
        return InputError(out, f"holds the pack of another dataset ({why}); nothing written: pack {data} "
                               "into its own folder or an empty one")

    old = _read_meta(out / META) if (out / META).exists() else None
    renamed: dict[str, str] = {}
    if old is not None:
        packed = [(t["dialect"], t["workload_hash"]) for t in old["tasks"]]
        mine = [(t.dialect, t.workload_hash) for t in ds.tasks]
        if mine[:len(packed)] != packed:
            raise foreign(f"its {len(packed)} tasks are not the first tasks of {data}")
        for was in sorted(old["platforms"]):
            now = _renamed(ds, out, old, was, columns, renamed)
            if was in ds.platforms:
                if now is None or _holds(ds, out, old, was, columns):
                    continue  # kept: no new platform holds its packed records, or it does too (a copy)
            elif now is None:
                raise foreign(f"platform {was!r}, which {data} does not have, nor a platform holding the records "
                              f"packed as {was!r}, as one renamed by `costlab dataset rename-platform` would")
            renamed[was] = now
    source = {now: was for was, now in renamed.items()}  # the folder a renamed platform's shards are in now
    for d in sorted((out / "records").iterdir()) if (out / "records").is_dir() else []:
        if d.name not in columns and d.name not in renamed and _shard_files(d):
            raise foreign(f"records of platform {d.name!r}, of which {data} has none")
    starts = {}
    for pid, (task, prog) in columns.items():
        if pid in renamed:  # made again after it was renamed: what the pack holds as pid is the renamed one's
            have, known = [], None
        else:
            have = (_renamed_shards(out / "records", source[pid], pid) if pid in source
                    else shards(out / "records" / pid))
            known = (old or {}).get("records", {}).get(source.get(pid, pid))
        start, total = (have[-1][1] if have else 0), len(task)
        if start > total:
            raise foreign(f"{start} records of platform {pid!r}, {data} only {total}")
        vouched = 0
        if known is not None:
            vouched = known["count"]
            if vouched > total:
                raise foreign(f"{vouched} records of platform {pid!r}, {data} only {total}")
            if not _vouched_for(known, task, prog):
                raise foreign(f"its first {vouched} records of platform {pid!r} are not those of {data}")
        # shards the meta file does not vouch for (packed by an earlier costlab, or by a packing interrupted
        # before its meta file was written) are read and compared row by row
        for first, end, path in have:
            if end > vouched:
                batch = _read_shard(path, first, end, len(ds.tasks), set())
                if not (np.array_equal(np.asarray(batch.task, np.int64), task[first:end])
                        and np.array_equal(np.asarray(batch.program_id, np.uint64), prog[first:end])):
                    raise foreign(f"{path.relative_to(out)} holds other records than rows {first}-{end} of "
                                  f"platform {pid!r} of {data}")
        starts[pid] = start
    return starts, renamed


def _renamed_shards(records: Path, was: str, now: str) -> list[tuple[int, int, Path]]:
    """The shards of a platform packed as ``was`` and renamed ``now``: in ``records/was``, or in ``records/now``
    where a packing that moved them was interrupted before it wrote its meta file. Shards in both folders are
    not one platform's: an error."""
    old, new = shards(records / was), shards(records / now)
    if old and new:
        raise InputError(records / now, f"holds shards, and so does {records / was}: the folder of platform {was!r}, "
                                        f"renamed {now!r}, is moved there when it is packed; remove the one that is "
                                        "not the platform's")
    return old or new


def _renamed(ds, out: Path, old: dict, was: str, columns: dict, taken: dict) -> str | None:
    """The platform of ``ds`` that a platform the pack holds as ``was`` (and ``ds`` does not have) was renamed to,
    or None. Renaming moves a platform's records unchanged, so it is the one platform new to the pack whose first
    rows are, column by column (task, program id, error, timestamp, costs, schedule), every record packed as
    ``was``. The (task, program id) digest alone would not do: ``measure --same-programs-as`` gives another
    platform the same programs in the same order, and its timings must never be packed as this platform's. A
    platform with no packed records cannot be told from another: None."""
    known = old.get("records", {}).get(was)
    found = []
    for now, (task, prog) in columns.items():
        if now in old["platforms"] or now in taken.values():
            continue
        # its shards where they are (a packing interrupted after moving them left them in the new folder)
        have = shards(out / "records" / was) or shards(out / "records" / now)
        count = have[-1][1] if have else 0
        if count == 0 or count > len(task):
            continue
        if known is not None:  # the meta file's count and digest first: cheap, and they rule out most platforms
            if known["count"] > count or not _vouched_for(known, task, prog):
                continue
        if _same_records(ds.records(now), have):
            found.append(now)
    return found[0] if len(found) == 1 else None


def _holds(ds, out: Path, old: dict, pid: str, columns: dict) -> bool:
    """Whether the records packed as ``pid`` (in its folder) are, column by column, the first records of the
    platform ``pid`` of ``ds``: not where ``ds`` renamed that platform and made a new one under its id."""
    have = shards(out / "records" / pid)
    if pid not in columns or not have or have[-1][1] > len(columns[pid][0]):
        return False
    task, prog = columns[pid]
    known = old.get("records", {}).get(pid)
    if known is not None and (known["count"] > len(task) or not _vouched_for(known, task, prog)):
        return False
    return _same_records(ds.records(pid), have)


def _vouched_for(known: dict, task: np.ndarray, prog: np.ndarray) -> bool:
    """Whether the first ``known["count"]`` rows (task, program id) are those the meta file's digest vouches for."""
    n = known["count"]
    return _RowDigest().update(task[:n], prog[:n]).hexdigest() == known["digest"]


def _same_records(table, have: list[tuple[int, int, Path]]) -> bool:
    """Whether the shards ``have`` hold, column by column, the rows of ``table`` that their names say."""
    return all(_lines(_read_gz(path)) == _lines(_records_jsonl(table, np.arange(first, end)))
               for first, end, path in have)


def _moved_meta(old: dict, renamed: dict[str, str]) -> dict:
    """The meta file ``old`` with the platforms in ``renamed`` under their new ids (``{packed id: id now}``):
    that of the folder once their shards are moved, before anything new is packed."""
    meta = dict(old, platforms={p: v for p, v in old["platforms"].items() if p not in renamed})
    for was, now in renamed.items():
        meta["platforms"][now] = old["platforms"][was]
    if "records" in old:
        meta["records"] = {p: v for p, v in old["records"].items() if p not in renamed}
        meta["records"].update({now: old["records"][was] for was, now in renamed.items() if was in old["records"]})
    return meta


def _lines(data: bytes) -> list:
    """The parsed lines of a shard: records compared by value, whatever the formatting of their numbers."""
    try:
        return [orjson.loads(line) for line in data.splitlines()]
    except orjson.JSONDecodeError:
        return []  # a damaged shard matches no dataset's records


def _move_renamed(records: Path, was: str, now: str) -> None:
    """Move the shards of a platform packed as ``was`` to the folder of its new id ``now``, unchanged (their lines
    do not name the platform), after every check passed: one rename of the folder, or, where the new folder holds
    other files (never shards: ``_renamed_shards`` refuses that), one rename per shard."""
    src, dst = records / was, records / now
    if not _shard_files(src):
        return  # moved by an earlier packing that was interrupted before it wrote its meta file
    if dst.is_dir() and not any(dst.iterdir()):
        dst.rmdir()
    if not dst.exists():
        src.rename(dst)
        return
    for path in _shard_files(src):
        path.rename(dst / path.name)
    if not any(src.iterdir()):
        src.rmdir()


def _check_serialisable(meta: dict, data: Path) -> None:
    """Refuse, before anything is written, a dataset whose meta file cannot be written (a split's seed beyond
    64 bits, stored by a costlab that did not check it), which would otherwise fail after the shards."""
    for name, s in meta["splits"].items():
        if s["meta"]["seed"] is not None and not -2**63 <= s["meta"]["seed"] < 2**64:  # None: --held-out
            raise InputError(data, f"split {name!r} has seed {s['meta']['seed']}, beyond 64 bits, which the pack "
                                   f"cannot hold: make it again with a smaller --seed (costlab dataset split --name "
                                   f"{name} --replace ...)")
    try:
        orjson.dumps(meta, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise InputError(data, f"cannot be packed ({exc})") from None


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


def pack_platforms(folder) -> dict | None:
    """The platforms a pack holds, as its meta file records them (id -> target, spec, host), read
    with the checks of ``unpack``; None where ``folder`` holds no pack."""
    meta_path = Path(folder) / META
    return _read_meta(meta_path)["platforms"] if meta_path.exists() else None


def unpack(folder, out) -> str:
    """Build a dataset from its packed form (the output must not exist yet); returns a summary.

    Everything read is checked (the meta file's keys and types, task and split indices, each record line,
    each shard's count against its name and the platform's count and digest against the meta file); the
    first fault is an error naming the file and line, and no output file is left."""
    folder, out = Path(folder), Path(out)
    meta_path = folder / META
    if not meta_path.exists():
        raise InputError(folder, f"not a packed costlab dataset (no {META})")
    if out.exists():
        raise InputError(out, "exists already: unpack builds a new dataset")
    meta = _read_meta(meta_path)
    for d in sorted((folder / "records").iterdir()) if (folder / "records").is_dir() else []:
        found = [] if d.name in meta["platforms"] else _shard_files(d)
        if found:
            raise InputError(found[0], f"records of platform {d.name!r}, which {META} does not list")
    ntasks = len(meta["tasks"])
    counts = {}
    with DatasetWriter(out) as w:
        if out.exists():  # made since the check above by another command, whose lock this writer waited for
            raise InputError(out, "exists already (another command wrote it meanwhile): unpack builds a new dataset")
        for t in meta["tasks"]:
            w.add_task(t["workload_hash"], t["dialect"], t["workload"], name=t["name"], kernel_class=t["kernel_class"],
                       flops=t["flops"], extra=t["extra"])
        for name, pairs in meta["networks"].items():
            w.set_network(name, [(int(t), float(x)) for t, x in pairs])
        for pid, p in sorted(meta["platforms"].items()):
            w.add_platform(pid, p["target"], p.get("spec"), p.get("host"))
            folder_p, seen, digest, end = folder / "records" / pid, set(), _RowDigest(), 0
            for first, end, path in shards(folder_p):
                batch = _read_shard(path, first, end, ntasks, seen)
                w.add_records(pid, batch)
                digest.update(batch.task, batch.program_id)
            known = meta.get("records", {}).get(pid)
            if known is not None and known["count"] != end:
                raise InputError(folder_p, f"holds {end} records of platform {pid!r}, {META} lists {known['count']}")
            if known is not None and known["digest"] != digest.hexdigest():
                raise InputError(folder_p, f"holds other records of platform {pid!r} than were packed (their "
                                           f"digest differs from the one in {META})")
            counts[pid] = w.added.get(pid, 0)
        group = w.h5.require_group("splits")
        for name, s in meta["splits"].items():
            m = s["meta"]
            Split(name, m["by"], m["seed"], m["test_fraction"], np.asarray(s["test_tasks"], np.int64),
                  None if s["test_programs"] is None else np.asarray(s["test_programs"], np.uint64),
                  m.get("held_out_networks", [])).write(group)
    return (f"{out}: unpacked {len(meta['tasks'])} tasks from {folder}\n"
            + "\n".join(f"  {pid}: {n} records" for pid, n in counts.items()))


def _shard_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".jsonl.gz")) if folder.is_dir() else []


def _read_shard(path: Path, first: int, end: int, ntasks: int, seen: set) -> RecordBatch:
    """The records of one shard, every line checked; ``seen`` holds the program ids of the platform's earlier
    records (a pack never repeats one) and gets this shard's."""
    batch = RecordBatch()
    for n, line in enumerate(_read_gz(path).splitlines(), 1):
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise InputError(path, "damaged record line (not JSON)", line=n) from None
        if type(rec) is not list or len(rec) != 6:
            raise InputError(path, "damaged record line: not [task, program id, error, timestamp, [costs], "
                                   "schedule]", line=n)
        task, prog, error, stamp, costs, schedule = rec
        if type(task) is not int or not 0 <= task < ntasks:
            raise InputError(path, f"task index {_shown(task)} out of range (the pack has {ntasks} tasks)", line=n)
        if type(prog) is not int or not 0 <= prog < 1 << 64:
            raise InputError(path, f"program id {_shown(prog)} is not a 64-bit unsigned integer", line=n)
        if prog in seen:
            raise InputError(path, f"program id {prog} repeats an earlier record's", line=n)
        if type(error) is not int or not ERROR_MIN <= error <= ERROR_MAX:
            raise InputError(path, f"error code {_shown(error)} is not a 16-bit integer", line=n)
        if type(stamp) not in (int, float):
            raise InputError(path, f"timestamp {_shown(stamp)} is not a number", line=n)
        if type(costs) is not list or not all(type(c) in (int, float) for c in costs):
            raise InputError(path, f"costs {_shown(costs)} are not a list of numbers", line=n)
        if type(schedule) is not str:
            raise InputError(path, f"schedule {_shown(schedule)} is not a string", line=n)
        seen.add(prog)
        batch.append(task, schedule, costs, error, stamp, prog)
    if len(batch) != end - first:
        raise InputError(path, f"holds {len(batch)} records, its name says {end - first} (rows {first}-{end})")
    return batch


def _shown(value) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 60 else text[:57] + "..."


def _read_meta(path: Path) -> dict:
    """The meta file of a pack, checked: every key ``pack`` writes, of the right type, indices in range."""
    try:
        meta = orjson.loads(_read_gz(path))
    except orjson.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("costlab_pack") != PACK_FORMAT:
        raise InputError(path, f"not a packed costlab dataset of format {PACK_FORMAT}")

    def need(obj, key, kinds, where, what):
        if key not in obj:
            raise InputError(path, f"{where}missing key {key!r}")
        if not isinstance(obj[key], kinds) or isinstance(obj[key], bool):
            raise InputError(path, f"{where}{key!r} must be {what}, not {_shown(obj[key])}")
        return obj[key]

    def name(value, what, example, where):
        try:
            check_name(value, what, example)
        except UsageError as exc:
            raise InputError(path, f"{where}{exc}") from None

    tasks = need(meta, "tasks", list, "", "a list")
    keys = {}
    for i, t in enumerate(tasks):
        where = f"task {i}: "
        if not isinstance(t, dict):
            raise InputError(path, f"{where}must be an object, not {_shown(t)}")
        for k in ("workload_hash", "dialect", "workload", "name", "kernel_class"):
            need(t, k, str, where, "a string")
        need(t, "flops", (int, float), where, "a number")
        need(t, "extra", dict, where, "an object")
        key = (t["dialect"], t["workload_hash"])
        if key in keys:
            raise InputError(path, f"{where}repeats task {keys[key]} (same dialect and workload hash)")
        keys[key] = i

    def task_index(value, where):
        if type(value) is not int or not 0 <= value < len(tasks):
            raise InputError(path, f"{where}task index {_shown(value)} out of range (the pack has {len(tasks)} tasks)")

    for net, pairs in need(meta, "networks", dict, "", "an object").items():
        where = f"network {net!r}: "
        if not isinstance(pairs, list):
            raise InputError(path, f"{where}must be a list of [task, weight], not {_shown(pairs)}")
        for pair in pairs:
            if type(pair) is not list or len(pair) != 2 or type(pair[1]) not in (int, float):
                raise InputError(path, f"{where}{_shown(pair)} is not [task, weight]")
            task_index(pair[0], where)
    platforms = need(meta, "platforms", dict, "", "an object")
    for pid, p in platforms.items():
        where = f"platform {pid!r}: "
        name(pid, "platform id", "x86-avx2-2c", "")
        if not isinstance(p, dict):
            raise InputError(path, f"{where}must be an object, not {_shown(p)}")
        need(p, "target", dict, where, "an object")
        for k in ("spec", "host"):
            if p.get(k) is not None and not isinstance(p[k], dict):
                raise InputError(path, f"{where}{k!r} must be an object or null, not {_shown(p[k])}")
    for split, s in need(meta, "splits", dict, "", "an object").items():
        where = f"split {split!r}: "
        name(split, "split name", "task-s0", "")
        if not isinstance(s, dict):
            raise InputError(path, f"{where}must be an object, not {_shown(s)}")
        m = need(s, "meta", dict, where, "an object")
        if m.get("by") not in SPLIT_KINDS:
            raise InputError(path, f"{where}'by' must be one of {', '.join(SPLIT_KINDS)}, not {_shown(m.get('by'))}")
        # networks named by --held-out: a split by network whose seed and test fraction are null (they chose nothing)
        named = m.get("by") == "network" and m.get("held_out_networks") and all(
            k in m and m[k] is None for k in ("seed", "test_fraction"))
        if not named:
            need(m, "seed", int, where, "an integer")
            need(m, "test_fraction", (int, float), where, "a number")
        if not isinstance(m.get("held_out_networks", []), list):
            raise InputError(path, f"{where}'held_out_networks' must be a list")
        for t in need(s, "test_tasks", list, where, "a list"):
            task_index(t, where)
        if "test_programs" not in s:
            raise InputError(path, f"{where}missing key 'test_programs'")
        progs = s["test_programs"]
        if progs is not None and (type(progs) is not list
                                  or not all(type(v) is int and 0 <= v < 1 << 64 for v in progs)):
            raise InputError(path, f"{where}'test_programs' must be null or a list of program ids")
    records = meta.get("records", {})  # absent from packs written before costlab recorded counts and digests
    if not isinstance(records, dict):
        raise InputError(path, f"'records' must be an object, not {_shown(records)}")
    for pid, r in records.items():
        where = f"records of platform {pid!r}: "
        if pid not in platforms:
            raise InputError(path, f"{where}the platform is not listed")
        if not isinstance(r, dict):
            raise InputError(path, f"{where}must be an object, not {_shown(r)}")
        if need(r, "count", int, where, "an integer") < 0:
            raise InputError(path, f"{where}'count' must not be negative")
        need(r, "digest", str, where, "a string")
    return meta
