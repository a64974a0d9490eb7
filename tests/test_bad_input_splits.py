"""Splits never destroy or silently replace data: a split name is a name (never an HDF5 path into the file),
a stored split is never replaced by a different one without --replace, and a model is not evaluated on a
split that was replaced since it trained."""

from __future__ import annotations

import hashlib

import pytest

from conftest import FIXTURES
from costlab.cli import main
from costlab.datasets import open_dataset

from test_splits_info import data  # noqa: F401  (the ten-task, two-platform dataset fixture)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _error(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("costlab: error:")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("name", ["/records", "/tasks", "/networks", "/platforms", "records/cpu-a", "a/b", "",
                                  ".", "..", "-x", " x", "x" * 201])
def test_split_name_is_not_a_path(data, capsys, name):  # noqa: F811
    before = _digest(data)
    assert main(["dataset", "split", str(data), f"--name={name}"]) == 2
    assert "bad split name" in _error(capsys)
    assert _digest(data) == before
    with open_dataset(data) as ds:
        assert ds.num_records("cpu-a") > 0 and len(ds.tasks) == 10 and ds.split_names() == []


def test_reading_a_split_by_path_is_refused(data):  # noqa: F811
    from costlab.common.errors import UsageError

    with open_dataset(data) as ds, pytest.raises(UsageError, match="bad split name"):
        ds.split("/records")


def test_other_options_other_default_name(data, capsys):  # noqa: F811
    assert main(["dataset", "split", str(data)]) == 0
    assert main(["dataset", "split", str(data), "--test-fraction", "0.3"]) == 0
    assert main(["dataset", "split", str(data), "--by", "within-task", "--test-fraction", "0.25"]) == 0
    with open_dataset(data) as ds:
        assert ds.split_names() == ["task-s0", "task30-s0", "within-task25-s0"]
        assert ds.split("task-s0").test_fraction == 0.2 and ds.split("task30-s0").test_fraction == 0.3


def test_a_different_split_is_never_silently_replaced(data, capsys):  # noqa: F811
    assert main(["dataset", "split", str(data), "--name", "mine"]) == 0
    with open_dataset(data) as ds:
        first = ds.split("mine")
    capsys.readouterr()
    before = _digest(data)
    assert main(["dataset", "split", str(data), "--name", "mine", "--test-fraction", "0.5"]) == 2
    assert "a different split named 'mine' is stored already" in _error(capsys)
    assert _digest(data) == before
    # the same split again is a no-op
    assert main(["dataset", "split", str(data), "--name", "mine"]) == 0
    assert "unchanged" in capsys.readouterr().err
    with open_dataset(data) as ds:
        assert ds.split("mine").digest == first.digest
    # --replace says it: replaced
    assert main(["dataset", "split", str(data), "--name", "mine", "--test-fraction", "0.5", "--replace"]) == 0
    with open_dataset(data) as ds:
        assert ds.split("mine").test_fraction == 0.5 and ds.split("mine").digest != first.digest


SPLIT_DAMAGE = {  # a stored split damaged, and what the one error line about it says
    "meta not JSON": (lambda g: g.attrs.__setitem__("meta", '{"by": "task", "seed'), "has no valid JSON meta"),
    "meta of no kind": (lambda g: g.attrs.__setitem__("meta", '{"by": "rows"}'), "meta is not a split's"),
    "no test tasks": (lambda g: g.__delitem__("test_tasks"), "has no column 'test_tasks'"),
}


@pytest.mark.parametrize("case", sorted(SPLIT_DAMAGE))
def test_a_damaged_split_is_one_error_and_replaced_only_when_asked(data, capsys, case):  # noqa: F811
    """A stored split whose meta or columns are damaged is one error naming the file and the split wherever it is
    read (``dataset split`` storing it again, training on it), never a traceback; ``--replace`` stores a good one
    in its place."""
    import h5py

    assert main(["dataset", "split", str(data), "--name", "mine"]) == 0
    damage, says = SPLIT_DAMAGE[case]
    with h5py.File(data, "a") as f:
        damage(f["splits/mine"])
    capsys.readouterr()
    before = _digest(data)
    assert main(["dataset", "split", str(data), "--name", "mine"]) == 2
    assert "the split named 'mine' stored already is damaged" in _error(capsys) and _digest(data) == before
    with open_dataset(data) as ds, pytest.raises(Exception, match=f"damaged dataset: split 'mine' {says}"):
        ds.split("mine")
    assert main(["dataset", "split", str(data), "--name", "mine", "--replace"]) == 0
    with open_dataset(data) as ds:
        assert ds.split("mine").by == "task"


