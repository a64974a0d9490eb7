"""A network's end-to-end timing runs on the target's threads, whatever the calling process ran before."""

from __future__ import annotations

import os

import torch

from costlab.datasets.extract import network_module
from costlab.metaschedule.targets import host_target


def test_a_network_is_timed_on_the_targets_threads_after_this_process_ran_kernels_on_others(monkeypatch):
    """TVM sizes a process's thread pool once, when its first kernel runs: a notebook that tuned or timed on 2
    threads and then times a network for a 1-core target gets the 1 thread it asked for, and its own pool and
    ``TVM_NUM_THREADS`` stay as they were."""
    import tvm

    from costlab.export.network import end_to_end
    from costlab.metaschedule.runners import runner_threads

    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    before = runner_threads()  # this process's pool: 2 threads, or as an earlier test's first kernel sized it
    target = tvm.target.Target(host_target(num_cores=1))
    model, x = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval(), torch.randn(2, 16)
    with torch.no_grad():
        reference = model(x).numpy()
    net = end_to_end(network_module(model, (x,), target), (x,), target, None, cores=1, reference=reference)
    assert net["threads"] == 1 and "threads_note" not in net
    assert net["tuned_ms"] > 0 and net["untuned_ms"] > 0 and net["output_check"]["status"] == "ok"
    assert runner_threads() == before and os.environ["TVM_NUM_THREADS"] == "2"


def test_a_target_of_more_cores_than_this_machine_is_timed_on_the_threads_it_has_and_says_so():
    """TVM's runtime runs no more threads than the machine has cores: a target of more cores is timed on fewer
    threads, and the result says so (it said nothing)."""
    import tvm

    from costlab.export.network import end_to_end

    cores = (os.cpu_count() or 1) + 2
    target = tvm.target.Target(host_target(num_cores=cores))
    model, x = torch.nn.Linear(16, 8).eval(), torch.randn(2, 16)
    net = end_to_end(network_module(model, (x,), target), (x,), target, None, cores=cores)
    assert net["threads"] < cores and f"not the target's num-cores {cores}" in net["threads_note"]
