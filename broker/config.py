"""Settings, resolved once with one precedence:
flag > `BROKER_*` environment > `./broker.toml` > `~/.config/broker/config.toml` > default.

Keys are plain names (`catalog`, `pools`, `overlays`, `freshness_days`); the
environment variable of `catalog` is `BROKER_CATALOG`, and the TOML files hold
them at top level (`catalog = "/data/offers.csv"`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def user_config_dir() -> Path:
    """Where broker reads user configuration (XDG config home)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "broker"


DEFAULTS: dict[str, Any] = {
    "catalog": None,
    "pools": None,  # None: ~/.config/broker/pools.yaml when it exists
    "overlays": None,  # None: ~/.config/broker/overlays.yaml when it exists
    "freshness_days": 30,
    "clouds": (),  # clouds launched for real (BROKER_CLOUDS=aws,gcp); others: the sandbox
}


@dataclass(frozen=True)
class Setting:
    """A resolved value and where it came from (for `--verbose` and error messages)."""

    value: Any
    origin: str


class ConfigError(ValueError):
    """A configuration file that cannot be read."""


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    import tomllib

    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def resolve(name: str, flag: Any = None, cwd: Path | None = None) -> Setting:
    """The value of setting `name` by the precedence in the module docstring."""
    if flag is not None:
        return Setting(flag, "flag")
    env_name = f"BROKER_{name.upper()}"
    if os.environ.get(env_name):
        return Setting(os.environ[env_name], env_name)
    for path in ((cwd or Path.cwd()) / "broker.toml", user_config_dir() / "config.toml"):
        values = _read_toml(path)
        if name in values:
            return Setting(values[name], str(path))
    return Setting(DEFAULTS.get(name), "default")


def resolve_path(
    name: str, flag: Path | None = None, default_file: str | None = None
) -> Path | None:
    """A path setting; falls back to `~/.config/broker/<default_file>` when that file exists."""
    setting = resolve(name, flag)
    if setting.value is not None:
        return Path(setting.value).expanduser()
    if default_file:
        candidate = user_config_dir() / default_file
        if candidate.exists():
            return candidate
    return None
