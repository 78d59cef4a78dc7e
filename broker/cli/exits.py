"""Exit codes (DESIGN.md) and the one way a command fails."""

from __future__ import annotations

import sys
from typing import NoReturn

OK = 0
FAILED = 1
BAD_INPUT = 2
NO_PLACEMENT = 3
OVER_BUDGET = 4
PROVIDER = 5
INTERRUPTED = 130


# Exceptions that stop a command wherever they are raised, and their exit codes, in the
# order they are tried (a subclass before its base). Looked up by module and name among
# the modules already imported: an exception whose class was never imported cannot have
# been raised, so this map costs a command no import.
KNOWN_FAILURES: tuple[tuple[str, str, int], ...] = (
    ("broker.state.files", "ReadOnlyState", FAILED),
    ("broker.state.files", "StateFileError", BAD_INPUT),  # not ours, damaged, missing
    ("broker.state.schema", "SchemaTooNew", BAD_INPUT),
    ("pricing.userio.errors", "UserInputError", BAD_INPUT),
    ("pricing.userio.settings", "ConfigError", BAD_INPUT),
    ("pricing.schema", "SchemaError", BAD_INPUT),
    ("broker.reports.actual", "BillError", BAD_INPUT),
    ("sqlite3", "OperationalError", FAILED),  # locked, a full disk
    ("sqlite3", "DatabaseError", BAD_INPUT),  # a state file SQLite finds damaged
)


def known_failure(exc: BaseException) -> CliExit | None:
    """The CliExit an exception of `KNOWN_FAILURES` means, or None for any other."""
    for module_name, class_name, code in KNOWN_FAILURES:
        module = sys.modules.get(module_name)
        kind = getattr(module, class_name, None) if module is not None else None
        if isinstance(kind, type) and isinstance(exc, kind):
            message = str(exc) if module_name != "sqlite3" else f"state file: {exc}"
            return CliExit(message.splitlines()[0] if message else class_name, code)
    return None


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
    from pricing.userio.redact import redact

    print(f"broker: error: {redact(str(exc))}", file=sys.stderr)
    return exc.code
