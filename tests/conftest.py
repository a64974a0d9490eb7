"""Shared test helpers: paths of the committed fixtures and of the real public logs in ../shared/data."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"the public logs in {SHARED_DATA} are not beside this checkout")
    return SHARED_DATA
