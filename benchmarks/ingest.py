"""Ingest speed and memory of the two log importers (Ansor/TenSet logs, MetaSchedule databases).

Generates logs of N records by replicating real records (the public Ansor logs in ../shared/data, or the
test fixtures without them; the MetaSchedule database in tests/fixtures/ms_tune_db) with fresh costs and
perturbed schedules, so every record is a new program. Each import runs in a fresh subprocess, which
reports its wall time and its peak resident memory (``getrusage`` max RSS: it includes h5py's and HDF5's C
allocations, which tracemalloc does not see) before and during the import. Running two sizes shows
whether memory grows with the number of records.

    flock /tmp/costlab-cpu.lock .venv/bin/python benchmarks/ingest.py            # 250k and 1M records
    .venv/bin/python benchmarks/ingest.py --sizes 20000 50000 --work /tmp/x    # quick look
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
ANSOR_SOURCES = [REPO.parent / "shared" / "data" / "ansor_logs", REPO / "tests" / "fixtures" / "ansor"]
MS_SOURCE = REPO / "tests" / "fixtures" / "ms_tune_db"
TARGET_RATE = 50_000  # records/s


# -- generated inputs ---------------------------------------------------------------------------------------

def _ansor_source() -> list[dict]:
    for folder in ANSOR_SOURCES:
        files = sorted(folder.rglob("*.json")) if folder.exists() else []
        if files:
            return [orjson.loads(line) for f in files for line in f.read_bytes().splitlines() if line.strip()]
    raise SystemExit("no Ansor logs found to replicate")


def generate_ansor(sizes: list[int], out_dir: Path, seed: int = 0) -> dict[int, Path]:
    """One log per size; the smaller ones are prefixes of the largest. Replica r of a record has the first
    tile length L of its first split step set to L * 100000 + r (so its program id is new, and no two
    replicas collide) and its costs scaled by a random factor; failed records stay failed. Written with ``json.dumps`` separators, as TVM writes them."""
    base = _ansor_source()
    rng = np.random.default_rng(seed)
    sizes = sorted(sizes)
    paths = {n: out_dir / f"ansor-{n}.json" for n in sizes}
    sp_index = [next((k for k, s in enumerate(r["i"][1][1]) if s[0] == "SP" and s[4]), None) for r in base]
    factors = rng.lognormal(0.0, 0.3, size=sizes[-1])

    def lines():
        for i in range(sizes[-1]):
            j = i % len(base)
            rec, r = base[j], i // len(base)
            steps = rec["i"][1][1]
            k = sp_index[j]
            if r and k is not None:
                sp = steps[k]
                steps = steps[:k] + [sp[:4] + [[sp[4][0] * 100_000 + r] + sp[4][1:]] + sp[5:]] + steps[k + 1:]
            elif r:
                steps = steps + [["PR", 0, 0, f"auto_unroll_max_step${r}"]]
            costs, err, all_cost, ts = rec["r"][:4]
            if err == 0:
                costs = [c * float(factors[i]) for c in costs]
            yield (json.dumps({"i": [rec["i"][0], [[], steps]], "r": [costs, err, all_cost, ts + i],
                               "v": rec["v"]}) + "\n").encode()

    _write_prefixes(paths, lines())
    return paths


def generate_ms(sizes: list[int], out_dir: Path, seed: int = 0) -> dict[int, Path]:
    """One MetaSchedule database (work dir) per size, replicating the records of MS_SOURCE: each replica
    gets its sampling decisions perturbed (an integer decision set to a new value) and fresh run_secs."""
    workloads = (MS_SOURCE / "database_workload.json").read_text()
    base = [orjson.loads(line) for line in (MS_SOURCE / "database_tuning_record.json").read_bytes().splitlines()
            if line.strip()]
    rng = np.random.default_rng(seed)
    factors = rng.lognormal(0.0, 0.3, size=max(sizes))
    sizes = sorted(sizes)
    dirs = {n: out_dir / f"ms-{n}" for n in sizes}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
        (d / "database_workload.json").write_text(workloads)

    def lines():
        for i in range(sizes[-1]):
            j = i % len(base)
            widx, (trace, run_secs, target, args_info) = base[j][0], base[j][1][:4]
            r = i // len(base)
            if r:
                trace = _perturb_trace(trace, r)
            if run_secs and all(s < 1e9 for s in run_secs):
                run_secs = [s * float(factors[i]) for s in run_secs]
            yield orjson.dumps([widx, [trace, run_secs, target, args_info]]) + b"\n"

    _write_prefixes({n: d / "database_tuning_record.json" for n, d in dirs.items()}, lines())
    return dirs


def _write_prefixes(paths: dict[int, Path], lines) -> None:
    """Line ``i`` goes to every file whose size (its key) is above ``i``: each smaller log is a prefix of
    the largest, generated once."""
    handles = {n: open(p, "wb") for n, p in paths.items()}
    try:
        for i, line in enumerate(lines):
            for n, fh in handles.items():
                if i < n:
                    fh.write(line)
    finally:
        for fh in handles.values():
            fh.close()


def _perturb_trace(trace, r: int):
    """A trace JSON ``[insts, decisions]`` whose first integer decision D becomes D * 100000 + r (or a new
    decision is appended when there is none), so that every replica is a different program."""
    insts, decisions = trace[0], [list(d) for d in trace[1]]
    for d in decisions:
        if isinstance(d[1], int):
            d[1] = d[1] * 100_000 + r
            return [insts, decisions]
        if isinstance(d[1], list) and d[1] and isinstance(d[1][0], int):
            d[1] = [d[1][0] * 100_000 + r] + d[1][1:]
            return [insts, decisions]
    return [insts, decisions + [[len(insts), r]]]


# -- one measured import, in a fresh process ----------------------------------------------------------------

def _child(kind: str, src: str, out: str) -> None:
    from costlab.datasets.ansor_log import import_ansor

    fn = import_ansor
    if kind == "ms":
        from costlab.datasets.ms_database import import_ms as fn
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    report = fn([src], out, progress=False)
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(dict(seconds=dt, records=report.good, added=sum(report.added.values()), bad=report.bad,
                          rss_before_kb=before, rss_peak_kb=peak)))


def measure(kind: str, src: Path, out: Path) -> dict:
    if out.exists():
        out.unlink()
    proc = subprocess.run([sys.executable, __file__, "--child", kind, str(src), str(out)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{kind} import of {src} failed:\n{proc.stderr}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["out_bytes"] = out.stat().st_size
    res["in_bytes"] = sum(p.stat().st_size for p in ([src] if src.is_file() else src.iterdir()))
    return res


def ms_breakdown(src: Path) -> list[tuple[str, float]]:
    """Microseconds per record of each step of ``import_ms`` on the database ``src``, each run alone over
    all its lines (the inputs a step needs made beforehand and frozen out of the garbage collector's
    passes, its outputs dropped as the import drops them), beside the whole import: what bounds the
    importer's rate. Runs in a child process, so that its memory is not counted in the sizes' figures."""
    import gc

    from costlab.datasets import records as rec
    from costlab.datasets.ms_database import import_ms
    from costlab.metaschedule.databases import parse_record
    from costlab.metaschedule.results import costs_and_error
    from costlab.metaschedule.traces import compact_json

    path = src / "database_tuning_record.json"
    lines = [x for x in path.read_bytes().splitlines() if x.strip()]
    values = [orjson.loads(x) for x in lines]
    parsed = [parse_record(v) for v in values]
    schedules = [compact_json(p[1]) for p in parsed]
    gc.freeze()

    def each(fn, items):
        def run():
            for x in items:
                fn(x)
        return run

    steps = [
        ("read the file's lines", each(len, open(path, "rb"))),
        ("orjson.loads of the line", each(orjson.loads, lines)),
        ("check the record's shape", each(parse_record, values)),
        ("the trace as canonical JSON text", each(lambda p: compact_json(p[1]), parsed)),
        ("program id (blake2b of the text)", each(lambda s: rec.program_id("ms", "0", s), schedules)),
        ("costs and error code", each(lambda p: costs_and_error(p[2]), parsed)),
    ]
    out = []
    for label, fn in steps:
        t0 = time.perf_counter()
        fn()
        out.append((label, (time.perf_counter() - t0) / len(lines) * 1e6))
    with tempfile.TemporaryDirectory() as tmp:
        import_ms([src], Path(tmp) / "warm.h5", progress=False)  # TVM imported and tasks named once
        t0 = time.perf_counter()
        import_ms([src], Path(tmp) / "d.h5", progress=False)
        out.append(("the whole import_ms", (time.perf_counter() - t0) / len(lines) * 1e6))
    return out


def _ms_available() -> str | None:
    try:
        from costlab.datasets.ms_database import import_ms  # noqa: F401
    except ImportError:
        return "costlab.datasets.ms_database.import_ms does not exist yet"
    if not (MS_SOURCE / "database_tuning_record.json").exists():
        return f"no MetaSchedule database to replicate in {MS_SOURCE}"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_000_000])
    ap.add_argument("--ms-sizes", type=int, nargs="+", help="sizes for the MetaSchedule importer (default: --sizes)")
    ap.add_argument("--work", type=Path, help="folder for generated logs and datasets (default: a temp dir)")
    ap.add_argument("--only", choices=["ansor", "ms"])
    ap.add_argument("--breakdown", action="store_true",
                    help="also time each step of the MetaSchedule import on the smallest database")
    ap.add_argument("--breakdown-of", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=3, metavar=("KIND", "SRC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(*args.child)
    if args.breakdown_of:
        return print(json.dumps(ms_breakdown(args.breakdown_of)))

    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="costlab-ingest-")
    work = args.work or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    kinds = [args.only] if args.only else ["ansor", "ms"]
    rows = []
    for kind in kinds:
        if kind == "ms" and (why := _ms_available()):
            print(f"ms: skipped ({why})")
            continue
        t0 = time.perf_counter()
        sizes = (args.ms_sizes or args.sizes) if kind == "ms" else args.sizes
        srcs = (generate_ansor if kind == "ansor" else generate_ms)(sizes, work)
        print(f"{kind}: generated {', '.join(map(str, sizes))} records in {time.perf_counter() - t0:.0f} s",
              flush=True)
        if kind == "ms" and args.breakdown:
            proc = subprocess.run([sys.executable, __file__, "--breakdown-of", str(srcs[min(srcs)])],
                                  capture_output=True, text=True, check=True)
            print(f"ms: microseconds per record of each step ({min(srcs)} records, one process)")
            for label, us in json.loads(proc.stdout.strip().splitlines()[-1]):
                print(f"  {label:36} {us:7.1f}")
        for n, src in srcs.items():
            res = measure(kind, src, work / f"{kind}-{n}.h5")
            rows.append((kind, n, res))
            print(f"  {n} records: {res['seconds']:.1f} s", flush=True)
            src_files = [src] if src.is_file() else list(src.iterdir())
            for f in src_files:  # free the disk as we go
                f.unlink()

    from costlab.common.host import describe_host, host_info

    print()
    print(f"host: {describe_host(host_info())}")  # the seconds and records/s below are this machine's
    print(f"{'importer':8} {'records':>9} {'added':>9} {'seconds':>8} {'records/s':>10} {'vs 50k/s':>8} "
          f"{'RSS before':>10} {'RSS peak':>9} {'in B/rec':>8} {'out B/rec':>9}")
    for kind, n, r in rows:
        rate = r["records"] / r["seconds"]
        print(f"{kind:8} {r['records']:>9} {r['added']:>9} {r['seconds']:>8.1f} {rate:>10,.0f} "
              f"{rate / TARGET_RATE:>7.2f}x {r['rss_before_kb'] / 1024:>8.0f}MB {r['rss_peak_kb'] / 1024:>7.0f}MB "
              f"{r['in_bytes'] / n:>8.0f} {r['out_bytes'] / n:>9.1f}")
    for kind in kinds:
        mine = [(n, r) for k, n, r in rows if k == kind]
        if len(mine) >= 2:
            (n0, r0), (n1, r1) = mine[0], mine[-1]
            grow0, grow1 = r0["rss_peak_kb"] - r0["rss_before_kb"], r1["rss_peak_kb"] - r1["rss_before_kb"]
            print(f"{kind}: {n1 / n0:.0f}x the records -> peak RSS {r1['rss_peak_kb'] / r0['rss_peak_kb']:.2f}x "
                  f"(growth during the import {grow0 / 1024:.0f} MB -> {grow1 / 1024:.0f} MB)")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
