"""What a pool's `executor:` mapping may say, per kind, as frozen dataclasses.

The pools file (`onprem.inventory`) validates each pool's executor mapping against
the dataclass of its kind: an unknown key is a located error with a "did you
mean", a wrong type names the field, and the checks of `__post_init__` (a port in
range, `login` as user@host) are located at the field they name. The executors
read these values; nothing else does.

- local: `base_dir`, `devices`
- ssh: `user` (required), `port`, `identity_file`, `known_hosts`, `base_dir`,
  `connect_timeout`
- slurm: `partition`, `account`, `qos`, `gres`, `login`, `port`, `identity_file`,
  `known_hosts`, `base_dir`, `requeue`, `switch_wait`, `slurm_conf`, `connect_timeout`
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import ClassVar

_LOGIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*@[A-Za-z0-9][A-Za-z0-9_.:-]*")
_WORD = re.compile(r"[A-Za-z0-9_.,:+-]*")  # partition, account, qos, gres type, constraint


class OptionError(ValueError):
    """A value an executor cannot take; `field` names the key it is about."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise OptionError("port", f"port {port} is not between 1 and 65535")


def _check_timeout(seconds: float) -> None:
    if not seconds > 0:
        raise OptionError("connect_timeout", f"connect_timeout must be positive, not {seconds}")


@dataclass(frozen=True)
class LocalOptions:
    """Processes on this machine (a workstation). `devices`: the GPU indices of this
    machine the pool may hand out (default 0 .. gpus_per_node - 1); `base_dir`: where
    attempts live ("" = the provider's work directory)."""

    kind: ClassVar[str] = "local"
    base_dir: str = ""
    devices: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))
        if any(index < 0 for index in self.devices) or len(set(self.devices)) != len(self.devices):
            raise OptionError("devices", "devices must be distinct GPU indices (0, 1, ...)")


@dataclass(frozen=True)
class SshOptions:
    """Plain OpenSSH to every node of the pool (BatchMode, keys only, host keys checked
    against `known_hosts`; "" = ssh's own ~/.ssh/known_hosts). `base_dir` is on each
    node, relative to the user's home unless absolute."""

    kind: ClassVar[str] = "ssh"
    user: str
    port: int = 22
    identity_file: str = ""
    known_hosts: str = ""
    base_dir: str = ".broker/attempts"
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", self.user):
            raise OptionError("user", f"user {self.user!r} is not a login name")
        _check_port(self.port)
        _check_timeout(self.connect_timeout)


@dataclass(frozen=True)
class SlurmOptions:
    """The Slurm CLI, here or on a login node over SSH (`login: user@host`).

    `gres`: Slurm's type name of the pool's whole GPUs (`a100`); MIG slices are typed
    `<gres>_<profile>` (`a100_1g.10gb`), as Slurm's NVML autodetection names them.
    "" asks for untyped `--gres=gpu:N`. `base_dir`: a directory every node sees (batch
    scripts, logs, markers); "" = the provider's work directory here, or
    `.broker/attempts` in the login user's home. `requeue`: Slurm requeues a preempted
    attempt itself (`--requeue`) instead of the broker re-planning it. `switch_wait`:
    the most seconds a multi-node job on an InfiniBand pool waits for one leaf switch
    (`--switches=1@<wait>`). `slurm_conf`: the cluster's slurm.conf when not the default.
    """

    kind: ClassVar[str] = "slurm"
    partition: str = ""
    account: str = ""
    qos: str = ""
    gres: str = ""
    login: str = ""
    port: int = 22
    identity_file: str = ""
    known_hosts: str = ""
    base_dir: str = ""
    requeue: bool = False
    switch_wait: int = 300
    slurm_conf: str = ""
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        for name in ("partition", "account", "qos", "gres"):
            if not _WORD.fullmatch(getattr(self, name)):
                raise OptionError(name, f"{name} {getattr(self, name)!r} is not a Slurm name")
        if self.login and not _LOGIN.fullmatch(self.login):
            raise OptionError("login", f"login {self.login!r} must be user@host")
        _check_port(self.port)
        _check_timeout(self.connect_timeout)
        if self.switch_wait < 0:
            raise OptionError("switch_wait", "switch_wait is seconds, 0 or more")


ExecutorOptions = LocalOptions | SshOptions | SlurmOptions
OPTIONS: dict[str, type[LocalOptions] | type[SshOptions] | type[SlurmOptions]] = {
    "local": LocalOptions,
    "ssh": SshOptions,
    "slurm": SlurmOptions,
}


def option_names(kind: str) -> list[str]:
    """The keys an executor of `kind` takes (besides `kind`)."""
    return [f.name for f in dataclasses.fields(OPTIONS[kind])]
