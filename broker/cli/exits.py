"""Exit codes (DESIGN.md), the one way a command fails, and the one table from what
escaped a command to its exit code and its one line on stderr.

    0 ok; 1 operation failed; 2 bad input; 3 no feasible placement; 4 over budget or
    policy; 5 provider or credentials; 130 interrupted.

Nothing here imports the classes it maps: an exception can only be an instance of a
class whose module is loaded already, so the table looks in `sys.modules` and keeps
`broker --help` as light as it was.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import NoReturn

OK = 0
FAILED = 1
BAD_INPUT = 2
NO_PLACEMENT = 3
OVER_BUDGET = 4
PROVIDER = 5
INTERRUPTED = 130


class CliExit(Exception):
    """Raised by commands to stop with a one-line message and an exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = FAILED) -> NoReturn:
    """Stop the command: message to stderr, `code` as the exit status."""
    raise CliExit(message, code)


def report(exc: CliExit) -> int:
    """Print a CliExit's message the one way (redacted: `pricing.userio.redact`), and
    return its code."""
    from pricing.userio.redact import redact, shortened

    print(f"broker: error: {redact(shortened(str(exc)))}", file=sys.stderr)
    return exc.code


# What may escape a command, most specific first: "module:Class" and its exit code.
# Looked up among the modules already imported: an exception whose class was never
# imported cannot have been raised, so the table costs a command no import.
EXIT_CODES: tuple[tuple[str, int], ...] = (
    ("broker.state.backend:StateUnavailable", FAILED),  # the state database is down
    ("broker.state.pg_backend:DriverMissing", FAILED),  # a URL without the postgres extra
    ("broker.state.files:ReadOnlyState", FAILED),
    ("broker.state.files:StateFileError", BAD_INPUT),  # not ours, damaged, missing
    ("broker.state.schema:SchemaTooNew", BAD_INPUT),  # written by a newer broker: unchanged
    ("pricing.userio.settings:ConfigError", BAD_INPUT),  # broker.toml, config.toml
    ("pricing.userio.errors:UserInputError", BAD_INPUT),
    ("pricing.schema:SchemaError", BAD_INPUT),
    ("broker.reports.actual:BillError", BAD_INPUT),
    ("broker.state.model:UnknownJob", BAD_INPUT),
    ("providers.errors:ProviderError", PROVIDER),  # credentials, capacity, quota, ...
    ("providers.registry:ProviderUnavailable", PROVIDER),  # an SDK extra not installed
    ("sqlite3:OperationalError", FAILED),  # locked, a full disk
    ("sqlite3:DatabaseError", BAD_INPUT),  # a state file SQLite finds damaged
    ("psycopg:Error", FAILED),  # the state database refused a statement (a timeout, ...)
)


def _mapped(exc: BaseException) -> tuple[int, str] | None:
    """The exit code and one line for an exception of the table, or None."""
    for target, code in EXIT_CODES:
        module, _, name = target.partition(":")
        loaded = sys.modules.get(module)
        kind = loaded.__dict__.get(name) if loaded is not None else None
        if isinstance(kind, type) and isinstance(exc, kind):
            line = _one_line(exc)
            prefix = {"sqlite3": "state file: ", "psycopg": "state database: "}.get(module, "")
            return code, prefix + line
    return None


def exit_code(exc: BaseException) -> int:
    """Say what ended the command (one line on stderr, or nothing) and return its exit
    code. A closed stdout (`broker jobs | head`) ends quietly with 0; an exception the
    table does not know is a bug, and is raised again with its traceback."""
    # typer's (and click's) exceptions only where typer is loaded: a command run without
    # it (`broker plan FILE`: broker.cli.direct) cannot have raised them.
    typer = sys.modules.get("typer")
    if isinstance(exc, CliExit):
        return report(exc)
    if typer is not None and isinstance(exc, typer.Exit):
        return exc.exit_code
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else FAILED)
    if isinstance(exc, KeyboardInterrupt) or (typer is not None and isinstance(exc, typer.Abort)):
        _flush_stdout()  # what the command printed lands before it exits 130
        said = str(exc) if isinstance(exc, KeyboardInterrupt) else ""
        print("broker: interrupted" + (f": {said}" if said else ""), file=sys.stderr)
        return INTERRUPTED
    usage = _click_exception() if typer is not None else None
    if usage is not None and isinstance(exc, usage):  # usage errors: click's words, exit 2
        from pricing.userio.redact import shortened

        exc.message = shortened(exc.message)  # click quotes a value of 5,000 digits whole
        exc.show()
        return exc.exit_code
    if isinstance(exc, BrokenPipeError):
        silence_stdout()
        return OK
    mapped = _mapped(exc) or _unusable_path(exc)
    if mapped is None:
        raise exc
    code, line = mapped
    return report(CliExit(line, code))


# A path the system refuses to look up at all is a path a user gave (a name of 300
# letters, links that point at each other): bad input, wherever it was first touched.
_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP})


def _unusable_path(exc: BaseException) -> tuple[int, str] | None:
    if isinstance(exc, OSError) and exc.errno in _PATH_ERRNOS and exc.filename is not None:
        return BAD_INPUT, f"{exc.strerror}: {exc.filename}"
    return None


def _click_exception() -> type[Exception]:
    """Click's error shown to users (usage errors): typer 0.28 carries its own click."""
    try:
        from typer._click.exceptions import ClickException
    except ImportError:  # typer before 0.28 runs on click itself
        from click.exceptions import ClickException
    return ClickException


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _flush_stdout() -> None:
    """Flush what a command printed; a reader that went away is no error here."""
    try:
        sys.stdout.flush()
    except OSError:  # the reader went away (`| head`): exit quietly all the same
        silence_stdout()
    except ValueError:
        pass  # stdout is closed: nothing can reach it


def silence_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and Python's last flush at exit
    must not complain about it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # stdout is not a file (a test's capture): nothing will flush to a pipe
