"""Regenerates tests/fixtures/zen5_small/: six tasks of the AMD Zen 5 MetaSchedule database in
../shared/data/zen5 (the "new machine" of fine-tuning; see its README), the ones with the smallest workloads,
renumbered, as a MetaSchedule database that `costlab dataset import-ms` reads.

    python scripts/make_zen5_fixture.py [SOURCE_DIR] [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEEP = 6


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    src = Path(argv[0]) if argv else root.parent / "shared" / "data" / "zen5"
    out = Path(argv[1]) if len(argv) > 1 else root / "tests" / "fixtures" / "zen5_small"
    workloads = (src / "database_workload.json").read_text().splitlines()
    keep = sorted(sorted(range(len(workloads)), key=lambda i: (len(workloads[i]), i))[:KEEP])
    index = {old: new for new, old in enumerate(keep)}
    records = []
    for line in (src / "database_tuning_record.json").read_text().splitlines():
        rec = json.loads(line)
        if rec[0] in index:
            records.append(json.dumps([index[rec[0]], rec[1]], separators=(",", ":")))
    out.mkdir(parents=True, exist_ok=True)
    (out / "database_workload.json").write_text("".join(workloads[i] + "\n" for i in keep))
    (out / "database_tuning_record.json").write_text("".join(r + "\n" for r in records))
    print(f"{out}: {len(keep)} tasks (source indices {keep}), {len(records)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
