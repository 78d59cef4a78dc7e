"""`broker plan FILE... [-o FORMAT]` run straight, without typer.

Importing typer (and the click it carries) costs ~0.04 s of a cold `broker plan
job.yaml`'s ~0.18 s. The plainest shapes of the commonest command are therefore
recognised here, from the words alone: `plan`, then manifest paths (none empty or
starting with `-`) and at most one `-o FORMAT` / `--output FORMAT` with a known
format, in any order. They run as typer would run them (the same settings warning,
quiet log, command function and exit-code table), and print the same bytes with the
same exit code (tests/cli/test_direct_cli.py compares the two over drawn argument
lists). Anything else (help, every other flag, an unknown format, a path that looks
like a flag) goes to typer, whose parsing and messages stay the only ones.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

FORMATS = ("table", "json", "csv", "markdown")  # broker.cli.render.Output's values
OUTPUT_FLAGS = ("-o", "--output")


class DirectPlan(NamedTuple):
    """A `broker plan` recognised: its paths and output format (a named tuple:
    a third of a frozen dataclass's cost to define, paid on every start)."""

    paths: tuple[str, ...]
    output: str = "table"


def recognise(args: list[str]) -> DirectPlan | None:
    """The `broker plan` of `args` (the words after `broker`) when it has a plain shape
    (module docstring), else None: typer parses it."""
    if not args or args[0] != "plan":
        return None
    paths: list[str] = []
    output: str | None = None
    words = iter(args[1:])
    for word in words:
        if word in OUTPUT_FLAGS:
            value = next(words, None)
            if output is not None or value not in FORMATS:
                return None
            output = value
        elif word and "\x00" not in word and not word.startswith("-"):
            paths.append(word)
        else:
            return None
    if not paths:
        return None
    return DirectPlan(tuple(paths), output or "table")


def run(plan: DirectPlan) -> int:
    """Run the plan as `broker.cli.main.main` runs a command (its root callback's
    quiet log included); the exit code (`broker.cli.exits`)."""
    from broker.cli.startup import environment_defaults, quiet_logs, warn_unknown_settings

    environment_defaults()
    try:
        warn_unknown_settings()
        quiet_logs(False)
        from broker.cli.plan_run import plan_paths
        from broker.cli.render import Output

        plan_paths([Path(p) for p in plan.paths], output=Output(plan.output))
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return 0
    except BaseException as exc:  # exit_code raises again what it does not know
        from broker.cli.exits import exit_code

        return exit_code(exc)
