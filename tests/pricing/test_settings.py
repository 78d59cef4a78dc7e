"""Config precedence: flag > environment > ./broker.toml > user config.toml > default,
the same for every declared setting, and the table in docs/settings.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing.userio.settings import SETTINGS, ConfigError, resolve, resolve_text

DOCS = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


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


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(sorted(n for n, s in SETTINGS.items() if s.default is None)),
    in_env=st.booleans(),
    in_project=st.booleans(),
    in_user=st.booleans(),
)
def test_every_text_setting_takes_the_same_precedence(
    isolated_user_dirs, monkeypatch, name, in_env, in_project, in_user
):
    """Endpoints, price URLs, images: what was read straight from the environment now
    comes through the one resolution, so broker.toml can hold it and the env still wins."""
    variable = SETTINGS[name].variable
    user = isolated_user_dirs / "config" / "broker"
    user.mkdir(parents=True, exist_ok=True)
    for path, given_here, value in (
        (isolated_user_dirs / "broker.toml", in_project, "project"),
        (user / "config.toml", in_user, "user"),
    ):
        path.write_text(f'{name} = "{value}"\n' if given_here else "")
    monkeypatch.delenv(variable, raising=False)
    if in_env:
        monkeypatch.setenv(variable, "env")
    expected = "env" if in_env else "project" if in_project else "user" if in_user else None
    assert resolve_text(name) == expected


def test_empty_variable_counts_as_unset(isolated_user_dirs, monkeypatch):
    (isolated_user_dirs / "broker.toml").write_text('aws_endpoint = "http://127.0.0.1:5000"\n')
    monkeypatch.setenv("BROKER_AWS_ENDPOINT", "")
    assert resolve_text("aws_endpoint") == "http://127.0.0.1:5000"


def test_a_text_setting_of_another_kind_names_file_and_key(isolated_user_dirs):
    (isolated_user_dirs / "broker.toml").write_text("gcp_image = 7\n")
    with pytest.raises(ConfigError, match=r"broker\.toml: gcp_image: expected a string"):
        resolve_text("gcp_image")


def test_an_undeclared_setting_is_a_programming_error():
    with pytest.raises(KeyError):
        resolve("aws_endpiont")


def test_docs_list_every_setting_with_its_variable():
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| `(BROKER_[A-Z0-9_]+)` \|", DOCS.read_text(), re.M)
    assert rows == [(s.name, s.variable) for s in SETTINGS.values()]


def test_a_toml_syntax_error_is_file_line_column_and_exit_2(isolated_user_dirs, capsys):
    from tests.cli.runner import run_cli

    (isolated_user_dirs / "broker.toml").write_text('catalog = "a.csv"\nfreshness_days = \n')
    with pytest.raises(ConfigError, match=r"broker\.toml:2:\d+: TOML syntax error: Invalid value"):
        resolve("catalog")
    result = run_cli(capsys, "offers", "--summary")
    assert result.code == 2
    assert re.fullmatch(
        r"broker: error: .*broker\.toml:2:\d+: TOML syntax error: .*\n", result.stderr
    )


def test_unknown_keys_warn_with_a_did_you_mean_and_their_line(isolated_user_dirs, capsys):
    from pricing.userio.settings import unknown_keys
    from tests.cli.runner import run_cli

    (isolated_user_dirs / "broker.toml").write_text(
        'freshness_days = 7\ncatalgo = "x.csv"\nzzz = 1\n\n[aws_endpiont]\nurl = "x"\n'
    )
    path = isolated_user_dirs / "broker.toml"
    assert unknown_keys() == [
        f"{path}:2: unknown setting 'catalgo' (did you mean 'catalog'?)",
        f"{path}:3: unknown setting 'zzz'",
        f"{path}:5: unknown setting 'aws_endpiont' (did you mean 'aws_endpoint'?)",
    ]
    result = run_cli(capsys, "offers", "--summary")
    assert result.code == 0
    assert f"broker: warning: {path}:2: unknown setting 'catalgo'" in result.stderr


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("freshness_days = 'abc'", "freshness_days: expected a whole number above 0"),
        ("max_yaml_bytes = -1", "max_yaml_bytes: expected a whole number above 0"),
        ("catalog = 5", "catalog: expected a path, got 5"),
        ("x = " + "[" * 3000 + "]" * 3000, "nested too deep"),
    ],
)
def test_a_setting_of_the_wrong_kind_is_bad_input_naming_the_file(
    isolated_user_dirs, capsys, text, said
):
    from tests.cli.runner import run_cli

    (isolated_user_dirs / "broker.toml").write_text(text + "\n")
    result = run_cli(capsys, "offers", "--summary")
    assert result.code == 2 and said in result.stderr and "broker.toml" in result.stderr


def test_a_settings_file_that_is_no_regular_file_is_refused(isolated_user_dirs):
    import os

    os.mkfifo(isolated_user_dirs / "broker.toml")
    with pytest.raises(ConfigError, match="is a FIFO"):
        resolve("catalog")
