"""The store's write transactions: one per write (`_write`), or the savepoints of one
transaction for a block of writes (`together`), and what a commit that may or may not
have happened raises (`CommitUnknown`). A part of `StateStore` (broker.state.store),
which provides the attributes below."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from broker.clock import Clock
from broker.state.backend import Backend, CommitUnknown, Connection, StateUnavailable
from broker.state.ended import Ended
from broker.state.model import ts_text


class Transactions:
    """How the store's writes begin, commit and roll back (a part of `StateStore`)."""

    _conn: Connection
    _clock: Clock
    _backend: Backend
    _together: bool
    _held_rows: dict | None
    _ending: list[tuple[str, str]]
    _ended: Ended

    @property
    def dialect(self) -> str:
        """ "sqlite" or "postgresql": which claim and lock queries run (broker.state.leases,
        broker.state.limits)."""
        return self._backend.dialect

    @contextmanager
    def together(self) -> Iterator[None]:
        """The writes made inside commit at once, at the end: one commit (one fsync)
        for several steps. Each write inside is a savepoint, undone alone when it raises,
        and what the others wrote commits even when the block raises: the store ends as
        separate transactions would have left it. Only a kill in the block loses its
        writes together, so a block holds steps whose loss together is safe (a pass's
        plans and starts, its launches' "running", its closes: docs/state.md), and no
        provider call (it holds SQLite's write lock; another writer waits for it).
        On PostgreSQL each write stays its own transaction: a write there may have to run
        again whole after a conflict (`retried`), which a write inside another cannot."""
        if self._together or self.dialect != "sqlite":
            yield
            return
        self._together = True  # the transaction begins at the first write (`_write`)
        try:
            yield
        finally:  # what the writes inside left, committed (the block's error goes on)
            self._together = False
            self._end_together()

    def _end_together(self) -> None:
        if not self._conn.in_transaction:
            return  # nothing was written
        try:
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    @contextmanager
    def _write(self) -> Iterator[str]:
        """One write transaction; yields "now" read under the lock, so times follow commits.
        Inside `together`, a savepoint of its transaction (`_writing`)."""
        yield from self._writing()

    def _writing(self) -> Iterator[str]:
        """`_write`'s steps, a generator a store may extend (the simulator's does): one
        context manager per write, its parts delegated to by `yield from`."""
        self._held_rows = {}  # rows this write locked and read, as it left them (`_held`)
        self._ending = []
        try:
            yield from self._transaction()
            self._ended.note(self._ending)  # kept only once the write went through
        finally:
            self._held_rows = None

    def _transaction(self) -> Iterator[str]:
        """`_writing`'s transaction, or its savepoint inside `together`."""
        if self._together:
            yield from self._savepoint()
            return
        self._backend.begin(self._conn)
        try:
            yield ts_text(self._clock.now())
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        try:
            self._conn.execute("COMMIT")
        except StateUnavailable as exc:  # it may have committed: never run it again blindly
            why = f"{exc} (while committing: the change may have been made)"
            raise CommitUnknown(why) from None
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    def _savepoint(self) -> Iterator[str]:
        """A write inside `together`: a savepoint of its transaction (begun if need be)."""
        if not self._conn.in_transaction:
            self._backend.begin(self._conn)
        self._conn.execute("SAVEPOINT write")
        try:
            yield ts_text(self._clock.now())
        except BaseException:
            self._conn.execute("ROLLBACK TO SAVEPOINT write")
            self._conn.execute("RELEASE SAVEPOINT write")
            raise
        self._conn.execute("RELEASE SAVEPOINT write")
