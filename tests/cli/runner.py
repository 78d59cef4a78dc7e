"""Run the real `broker` entry point in-process and capture what a user would see."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> Result:
    from broker.cli.main import main

    old_argv = sys.argv
    sys.argv = ["broker", *args]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
    out, err = capsys.readouterr()
    return Result(code, out, err)
