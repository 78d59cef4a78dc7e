"""Shared fixtures: where ../shared lives, an isolated user environment per test, and the
real Slurm cluster and sshd nodes the on-prem tests run against."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
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
    """Every test gets empty XDG config/data/cache/state dirs and no BROKER_* variables, so
    a developer's own catalog, pools, config or state never leak into a result, and no
    test leaves a state or a sandbox behind in the user's own directories."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    for name in list(os.environ):
        if name.startswith("BROKER_") and name != "BROKER_SHARED_DIR":
            monkeypatch.delenv(name)
    monkeypatch.chdir(home)
    return home


# ---- real services: a 3-node Slurm cluster and key-only sshd nodes on 127.0.0.1 ----------
# Started once per session by .ci/services/*.sh and stopped by PID. In CI (`.ci/run` sets
# TEST_SERVICES=required, tests/services.py) a missing package is an error; elsewhere
# those tests skip.

SERVICES = REPO / ".ci" / "services"


@dataclass(frozen=True)
class SlurmCluster:
    """The cluster of .ci/services/slurm-up.sh: n1, n2 (gpu:a100:8, leaf1), n3
    (gpu:a100_1g.10gb:7, leaf2); partitions low (default) and high (preempts low)."""

    conf: Path
    env: dict[str, str]  # SLURM_CONF for a subprocess

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout


@dataclass(frozen=True)
class SshNodes:
    """The sshd instances of .ci/services/sshd-up.sh: node1.. on 127.0.0.1 ports, user
    `user`, key `identity_file`, host keys in `known_hosts`."""

    ports: tuple[int, ...]
    user: str
    identity_file: str
    known_hosts: str
    directory: Path


def _need_services(*programs: str) -> None:
    """Skip (outside CI) or fail (in CI) when these services cannot run here."""
    from tests.services import required as in_ci

    required = in_ci()
    missing = [p for p in programs if shutil.which(p) is None and not Path(p).exists()]
    why = ""
    if os.geteuid() != 0:
        why = "needs root (runuser, mknod, a private sshd)"
    elif missing:
        why = f"needs {', '.join(missing)} (apt-get install slurm-wlm munge openssh-server)"
    if why and required:
        pytest.fail(f"on-prem services are required here but {why}")
    if why:
        pytest.skip(f"real Slurm/sshd tests skipped: {why}")


def _free_ports(count: int) -> int:
    """A base port with `count` consecutive free ports on 127.0.0.1."""
    for _ in range(200):
        base = random.randint(20000, 40000)
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no free ports")


def _service(script: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", str(SERVICES / script)], env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode:
        raise RuntimeError(f"{script} rc={done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


@pytest.fixture(scope="session")
def services_dir() -> Iterator[Path]:
    """A 0755 folder under /tmp for the services' state (munge and the ssh user must
    traverse it, which pytest's 0700 tmp folders forbid)."""
    folder = Path(tempfile.mkdtemp(prefix="svc-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster(services_dir) -> Iterator[SlurmCluster]:
    _need_services("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged")
    conf = services_dir / "slurm" / "etc" / "slurm.conf"
    env = {
        **os.environ,
        "SVC_DIR": str(services_dir),
        "SLURM_PORT_BASE": str(_free_ports(4)),
        "SLURM_CONF": str(conf),
        "SLURM_MIN_JOB_AGE": "5",  # squeue forgets ended jobs soon: sacct -c is read too
    }
    try:
        _service("slurm-up.sh", env)
        yield SlurmCluster(conf, {**os.environ, "SLURM_CONF": str(conf)})
    finally:
        _service("slurm-down.sh", env)


@pytest.fixture(scope="session")
def ssh_nodes(services_dir) -> Iterator[SshNodes]:
    _need_services("/usr/sbin/sshd", "ssh")
    base, count = _free_ports(3), 3
    env = {**os.environ, "SVC_DIR": str(services_dir), "SSHD_PORT": str(base), "SSHD_NODES": "3"}
    folder = services_dir / "sshd"
    try:
        _service("sshd-up.sh", env)
        yield SshNodes(
            ports=tuple(range(base, base + count)),
            user="brokerci",
            identity_file=str(folder / "id_ed25519"),
            known_hosts=str(folder / "known_hosts"),
            directory=folder,
        )
    finally:
        _service("sshd-down.sh", env)


# ---- the state store's backends: SQLite and a real PostgreSQL (tests/state_backends.py) --
from tests.state_backends import (  # noqa: E402, F401
    new_state_location,
    postgres_cluster,
    state_location,
)
