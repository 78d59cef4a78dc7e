"""What differs between the state store's two databases, behind one small interface:
`SqliteBackend` (broker.state.sqlite_backend, a file) and `PostgresBackend`
(broker.state.pg_backend, a server, psycopg 3 imported only when one is opened).

The store and its migrations are written once, in SQL both accept, with `?`
placeholders; a backend supplies the rest: how to connect, how a write transaction
starts and serialises against other writers (SQLite: `BEGIN IMMEDIATE`'s file lock;
PostgreSQL: READ COMMITTED with the job and attempt rows a write reads locked
`FOR UPDATE`), the few SQL functions that are spelled differently, and which of its
errors mean "try the whole write again" (a deadlock, a serialization failure, a
unique key two writers raced for) or "the database is not there".
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from broker.state.location import StateLocation
from broker.state.model import StateError

F = TypeVar("F", bound=Callable[..., Any])

WRITE_TRIES = 8  # a write that keeps conflicting fails after this many tries
_BACKOFF_S = 0.02  # doubled per try, with jitter: 0.02, 0.04, ... 2.56 s


class StateUnavailable(StateError):
    """The state database cannot be reached (down, unreachable, refused us, or the
    connection dropped): no state changed that a retry would not find. One line,
    the URL's password masked."""


class StateRefused(StateUnavailable):
    """The state database answered and refused us (a wrong password, no such role or
    database): waiting will not help, so `broker run` does not wait for it."""


class CommitUnknown(StateUnavailable):
    """The connection dropped while a COMMIT was in flight: the write may or may not
    have happened, so it is not tried again blindly (the next read tells)."""


class Connection(Protocol):
    """The part of a DB-API connection the store uses (sqlite3's, or the PostgreSQL
    adapter's): `?` placeholders, rows readable by index and by column name."""

    def execute(self, sql: str, parameters: Any = ...) -> Any: ...

    def executemany(self, sql: str, rows: Any) -> Any: ...

    def close(self) -> None: ...

    @property
    def in_transaction(self) -> bool: ...


class Backend(Protocol):
    """One database's dialect and connection rules (see the module docstring)."""

    dialect: str  # "sqlite" | "postgresql": picks `schema.statements` variants
    location: StateLocation
    for_update: str  # appended to a row read that guards a write: "" or " FOR UPDATE"

    def begin(self, conn: Connection) -> None:
        """Start a write transaction that serialises with other writers."""

    def begin_snapshot(self, conn: Connection) -> None:
        """Start a read-only transaction whose reads see one committed state."""

    def begin_migration(self, conn: Connection) -> None:
        """Start a migration's transaction, exclusive against other migrators."""

    def table_exists(self, conn: Connection, name: str) -> bool: ...

    def rebuilding(self, conn: Connection) -> AbstractContextManager[None]:
        """Around a migration that rebuilds a table (SQLite: foreign keys off)."""

    def check_references(self, conn: Connection, version: int) -> None:
        """After a migration's statements: StateError if it broke a reference."""

    def retryable(self, exc: BaseException) -> bool:
        """Whether a write that raised `exc` may simply run again."""

    def reset_serials(self, conn: Connection, table: str) -> None:
        """After rows were copied in with their ids: new ids follow the highest."""

    def json_number(self, column: str, key: str) -> str:
        """SQL: the number at `key` of a JSON object column (NULL when absent)."""

    def json_text(self, column: str, key: str) -> str:
        """SQL: the text at `key` of a JSON object column (NULL when absent)."""

    def joined_text(self, column: str) -> str:
        """SQL aggregate: the group's values joined by one space."""

    index_join: str  # a join SQLite keeps as the outer loop (`CROSS JOIN`), else `JOIN`


def retried(method: F) -> F:
    """Run a write method again when its backend says the failure was a conflict with
    another writer (never inside an outer transaction, never after an unknown commit):
    a few tries, backing off with jitter so two controllers do not collide again."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        backend: Backend = self._backend
        for attempt in range(WRITE_TRIES):
            try:
                return method(self, *args, **kwargs)
            except CommitUnknown:
                raise
            except Exception as exc:
                last = attempt == WRITE_TRIES - 1
                if last or self._conn.in_transaction or not backend.retryable(exc):
                    raise
            time.sleep(_BACKOFF_S * (2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    return run  # type: ignore[return-value]


def backoff_delays(total_s: float, first_s: float = 0.1, most_s: float = 2.0) -> Iterator[float]:
    """Pauses between reconnection tries, doubling up to `most_s`, `total_s` in all."""
    spent, pause = 0.0, first_s
    while spent < total_s:
        pause = min(pause, total_s - spent)
        yield pause
        spent += pause
        pause = min(pause * 2, most_s)


def is_store_error(exc: BaseException) -> bool:
    """Whether `exc` is the state database's own (locked, down, broken), not one job's:
    sqlite3's and psycopg's errors and StateUnavailable. Imports neither driver."""
    import sys

    if isinstance(exc, StateUnavailable):
        return True
    for module, name in (("sqlite3", "Error"), ("psycopg", "Error")):
        loaded = sys.modules.get(module)
        kind = loaded.__dict__.get(name) if loaded is not None else None
        if isinstance(kind, type) and isinstance(exc, kind):
            return True
    return False
