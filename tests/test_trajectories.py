"""The trajectory corpus job (scripts/make_trajectories.py): a task list that holds none of the benchmarks'
workloads, a run that resumes without measuring a program twice, one folder per host CPU that another CPU's run
refuses, and the committed pack that unpacks with its host."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from conftest import REPO

from costlab.cli import main
from costlab.common.host import FAKE_HOST_ENV, host_info
from costlab.datasets import open_dataset

sys.path.insert(0, str(REPO / "scripts"))
import make_trajectories as mt  # noqa: E402


def test_a_job_waiting_for_the_cpu_lock_says_so(tmp_path, capfd):
    """A job started under ``flock`` on the lock file waits for itself: it says what it waits for and why."""
    import threading

    from costlab.common.cpu_lock import cpu_lock
    from costlab.common.locks import take_lock

    lock = tmp_path / "cpu.lock"
    held = take_lock(lock)
    entered = threading.Event()

    def job():
        with cpu_lock(str(lock)):
            entered.set()

    worker = threading.Thread(target=job)
    worker.start()
    assert not entered.wait(1.0)  # blocked while another holder has the lock
    held.close()
    worker.join(10)
    assert entered.is_set()
    err = capfd.readouterr().err
    assert f"waiting for {lock}" in err and "start it without flock" in err


def test_the_task_list_is_long_enough_and_holds_no_benchmark_workload():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from tuning import WORKLOADS

    assert len(mt.TASKS) >= 200 and len(set(mt.TASKS)) == len(mt.TASKS)
    bench = {args[1] for args in WORKLOADS.values() if args[0] == "--workload"}
    assert bench and not bench & set(mt.TASKS)
    assert {mt.arm_of(i) for i in range(4)} == {"ms", "model"}  # both searches, alternately


def _dense_shapes(build) -> set:
    """(rows, in, out) of every dense layer of a network function: the dense tasks Relax extracts from it."""
    import torch

    model, inputs = build()
    rows = inputs[0].shape[1]
    return {(rows, m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)}


def test_network_tasks_name_trajectory_nets_at_shapes_no_network_benchmark_uses():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import trajectory_nets
    from networks import NETWORKS

    import nets

    entries = [t for t in mt.TASKS if t.startswith("NET:")]
    assert entries and all(t.count(":") == 2 for t in entries)
    assert mt.task_options(entries[0])[:2] == ["--network", f"trajectory_nets:{entries[0].split(':')[1]}"]
    assert mt.task_options("GMM:1,8,8,8") == ["--workload", "GMM:1,8,8,8"]
    bench = set().union(*(_dense_shapes(getattr(nets, f.split(":")[1])) for f in NETWORKS.values()
                          if f.split(":")[1] != "resnet18"))
    ours = set().union(*(_dense_shapes(getattr(trajectory_nets, net)) for net in mt.NETWORK_TASKS))
    assert bench and ours and not bench & ours
    assert mt.run_order(6, "4-") == [4, 5, 0, 1, 2, 3] and mt.run_order(3, None) == [0, 1, 2]


@pytest.mark.slow
def test_a_run_resumes_without_measuring_a_program_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(mt, "TASKS", ["GMM:1,8,8,8", "GMM:1,8,16,8"])
    monkeypatch.setattr(mt, "YIELD_S", 0)
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))  # the suite may run under the machine's
    out, to = tmp_path / "traj", ["--to", str(tmp_path / "pack")]
    assert mt.main(["run", "--out", str(out), "--trials", "3", *to]) == 0
    folder = next(out.iterdir())
    assert json.loads((folder / "host.json").read_text())["cpu_model"]
    works = [mt.work_dir(folder, p) for p in range(2)]
    assert all(mt.finished(w, 3) for w in works)
    first = [(w / "database_tuning_record.json").read_text() for w in works]
    assert mt.main(["run", "--out", str(out), "--trials", "3", *to]) == 0  # finished: nothing measured again
    assert [(w / "database_tuning_record.json").read_text() for w in works] == first
    for w in works:  # a larger budget continues the same work dir: its programs are not measured again
        (w / mt.DONE).unlink()
    assert mt.main(["run", "--out", str(out), "--trials", "6", *to]) == 0
    for w, before in zip(works, first):
        lines = (w / "database_tuning_record.json").read_text().splitlines()
        assert lines[: len(before.splitlines())] == before.splitlines()
        traces = [json.dumps(json.loads(line)[1][0]) for line in lines]
        assert len(traces) == len(set(traces)) and len(lines) > len(before.splitlines())


@pytest.mark.slow
def test_a_fresh_checkout_continues_the_committed_pack(tmp_path, monkeypatch, another_host):
    """The pack is committed, its work dirs are not: on a fresh checkout `run` skips the tasks the pack holds and
    `pack` adds the new tasks' records after the packed ones, dropping none; another CPU's run is refused the
    pack's platform before anything is measured."""
    from costlab.metaschedule.targets import host_cpu_name

    monkeypatch.setattr(mt, "TASKS", ["GMM:1,8,8,8"])
    monkeypatch.setattr(mt, "YIELD_S", 0)
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))
    out, dest = tmp_path / "traj", tmp_path / "pack"
    common = ["--out", str(out), "--to", str(dest), "--trials", "3"]
    assert mt.main(["run", *common]) == 0 and mt.main(["pack", *common]) == 0
    folder = next(out.iterdir())
    packed = json.loads((dest / folder.name / "info.json").read_text())
    shutil.rmtree(folder)  # a fresh checkout: the pack without its work dirs
    monkeypatch.setattr(mt, "TASKS", ["GMM:1,8,8,8", "GMM:1,8,16,8"])
    with monkeypatch.context() as m:  # another machine LLVM names alike may not add to this machine's pack
        faked = shutil.copytree(another_host, tmp_path / "host")
        (faked / "llvm_cpu").write_text(host_cpu_name())
        m.setenv(FAKE_HOST_ENV, str(faked))
        with pytest.raises(SystemExit, match="pack.* holds trajectories measured on"):
            mt.main(["run", *common])
    assert not folder.exists()
    assert mt.main(["run", *common]) == 0
    assert not mt.work_dir(folder, 0).exists() and mt.finished(mt.work_dir(folder, 1), 3)  # the packed one skipped
    assert mt.main(["pack", *common]) == 0
    info = json.loads((dest / folder.name / "info.json").read_text())
    assert info["trajectories"]["tasks"] == ["GMM:1,8,8,8", "GMM:1,8,16,8"] and info["tasks"] == 2
    assert info["records"][folder.name] > packed["records"][folder.name]
    assert info["trajectories"]["model"] == "x86-cpu-v1"
    data = tmp_path / "all.h5"
    assert main(["dataset", "unpack", str(dest / folder.name), "-o", str(data)]) == 0
    with open_dataset(data) as ds:
        assert ds.num_records(folder.name) == info["records"][folder.name]
    before = {p: p.read_bytes() for p in (dest / folder.name).rglob("*") if p.is_file()}
    with pytest.raises(SystemExit, match="tuned with --model x86-cpu-v1, not x86-cpu-v2"):
        mt.main(["pack", *common, "--model", "x86-cpu-v2"])
    assert {p: p.read_bytes() for p in (dest / folder.name).rglob("*") if p.is_file()} == before  # nothing written


