"""What an evaluation's figures are of: the part of the split, what the top-k is a mean of, and a platform with
records in that part (PSA on two platforms' Ansor logs, a network held out: nothing to train)."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from costlab.cli import main

HELD = "platinum-8358-MLP1-B256-head128"
SPLIT = f"network-{HELD}"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """The 2080 Ti (first platform) and Platinum-8358 log slices, a network each; the Platinum's held out."""
    path = tmp_path_factory.mktemp("labels") / "s.h5"
    assert main(["dataset", "import-ansor", str(FIXTURES / "ansor" / "2080ti-bert-B1-head128.json"),
                 str(FIXTURES / "ansor" / f"{HELD}.json"), "-o", str(path), "--network-per-file"]) == 0
    assert main(["dataset", "split", str(path), "--by", "network", "--held-out", HELD]) == 0
    return path


def _evaluate(capsys, *args) -> tuple[dict, str]:
    assert main(["evaluate", "--model", "psa", *args, "--json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_the_line_names_the_part_and_what_the_top_k_is_a_mean_of(two, capsys):
    """The test and train parts printed the same label, and top-1 is TenSet's weighted score of held-out networks
    in one and a mean over tasks in the other."""
    capsys.readouterr()
    assert main(["evaluate", "--model", "psa", "--data", str(two), "--split", SPLIT]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert f"split {SPLIT}, test part)" in line and "(mean over held-out networks)" in line, line
    assert main(["evaluate", "--model", "psa", "--data", str(two), "--split", SPLIT, "--part", "train"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert f"split {SPLIT}, train part)" in line and "(mean over tasks)" in line, line


def test_the_report_calls_networks_held_out_only_when_they_are(two, tmp_path, capsys):
    assert main(["evaluate", "--model", "psa", "--data", str(two), "--split", "none", "--report",
                 str(tmp_path / "all")]) == 0
    report = (tmp_path / "all" / "report.md").read_text()
    assert "## Networks (weighted top-k)" in report and "Held-out" not in report
    assert "| top1 (mean over whole networks) |" in report
    assert main(["evaluate", "--model", "psa", "--data", str(two), "--split", SPLIT, "--report",
                 str(tmp_path / "held")]) == 0
    assert "## Held-out networks (weighted top-k)" in (tmp_path / "held" / "report.md").read_text()


def test_a_model_of_no_platform_is_evaluated_on_one_with_records_in_the_part(two, capsys):
    """PSA names no platform: it was evaluated on the dataset's first (the 2080 Ti), which has no held-out record,
    and every figure was NaN with nothing said. The platform with records in the part is taken; one given without
    any is warned of."""
    result, _ = _evaluate(capsys, "--data", str(two), "--split", SPLIT)
    assert result["platform"] == "platinum-8358" and result["records"] == 128
    assert result["topk_over"] == "held-out networks"
    result, err = _evaluate(capsys, "--data", str(two), "--split", SPLIT, "--platform", "2080ti")
    assert result["records"] == 0
    assert (f"platform '2080ti' of {two} has no records in split '{SPLIT}' (test part): every figure is NaN "
            "(platforms with records there: platinum-8358; give --platform)") in err
