"""Run the real `broker` entry point in-process and capture what a user would see."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def run_cli(
    capsys: pytest.CaptureFixture, *args: str, entry: Callable[[], None] | None = None
) -> Result:
    """`broker ARGS` through typer's entry (`broker.cli.main.main`), or `entry`."""
    from broker.cli.main import main as through_typer

    main = entry or through_typer
    old_argv = sys.argv
    sys.argv = ["broker", *args]
    collecting = gc.isenabled()  # the console entry turns the collector off until its exit
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
        if collecting:
            gc.enable()  # in-process, the next test finds it as it was
    out, err = capsys.readouterr()
    return Result(code, out, err)


def state_cli(capsys: pytest.CaptureFixture, tmp_path, catalog_commands: tuple[str, ...]):
    """`broker ARGS` on one state file in `tmp_path` (`--state-file` for `jobs`, whose
    `--state` is a filter; none for `validate`) and a small catalog for the commands
    in `catalog_commands`."""
    from tests.fakes.offers import write_catalog

    catalog = str(write_catalog(tmp_path / "offers.csv"))
    state = str(tmp_path / "state.db")

    def call(*args: str) -> Result:
        command, rest = args[0], args[1:]
        where = ("--state-file", state) if command == "jobs" else ("--state", state)
        where = () if command == "validate" else where
        extra = ("--catalog", catalog) if command in catalog_commands else ()
        return run_cli(capsys, command, *rest, *where, *extra)

    return call