def test_another_cpu_is_refused_its_folder(tmp_path, monkeypatch, capsys, another_host):
    """The folder of a platform is one machine's: a run on another CPU that LLVM names alike (another model of
    the same generation: another CPU's files faked, under this machine's LLVM name) stops at once, naming both
    machines, with nothing measured."""
    from costlab.metaschedule.targets import host_cpu_name

    folder, host, _ = mt.platform_dir(tmp_path)
    mt.check_host(folder, host)
    faked = shutil.copytree(another_host, tmp_path / "host")
    (faked / "llvm_cpu").write_text(host_cpu_name())
    monkeypatch.setenv(FAKE_HOST_ENV, str(faked))
    other = host_info()
    monkeypatch.setattr(mt, "TASKS", ["GMM:1,8,8,8"])
    with pytest.raises(SystemExit, match=f"measured on .* this host is .*family {other['family']} model {other['model']}"):
        mt.main(["run", "--out", str(tmp_path), "--trials", "2"])
    assert not (folder / "runs").exists()


def test_the_committed_trajectories_unpack_with_their_host(tmp_path):
    packs = sorted((REPO / "corpus" / "trajectories").glob("*/info.json"))
    assert packs, "corpus/trajectories/ holds no pack"
    for info_path in packs:
        info = json.loads(info_path.read_text())
        data = tmp_path / f"{info_path.parent.name}.h5"
        assert main(["dataset", "unpack", str(info_path.parent), "-o", str(data)]) == 0
        with open_dataset(data) as ds:
            pid = info_path.parent.name
            assert ds.num_records(pid) == info["records"][pid] and ds.platforms[pid].host["cpu_model"]
            # two entries may tune one workload (BERT's and Llama's softmax at hidden 512 are the same function):
            # their records are one task's
            assert len(ds.tasks) == info["tasks"] <= len(info["trajectories"]["tasks"])
            assert len(ds.tasks) >= len(info["trajectories"]["tasks"]) - len(mt.NETWORK_TASKS)


