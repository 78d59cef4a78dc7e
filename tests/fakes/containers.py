"""A real podman for image-job tests, with no registry and no network
(shared/docs/local-services.md, "Containers without pulling an image").

`podman_image` (session-scoped) writes a containers.conf that works on a CI machine
(runc, cgroupfs, host network, low ulimits), keeps every podman file under one
temporary folder (`--root`/`--runroot`), and imports `localhost/broker-mini`: a rootfs
of host binaries and their libraries with a marker file only the image has
(`/etc/broker-image-marker`) and an entrypoint that prints it. Skips with the reason
when podman or runc is not installed (`.ci/run` installs them: `apt-get install
podman runc`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

IMAGE = "localhost/broker-mini"
MARKER = "inside the broker-mini image"
BINARIES = ("/bin/sh", "/bin/cat", "/bin/ls", "/bin/sleep", "/bin/echo", "/usr/bin/env")
CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "host"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{tmp}"
"""


@dataclass(frozen=True)
class Podman:
    """The runtime command (`podman --root … --runroot …`) and its containers.conf."""

    command: tuple[str, ...]
    conf: Path

    @property
    def setting(self) -> str:
        """The command as BROKER_CONTAINER_RUNTIME takes it."""
        return " ".join(self.command)


def _rootfs(root: Path) -> None:
    for name in ("proc", "sys", "dev", "tmp", "etc"):
        (root / name).mkdir(parents=True, exist_ok=True)
    for binary in BINARIES:
        libraries = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
        paths = [binary] + [w for w in libraries.split() if w.startswith("/")]
        for path in paths:
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(os.path.realpath(path), target)
    (root / "etc" / "broker-image-marker").write_text(MARKER + "\n")


@pytest.fixture(scope="session")
def podman_image() -> Iterator[Podman]:
    from tests.services import need_programs

    need_programs("podman", "runc", "ldd", install="apt-get install podman runc")
    home = Path(tempfile.mkdtemp(prefix="broker-podman-", dir="/tmp"))
    (home / "tmp").mkdir()
    conf = home / "containers.conf"
    conf.write_text(CONF.format(tmp=home / "tmp"))
    podman = Podman(
        ("podman", "--root", str(home / "storage"), "--runroot", str(home / "run")), conf
    )
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    try:
        _rootfs(home / "rootfs")
        tar = subprocess.Popen(
            ["tar", "-C", str(home / "rootfs"), "-c", "."], stdout=subprocess.PIPE
        )
        entrypoint = 'ENTRYPOINT ["/bin/cat", "/etc/broker-image-marker"]'
        subprocess.run(
            [*podman.command, "import", "-q", "--change", entrypoint, "-", IMAGE],
            stdin=tar.stdout,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        tar.wait()
        yield podman
    finally:
        subprocess.run(
            [*podman.command, "rm", "-a", "-f", "-t", "0"],
            env=env,
            capture_output=True,
            check=False,
        )
        mounts = Path("/proc/mounts").read_text().split()
        for point in sorted((m for m in mounts if m.startswith(str(home))), reverse=True):
            subprocess.run(["umount", point], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)
