"""benchmarks/tuning.py without tuning: the trial curve it reads from a run's MetaSchedule records, plain or as
its ``archive`` keeps them (gzipped), bad lines skipped."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import tuning  # noqa: E402

RUN = ROOT / "benchmarks" / "results" / "exploit-zen5-confirm" / "runs" / "base" / "c2d" / "s0"  # archived, gzipped


def test_the_curve_of_an_archived_run_and_of_its_plain_records(tmp_path):
    lines = gzip.decompress((RUN / "database_tuning_record.json.gz").read_bytes()).decode().splitlines()
    expected = []
    for line in lines:
        secs = json.loads(line)[1][1]
        expected.append(sum(secs) / len(secs) * 1e6 if secs and sum(secs) / len(secs) < 1e3 else math.inf)
    assert tuning._curve(RUN) == expected and len(expected) > 10
    plain = tmp_path / "run"
    plain.mkdir()
    shutil.copy(RUN / "database_workload.json.gz", plain)
    # a damaged line and a failed trial among good ones: the first is skipped, the second is inf
    failed = json.loads(lines[0])
    failed[1][1] = [1e10]
    records = [lines[0], "{not json", json.dumps(failed), *lines[1:]]
    (plain / "database_tuning_record.json").write_text("\n".join(records) + "\n")
    assert tuning._curve(plain) == [expected[0], math.inf, *expected[1:]]
    assert tuning._curve(tmp_path / "nothing") == []
