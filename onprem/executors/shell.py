"""Where an executor's commands run: this machine, or another over plain OpenSSH.

`LocalShell` runs an argv here. `SshShell` runs it on a host with the OpenSSH
client (`ssh`): BatchMode (never a prompt), keys only (no password or keyboard
interactive), host keys checked against a known_hosts file (StrictHostKeyChecking),
and one multiplexed connection per host (ControlMaster) so that a pass of many
commands pays the handshake once; `close()` ends those connections.

Failures of the transport itself are classified here, never the command's own exit
status: a refused key or a changed host key is a CredentialsError (a human must
act), anything else ssh reports (refused, timed out, closed, unknown host) is
NodeUnreachable, retryable: the job on the node may be fine.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from onprem.executors.base import NodeUnreachable
from providers.errors import CredentialsError, ProviderError

SSH_FAILED = 255  # ssh's own exit status when the connection, not the command, failed
_CREDENTIALS = ("permission denied", "host key verification failed", "identification has changed")


@dataclass(frozen=True)
class Completed:
    """What a command gave back."""

    returncode: int
    stdout: str
    stderr: str


class Shell(Protocol):
    """Runs commands somewhere; `where` names it in messages."""

    where: str

    def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Completed:
        """Run `argv` with `input` on stdin and `env` added to the environment; the
        command's exit status is the caller's to judge. NodeUnreachable (or
        CredentialsError) when the command could not be run there at all."""
        ...

    def close(self) -> None: ...


@dataclass
class LocalShell:
    """Commands on this machine, with the caller's environment plus `env`."""

    provider: str = "onprem"
    where: str = "localhost"

    def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Completed:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, **env} if env else None,
            )
        except FileNotFoundError as exc:
            raise ProviderError(self.provider, f"{argv[0]} is not installed here") from exc
        # A timer thread kills a command that hangs: communicate(timeout=...) would poll
        # for the exit with sleeps, which costs a fast command like sbatch ~10 % more.
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            stdout, stderr = proc.communicate(input)
        finally:
            timer.cancel()
        if fired.is_set():
            raise NodeUnreachable(self.provider, f"{argv[0]} did not answer in {timeout:g} s")
        return Completed(proc.returncode, _text(stdout), _text(stderr))

    def close(self) -> None:
        pass


@dataclass
class SshShell:
    """Commands on `host` over OpenSSH (see the module docstring)."""

    host: str
    user: str
    port: int = 22
    identity_file: str = ""
    known_hosts: str = ""
    connect_timeout: float = 10.0
    provider: str = "onprem"
    persist_seconds: int = 30
    _control_dir: str = field(default="", init=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def base_args(self) -> list[str]:
        """The ssh options every call uses (also what `scp`-free staging pipes through)."""
        if not self._control_dir:  # sockets must have short paths: /tmp, not the workdir
            self._control_dir = tempfile.mkdtemp(prefix="bssh-", dir="/tmp")
        args = [
            "ssh",
            "-o", "BatchMode=yes",
            "-o", "PasswordAuthentication=no",
            "-o", "KbdInteractiveAuthentication=no",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={max(1, round(self.connect_timeout))}",
            "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={self._control_dir}/%C",
            "-o", f"ControlPersist={self.persist_seconds}",
            "-p", str(self.port),
            "-l", self.user,
        ]  # fmt: skip
        if self.known_hosts:
            args += ["-o", f"UserKnownHostsFile={os.path.expanduser(self.known_hosts)}"]
        if self.identity_file:
            args += ["-o", "IdentitiesOnly=yes", "-i", os.path.expanduser(self.identity_file)]
        return args

    def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Completed:
        remote = shlex.join(list(argv))
        if env:
            remote = shlex.join(["env", *(f"{k}={v}" for k, v in env.items())]) + " " + remote
        command = [*self.base_args(), self.host, "--", remote]
        try:
            done = subprocess.run(
                command,
                input=input if input is not None else b"",
                capture_output=True,
                timeout=timeout + self.connect_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise NodeUnreachable(
                self.provider, f"{self.where} did not answer in {timeout:g} s"
            ) from exc
        result = Completed(done.returncode, _text(done.stdout), _text(done.stderr))
        if result.returncode == SSH_FAILED:
            self._raise_transport(result.stderr)
        return result

    def _raise_transport(self, stderr: str) -> None:
        """Raise for a failure of ssh itself (exit 255); a command's own 255 that left
        no ssh message on stderr comes back as it is."""
        lines = [line for line in stderr.splitlines() if line.strip()]
        said = " ".join(lines[-3:])[-400:]
        low = stderr.lower()
        if any(sign in low for sign in _CREDENTIALS):
            raise CredentialsError(self.provider, f"{self.where} refused us: {said}")
        if not lines or not any(
            s in low for s in ("ssh:", "connection", "timed out", "resolve", "closed", "broken")
        ):
            return
        raise NodeUnreachable(self.provider, f"{self.where} is unreachable: {said}")

    def close(self) -> None:
        """End the multiplexed connection (its master process), if one is open."""
        if not self._control_dir:
            return
        if any(Path(self._control_dir).iterdir()):  # a master is listening
            subprocess.run(
                [*self.base_args(), "-O", "exit", self.host],
                capture_output=True,
                timeout=10,
                check=False,
            )
        shutil.rmtree(self._control_dir, ignore_errors=True)
        self._control_dir = ""


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")
