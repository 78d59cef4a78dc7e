"""Config precedence: flag > environment > ./broker.toml > user config.toml > default."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, resolve


def test_precedence(isolated_user_dirs, monkeypatch):
    user = isolated_user_dirs / "config" / "broker"
    user.mkdir(parents=True)
    (user / "config.toml").write_text('catalog = "user.csv"\nfreshness_days = 7\n')
    assert resolve("catalog").value == "user.csv"
    (isolated_user_dirs / "broker.toml").write_text('catalog = "project.csv"\n')
    assert resolve("catalog").value == "project.csv"
    assert resolve("freshness_days").value == 7  # still from the user file
    monkeypatch.setenv("BROKER_CATALOG", "env.csv")
    assert resolve("catalog").value == "env.csv"
    assert resolve("catalog", flag="flag.csv").value == "flag.csv"
    assert resolve("pools").origin == "default"


def test_broken_toml_names_the_file(isolated_user_dirs):
    (isolated_user_dirs / "broker.toml").write_text("catalog = \n")
    with pytest.raises(ConfigError, match="broker.toml"):
        resolve("catalog")
