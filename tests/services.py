"""Tests that need a real program or service: skipped elsewhere with the reason, an error
in CI, where `.ci/run` installs them and sets TEST_SERVICES=required."""

from __future__ import annotations

import os
import shutil

import pytest


def required() -> bool:
    """Whether missing services fail the tests (CI) rather than skip them."""
    return os.environ.get("TEST_SERVICES") == "required"


def need_programs(*programs: str, install: str) -> None:
    """Skip (outside CI) or fail (in CI) unless every program is on PATH; `install` says
    how to get them (e.g. "apt-get install podman runc")."""
    missing = [p for p in programs if shutil.which(p) is None]
    if not missing:
        return
    why = f"{', '.join(missing)} not installed ({install})"
    if required():
        pytest.fail(f"required here but {why}")
    pytest.skip(why)
