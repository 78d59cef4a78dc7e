"""The simulator's state store: the real `StateStore`, its reads remembered between writes.

A controller pass asks the store the same questions many times (every job's attempts,
its manifest version, the recent reclaims, ...) and most simulated passes write
nothing at all; each answer is decoded from SQLite rows and JSON anew. Here every
public read is remembered until the next write transaction, so a question asked again
before anything changed is answered from memory. Nothing else differs: the writes,
the schema, the SQL and the decoding are the production store's, and every answer is
what the production store would give (its values are frozen dataclasses; lists and
dicts are handed out as copies). A simulator's store need not survive a power cut, so
commits do not wait for the disk (`synchronous = OFF`).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from broker.state import StateStore
from broker.state.model import Attempt, Event, attempt_of, event_of

# The reads the controller, recovery, steering and the cadence ask; each is a method of
# `StateReads` (or `AttemptWrites.migration`) that only reads the connection.
REMEMBERED = (
    "job", "jobs", "queued", "version", "versions", "attempt", "attempts",
    "ledger", "checkpoints", "lost_shares", "migration", "events",
)  # fmt: skip


class SimStateStore(StateStore):
    """`StateStore` whose reads are remembered until the next write (see the module)."""

    _memo: dict[tuple, Any]

    @classmethod
    def open_fast(cls, path, clock, *, new_id: Callable[[], str]) -> SimStateStore:
        """Open like `StateStore.open`, then let commits skip the disk flush."""
        store = cls.open(path, clock, new_id=new_id)
        store._conn.execute("PRAGMA synchronous = OFF")
        return store

    @contextmanager
    def _write(self) -> Iterator[str]:
        self._memo_clear()
        try:
            with super()._write() as now:
                yield now
        finally:
            self._memo_clear()

    def _event(
        self, job_id: str, attempt_id: str | None, now: str, kind: str, message: str, data: Any
    ) -> None:
        """`StateStore._event`'s row (`broker.state.store._insert_event`), each text's
        redaction remembered: a simulation writes the same few texts thousands of times."""
        from broker.state.model import json_text
        from pricing.userio.redact import redact_data

        row = (job_id, attempt_id, now, kind, self._redacted(message),
               json_text(redact_data(dict(data), self._redacted)))  # fmt: skip
        self._conn.execute(
            "INSERT INTO events (job_id, attempt_id, time, kind, message, data_json)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            row,
        )

    def _redacted(self, text: str) -> str:
        from pricing.userio.redact import redact

        known = self.__dict__.setdefault("_texts", {})
        if text not in known:
            known[text] = redact(text)
        return known[text]

    def _attempt_of(self, row: sqlite3.Row) -> Attempt:
        """An attempt row decoded once per content (a pass re-reads every attempt)."""
        return self._decoded(row, attempt_of)

    def _event_of(self, row: sqlite3.Row) -> Event:
        return self._decoded(row, event_of)

    def _decoded(self, row: sqlite3.Row, decode: Callable[[sqlite3.Row], Any]) -> Any:
        known = self.__dict__.setdefault("_rows", {})
        key = (decode, tuple(row))
        if key not in known:
            known[key] = decode(row)
        return known[key]

    def _memo_clear(self) -> None:
        self.__dict__["_memo"] = {}


def _key(value: Any) -> Any:
    """A hashable stand-in for an argument: a collection of states by its sorted texts
    (the store reads it as an SQL `IN`, where order does not matter)."""
    if value is None or isinstance(value, (str, int, float, datetime)):
        return value
    return ("in", tuple(sorted(str(v) for v in value)))


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def _remembered(name: str) -> Callable[..., Any]:
    read = getattr(StateStore, name)

    @functools.wraps(read)
    def remembered(self: SimStateStore, *args: Any, **kwargs: Any) -> Any:
        if self._conn.in_transaction:  # inside a write: its own reads must see it
            return read(self, *args, **kwargs)
        memo = self.__dict__.setdefault("_memo", {})
        key = (name, tuple(map(_key, args)), tuple(sorted((k, _key(v)) for k, v in kwargs.items())))
        if key not in memo:
            memo[key] = read(self, *args, **kwargs)
        return _copy(memo[key])

    return remembered


for _name in REMEMBERED:
    setattr(SimStateStore, _name, _remembered(_name))
