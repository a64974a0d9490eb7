"""benchmarks/ranking.py without training: its table carries every tail metric (best quarter and tenth, the
model's 1/8/32 picks) of each model's row, and split means average them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import ranking  # noqa: E402

from costlab.costmodels import metrics  # noqa: E402
from costlab.train.report import TAIL_KEYS  # noqa: E402


def _result(pred):
    task = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    latency = np.array([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0])
    score = latency.min() / latency
    return metrics.summary(task, np.asarray(pred, float), latency, score)


def test_rows_and_table_carry_every_tail_metric(capsys):
    good = ranking._row("good", _result([4, 3, 2, 1, 4, 3, 2, 1]))
    bad = ranking._row("bad", _result([1, 2, 3, 4, 1, 2, 3, 4]))
    assert set(TAIL_KEYS) <= set(good) and good["pick1"] == 1.0 and bad["pick1"] == 0.25
    ranking._print_table([good, bad], "t", baseline="bad")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("|")]
    head, rule, row = (ln.strip("|").split("|") for ln in lines[:3])
    assert len(head) == len(rule) == len(row) and "best of 8 picks" in lines[0]
    assert row[[h.strip() for h in head].index("best of 1 pick")].strip() == "1.0000"
    mean = ranking._mean_rows([[good], [bad]])[0]
    assert mean["pick1"] == (1.0 + 0.25) / 2 and mean["splits"] == 2


def test_the_json_rows_carry_the_host_and_the_command(tmp_path):
    """`ranking.py --json`: the rows of every section with the host that trained and timed them (records/s is
    that machine's) and the command line, so a committed table names where it was measured."""
    import json
    import shutil

    from costlab.cli import main
    from costlab.common.host import host_info

    data = tmp_path / "d.h5"
    shutil.copy(Path(__file__).parent / "fixtures" / "ms_small.h5", data)
    assert main(["dataset", "split", str(data), "--by", "task", "--test-fraction", "0.3", "--seed", "0"]) == 0
    argv = ["--section", "models", "--models", "xgb", "--data", str(data), "--split", "task30-s0",
            "--json", str(tmp_path / "rows.json")]
    assert ranking.main(argv) == 0
    out = json.loads((tmp_path / "rows.json").read_text())
    assert out["host"]["cpu_model"] == host_info()["cpu_model"] and out["argv"] == argv
    assert [r["model"] for r in out["sections"]["models"]["task30-s0"]][:1] == ["xgb"]


def test_sections_that_train_refuse_to_run_without_a_split(tmp_path, capsys):
    """Without --split the models, mtl and moa sections trained on every record and scored the same records,
    printed as the test part's figures."""
    import shutil

    import pytest

    data = str(shutil.copy(Path(__file__).parent / "fixtures" / "ms_small.h5", tmp_path / "d.h5"))
    for section in ("models", "mtl", "moa"):
        with pytest.raises(SystemExit) as stop:
            ranking.main(["--section", section, "--models", "xgb", "--data", data])
        assert stop.value.code == 2 and "give --split" in capsys.readouterr().err
