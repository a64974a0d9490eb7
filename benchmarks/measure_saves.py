"""``costlab dataset measure`` into a small and a large dataset: batches gathered into fewer saves once a save costs
more (``datasets/measure._Saver``) beside every batch saved in its own transaction (the replaced way,
``SAVE_EVERY = 0``), in one process.

A save copies the whole dataset file (``DatasetWriter``'s transaction): milliseconds for a dataset of one task, a
growing part of a second for one of hundreds of MB. Each dataset gets one MetaSchedule task (GMM 32³, extracted
into it) measured ``--per-task`` times in batches of ``--batch``, from a fresh copy of the dataset for every run, the
two ways in turn, ``--rounds`` times. The large dataset is ``ingest.py``'s generated Ansor log (``--lines``)
imported, with the TLP features of its records cached (as a dataset trained on holds them). Per dataset and way:
the medians of the run's seconds, of its transactions' seconds, and their number; the ratios gathered / every
batch. Everything runs under /tmp/costlab-cpu.lock; the host is recorded with the results.

    .venv/bin/python benchmarks/measure_saves.py --work /tmp/saves --json benchmarks/results/measure-saves-zen5.json
    .venv/bin/python benchmarks/measure_saves.py --work /tmp/saves-big --lines 3200000 \
        --json benchmarks/results/measure-saves-zen5-big.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import generate_ansor  # noqa: E402

from costlab.common.cpu_lock import cpu_lock  # noqa: E402
from costlab.common.host import describe_host, host_info  # noqa: E402
from costlab.datasets import measure as measure_module  # noqa: E402
from costlab.datasets.ansor_log import import_ansor  # noqa: E402
from costlab.datasets import open_dataset  # noqa: E402
from costlab.datasets.extract import extract  # noqa: E402
from costlab.featurizers.cache import build_cache  # noqa: E402

WAYS = {"gathered": measure_module.SAVE_EVERY, "every batch": 0}
WORKLOAD = "GMM:1,32,32,32"


def _datasets(work: Path, lines: int) -> dict[str, Path]:
    small, large = work / "small.h5", work / f"large-{lines}.h5"
    if not small.exists():
        extract(small, workloads=[WORKLOAD])
    if not large.exists():
        log = generate_ansor([lines], work)[lines]
        import_ansor([log], work / "large.tmp.h5", progress=False)
        log.unlink()
        extract(work / "large.tmp.h5", workloads=[WORKLOAD])
        with open_dataset(work / "large.tmp.h5") as ds:
            platforms = [p for p in ds.record_platforms() if ds.num_records(p)]
        for platform in platforms:  # the TLP features of its records, as a dataset trained on holds them
            build_cache(work / "large.tmp.h5", "tlp", platform, progress=False)
        (work / "large.tmp.h5").rename(large)
    return {"small": small, "large": large}


def run(source: Path, way: str, args, tmp: Path) -> dict:
    data = tmp / "run.h5"
    shutil.copyfile(source, data)
    real, saves = measure_module.DatasetWriter, []

    class Timed(real):
        """measure's transactions, each timed from its start (the file's copy) to its end (the rename)."""

        def __enter__(self):
            self._began = time.perf_counter()
            return super().__enter__()

        def __exit__(self, *exc):
            try:
                return super().__exit__(*exc)
            finally:
                saves.append(time.perf_counter() - self._began)

    measure_module.DatasetWriter, measure_module.SAVE_EVERY = Timed, WAYS[way]
    try:
        began = time.perf_counter()
        text = measure_module.measure(data, measure_module.MeasureOptions(
            target=args.target, per_task=args.per_task, batch_size=args.batch, seed=args.seed, number=1, repeat=1,
            min_repeat_ms=0, progress=False, platform="bench", tasks=WORKLOAD))
        seconds = time.perf_counter() - began
    finally:
        measure_module.DatasetWriter, measure_module.SAVE_EVERY = real, WAYS["gathered"]
    if f"measured {args.per_task} candidates" not in text:
        raise SystemExit(f"measure_saves.py: {way}: {text}")
    return dict(seconds=round(seconds, 2), saving_s=round(sum(saves), 3), saves=len(saves),
                mb=round(source.stat().st_size / 1e6, 1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=None, help="folder of the generated datasets (kept for a re-run)")
    p.add_argument("--lines", type=int, default=800_000, help="lines of the large dataset's generated Ansor log")
    p.add_argument("--per-task", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="host")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="costlab-saves-"))
    work.mkdir(parents=True, exist_ok=True)
    sources = _datasets(work, args.lines)
    runs: dict = {size: {w: [] for w in WAYS} for size in sources}
    with tempfile.TemporaryDirectory(dir=work) as tmp, cpu_lock():
        for i in range(args.rounds):
            for size, source in sources.items():
                for way in sorted(WAYS, reverse=bool(i % 2)):
                    r = run(source, way, args, Path(tmp))
                    runs[size][way].append(r)
                    print(f"[{time.strftime('%H:%M:%S')}] round {i} {size} ({r['mb']} MB) {way:11}: {r['seconds']} s, "
                          f"saving {r['saving_s']} s in {r['saves']} saves", flush=True)
    med = {size: {w: {k: float(np.median([r[k] for r in rows])) for k in rows[0]} for w, rows in ways.items()}
           for size, ways in runs.items()}
    out = dict(median=med, runs=runs, per_task=args.per_task, batch=args.batch, lines=args.lines,
               workload=WORKLOAD, target=args.target, rounds=args.rounds, host=host_info(),
               at=time.strftime("%Y-%m-%d %H:%M:%S"))
    print(f"{describe_host(out['host'])}\n{args.per_task} candidates in batches of {args.batch}, median of "
          f"{args.rounds}:")
    print(f"{'dataset':18}{'way':13}{'run (s)':>9}{'saving (s)':>12}{'saves':>7}")
    for size, ways in med.items():
        for way, m in ways.items():
            print(f"{size + ' (' + str(m['mb']) + ' MB)':18}{way:13}{m['seconds']:9.2f}{m['saving_s']:12.2f}"
                  f"{m['saves']:7.0f}")
        g, e = ways["gathered"], ways["every batch"]
        print(f"{'':18}{'gathered/every':13}{g['seconds'] / e['seconds']:9.2f}"
              f"{g['saving_s'] / max(e['saving_s'], 1e-9):12.2f}{g['saves'] / e['saves']:7.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