def test_a_pack_is_continued_with_its_packed_tasks_first(tmp_path):
    """Tasks finish out of position order; the pack only grows at its end, so the tasks it holds come first,
    in their packed order, then the newly finished ones by position."""
    dest = tmp_path / "pack"
    dest.mkdir()
    work = [tmp_path / f"{p:03d}-task" for p in (3, 5, 7, 9)]
    (dest / "info.json").write_text(json.dumps({"trajectories": {"tasks": [mt.TASKS[7], mt.TASKS[3]]}}))
    assert mt.packed_first(work, dest) == [work[2], work[0], work[1], work[3]]
    assert mt.packed_first(work, tmp_path / "new") == work  # nothing packed yet: position order


def test_a_folder_of_this_host_is_still_checked_against_the_packs_host(tmp_path, monkeypatch, another_host):
    """A work folder already holding this host's host.json (made with another --to, or before the pack existed)
    was never compared with the committed pack's host: hours of tuning went to a pack that refuses them."""
    monkeypatch.setenv(FAKE_HOST_ENV, str(another_host))  # neither fake is the committed pack's Zen 5
    folder, host, _ = mt.platform_dir(tmp_path)
    mt.check_host(folder, host)  # the folder's host.json is this (faked) machine's
    pack = REPO / "corpus" / "trajectories" / "llvm-znver5-2c"
    with pytest.raises(SystemExit, match="llvm-znver5-2c holds trajectories measured on"):
        mt.check_host(folder, host, pack)


def test_an_interrupted_run_says_so_and_a_pack_of_nothing_is_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C during a task's tuning is one line saying the same command continues it (exit 130), not
    KeyboardInterrupt's traceback; `pack` with no work dir at all says there is nothing to pack."""
    monkeypatch.setattr(mt, "TASKS", ["GMM:1,8,8,8"])
    monkeypatch.setenv("COSTLAB_CPU_LOCK", str(tmp_path / "cpu.lock"))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mt, "run_to_end", interrupted)
    common = ["--out", str(tmp_path / "traj"), "--to", str(tmp_path / "pack"), "--trials", "2"]
    assert mt.main(["run", *common]) == 130
    assert "GMM:1,8,8,8: interrupted; the same command continues it" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no finished task to pack"):
        mt.main(["pack", "--out", str(tmp_path / "none"), "--to", str(tmp_path / "pack"), "--trials", "2"])
