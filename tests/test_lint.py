"""The tree stays ruff-clean (configuration in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is part of the [test] extra"
    result = subprocess.run(
        [ruff, "check", "--no-cache", str(REPO)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
