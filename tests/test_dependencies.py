"""What installing costlab pulls in: the CPU build of XGBoost, not the one that carries CUDA's NCCL."""

from __future__ import annotations

import configparser

from conftest import REPO


def _requires() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = [ln.split("#")[0].strip() for ln in cfg["options"]["install_requires"].splitlines()]
    return [ln for ln in lines if ln]


def test_xgboost_is_the_cpu_build():
    names = {ln.split("=")[0].split(">")[0].split("<")[0].strip().lower() for ln in _requires()}
    assert "xgboost-cpu" in names and "xgboost" not in names


def test_the_cpu_build_is_imported_as_xgboost():
    import xgboost  # either build provides the module MetaSchedule's XGBModel imports

    assert hasattr(xgboost, "Booster")