@pytest.mark.parametrize("fraction", ["0", "1", "-0.1", "nan", "1.5"])
def test_test_fraction_out_of_range(data, capsys, fraction):  # noqa: F811
    before = _digest(data)
    assert main(["dataset", "split", str(data), f"--test-fraction={fraction}"]) == 2
    assert "test fraction must be between 0 and 1" in _error(capsys)
    assert _digest(data) == before


def test_evaluate_refuses_a_replaced_training_split(tmp_path, capsys):
    data = tmp_path / "a.h5"
    log = FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"
    bert = FIXTURES / "ansor" / "2080ti-bert-B1-head128.json"
    assert main(["dataset", "import-ansor", str(log), "-o", str(data), "--platform", "p"]) == 0
    assert main(["dataset", "import-ansor", str(bert), "-o", str(data)]) == 0  # a GPU: its own platform
    assert main(["dataset", "split", str(data), "--name", "s", "--seed", "0", "--test-fraction", "0.3"]) == 0
    assert main(["featurize", str(data), "--featurizer", "tlp", "--no-progress"]) == 0
    run = tmp_path / "run"
    assert main(["train", "--data", str(data), "--split", "s", "--out", str(run), "--epochs", "1", "--no-progress",
                 "--set", "net.d_model=16", "--set", "net.attention_heads=2",
                 "--set", "data_options.val_fraction=0"]) == 0
    assert main(["evaluate", "--model", str(run), "--data", str(data), "--json"]) == 0
    capsys.readouterr()
    with open_dataset(data) as ds:
        old = ds.split("s")
    seed = next(s for s in range(1, 50) if _other_split(data, s, old))
    assert main(["dataset", "split", str(data), "--name", "s", "--seed", str(seed), "--test-fraction", "0.3",
                 "--replace"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(run), "--data", str(data)]) == 2
    assert "split 's' was replaced since this model trained on it" in _error(capsys)
    # all records, said as such, is still possible
    assert main(["evaluate", "--model", str(run), "--data", str(data), "--split", "none", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["part"] == "all"


def _other_split(data, seed, old) -> bool:
    from costlab.datasets import make_split

    with open_dataset(data) as ds:
        return make_split(ds, "task", seed, 0.3, name="s").digest != old.digest


@pytest.mark.parametrize("seed", ["-1", "99999999999999999999999", str(2 ** 63), "1.5", "x"])
def test_seed_out_of_range_is_one_error_line(data, capsys, seed):  # noqa: F811
    """A negative seed was numpy's traceback; one beyond 64 bits was stored, and `dataset pack` then failed
    after writing its shards: 0 to 2^63 - 1."""
    before = _digest(data)
    assert main(["dataset", "split", str(data), f"--seed={seed}"]) == 2
    assert "--seed must be an integer from 0 to 9,223,372,036,854,775,807" in _error(capsys)
    assert _digest(data) == before
    assert main(["dataset", "split", str(data), f"--seed={2 ** 63 - 1}"]) == 0


def test_a_within_task_split_that_would_hold_out_nothing_is_refused(data, capsys):  # noqa: F811
    """round(0.01 * n) is 0 for every task of up to 50 programs: such a split held out no program and was stored
    as if it were one. Refused, naming the fraction and one that holds out a program of the largest task."""
    before = _digest(data)
    assert main(["dataset", "split", str(data), "--by", "within-task", "--test-fraction", "0.01"]) == 2
    err = _error(capsys)
    assert "--test-fraction 0.01 holds out no program" in err and "the largest task has 17 programs" in err
    assert "give --test-fraction 0.03 or more" in err
    assert _digest(data) == before
    assert main(["dataset", "split", str(data), "--by", "within-task", "--test-fraction", "0.03"]) == 0
    with open_dataset(data) as ds:
        assert len(ds.split("within-task3-s0").test_programs) >= 1


@pytest.mark.parametrize("index", [10, 99, -3])
@pytest.mark.parametrize("argv", [["info"], ["info", "--json"], ["split"], ["split", "--by", "within-task"],
                                  ["split", "--by", "network"]])
def test_records_of_a_task_the_task_table_lacks_are_one_error(data, capsys, index, argv):  # noqa: F811
    """A damaged file whose records name a task past the task table (10 of 10 tasks, 99) or a negative one: `info`
    counted one more task (np.bincount), or failed with numpy's traceback for a negative index, and `split` stored a
    split built on it. One error naming the file, the platform and the index, as reading the records' tasks gives;
    the file is unchanged."""
    import h5py

    with h5py.File(data, "a") as f:
        f["records/cpu-a/task"][3] = index
    before = _digest(data)
    assert main(["dataset", argv[0], str(data), *argv[1:]]) == 2
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert out == "" and len(lines) == 1, lines
    assert lines[0] == (f"costlab: error: {data}: damaged dataset: records of platform 'cpu-a' belong to task {index}, "
                        "and the dataset has 10 tasks")
    assert _digest(data) == before


@pytest.mark.parametrize("by", ["task", "within-task"])
def test_held_out_with_another_by_is_refused(data, capsys, by):  # noqa: F811
    """--held-out names networks to hold out whole: it silently made a split by network of an explicit --by task or
    --by within-task. Refused; --by network says what --held-out implies and is kept."""
    before = _digest(data)
    assert main(["dataset", "split", str(data), "--by", by, "--held-out", "bert"]) == 2
    assert (f"--held-out holds out whole networks, a split by network: it cannot be one by {by} (leave out --by, "
            "or give --by network)") in _error(capsys)
    assert _digest(data) == before
    assert main(["dataset", "split", str(data), "--by", "network", "--held-out", "bert"]) == 0
    with open_dataset(data) as ds:
        assert ds.split("network-bert").by == "network" and ds.split("network-bert").test_tasks.tolist() == [3, 4]


def test_the_same_held_out_networks_are_the_same_split_whatever_the_seed(data, capsys):  # noqa: F811
    """--seed and --test-fraction choose nothing when --held-out names the networks: they were stored with the split
    all the same (it claimed seed 3 and fraction 0.5), and holding out the same networks with other values was refused
    as a different split (--replace advised). Neither is stored now, and the same networks are the same split."""
    assert main(["dataset", "split", str(data), "--held-out", "bert", "--seed", "3", "--test-fraction", "0.5"]) == 0
    assert "(by network, held out bert, 2 test tasks): stored" in capsys.readouterr().err
    with open_dataset(data) as ds:
        first = ds.split("network-bert")
    assert first.seed is None and first.test_fraction is None and first.held_out_networks == ["bert"]
    for argv in ([], ["--seed", "7"], ["--by", "network", "--test-fraction", "0.3"]):
        assert main(["dataset", "split", str(data), "--held-out", "bert", *argv]) == 0
        assert "stored already, unchanged" in capsys.readouterr().err
    with open_dataset(data) as ds:
        assert ds.split_names() == ["network-bert"] and ds.split("network-bert").meta == first.meta
    # other networks under that name are a different split still
    before = _digest(data)
    assert main(["dataset", "split", str(data), "--held-out", "vit", "--name", "network-bert"]) == 2
    assert "a different split named 'network-bert' is stored already (by network, held out bert" in _error(capsys)
    assert _digest(data) == before


def test_a_held_out_split_stored_with_a_seed_is_the_same_split(data, capsys):  # noqa: F811
    """A held-out split stored before the seed and fraction were left out holds the values given then (seed 3,
    fraction 0.5): it stays readable, is the same split as the same networks held out now, and keeps its digest (a
    model that trained on it still evaluates on it)."""
    import json

    import h5py
    import numpy as np

    with h5py.File(data, "a") as f:  # as costlab stored `--held-out bert --seed 3 --test-fraction 0.5`
        g = f.require_group("splits").create_group("network-bert")
        g.attrs["meta"] = json.dumps(dict(by="network", seed=3, test_fraction=0.5, held_out_networks=["bert"]),
                                     sort_keys=True)
        g.create_dataset("test_tasks", data=np.array([3, 4], np.int64))
    assert main(["dataset", "split", str(data), "--held-out", "bert"]) == 0
    assert "stored already, unchanged" in capsys.readouterr().err
    with open_dataset(data) as ds:
        old = ds.split("network-bert")
    assert (old.seed, old.test_fraction, old.test_tasks.tolist()) == (3, 0.5, [3, 4])  # kept as stored
    assert old.digest == hashlib.sha256(b"network" + np.array([3, 4], np.int64).tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("command", ["train", "evaluate", "export-ms"])
def test_training_evaluating_and_exporting_refuse_records_of_a_task_the_table_lacks(trained, tmp_path, capsys,
                                                                                   command):
    """The labels, a split's test part and an export read the task column too: a task index past the table was
    numpy's IndexError (or, in an export, another task's workload for a negative one)."""
    import shutil

    import h5py

    from conftest import TINY

    data = tmp_path / "d.h5"
    shutil.copy(trained / "d.h5", data)
    assert main(["dataset", "split", str(data), "--by", "task"]) == 0
    with h5py.File(data, "a") as f:
        f["records/llvm-x86_64-2c/task"][3] = 99
    argv = {"train": ["train", "--data", str(data), "--out", str(tmp_path / "run"), "--epochs", "1", "--no-progress",
                      *TINY],
            "evaluate": ["evaluate", "--model", "psa", "--data", str(data), "--split", "task-s0"],
            "export-ms": ["dataset", "export-ms", str(data), "--platform", "llvm-x86_64-2c", "-o",
                          str(tmp_path / "db")]}[command]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "damaged dataset: records of platform 'llvm-x86_64-2c' belong to task 99" \
        in err, err


def test_the_same_networks_held_out_in_another_order_are_the_same_split(tmp_path, capsys):
    """The split's name joined the networks in the order they were typed: the same networks in another order were
    stored as a second split. The name is in name order, and a split an earlier costlab stored under the typed
    order is found by its networks."""
    import shutil

    import h5py

    data = tmp_path / "d.h5"
    shutil.copy(FIXTURES / "ms_small.h5", data)
    nets = ["GMM:1,16,16,16", "DEP:1,8,8,16,3,1,1"]
    assert main(["dataset", "split", str(data), "--held-out", nets[0], "--held-out", nets[1]]) == 0
    assert main(["dataset", "split", str(data), "--held-out", nets[1], "--held-out", nets[0], "--seed", "5"]) == 0
    with open_dataset(data) as ds:
        assert ds.split_names() == ["network-DEP_1_8_8_16_3_1_1+GMM_1_16_16_16"]
    with h5py.File(data, "a") as f:  # as an earlier costlab named it: the networks in the typed order
        f.move("splits/network-DEP_1_8_8_16_3_1_1+GMM_1_16_16_16", "splits/network-GMM_1_16_16_16+DEP_1_8_8_16_3_1_1")
    assert main(["dataset", "split", str(data), "--held-out", nets[1], "--held-out", nets[0]]) == 0
    with open_dataset(data) as ds:
        assert ds.split_names() == ["network-GMM_1_16_16_16+DEP_1_8_8_16_3_1_1"]
    # a split of another name that holds out the same networks (named by --name) is not the one --held-out names
    assert main(["dataset", "split", str(data), "--held-out", nets[0], "--name", "mine"]) == 0
    assert main(["dataset", "split", str(data), "--held-out", nets[0]]) == 0
    with open_dataset(data) as ds:
        assert "network-GMM_1_16_16_16" in ds.split_names()
