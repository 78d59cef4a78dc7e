"""A few PostgreSQL connections shared by the threads of one process (psycopg_pool),
for work that opens the state again and again: every scrape of `broker metrics serve`
and of `broker run --metrics-port` borrows a connection rather than opening its own
(a TCP connect, a password exchange and the schema check each time).

Each borrowed connection is the one a `StateStore` opens itself would be (the same
timeouts, `broker.state.pg_backend.PostgresBackend.connect_options`), wrapped in a
store for the time of one `with pool.store():`. A connection that dropped while it sat
in the pool is found out when it is lent (`check_connection`) and replaced; one that
drops while lent fails that one use (StateUnavailable, one line) and the pool opens a
new one in its place. A database that stays away fails a borrow after the connect
timeout, with the password masked, and the pool keeps trying in the background; its
own log lines are masked the same way.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from broker.state.location import DatabaseUrl
from broker.state.pg_backend import (
    CONNECT_TIMEOUT_S,
    PgConnection,
    PostgresBackend,
    check_schema,
)

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.state.store import StateStore

POOL_LOGGER = "psycopg.pool"  # psycopg_pool's own warnings (a failed connect) go here


class StorePool:
    """Up to `max_size` connections to one database, lent one at a time as a store
    (`store()`); `read_only`: every connection's transactions are read-only and a schema
    this broker would have to migrate is refused. Open with `open()`, `close()` after."""

    def __init__(
        self,
        location: DatabaseUrl,
        clock: Clock,
        *,
        read_only: bool = True,
        min_size: int = 1,
        max_size: int = 4,
        busy_timeout: float = 30.0,
        reconnect_s: float = 5.0,
    ) -> None:
        from psycopg_pool import ConnectionPool

        self._backend = PostgresBackend(
            location, busy_timeout=busy_timeout, reconnect_s=reconnect_s
        )
        self._clock, self._read_only = clock, read_only
        self._masking = _Masking(self._backend)
        self._pool = ConnectionPool(
            location.url,
            kwargs=self._backend.connect_options(),
            min_size=min_size,
            max_size=max_size,
            open=False,
            configure=self._configure,
            check=ConnectionPool.check_connection,
            name="broker-state",
            timeout=CONNECT_TIMEOUT_S,
            reconnect_timeout=max(60.0, reconnect_s),
        )

    @property
    def location(self) -> DatabaseUrl:
        return self._backend.location

    def open(self) -> StorePool:
        """Open the pool's first connection and check the schema (migrating it when
        writable): StateUnavailable when the database cannot be reached."""
        from psycopg_pool import PoolTimeout

        logging.getLogger(POOL_LOGGER).addFilter(self._masking)
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except PoolTimeout as exc:
            self.close()
            raise self._backend.unavailable(exc) from None
        with self._pool.connection() as raw:
            conn = PgConnection(self._backend, borrowed=raw)
            check_schema(self._backend, conn, self._clock, read_only=self._read_only)
        return self

    def close(self) -> None:
        """Close every connection (safe to repeat)."""
        self._pool.close()
        logging.getLogger(POOL_LOGGER).removeFilter(self._masking)

    def __enter__(self) -> StorePool:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def store(self) -> Iterator[StateStore]:
        """A store on a borrowed connection, given back when the block ends (rolled back
        if left inside a transaction). A newer schema than this broker knows (another
        broker migrated the database meanwhile) is refused here as at any open."""
        from psycopg_pool import PoolTimeout

        from broker.state.store import StateStore

        try:
            with self._pool.connection() as raw:
                conn = PgConnection(self._backend, borrowed=raw)
                try:
                    check_schema(self._backend, conn, self._clock, read_only=True)
                    yield StateStore(
                        conn, self._clock, self.location, lambda: secrets.token_hex(6),
                        self._backend,
                    )  # fmt: skip
                finally:
                    conn.close()
        except PoolTimeout as exc:  # none free, none could be opened, in the timeout
            raise self._backend.unavailable(exc) from None

    def stats(self) -> dict[str, int]:
        """psycopg_pool's counters (connections open, lent, lost...), for the tests."""
        return dict(self._pool.get_stats())

    def _configure(self, raw: Any) -> None:
        if self._read_only:
            raw.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


class _Masking(logging.Filter):
    """Masks the URL's password in psycopg_pool's log lines (a failed connect names the
    server; libpq never echoes a password, but a URL in a message would carry it)."""

    def __init__(self, backend: PostgresBackend) -> None:
        super().__init__()
        self._backend = backend

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._backend.masked(Exception(record.getMessage()))
        record.args = ()
        return True
