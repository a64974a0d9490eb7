"""What a work dir compares when a run or a transfer continues in it, called directly (nothing tuned or measured):
workload specs as the tasks they name, a shipped model's alias as the version it stands for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costlab.common.errors import UsageError

FIXTURE = Path(__file__).parent / "fixtures" / "ms_tune_db"


def test_a_workload_spec_is_compared_as_the_task_it_names(tmp_path):
    """``gmm:1,16,16,16`` continues a run made with ``GMM:1,16,16,16`` (one task, as ``workload_tasks`` tunes it):
    the run records the canonical names, a run recorded before with the specs as typed continues when they name
    the same tasks, and another shape, or a spec that names no workload, is still refused in one line."""
    from costlab.export.tasks import measuring_target
    from costlab.export.tune import TuneOptions, _check_same_run

    target = measuring_target("host", local=True)
    run = tmp_path / "costlab_run.json"

    def check(*workloads):
        opts = TuneOptions(work_dir=str(tmp_path), workloads=list(workloads))
        opts.check()
        return _check_same_run(tmp_path, opts, target)

    recorded = check("gmm: 1, 16,16,16 ")
    assert recorded["workloads"] == ["GMM:1,16,16,16"]  # recorded as the task is named
    run.write_text(json.dumps(recorded))
    check("GMM:1,16,16,16")
    check("gmm:1,16,16,16", "GMM:1,16,16,16")  # the same workload twice is one task
    with pytest.raises(UsageError, match=r"workloads: \['GMM:1,16,16,16'\] -> \['GMM:1,16,16,32'\]"):
        check("gmm:1,16,16,32")
    with pytest.raises(UsageError, match="--workload NOPE:1: unknown te_workload 'NOPE'"):
        check("NOPE:1")
    # a work dir made before specs were canonicalised: recorded as typed, continued with another spelling
    run.write_text(json.dumps(dict(recorded, workloads=["GMM:1,16,16,16"])))
    check("gmm:1,16,16,16")
    run.write_text(json.dumps(dict(recorded, workloads=["gmm:1,16,16,16"])))
    check("GMM:1,16,16,16")
    # a recorded spec this TVM does not know is kept as recorded: refused, not a crash
    run.write_text(json.dumps(dict(recorded, workloads=["NOPE:1"])))
    with pytest.raises(UsageError, match=r"workloads: \['NOPE:1'\] -> \['GMM:1,16,16,16'\]"):
        check("GMM:1,16,16,16")


def test_a_transfer_compares_a_shipped_alias_as_its_version(tmp_path, monkeypatch):
    """``costlab transfer --model x86-cpu`` and ``--model x86-cpu-v2`` (what the alias stands for) continue one
    transfer; once the alias has moved on, continuing with it is refused (its state names the version it ranked
    with), as is a state recorded under the bare alias, as ``costlab tune`` refuses such a run."""
    from costlab.costmodels import shipped
    from costlab.export.transfer.run import TransferOptions, _check_same_transfer, transfer_options

    alias = "x86-cpu"
    version = shipped.aliases()[alias]
    other = next(v for v in shipped.versioned_names() if v.startswith(alias) and v != version)
    state_path = tmp_path / "transfer.json"

    def opts(model):
        return TransferOptions(str(tmp_path), sources=[str(FIXTURE)], workloads=["GMM:1,16,16,16"], model=model)

    def state(model):
        return {"tasks": {"key": {"done": True}}, "options": transfer_options(opts(model))}

    assert transfer_options(opts(alias))["model"] == version
    assert transfer_options(opts(None))["model"] == "psa"  # the draft kind, as before
    _check_same_transfer(state(alias), state_path, opts(version))
    _check_same_transfer(state(version), state_path, opts(alias))
    with pytest.raises(UsageError, match=f"model: '{version}' -> '{other}'"):
        _check_same_transfer(state(alias), state_path, opts(other))
    # a state recorded under the bare alias (before versions were): which version it ranked with is not known
    old = {"tasks": {"key": {"done": True}}, "options": dict(transfer_options(opts(alias)), model=alias)}
    with pytest.raises(UsageError, match=f"model: '{alias}' -> '{version}'"):
        _check_same_transfer(old, state_path, opts(alias))
    # the alias moves on: a transfer it ranked before is not continued with the new version's weights
    made = state(alias)
    table = tmp_path / "aliases.json"
    table.write_text(json.dumps({alias: other}))
    monkeypatch.setattr(shipped, "ALIASES", table)
    with pytest.raises(UsageError, match=f"model: '{version}' -> '{other}'"):
        _check_same_transfer(made, state_path, opts(alias))
