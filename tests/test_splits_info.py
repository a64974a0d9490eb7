"""Splits stored in the dataset and reproducible from the seed; `costlab dataset info` and `split`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costlab.cli import main
from costlab.datasets import DatasetWriter, open_dataset

from test_store import _batch


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.h5"
    with DatasetWriter(path) as w:
        w.add_platform("cpu-a", {"kind": "llvm"})
        w.add_platform("cpu-b", {"kind": "llvm", "num-cores": 1})
        for t in range(10):
            idx = w.add_task(f"wk{t}", "ansor", f"wk{t}", kernel_class="conv2d" if t % 2 else "dense")
            w.add_records("cpu-a", _batch(idx, 8 + t, fail_every=4))
            if t < 4:
                w.add_records("cpu-b", _batch(idx, 5))
        w.set_network("resnet", [(0, 3), (1, 1), (2, 2)])
        w.set_network("bert", [(3, 12), (4, 12)])
        w.set_network("vit", [(5, 6), (6, 6), (7, 1)])
    return path


def test_info_json(data, capsys):
    assert main(["dataset", "info", str(data), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["tasks"] == 10
    assert s["records"] == {"cpu-a": sum(8 + t for t in range(10)), "cpu-b": 20}
    # _batch fails every 4th record index: 0, 4, 8, 12, 16 below 8 + t
    assert s["failed"]["cpu-a"] == sum(len(range(0, 8 + t, 4)) for t in range(10))
    assert s["failed"]["cpu-b"] == 0
    assert s["records_per_task"]["cpu-a"] == {"tasks": 10, "min": 8, "median": 12.5, "max": 17}
    assert s["kernel_classes"] == {"dense": 5, "conv2d": 5}
    assert s["networks"] == {"bert": 2, "resnet": 3, "vit": 3}


def test_info_text(data, capsys):
    assert main(["dataset", "info", str(data)]) == 0
    out = capsys.readouterr().out
    assert "tasks: 10" in out and "cpu-b: 20 records, 0 failed" in out


@pytest.mark.parametrize("by", ["task", "network", "within-task"])
def test_split_reproducible_and_stored(data, tmp_path, by):
    assert main(["dataset", "split", str(data), "--by", by, "--seed", "3", "--test-fraction", "0.3",
                 "--name", "a"]) == 0
    assert main(["dataset", "split", str(data), "--by", by, "--seed", "3", "--test-fraction", "0.3",
                 "--name", "b"]) == 0
    assert main(["dataset", "split", str(data), "--by", by, "--seed", "4", "--test-fraction", "0.3",
                 "--name", "c"]) == 0
    with open_dataset(data) as ds:
        a, b, c = ds.split("a"), ds.split("b"), ds.split("c")
        table = ds.records("cpu-a")
        ma = a.is_test(table.task, table.program_id)
        assert np.array_equal(ma, b.is_test(table.task, table.program_id))
        assert 0 < ma.sum() < len(ma)
        if by == "within-task":
            # every task keeps training records, and a program is test on every platform or on none
            assert all((~ma[table.task == t]).any() for t in range(10))
            tb = ds.records("cpu-b")
            mb = a.is_test(tb.task, tb.program_id)
            common = np.isin(table.program_id, tb.program_id)
            assert sorted(table.program_id[ma & common]) == sorted(tb.program_id[mb])
        else:
            assert set(table.task[ma]) == set(a.test_tasks)
            assert set(table.task[~ma]).isdisjoint(a.test_tasks)
        if by == "network":
            held = {t for n in a.held_out_networks for t, _ in ds.networks[n]}
            assert set(a.test_tasks) == held
        # a different seed gives a different split (these seeds are checked to differ: by network, seed 3 holds
        # out vit, seed 4 bert and resnet)
        assert not np.array_equal(ma, c.is_test(table.task, table.program_id))


def test_split_named_networks(data):
    assert main(["dataset", "split", str(data), "--held-out", "bert,vit"]) == 0
    with open_dataset(data) as ds:
        s = ds.split("network-bert+vit")
        assert s.by == "network" and s.test_tasks.tolist() == [3, 4, 5, 6, 7]


def test_held_out_names_with_commas_and_repeated(data, capsys):
    """The names costlab gives networks and operators have commas (GMM:1,16,16,16): such a network is held out by
    its name, and --held-out is repeatable (one network per flag); comma-separated names still work."""
    with DatasetWriter(data) as w:
        w.set_network("GMM:1,16,16,16", [(8, 1)])
        w.set_network("C2D:1,8,8,8,16,3,1,1", [(9, 1)])
    assert main(["dataset", "split", str(data), "--held-out", "GMM:1,16,16,16", "--name", "one"]) == 0
    assert main(["dataset", "split", str(data), "--held-out", "GMM:1,16,16,16", "--held-out", "C2D:1,8,8,8,16,3,1,1",
                 "--held-out", "bert,vit", "--name", "four"]) == 0
    with open_dataset(data) as ds:
        assert ds.split("one").held_out_networks == ["GMM:1,16,16,16"] and ds.split("one").test_tasks.tolist() == [8]
        four = ds.split("four")
        assert sorted(four.held_out_networks) == sorted(["GMM:1,16,16,16", "C2D:1,8,8,8,16,3,1,1", "bert", "vit"])
        assert four.test_tasks.tolist() == [3, 4, 5, 6, 7, 8, 9]
    capsys.readouterr()
    # a name the dataset lacks is named whole, not cut at its commas
    assert main(["dataset", "split", str(data), "--held-out", "GMM:1,16,16,17"]) == 2
    assert "no network named GMM:1,16,16,17 (" in capsys.readouterr().err


def test_a_network_without_records_is_never_the_held_out_part(data, capsys):
    """TenSet's network info lists every target's networks: one whose tasks have no record here would hold out
    nothing. Drawn, such networks are left out; named, the split is refused in one line."""
    with DatasetWriter(data) as w:
        tasks = [w.add_task(f"gpu{t}", "ansor", f"gpu{t}") for t in range(2)]
        w.set_network("gpu-only", [(t, 1) for t in tasks])
    with open_dataset(data) as ds:
        recorded = set(ds.records("cpu-a").task.tolist())
    for seed in range(6, 18):  # seeds 12 and 16 draw gpu-only first
        assert main(["dataset", "split", str(data), "--by", "network", "--seed", str(seed), "--name", f"n{seed}"]) == 0
        with open_dataset(data) as ds:
            split = ds.split(f"n{seed}")
            assert "gpu-only" not in split.held_out_networks and set(split.test_tasks.tolist()) & recorded
    capsys.readouterr()
    assert main(["dataset", "split", str(data), "--held-out", "gpu-only"]) == 2
    err = capsys.readouterr().err
    assert "gpu-only leaves no task with records in the test part" in err and len(err.strip().splitlines()) == 1


def test_a_network_holding_every_recorded_task_is_never_drawn(data, capsys):
    """Networks share tasks: one that holds every recorded task would leave nothing to train on. A draw skips
    it and holds out others, on every seed, instead of refusing the split for the seeds that draw it first."""
    with open_dataset(data) as ds:
        recorded = sorted(set(ds.records("cpu-a").task.tolist()))
    with DatasetWriter(data) as w:
        w.set_network("everything", [(t, 1) for t in recorded])
    for seed in (0, 1, 12, 16, 22):  # seeds 12, 16 and 22 draw it first
        assert main(["dataset", "split", str(data), "--by", "network", "--seed", str(seed), "--name", f"e{seed}"]) == 0
        with open_dataset(data) as ds:
            split = ds.split(f"e{seed}")
            assert "everything" not in split.held_out_networks and split.held_out_networks
            assert set(split.test_tasks.tolist()) & set(recorded) != set(recorded)
    capsys.readouterr()
    with DatasetWriter(data) as w:  # every network holding every recorded task: no draw holds one out
        for net in ("resnet", "bert", "vit"):
            w.set_network(net, [(t, 1) for t in recorded])
    assert main(["dataset", "split", str(data), "--by", "network", "--name", "none-left"]) == 2
    err = capsys.readouterr().err
    assert "every network with records holds every task with records" in err and len(err.strip().splitlines()) == 1


def test_split_bad_network(data, capsys):
    assert main(["dataset", "split", str(data), "--held-out", "gpt9"]) == 2
    assert "no network named gpt9" in capsys.readouterr().err


def test_the_network_score_counts_only_networks_whose_every_task_is_evaluated(tmp_path, capsys):
    """A task split cuts a network apart: its top-k is then the per-task mean, not a network score of the few
    test tasks it holds; without a split every network is whole and scored."""
    from conftest import FIXTURES

    from costlab.cli import main
    from costlab.train.evaluate import evaluate

    data = tmp_path / "d.h5"
    mlp = FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"
    assert main(["dataset", "import-ansor", str(mlp), "-o", str(data), "--network-per-file"]) == 0
    assert main(["dataset", "split", str(data), "--by", "task", "--seed", "0", "--test-fraction", "0.5",
                 "--name", "t"]) == 0
    cut = evaluate("random", data, split="t", part="test")
    assert cut["networks"] == {} and cut["records"] > 0
    whole = evaluate("random", data, split=None)
    assert list(whole["networks"]) == [mlp.stem]



def test_the_headline_top_k_never_leaves_out_an_evaluated_task_nor_becomes_nan(tmp_path):
    """The headline top-k weighs networks only when they hold every evaluated task: a task split whose test part
    holds one whole network and a task of another is the per-task mean of both tasks. A held-out network is
    scored over its tasks with measured programs: one task never measured here, or a second held-out network
    whose every record failed, neither drops it nor makes the score NaN."""
    import math
    import shutil

    from conftest import FIXTURES

    from costlab.datasets.records import RecordBatch
    from costlab.datasets.splits import Split
    from costlab.train.evaluate import evaluate

    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    with open_dataset(data) as ds:
        platform = ds.record_platforms()[0]
        src = ds.tasks[0]
        sched = ds.records(platform).schedules(np.arange(1))[0]
    with DatasetWriter(data) as w:
        for n in list(w.networks):
            del w.networks[n]
        unmeasured = w.add_task("never-measured", src.dialect, src.workload, name="never-measured")
        failed = w.add_task("all-failed", src.dialect, src.workload, name="all-failed")
        b = RecordBatch()
        for i in range(3):
            b.append(failed, sched, [1e10], 1, 0.0, 10**6 + i)
        w.add_records(platform, b)
        w.set_network("big", [(0, 1), (1, 1), (unmeasured, 1)])
        w.set_network("one", [(3, 1)])
        w.set_network("broken", [(failed, 1)])
        splits = w.h5.require_group("splits")
        Split("t", "task", 0, 0.5, np.array([0, 1, 3], np.int64)).write(splits)
        Split("n", "network", 0, 0.5, np.array([0, 1, unmeasured, failed], np.int64),
              held_out_networks=["big", "broken"]).write(splits)
    by_task = evaluate("random", data, split="t", part="test")
    assert by_task["networks"] == {} and len(by_task["tasks"]) == 3  # "one" is whole, "big" is cut: per-task mean
    by_net = evaluate("random", data, split="n", part="test")
    assert list(by_net["networks"]) == ["big"] and math.isfinite(by_net["top1"]) and math.isfinite(by_net["top5"])


def _tasks(path, sizes: list[int], failing: int | None = None):
    """A dataset of one platform, task t with sizes[t] programs; task ``failing`` with none that ran."""
    with DatasetWriter(path) as w:
        w.add_platform("cpu-a", {"kind": "llvm"})
        for t, n in enumerate(sizes):
            idx = w.add_task(f"wk{t}", "ansor", f"wk{t}")
            w.add_records("cpu-a", _batch(idx, n, fail_every=1 if t == failing else 0))
    return path


def test_a_task_none_of_whose_programs_ran_is_never_held_out(tmp_path):
    """It has nothing to rank: a split by task that held it out scored nan on every metric of its test part (6 of
    20 seeds did, on three tasks and this one)."""
    from costlab.datasets.splits import make_split

    path = _tasks(tmp_path / "d.h5", [20, 20, 20, 3], failing=3)
    with open_dataset(path) as ds:
        held = {int(t) for seed in range(20) for t in make_split(ds, "task", seed, 0.34).test_tasks}
    assert held == {0, 1, 2}


def test_a_fraction_of_tasks_is_not_one_task_more_for_a_rounding_error(tmp_path):
    """0.28 * 25 is 7.000000000000001 in floating point: its ceiling held out 8 of 25 tasks, not 7."""
    from costlab.datasets.splits import make_split

    path = _tasks(tmp_path / "d.h5", [2] * 25)
    with open_dataset(path) as ds:
        assert len(make_split(ds, "task", 0, 0.28).test_tasks) == 7


def test_a_split_within_task_leaves_each_task_a_program_to_train_on(tmp_path, capsys):
    """round(0.75 * 2) held out both programs of a task, and 0.99 every program of the dataset, stored as a split
    that trained on nothing; a task keeps one, and a dataset of one-program tasks is refused."""
    from costlab.datasets.splits import make_split

    path = _tasks(tmp_path / "d.h5", [2, 2, 3])
    with open_dataset(path) as ds:
        split = make_split(ds, "within-task", 0, 0.99)
        assert len(split.test_programs) == 1 + 1 + 2
    ones = _tasks(tmp_path / "ones.h5", [1, 1, 1])
    assert main(["dataset", "split", str(ones), "--by", "within-task", "--test-fraction", "0.9"]) == 2
    assert "holds out every program (its tasks have one program each)" in capsys.readouterr().err


def test_a_network_none_of_whose_programs_ran_is_never_the_held_out_part(tmp_path):
    """As for a task: a network whose every recorded program failed has nothing to rank, and a split by network
    that held it out scored nan."""
    from costlab.datasets.splits import make_split

    path = _tasks(tmp_path / "d.h5", [10, 10, 10, 4], failing=3)
    with DatasetWriter(path) as w:
        w.set_network("a", [(0, 1)])
        w.set_network("b", [(1, 1)])
        w.set_network("c", [(2, 1)])
        w.set_network("failed", [(3, 1)])
    with open_dataset(path) as ds:
        held = {n for seed in range(20) for n in make_split(ds, "network", seed, 0.3).held_out_networks}
    assert "failed" not in held and held


def test_make_split_takes_one_network_by_name_and_names_a_bad_seed_or_fraction(data):
    """``make_split(held_out="bert")`` held out the networks b, e, r, t (none of them: an error naming the
    letters); a seed or test fraction of another type was a TypeError from deep inside numpy."""
    from costlab.common.errors import UsageError
    from costlab.datasets.splits import make_split

    with open_dataset(data) as ds:
        assert make_split(ds, "network", held_out="bert").held_out_networks == ["bert"]
        with pytest.raises(UsageError, match="split seed must be an integer, not 'x'"):
            make_split(ds, "task", seed="x")
        with pytest.raises(UsageError, match="test fraction must be a number between 0 and 1, not '0.2'"):
            make_split(ds, "task", test_fraction="0.2")


def test_a_held_out_networks_new_tasks_are_held_out_too(data):
    """A split by network stored the task indices it held out: a held-out network whose task list was replaced
    later (extracted again at another batch size) had its new tasks trained on, as the tasks of no held-out
    network. They are held out with the rest of it; the tasks it had stay held out."""
    assert main(["dataset", "split", str(data), "--held-out", "bert"]) == 0
    with DatasetWriter(data) as w:
        w.set_network("bert", [(4, 12), (8, 12)])  # task 8 new to it, task 3 no longer its
    with open_dataset(data) as ds:
        split = ds.split("network-bert")
        table = ds.records("cpu-a")
        assert split.test_tasks.tolist() == [3, 4, 8]
        assert set(table.task[split.is_test(table.task)]) == {3, 4, 8}


def test_the_same_held_out_network_split_again_after_its_network_grew_is_the_stored_one(data, capsys):
    """The stored split is compared as it holds out now: splitting the grown network out again is the split stored
    already (it was refused as a different one, and --replace was said to change what models trained on)."""
    assert main(["dataset", "split", str(data), "--held-out", "bert"]) == 0
    with DatasetWriter(data) as w:
        w.set_network("bert", [(3, 12), (4, 12), (8, 12)])
    capsys.readouterr()
    assert main(["dataset", "split", str(data), "--held-out", "bert"]) == 0
    assert "stored already, unchanged" in capsys.readouterr().err
