"""A temporary folder no candidate can be built and loaded in (full, or mounted noexec) stops the command with one
line, before a candidate is recorded as a program that fails to build or run (and never measured again)."""

from __future__ import annotations

import os
import shutil
from collections import namedtuple

import pytest

from costlab.cli import main
from costlab.datasets import open_dataset
from costlab.datasets.extract import extract

Usage = namedtuple("Usage", "total used free")


def _full(monkeypatch):
    """The temporary folder's file system as one with 1 MB free."""
    import costlab.metaschedule.builders as builders

    real = shutil.disk_usage
    folder = os.path.realpath(builders.tempfile.gettempdir())

    def usage(path):
        return Usage(1 << 40, (1 << 40) - (1 << 20), 1 << 20) if os.path.realpath(path) == folder else real(path)

    monkeypatch.setattr(builders.shutil, "disk_usage", usage)


def _noexec(monkeypatch):
    """The temporary folder's file system as one mounted noexec."""
    import costlab.metaschedule.builders as builders

    real = os.statvfs
    folder = os.path.realpath(builders.tempfile.gettempdir())

    class Noexec:
        def __init__(self, st):
            self.st, self.f_flag = st, st.f_flag | os.ST_NOEXEC

        def __getattr__(self, name):
            return getattr(self.st, name)

    def statvfs(path):
        return Noexec(real(path)) if os.path.realpath(path) == folder else real(path)

    monkeypatch.setattr(os, "statvfs", statvfs)


@pytest.mark.parametrize("folder, says", [(_full, "MB free, too little to build candidates in"),
                                          (_noexec, "mounted noexec")])
def test_measure_stops_before_recording_candidates_it_could_not_build_or_load(tmp_path, monkeypatch, capsys,
                                                                           folder, says):
    data = tmp_path / "d.h5"
    extract(data, workloads=["GMM:1,8,8,8"])
    folder(monkeypatch)
    assert main(["dataset", "measure", str(data), "--target", "llvm -num-cores=1", "--per-task", "2",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if ln.startswith("costlab: error:")] == [
        ln for ln in err.splitlines() if says in ln], err
    with open_dataset(data) as ds:
        assert sum(ds.num_records(p) for p in ds.record_platforms()) == 0


def test_a_networks_timing_in_a_full_temporary_folder_is_refused_before_llvm_ends_the_process(monkeypatch):
    import torch
    import tvm

    from costlab.common.errors import InputError
    from costlab.datasets.extract import network_module
    from costlab.export.network import end_to_end
    from costlab.metaschedule.targets import host_target

    target = tvm.target.Target(host_target(num_cores=1))
    x = torch.randn(2, 16)
    mod = network_module(torch.nn.Linear(16, 8).eval(), (x,), target)
    _full(monkeypatch)
    with pytest.raises(InputError, match="MB free"):
        end_to_end(mod, (x,), target, None, cores=1)


def test_a_temporary_folder_that_fills_during_a_tuning_run_is_one_line(tmp_path, monkeypatch, capsys):
    """The check before each batch's builds runs inside MetaSchedule's C++ loop: its error came back as the
    FFI's RuntimeError and a traceback. The command says it in one line, the records measured before kept."""
    import costlab.metaschedule.builders as builders

    real, calls = shutil.disk_usage, []
    folder = os.path.realpath(builders.tempfile.gettempdir())

    def usage(path):
        if os.path.realpath(path) != folder:
            return real(path)
        calls.append(path)
        return Usage(1 << 40, 0, 1 << 20) if len(calls) > 3 else real(path)

    monkeypatch.setattr(builders.shutil, "disk_usage", usage)
    work = tmp_path / "w"
    assert main(["tune", "--workload", "GMM:1,8,8,8", "--target", "llvm -num-cores=1", "--trials", "8", "--per-iter",
                 "2", "--no-library", "--work-dir", str(work), "--no-check", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("costlab: error:")]
    assert "MB free, too little to build candidates in" in line
