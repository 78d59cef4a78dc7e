"""Quiet and informative: no SDK's log reaches the terminal unless --verbose; `broker
check` is one row per cloud; progress bars only on a terminal; `broker run` ends with a
summary of what it finished, what it cost and the GPU-hours."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.cli.runner import run_cli
from tests.fakes.offers import write_catalog

JOB = """\
apiVersion: broker/v1
name: {name}
team: nlp
resources:
  accelerators: T4:1
run:
  command: echo hello
runtime:
  estimate_hours: 1
"""


def no_cloud_env(home: Path) -> dict[str, str]:
    """An environment where no cloud finds credentials (and none waits long to say so)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "GOOGLE"))}
    return env | {
        "HOME": str(home),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AZURE_CLIENT_ID": "",
        "CLOUDSDK_CONFIG": str(home / "gcloud"),
        "GCE_METADATA_HOST": "127.0.0.1:9",
        "GCE_METADATA_IP": "127.0.0.1:9",
    }


def test_check_is_one_row_per_cloud_and_sdk_logs_only_with_verbose(tmp_path):
    env = no_cloud_env(tmp_path)
    args = [sys.executable, "-m", "broker", "check", "--cloud", "azure", "--timeout", "10"]
    quiet = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 1  # no cloud usable
    assert quiet.stderr == ""  # azure-identity's page of text stays out of the terminal
    rows = [line for line in quiet.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 1 and "azure" in rows[0] and "no credentials" in rows[0]
    args.insert(3, "--verbose")
    loud = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert loud.returncode == 1 and "azure.identity" in loud.stderr


def on_a_terminal_stderr(args: list[str], cwd: Path) -> str:
    """What `args` writes to stderr when stderr is a terminal (stdout is a pipe)."""
    primary, secondary = pty.openpty()
    try:
        subprocess.run(
            args, stdout=subprocess.DEVNULL, stderr=secondary, cwd=cwd, check=True, timeout=300
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # closed: all read
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")
    finally:
        os.close(primary)


def test_a_progress_bar_for_a_large_submit_only_on_a_terminal(tmp_path):
    folder = tmp_path / "jobs"
    folder.mkdir()
    for i in range(250):
        (folder / f"j{i}.yaml").write_text(JOB.format(name=f"j{i}"))
    args = [sys.executable, "-m", "broker", "submit", str(folder), "-o", "json"]
    drawn = on_a_terminal_stderr([*args, "--state", str(tmp_path / "a.db")], tmp_path)
    assert "submitting" in drawn and "250" in drawn
    piped = subprocess.run(
        [*args, "--state", str(tmp_path / "b.db")], capture_output=True, text=True, timeout=300
    )
    assert piped.returncode == 0 and "submitting" not in piped.stderr


def test_run_ends_with_a_summary(capsys, tmp_path):
    catalog = str(write_catalog(tmp_path / "offers.csv"))
    state = ("--state", str(tmp_path / "state.db"))
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(JOB.format(name=name))
        run_cli(capsys, "submit", str(tmp_path / f"{name}.yaml"), *state)
    result = run_cli(capsys, "run", "--poll", "0.05", *state, "--catalog", catalog)
    assert result.code == 0, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("broker run: 2 job(s) finished (2 succeeded); 2 attempt(s) ended")
    assert "USD" in last and "GPU-hours" in last and "sandbox time" not in last
    fast = run_cli(
        capsys, "run", "--once", "--sandbox-time-scale", "60", *state, "--catalog", catalog
    )
    assert "one wall second is billed as 60 seconds" in fast.stderr
    assert "broker run: 0 job(s) finished (none)" in fast.stderr
