"""What a work dir compares when a run or a transfer continues in it, called directly (nothing tuned or measured):
workload specs as the tasks they name, a shipped model's alias as the version it stands for."""

from __future__ import annotations

import json
import re
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


def _checked(work, target, **options):
    from costlab.export.tune import TuneOptions, _check_same_run

    opts = TuneOptions(work_dir=str(work), **options)
    opts.check()
    return _check_same_run(work, opts, target)


def test_a_model_directory_is_compared_by_its_weights_and_every_option_that_changes_a_run_is(tmp_path, monkeypatch):
    """A model given as a path was compared as spelled: another model copied over it continued the run (two
    models' choices in one search), the same one as an absolute path was refused. And --head, --first-rounds,
    --task, --transfer-from and --transfer-top were not recorded, so a continuation with other values went on."""
    import shutil

    from costlab.costmodels.shipped import shipped_path
    from costlab.export.tasks import measuring_target

    target = measuring_target("host", local=True)
    work = tmp_path / "w"
    work.mkdir()
    shutil.copytree(shipped_path("x86-cpu-v1"), tmp_path / "mm")
    base = dict(workloads=["GMM:1,16,16,16"], model="mm")
    monkeypatch.chdir(tmp_path)
    (work / "costlab_run.json").write_text(json.dumps(_checked(work, target, **base)))
    _checked(work, target, **dict(base, model=str(tmp_path / "mm")))  # the same weights, spelled another way
    for change, words in ((dict(head="other"), "head: None -> 'other'"),
                          (dict(first_rounds=(4,)), "first_rounds: [8, 16, 32] -> [4]"),
                          (dict(transfer_from=[str(FIXTURE)]), "transfer_from: [] -> ["),
                          (dict(transfer_top=9), "transfer_top: 4 -> 9")):
        with pytest.raises(UsageError, match=re.escape(words)):
            _checked(work, target, **dict(base, **change))
    shutil.rmtree(tmp_path / "mm")
    shutil.copytree(shipped_path("x86-cpu-v2"), tmp_path / "mm")
    with pytest.raises(UsageError, match="model_sha256: "):
        _checked(work, target, **base)


def test_a_run_recorded_before_the_new_options_continues(tmp_path):
    """A run record of an earlier costlab lacks the options recorded since: it continues with them as given."""
    from costlab.export.tasks import measuring_target

    target = measuring_target("host", local=True)
    recorded = _checked(tmp_path, target, workloads=["GMM:1,16,16,16"])
    for key in ("model_sha256", "head", "first_rounds", "task_filter", "transfer_from", "transfer_top", "rpc_key"):
        recorded.pop(key)
    (tmp_path / "costlab_run.json").write_text(json.dumps(recorded))
    _checked(tmp_path, target, workloads=["GMM:1,16,16,16"])


def test_a_record_of_an_option_this_costlab_does_not_know_is_named_in_the_refusal(tmp_path):
    """A run recorded by another costlab with an option this one does not compare: refused (its effect is not known
    here), naming it, never as "other options ()"."""
    from costlab.export.tasks import measuring_target

    target = measuring_target("host", local=True)
    recorded = _checked(tmp_path, target, workloads=["GMM:1,16,16,16"])
    (tmp_path / "costlab_run.json").write_text(json.dumps(dict(recorded, warp_drive=True)))
    with pytest.raises(UsageError, match=r"other options \(warp_drive: True -> None\)"):
        _checked(tmp_path, target, workloads=["GMM:1,16,16,16"])


def test_records_a_transfer_measured_for_another_target_are_not_tuned_for_this_one(tmp_path):
    """A work dir a transfer alone made has no run record: tune took it for any target (its records, measured for
    another CPU, then compared with this one's) and on any machine (the transfer recorded none)."""
    import shutil

    from costlab.export.tasks import measuring_target
    from costlab.export.workdir import WorkDir

    work = tmp_path / "w"
    shutil.copytree(FIXTURE, work)  # records of a generic x86-64 target, no run record
    with pytest.raises(UsageError, match="is not the machine of the run in"):
        _checked(work, measuring_target("llvm -mcpu=znver4 -num-cores=2", local=True),
                 workloads=["GMM:1,16,16,16"])
    _checked(work, measuring_target("llvm -num-cores=2", local=True), workloads=["GMM:1,16,16,16"])
    (work / "transfer.json").write_text(json.dumps({"tasks": {}, "host": {"cpu_model": "Another CPU", "threads": 64}}))
    assert WorkDir(work).host() == {"cpu_model": "Another CPU", "threads": 64}
    with pytest.raises(UsageError, match="holds a run measured on"):
        _checked(work, measuring_target("llvm -num-cores=2", local=True), workloads=["GMM:1,16,16,16"])


def test_exploitations_records_are_not_the_searchs_trials(tmp_path):
    """--exploit (or `costlab exploit`) measures within its own budget: its records counted as the search's, so a
    continued run with more --trials searched nothing."""
    import shutil

    from tvm.s_tir import meta_schedule as ms

    from types import SimpleNamespace

    from costlab.export.tune import _done_per_task, _searched_per_task
    from costlab.export.workdir import WorkDir

    work = tmp_path / "w"
    shutil.copytree(FIXTURE, work)
    database = ms.database.JSONDatabase(work_dir=str(work))
    tasks = [SimpleNamespace(mod=database.get_all_tuning_records()[0].workload.mod)]  # the fixture's first task
    (done,) = _done_per_task(database, tasks)
    assert done > 3 and _searched_per_task(WorkDir(work), database, tasks) == [done]
    key = str(database.commit_workload(tasks[0].mod).as_json()[0])
    (work / "exploit_state.json").write_text(json.dumps({key: {"trials": 3, "radius": 1, "rounds": 1, "improved": 0}}))
    assert _searched_per_task(WorkDir(work), database, tasks) == [done - 3]


@pytest.mark.parametrize("target, words", [("llvm -mcpu=", "-mcpu is empty"),
                                           ("llvm -num-cores=0", "num-cores must be at least 1, not 0")])
def test_an_empty_mcpu_or_no_cores_is_refused(target, words):
    """An empty -mcpu= (an unset $CPU) compiled generic code under LLVM's "Error" lines; -num-cores=0 became this
    machine's cores."""
    from costlab.export.tasks import measuring_target

    with pytest.raises(UsageError, match=words):
        measuring_target(target, local=True)
