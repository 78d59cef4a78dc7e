"""Where the state lives in tests that drive real processes: the `state_location` fixture.

A SQLite file here; the PostgreSQL backend parametrises the same fixture over both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def state_location(tmp_path: Path) -> Iterator[Path]:
    """A fresh state location: a SQLite file path in the test's folder."""
    yield tmp_path / "state.db"
