"""The sbatch script's shell, run by /bin/sh on this machine without Slurm: what it does
with the SIGTERM that Slurm's --signal (or scancel) sends it. Its exit status is what
Slurm records as the job's, so a status taken from an interrupted `wait` (143) instead of
from the job would turn a job that ended cleanly on SIGTERM into a failed one."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from onprem.executors.slurm_text import batch_script
from tests.onprem.test_slurm_text import _request
from tests.waiting import wait_until


def _run_until_term(tmp: Path, job: str, *, job_too: bool = False) -> int:
    """Start the batch script of `job`, send its shell SIGTERM once the job says it is
    ready (with `job_too`, the job's session first, as scancel signals every process of
    the job), and return the shell's exit status."""
    ready = tmp / "ready"
    ready.unlink(missing_ok=True)
    script = tmp / "batch.sh"
    script.write_text(batch_script(_request(script=f"#!/bin/sh\n{job}\n"), "p", str(tmp), {}))
    shell = subprocess.Popen(["/bin/sh", str(script)], cwd=tmp, start_new_session=True)
    try:
        assert wait_until(lambda: ready.exists() and ready.read_text().strip(), 10)
        if job_too:
            os.killpg(int(ready.read_text()), signal.SIGTERM)
        shell.send_signal(signal.SIGTERM)
        return shell.wait(timeout=10)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait(timeout=10)


@settings(max_examples=30, deadline=None)
@given(code=st.integers(min_value=0, max_value=125), job_too=st.booleans())
def test_a_job_that_exits_on_sigterm_gives_its_own_status(tmp_path_factory, code, job_too):
    tmp = tmp_path_factory.mktemp("batch")
    job = f"trap 'exit {code}' TERM; echo $$ > ready; sleep 30 & wait"
    assert _run_until_term(tmp, job, job_too=job_too) == code


def test_a_job_that_finishes_its_work_after_sigterm_is_waited_for(tmp_path):
    """The trap interrupts the shell's wait while the job still saves its state: the shell
    waits again, and the job's status (after its work) is the script's."""
    job = (
        "trap 'sleep 0.3; echo saved > saved; exit 4' TERM; echo $$ > ready; "
        "sleep 30 & wait"
    )
    assert _run_until_term(tmp_path, job) == 4
    assert (tmp_path / "saved").read_text() == "saved\n"


def test_a_job_killed_by_the_signal_reports_it(tmp_path):
    """A job with no trap dies of the SIGTERM passed on to it: 128 + 15."""
    assert _run_until_term(tmp_path, "echo $$ > ready; sleep 30") == 128 + signal.SIGTERM


def test_a_job_that_ends_alone_is_not_waited_for_twice(tmp_path):
    script = tmp_path / "batch.sh"
    script.write_text(batch_script(_request(script="#!/bin/sh\nexit 127\n"), "p", "x", {}))
    done = subprocess.run(["/bin/sh", str(script)], cwd=tmp_path, timeout=10, check=False)
    assert done.returncode == 127
