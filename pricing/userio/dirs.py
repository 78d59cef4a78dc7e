"""The user's directories for broker, after the XDG base directory spec.

| function          | variable          | when it is unset           |
|-------------------|-------------------|----------------------------|
| `user_config_dir` | `XDG_CONFIG_HOME` | `~/.config/broker`         |
| `user_data_dir`   | `XDG_DATA_HOME`   | `~/.local/share/broker`    |
| `user_cache_dir`  | `XDG_CACHE_HOME`  | `~/.cache/broker`          |
| `user_state_dir`  | `XDG_STATE_HOME`  | `~/.local/state/broker`    |

Config holds what the user writes (`config.toml`, `pools.yaml`, ...), data what
broker writes for the user (the user catalog), cache what it can rebuild
(compiled catalogs, validated specs, the rendered help), state the job database.
A relative `XDG_STATE_HOME` is ignored, as the spec asks; the other three take
the variable as given, as they always have.

This module imports nothing but `os`: the cached `broker --help` finds its answer
through `user_dir` before anything else (pathlib included) is imported.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from pathlib import Path

_HOMES = {
    "config": ("XDG_CONFIG_HOME", (".config",)),
    "data": ("XDG_DATA_HOME", (".local", "share")),
    "cache": ("XDG_CACHE_HOME", (".cache",)),
    "state": ("XDG_STATE_HOME", (".local", "state")),
}


def user_dir(kind: str) -> str:
    """The broker folder of one kind ("config", "data", "cache" or "state"), as text."""
    variable, default = _HOMES[kind]
    base = os.environ.get(variable, "")
    if kind == "state" and not os.path.isabs(base):
        base = ""
    return os.path.join(base or os.path.join(os.path.expanduser("~"), *default), "broker")


def user_config_dir() -> Path:
    """Where broker reads user configuration (XDG config home)."""
    return _path("config")


def user_data_dir() -> Path:
    """Where broker keeps user data (XDG data home)."""
    return _path("data")


def user_cache_dir() -> Path:
    """Where broker keeps derived files it can rebuild (XDG cache home)."""
    return _path("cache")


def user_state_dir() -> Path:
    """Where broker keeps its job state (XDG state home)."""
    return _path("state")


def _path(kind: str) -> Path:
    from pathlib import Path

    return Path(user_dir(kind))
