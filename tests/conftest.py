"""Shared fixtures: where ../shared lives, and an isolated user environment per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """`../shared` beside the checkout, or BROKER_SHARED_DIR."""
    return Path(os.environ.get("BROKER_SHARED_DIR") or REPO.parent / "shared")


def skypilot_catalogs() -> Path | None:
    """The real SkyPilot v8 catalogs, or None when shared/ is absent."""
    path = shared_dir() / "catalogs" / "skypilot" / "v8"
    return path if (path / "gcp" / "vms.csv").is_file() else None


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Every test gets empty XDG config/data/cache dirs and no BROKER_* variables, so a
    developer's own catalog, pools or config never leak into a result."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    for name in list(os.environ):
        if name.startswith("BROKER_") and name != "BROKER_SHARED_DIR":
            monkeypatch.delenv(name)
    monkeypatch.chdir(home)
    return home
