"""The sandbox's jobs as local processes: starting one behind a gate, telling a live
job from a recycled pid, waiting for one to end, signalling its process group.

A pid alone cannot tell a live job from a recycled pid, so a record also keeps the
process start time from /proc and the boot id. Linux only (/proc, pidfd).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from providers.errors import ProviderError
from providers.sandbox.records import NAME, Record

R = TypeVar("R")
INHERITED_ENV = (
    *("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME"),
    # what a container runtime needs to find its configuration and daemon (image jobs)
    *("XDG_RUNTIME_DIR", "CONTAINERS_CONF", "CONTAINER_HOST", "DOCKER_HOST"),
)
KILL_WAIT_SECONDS = 5.0
# The shell waits for "go" on stdin before it runs the script, and the launcher sends
# it only once the record is on disk: a launcher killed in between closes the pipe, the
# shell exits, and no job runs without a record. `exec` keeps the recorded pid.
GATE = 'IFS= read -r go && [ "$go" = go ] && exec /bin/sh "$0" </dev/null'


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of process `pid` from /proc, or None when there is none."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data.rpartition(")")[2].split()  # the command name may hold spaces and ')'
    return fields[0], int(fields[19])


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send `sig` to a job's whole process group (nothing when it is gone)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def job_env(inherit: tuple[str, ...]) -> dict[str, str]:
    """The environment a job starts with: only the `inherit` variables of ours (the
    controller's credentials never reach a job), and a PATH."""
    env = {name: os.environ[name] for name in inherit if name in os.environ}
    env.setdefault("PATH", os.defpath)
    return env


class Processes:
    """The jobs this object started (their Popen) and this machine's boot id: how it
    tells whether a record's process still runs."""

    def __init__(self) -> None:
        self.boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        self._procs: dict[str, subprocess.Popen] = {}

    def start(
        self,
        attempt_id: str,
        script: Path,
        log_path: Path,
        env: Mapping[str, str],
        record: Callable[[int, int], R],
    ) -> R:
        """Run `script` with /bin/sh in its folder, in its own session (so Ctrl-C on the
        controller and its death leave the job alone), output to `log_path`.

        `record(pid, start time)` must put the record on disk: the gate opens only after
        it returns, and if it raises the job never runs. Returns what `record` returned.
        """
        try:
            with log_path.open("ab") as log:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", GATE, str(script)],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=script.parent,
                    env=dict(env),
                    start_new_session=True,  # own process group; survives the controller
                )
        except OSError as exc:
            raise ProviderError(NAME, f"cannot start the job: {exc}") from exc
        assert proc.stdin is not None
        try:
            stat = proc_stat(proc.pid)
            if stat is None:
                raise ProviderError(NAME, f"process {proc.pid} vanished at start")
            written = record(proc.pid, stat[1])
        except BaseException:
            proc.stdin.close()  # the gate never opens: the shell exits, nothing ran
            proc.wait()
            raise
        self._procs[attempt_id] = proc
        try:
            proc.stdin.write(b"go\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once; describe will say so
        return written

    def running(self, record: Record) -> bool:
        """Does the record's process still run (not a recycled pid, not a zombie)?"""
        proc = self._procs.get(record.attempt_id)
        if proc is not None and proc.pid == record.pid:
            return proc.poll() is None
        if record.boot_id != self.boot_id:
            return False
        stat = proc_stat(record.pid)
        return stat is not None and stat[1] == record.proc_start and stat[0] not in ("Z", "X")

    def exit_code(self, record: Record, path: Path) -> int | None:
        """The job's exit code: what its script wrote to `path`, else (killed before it
        could) the status of a process this object started; None when unknown."""
        try:
            return int(path.read_text())
        except (OSError, ValueError):
            pass
        proc = self._procs.get(record.attempt_id)
        if proc is not None and proc.returncode is not None:
            return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return None

    def wait_exit(self, record: Record, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the process to end; True once it has."""
        proc = self._procs.get(record.attempt_id)
        if proc is not None and proc.pid == record.pid:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        if not self.running(record):
            return True
        try:
            handle = os.pidfd_open(record.pid)  # works for processes we did not start
        except ProcessLookupError:
            return True
        except OSError:  # no pidfd (Linux before 5.3): one bounded wait instead
            threading.Event().wait(timeout)
            return not self.running(record)
        try:
            if not self.running(record):  # the pid was recycled before the open
                return True
            return bool(select.select([handle], [], [], timeout)[0])
        finally:
            os.close(handle)
