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
