"""A statement's result while a PostgreSQL write is pipelined (psycopg's pipeline mode,
`broker.state.pg_backend.PgConnection.begin_pipelined`): the store reads it as it reads
any cursor's, and reading it is what waits for the server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.state.pg_backend import PgConnection


class PendingResult:
    """A statement's result in a pipeline: reading it (rows, or `rowcount`) waits for
    the server's answer to it and to everything queued before it (one round trip)."""

    def __init__(self, cursor: Any, conn: PgConnection) -> None:
        self._cursor, self._conn = cursor, conn

    def _read(self, what: Callable[[Any], Any]) -> Any:
        """`what(cursor)` once the answer is in: psycopg's fetch flushes the queue and
        waits for it (one round trip), `rowcount` needs the pipeline synced."""
        import psycopg

        cursor, conn = self._cursor, self._conn
        try:
            if cursor.pgresult is None:
                conn.round_trips += 1
                if conn._pipeline is not None and what is _rowcount:
                    conn._pipeline.sync()
            return what(cursor)
        except psycopg.Error as exc:
            raise conn._unavailable_or(exc) from None

    def fetchone(self) -> Any:
        return self._read(lambda cursor: cursor.fetchone())

    def fetchall(self) -> list[Any]:
        return self._read(lambda cursor: cursor.fetchall())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    @property
    def rowcount(self) -> int:
        return int(self._read(_rowcount))


def _rowcount(cursor: Any) -> int:
    return cursor.rowcount
