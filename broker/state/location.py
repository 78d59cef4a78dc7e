"""Where the state lives: a SQLite file (a path) or a PostgreSQL database (a
`postgresql://` URL), told apart in one place so that every command accepts both.

A URL carries its credentials only as the user wrote them (or none: PGPASSFILE,
~/.pgpass and the PG* environment are libpq's); `DatabaseUrl.shown` is what any
message prints, with the password masked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class DatabaseUrl:
    """A PostgreSQL state database: the URL as given (password and all, never printed)."""

    url: str = field(repr=False)

    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        return f"DatabaseUrl({self.shown!r})"

    @property
    def shown(self) -> str:
        """The URL with its password (if any) replaced by `***`."""
        return shown_url(self.url)

    @property
    def local_anchor(self) -> Path:
        """A file name in the user's state folder standing for this database, beside which
        the local folders a state file has (the sandbox, packed workdirs) are kept."""
        from pricing.userio.dirs import user_state_dir

        parts = urlsplit(self.url)
        database = parts.path.lstrip("/") or "postgres"
        host = (parts.hostname or "local").replace("/", "_")
        return user_state_dir() / f"pg-{host}-{parts.port or 5432}-{database}.db"


StateLocation = Path | DatabaseUrl


def is_database_url(text: str | os.PathLike[str]) -> bool:
    return isinstance(text, str) and text.split("://", 1)[0].lower() in SCHEMES and "://" in text


def parse_location(text: str | os.PathLike[str] | DatabaseUrl) -> StateLocation:
    """A URL (`postgresql://...`, `postgres://...`) or else a path (`~` expanded)."""
    if isinstance(text, DatabaseUrl):
        return text
    if is_database_url(text):
        _check_url(str(text))
        return DatabaseUrl(str(text))
    return Path(text).expanduser()


def _check_url(url: str) -> None:
    """A StateFileError (exit 2) for a URL no driver could read: `postgresql://[bad`, a
    port that is no port; what it names is asked of the database only when it is used."""
    from broker.state.files import StateFileError
    from pricing.userio.redact import redact

    try:
        urlsplit(url).port  # noqa: B018 - parsed for its error
    except ValueError as exc:
        raise StateFileError(url, f"{redact(url)}: not a database URL: {exc}") from None


def local_anchor(location: StateLocation | str) -> Path:
    """The state file itself, or the stand-in path of a database (`DatabaseUrl.local_anchor`)."""
    where = parse_location(location)
    return where.local_anchor if isinstance(where, DatabaseUrl) else where


def shown_url(url: str) -> str:
    """`postgresql://alice:***@db:5432/broker`: the password masked, the rest kept (a
    `password=` query parameter too)."""
    import re

    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        name, colon, _ = user.partition(":")
        netloc = f"{name}:***@{host}" if colon else f"{name}@{host}"
    query = re.sub(r"(?i)(^|&)(password)=[^&]*", r"\1\2=***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
