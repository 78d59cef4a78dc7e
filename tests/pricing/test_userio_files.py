"""pricing.userio.dirs and .atomic: the user's folders where they always were, and files
replaced all or nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pricing.userio.atomic import atomic_write, atomic_write_text
from pricing.userio.dirs import (
    user_cache_dir,
    user_config_dir,
    user_data_dir,
    user_dir,
    user_state_dir,
)

FOLDERS = (
    (user_config_dir, "XDG_CONFIG_HOME", (".config",)),
    (user_data_dir, "XDG_DATA_HOME", (".local", "share")),
    (user_cache_dir, "XDG_CACHE_HOME", (".cache",)),
    (user_state_dir, "XDG_STATE_HOME", (".local", "state")),
)


@pytest.mark.parametrize(("folder", "variable", "default"), FOLDERS)
def test_each_folder_follows_its_variable_else_the_home_default(
    folder, variable, default, tmp_path, monkeypatch
):
    monkeypatch.setenv(variable, str(tmp_path))
    assert folder() == tmp_path / "broker"
    monkeypatch.delenv(variable)
    assert folder() == Path.home().joinpath(*default, "broker")
    monkeypatch.setenv(variable, "")
    assert folder() == Path.home().joinpath(*default, "broker")


def test_a_relative_state_home_is_ignored_the_others_are_taken_as_given(monkeypatch):
    for _, variable, _ in FOLDERS:
        monkeypatch.setenv(variable, "relative")
    assert user_state_dir() == Path.home() / ".local" / "state" / "broker"
    assert user_cache_dir() == Path("relative") / "broker"
    assert user_config_dir() == Path("relative") / "broker"


def test_the_text_form_is_the_same_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_dir("cache") == str(user_cache_dir())


def test_atomic_write_replaces_and_creates_the_folder(tmp_path):
    target = tmp_path / "new" / "folder" / "file.txt"
    atomic_write_text(target, "one\r\n")
    assert target.read_bytes() == b"one\r\n"  # newlines as written
    atomic_write_text(str(target), "two", durable=False)
    assert target.read_text() == "two"
    atomic_write(target, lambda handle: handle.write(b"\x00\x01"), binary=True)
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(os.listdir(target.parent)) == ["file.txt"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "catalog.csv"
    target.write_text("old")

    def half_then_fail(handle):
        handle.write("half a new")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["catalog.csv"]
