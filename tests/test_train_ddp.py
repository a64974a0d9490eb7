"""Distributed training through Lightning's own DDP strategy: two CPU processes (gloo) share the training
batches of one `costlab train` command, and the first process alone writes the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from conftest import FIXTURES

from costlab.cli import main
from costlab.train.data import ListSampler

PLATFORM = "platinum-8358"


def test_list_sampler_shards_training_batches_across_processes(monkeypatch):
    task = np.repeat(np.arange(5), 20)
    sampler = ListSampler(task, np.arange(100), list_size=8, lists_per_batch=1, shuffle=True, seed=0)
    whole = [tuple(map(tuple, b)) for b in sampler]
    assert len(whole) == 15  # 5 tasks x (8 + 8 + 4)
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    shards = []
    for rank in (0, 1):
        monkeypatch.setattr(dist, "get_rank", lambda rank=rank: rank)
        shards.append([tuple(map(tuple, b)) for b in sampler])
    assert len(shards[0]) == len(shards[1]) == 7  # equal step counts: the odd batch out is dropped
    assert not set(shards[0]) & set(shards[1]) and set(shards[0]) | set(shards[1]) <= set(whole)
    evaluation = ListSampler(task, np.arange(100), 8, 1, shuffle=False, seed=0)
    assert len(list(evaluation)) == 15  # evaluation is never split: every process sees whole tasks


def test_ddp_two_cpu_processes(tmp_path):
    data = tmp_path / "x.h5"
    assert main(["dataset", "import-ansor", str(FIXTURES / "ansor" / "platinum-8358-MLP1-B256-head128.json"),
                 "-o", str(data)]) == 0
    assert main(["featurize", str(data), "--featurizer", "tlp", "--no-progress"]) == 0
    costlab = Path(sys.executable).with_name("costlab")
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_PORT=str(29500 + os.getpid() % 1000))
    cmd = [str(costlab), "train", "--model", "tlp", "--data", str(data), "--out", str(tmp_path / "run"),
           "--epochs", "2", "--no-progress", "--set", "net.d_model=32", "--set", "net.attention_heads=4",
           "--set", "data_options.val_fraction=0", "--set", "data_options.lists_per_batch=1",
           "--set", "trainer.accelerator=cpu", "--set", "trainer.devices=2", "--set", "trainer.strategy=ddp"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # 128 records of 2 tasks in lists of 32: 4 one-list batches per epoch, 2 of them on each process
    assert summary["epochs"] == 2 and summary["records_seen"] == 2 * 2 * 32, summary
    assert (tmp_path / "run" / "model" / "model.safetensors").exists()
