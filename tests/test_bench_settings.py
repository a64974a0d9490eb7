"""The transfer and checks benchmarks continue only what they were started as: the same seed and budgets, the same
network, trials and target; otherwise one table would hold figures of two settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

def test_a_continued_transfer_benchmark_keeps_its_seed_and_budgets(tmp_path):
    """Finished arms are kept and the rest run with the options given: a continued benchmark with another seed,
    --top or per-task budget made one table of arms of two settings. Recorded at the first run, refused after;
    an --out made before the record reads the seed and --transfer-top its arms' commands name."""
    import argparse

    import transfer

    def args(**kw):
        return argparse.Namespace(**dict(dict(seed=0, top=4, more=64, source_per_task=32, full_per_task=200), **kw))

    out = tmp_path / "new"
    out.mkdir()
    transfer._check_settings(out, args())
    transfer._check_settings(out, args())
    with pytest.raises(SystemExit, match=r"holds arms run with full_per_task 200 \(not 10\)"):
        transfer._check_settings(out, args(full_per_task=10))
    old = tmp_path / "old" / "runs" / "bert192-bert256" / "transfer"
    old.mkdir(parents=True)
    (old / "done.json").write_text(json.dumps(dict(cmd=["costlab", "tune", "--seed", "0", "--transfer-top", "4",
                                                         "--json"])))
    with pytest.raises(SystemExit, match=r"seed 0 \(not 7\), top 4 \(not 1\)"):
        transfer._check_settings(tmp_path / "old", args(seed=7, top=1))


def test_the_checks_benchmark_times_only_a_run_of_its_own_network_budget_and_target(tmp_path):
    """A --work that holds a run was taken as it was and its figures recorded under the network and trials asked
    for (with a run of another network no task matched, and the ratio divided by zero)."""
    import argparse

    import checks
    import networks

    work = tmp_path / "w"
    work.mkdir()
    options = dict(network=networks.NETWORKS["bert"], trials=64, target="host")
    (work / "costlab_tune.json").write_text(json.dumps(dict(options=options)))
    checks._tune(argparse.Namespace(network="bert", trials=64, target="host"), work)  # its own: taken as it is
    with pytest.raises(SystemExit, match=r"holds a tuning run of trials 64 \(not 8\)"):
        checks._tune(argparse.Namespace(network="bert", trials=8, target="host"), work)
