"""Installed as users install it: `pip install .` without `-e` gives a wheel, and the
wheel alone must run `broker demo` (its manifests, pools, policy and training script are
package data: pyproject's force-include of examples/, found with importlib.resources).

The wheel is built by pip (hatchling in an isolated build environment) and installed
with `--no-deps` into a fresh virtual environment whose dependencies come from this
one's site-packages (a path entry only: the editable install here is not seen there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel of this checkout installed; its bin folder."""
    root = tmp_path_factory.mktemp("wheel")
    built = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        str(REPO),
        "--no-deps",
        "-q",
        "-w",
        str(root),
        cwd=root,
    )
    if built.returncode != 0:
        pytest.skip(f"cannot build the wheel here (no build backend reachable): {built.stderr}")
    (wheel,) = root.glob("broker-*.whl")
    venv = root / "venv"
    assert run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=root).returncode == 0
    python = venv / "bin" / "python"
    purelib = run(
        str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=root
    ).stdout.strip()
    Path(purelib, "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-deps",
        "-q",
        str(wheel),
        cwd=root,
    )
    assert pip.returncode == 0, pip.stderr
    return venv / "bin"


def test_the_installed_wheel_runs_the_demo_from_its_package_data(installed, tmp_path):
    where = run(
        str(installed / "python"),
        "-c",
        "import broker, importlib.resources as r;"
        "print(broker.__file__); print((r.files('broker') / '_examples' / 'demo').is_dir())",
        cwd=tmp_path,
    )
    module, has_data = where.stdout.split()
    assert module.startswith(str(installed.parent)) and has_data == "True"
    state = tmp_path / "state.db"
    demo = run(str(installed / "broker"), "demo", "--state", str(state), "-o", "json", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    jobs = json.loads(demo.stdout)["jobs"]
    assert len(jobs) == 5 and {j["state"] for j in jobs} == {"succeeded"}
    # The workdir the demo's jobs ran in was packed from the installed package data.
    (archive,) = (tmp_path / "state-workdirs").glob("*.tar.gz")
    listing = run("tar", "-tzf", str(archive), cwd=tmp_path).stdout.split()
    assert "train.py" in listing and "demo/finetune-spot.yaml" in listing
