"""Located errors: a mistake in a user's file, printed like a compiler's.

    pools.yaml:12:5: pools[0].gpus_per_nod: unknown field (did you mean 'gpus_per_node'?)

Lines and columns are 1-based; 0 means unknown (an unreadable file). A field
path is a tuple of mapping keys and list indices, `("pools", 0, "nodes")`,
written `pools[0].nodes`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

FieldPath = tuple[str | int, ...]


def format_field(field_path: Iterable[str | int]) -> str:
    """`("pools", 0, "nodes")` as `pools[0].nodes`."""
    out = ""
    for part in field_path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class UserInputError(ValueError):
    """A mistake in a user's file, located as `path:line:column: field: message`.

    `related` holds further errors found in the same pass, so that one run can
    report them all; `str()` prints one error per line, this one first.
    """

    def __init__(
        self,
        path: Path | str,
        line: int,
        column: int,
        field: str,
        message: str,
        related: Sequence[UserInputError] = (),
    ) -> None:
        super().__init__(path, line, column, field, message, tuple(related))
        self.path = Path(path)
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        self.related: tuple[UserInputError, ...] = tuple(related)

    @classmethod
    def collect(cls, errors: Sequence[UserInputError]) -> UserInputError:
        """One error carrying all of `errors` (at least one), the first as the head."""
        head, *rest = errors
        return cls(head.path, head.line, head.column, head.field, head.message, rest)

    @property
    def errors(self) -> tuple[UserInputError, ...]:
        """This error and the related ones, each on its own."""
        return (self, *self.related)

    def one_line(self) -> str:
        """This error alone, without the related ones; a secret quoted from the file
        (a password in a URI, a token) masked (`pricing.userio.redact`)."""
        from pricing.userio.redact import redact, shortened

        where = str(self.path)
        message = redact(shortened(self.message))
        if self.line:
            where += f":{self.line}:{self.column}"
        if self.field:
            return f"{where}: {shortened(self.field)}: {message}"
        return f"{where}: {message}"

    def __str__(self) -> str:
        return "\n".join(error.one_line() for error in self.errors)
