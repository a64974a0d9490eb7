"""benchmarks/scale.py on small generated datasets: costlab's reads and the code they replaced give the same
records and figures (checked before timing), and the table has every row."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import scale  # noqa: E402


def test_the_scale_benchmark_runs_and_checks_both_codes_agree(tmp_path, capsys):
    assert scale.main(["--sizes", "1500", "3000", "--pairs", "60", "120", "--work", str(tmp_path),
                       "--json", str(tmp_path / "rows.json")]) == 0
    out = capsys.readouterr().out
    for row in ("costlab chunk of 256 schedules", "replaced chunk of 256 schedules", "costlab batch of 512 TLP rows",
                "costlab pairwise of one task (MB)", "replaced pairwise of one task (MB)"):
        assert row in out, out
    saved = json.loads((tmp_path / "rows.json").read_text())
    assert saved["host"]["cpu_model"] and [r["pair_records"] for r in saved["rows"]] == [60, 120]
    assert saved["rows"][0]["records"] < saved["rows"][1]["records"]
