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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from broker.state import StateStore

# The reads the controller, recovery, steering and the cadence ask; each is a method of
# `StateReads` (or `AttemptWrites.migration`) that only reads the connection.
REMEMBERED = (
    "job", "jobs", "queued", "version", "versions", "attempt", "attempts",
    "ledger", "checkpoints", "lost_shares", "migration",
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
        """`StateStore._event`'s row, its redaction (`_insert_event`) remembered: a
        simulation writes the same few texts thousands of times."""
        from broker.state.model import json_text
        from pricing.userio.redact import redact, redact_data

        cleaned = self.__dict__.setdefault("_cleaned", {})
        key = (message, json_text(data))
        if key not in cleaned:
            cleaned[key] = (redact(message), json_text(redact_data(dict(data))))
        self._conn.execute(
            "INSERT INTO events (job_id, attempt_id, time, kind, message, data_json)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, attempt_id, now, kind, *cleaned[key]),
        )

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
