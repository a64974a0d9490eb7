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


@pytest.mark.parametrize("pack", ["corpus", "corpus/trajectories/llvm-znver5-2c"])
def test_every_committed_pack_records_its_count_so_a_lost_shard_is_an_error(tmp_path, capsys, pack):
    """Each committed pack's meta records its records' count and digest: a copy missing its last shard is refused
    when unpacked (corpus/ was packed before the count was recorded, and unpacked 7,045 of its 10,245 records
    without a word)."""
    import gzip
    import shutil

    src = CORPUS.parent / pack
    meta = json.loads(gzip.open(src / "dataset.json.gz").read())
    assert all(r.get("count") and r.get("digest") for r in meta["records"].values())
    lossy = shutil.copytree(src, tmp_path / "lossy")
    sorted((lossy / "records").rglob("*.jsonl.gz"))[-1].unlink()
    assert main(["dataset", "unpack", str(lossy), "-o", str(tmp_path / "c.h5")]) == 2
    assert f"lists {sum(r['count'] for r in meta['records'].values())}" in capsys.readouterr().err
