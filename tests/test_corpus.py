"""The committed pre-training corpus (corpus/, written by `scripts/make_corpus.sh pack`) reads back into a
dataset whose counts are the ones recorded when it was packed, measured on one recorded machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costlab.cli import main

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def test_corpus_unpacks_to_its_recorded_counts(tmp_path, capsys):
    if not (CORPUS / "info.json").exists():
        pytest.fail("corpus/ is not in this checkout (scripts/make_corpus.sh ... pack writes it)")
    want = json.loads((CORPUS / "info.json").read_text())
    assert main(["dataset", "unpack", str(CORPUS), "-o", str(tmp_path / "c.h5")]) == 0
    capsys.readouterr()
    assert main(["dataset", "info", str(tmp_path / "c.h5"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    for key in ("tasks", "records", "failed", "records_per_task", "platforms", "networks", "kernel_classes"):
        assert got[key] == want[key], key
    from costlab.datasets import open_dataset

    with open_dataset(tmp_path / "c.h5") as ds:
        for pid in ds.record_platforms():
            host = ds.platforms[pid].host
            assert host and host.get("cpu_model") and host.get("flags"), pid  # the machine that measured it
