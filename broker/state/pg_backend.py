"""The state store on a PostgreSQL database (a team's shared queue), through psycopg 3.

A write is one READ COMMITTED transaction in which the job and attempt rows that
guard it are read `SELECT ... FOR UPDATE` (`PostgresBackend.for_update`): a second
writer of the same job waits for the first to commit and then reads what it wrote,
which is what `BEGIN IMMEDIATE`'s file lock gives on SQLite. What row locks cannot
guard (two writers inserting the same new key: a first submission of one name, an
instance reported twice) fails with a unique violation, and a lock cycle with a
deadlock; both are "run the write again" (`retryable`, `broker.state.backend.retried`).
Migrations take a transaction-level advisory lock, so two brokers opening a fresh
database migrate it once.

The connection is psycopg's, in autocommit mode (the store says BEGIN and COMMIT,
as with SQLite), wrapped so that the store's SQL (`?` placeholders) runs unchanged
and rows read by index and by name. A dropped connection is opened again on the
next statement, with backoff; a database that stays away raises StateUnavailable,
one line with the password masked. Credentials come from the URL, PGPASSFILE or
~/.pgpass, or the PG* environment (libpq's own rules): nothing else is read.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any
from urllib.parse import unquote, urlsplit

from broker.clock import Clock
from broker.state import schema
from broker.state.backend import StateRefused, StateUnavailable, backoff_delays
from broker.state.location import DatabaseUrl
from broker.state.model import StateError, ts_text
from broker.state.pg_pipeline import PendingResult

MIGRATION_LOCK = 0x62726F6B6572  # "broker": the advisory lock migrations take
CONNECT_TIMEOUT_S = 10
STATEMENT_TIMEOUT_S = 300  # no statement of the broker's runs this long: a stuck one fails
REFUSED_CLASSES = ("28", "3D")  # SQLSTATE: invalid authorization, no such database
# libpq gives a refusal at connect no SQLSTATE, only the server's text (FATAL: ...)
REFUSED_TEXTS = (
    "authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
    "permission denied",
)


class DriverMissing(StateError):
    """A PostgreSQL URL without psycopg installed."""


class PostgresBackend:
    """PostgreSQL's dialect, locking and connections (see `broker.state.backend.Backend`)."""

    dialect = "postgresql"
    for_update = " FOR UPDATE"
    index_join = "JOIN"

    def __init__(
        self, location: DatabaseUrl, *, busy_timeout: float = 30.0, reconnect_s: float = 5.0
    ) -> None:
        self.location = location
        self.busy_timeout = busy_timeout  # how long a write waits for a row lock
        self.reconnect_s = reconnect_s  # how long a lost connection is tried again

    def connect(self) -> PgConnection:
        return PgConnection(self)

    def begin(self, conn: PgConnection) -> None:
        conn.begin_pipelined("BEGIN ISOLATION LEVEL READ COMMITTED")

    def begin_snapshot(self, conn: Any) -> None:
        """Reads that see one committed state: one snapshot for every read inside (MVCC:
        no writer waits)."""
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def begin_migration(self, conn: PgConnection) -> None:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def table_exists(self, conn: PgConnection, name: str) -> bool:
        (found,) = conn.execute("SELECT to_regclass(?)", (name,)).fetchone()
        return found is not None

    def rebuilding(self, conn: PgConnection) -> nullcontext[None]:
        return nullcontext()  # constraints are dropped in place (`Migration.postgresql`)

    def check_references(self, conn: PgConnection, version: int) -> None:
        pass  # PostgreSQL checks every foreign key as the statements run

    def retryable(self, exc: BaseException) -> bool:
        from psycopg import errors

        transient = (errors.SerializationFailure, errors.DeadlockDetected, errors.UniqueViolation)
        return isinstance(exc, transient) or type(exc) is StateUnavailable

    def reset_serials(self, conn: PgConnection, table: str) -> None:
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence(?, 'id'), COALESCE(MAX(id), 0) + 1, false)"
            f" FROM {table}",
            (table,),
        )

    def json_number(self, column: str, key: str) -> str:
        return f"CAST(CAST({column} AS jsonb) ->> '{key}' AS DOUBLE PRECISION)"

    def json_text(self, column: str, key: str) -> str:
        return f"(CAST({column} AS jsonb) ->> '{key}')"

    def joined_text(self, column: str) -> str:
        return f"string_agg({column}, ' ')"

    # --- connections --------------------------------------------------------------------

    def connect_options(self) -> dict[str, Any]:
        """psycopg.connect's keywords beside the URL: autocommit, rows by name and index,
        the connect, statement, lock and idle-in-transaction timeouts (a pool's too)."""
        options = (
            f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}"
            f" -c lock_timeout={max(1, int(self.busy_timeout * 1000))}"  # 0 would be "never"
            " -c idle_in_transaction_session_timeout=600000"
        )
        return {
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": options,
            "application_name": "broker",
            "row_factory": _rows,
        }

    def raw_connection(self) -> Any:
        """A new psycopg connection (autocommit, rows by name and index, timeouts set);
        tried again with backoff for `reconnect_s`; StateUnavailable when it stays away."""
        psycopg = _driver()
        delays = backoff_delays(self.reconnect_s)
        while True:
            try:
                return psycopg.connect(self.location.url, **self.connect_options())
            except psycopg.OperationalError as exc:
                if refused(exc):  # the server answered no: asking again won't help
                    raise StateRefused(self.unavailable(exc).args[0]) from None
                pause = next(delays, None)
                if pause is None:
                    raise self.unavailable(exc) from None
                time.sleep(pause)

    def unavailable(self, exc: BaseException) -> StateUnavailable:
        """The one line for a database that cannot be reached (password masked)."""
        return StateUnavailable(f"the state database {self.location.shown} is unavailable: "
                                f"{self.masked(exc)}")  # fmt: skip

    def masked(self, exc: BaseException) -> str:
        from pricing.userio.redact import redact

        text = " ".join(str(exc).split()) or type(exc).__name__
        password = unquote(urlsplit(self.location.url).password or "")
        if password:
            text = text.replace(password, "***")
        return redact(text)


class PgConnection:
    """psycopg's connection as the store uses sqlite3's: `execute(sql, params)` with `?`
    placeholders, `in_transaction`, rows by index and name; opened again when lost.
    `borrowed`: a pool's connection (broker.state.pg_pool), which the pool closes, never
    this wrapper (a connection opened in its place is this wrapper's, and closed by it)."""

    def __init__(self, backend: PostgresBackend, borrowed: Any = None) -> None:
        self._backend = backend
        self._borrowed = borrowed
        self._raw = borrowed if borrowed is not None else backend.raw_connection()
        self._pipeline: Any = None  # psycopg's Pipeline while a write is open
        self._pipeline_cm: Any = None  # and the context that entered it
        self.statements = 0  # sent so far (bench/state_backends.py)
        self.round_trips = 0  # waits for the server's answer (a pipeline sends several)

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        raw = self._raw
        if raw is None or raw.closed or raw.broken:
            return False
        if self._pipeline is not None:
            return True  # its BEGIN may not have been sent yet
        return raw.info.transaction_status != TransactionStatus.IDLE

    def begin_pipelined(self, sql: str) -> None:
        """Start a write transaction in psycopg's pipeline mode: a statement whose result
        the store does not read (an insert, an update, the BEGIN) goes out with the next
        one it reads, or with the COMMIT, in one round trip rather than one each. An
        error of a queued statement is raised at that next read (or the COMMIT), with
        its own type, and the transaction is rolled back as any failed write is."""
        raw = self._live()
        if self._pipeline is None:
            self._pipeline_cm = raw.pipeline()
            self._pipeline = self._pipeline_cm.__enter__()
        self.execute(sql)

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        import psycopg

        if self._pipeline is not None and sql == "ROLLBACK":
            self._end_pipeline(quiet=True)  # the error that got here was raised already
            if not self.in_transaction:
                return None
        raw = self._live()
        self.statements += 1
        try:
            cursor = raw.execute(_pg_sql(sql), tuple(parameters))
            if self._pipeline is None:
                self.round_trips += 1
                return cursor
            if sql == "COMMIT":
                self._end_pipeline()
            return PendingResult(cursor, self)
        except psycopg.Error as exc:
            raise self._unavailable_or(exc) from None

    def _live(self) -> Any:
        """The psycopg connection, opened again if it was lost; lost inside a write, the
        write fails (StateUnavailable): its transaction went with the connection."""
        raw = self._raw
        if raw is None or raw.closed or raw.broken:
            if self._pipeline is not None:
                self._pipeline = self._pipeline_cm = None
                raise self._backend.unavailable(ConnectionError("connection lost in a write"))
            self._raw = raw = None
            raw = self._raw = self._backend.raw_connection()
        return raw

    def _end_pipeline(self, quiet: bool = False) -> None:
        """Leave pipeline mode: send what is queued and wait for every answer (one round
        trip); `quiet`: after an error already raised, ignore what the rest says (but a
        connection the pipeline could not be left on is discarded all the same)."""
        import psycopg

        entered, self._pipeline, self._pipeline_cm = self._pipeline_cm, None, None
        if entered is None:
            return
        self.round_trips += 1
        try:
            entered.__exit__(None, None, None)
        except psycopg.Error as exc:
            if not quiet:
                raise
            self._unavailable_or(exc)  # discards a connection that is gone

    def _unavailable_or(self, exc: BaseException) -> BaseException:
        """StateUnavailable when the connection is gone (`connection_gone`: not the
        statement's fault), after discarding it: closed, so the next statement connects
        again and a pool's connection is dropped, not lent again. Else the error itself
        (a lock or statement timeout, a constraint: the statement's)."""
        raw = self._raw
        if not connection_gone(raw, exc, pipelined=self._pipeline is not None):
            return exc
        if raw is not None and not raw.closed:
            raw.close()  # before the pipeline is let go: its exit must not wait on it
        self._pipeline = self._pipeline_cm = None
        return self._backend.unavailable(_cause(exc))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement for many rows (`broker state migrate`), in the open transaction."""
        assert self._raw is not None
        self.statements += 1
        with self._raw.cursor() as cursor:
            cursor.executemany(_pg_sql(sql), rows)

    def close(self) -> None:
        if self._raw is not None and self._raw is not self._borrowed:
            self._raw.close()
        self._raw = None


GONE_SQLSTATES = ("08", "57P01", "57P02", "57P03", "57P05", "25P03")  # connection
# exceptions, admin/crash shutdown, cannot connect now, idle (in transaction) timeouts
GONE_SEVERITIES = ("FATAL", "PANIC")  # the server ends the session after these


def connection_gone(raw: Any, exc: BaseException, *, pipelined: bool) -> bool:
    """Whether `exc` (a psycopg error) means the connection `raw` is gone, not that a
    statement failed: the connection is closed or broken; it is left in pipeline mode
    once the store's pipeline ended (`pipelined` off: psycopg could not leave it,
    "cannot exit pipeline mode while busy", as when the server's FATAL was read before
    its close); or the error, or one it was raised over (psycopg raises that exit
    error over the FATAL), is the server ending the session (a FATAL, a shutdown, a
    connection failure)."""
    from psycopg import pq

    if raw is None or raw.closed or raw.broken:
        return True
    if not pipelined and raw.pgconn.pipeline_status != pq.PipelineStatus.OFF:
        return True  # libpq could not leave pipeline mode: no statement works on it
    return any(_ends_session(error) for error in _chain(exc))


def _ends_session(exc: BaseException) -> bool:
    from psycopg import Error

    if not isinstance(exc, Error):
        return False
    severity = exc.diag.severity_nonlocalized  # None for psycopg's own errors
    return severity in GONE_SEVERITIES or (exc.sqlstate or "").startswith(GONE_SQLSTATES)


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc` and the errors it was raised over (`__context__`), oldest last."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _cause(exc: BaseException) -> BaseException:
    """The error to show: the server's (the FATAL), not psycopg's own over it."""
    return next((e for e in _chain(exc) if _ends_session(e)), exc)


class PgRow(tuple):
    """A row readable as a tuple and by column name (as `sqlite3.Row` is). Each set of
    column names has its own subclass (`_row_class`) holding their positions, so making
    a row is the tuple's own constructor: a pass reads some 20,000 rows."""

    __slots__ = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


@functools.lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> type[PgRow]:
    """The PgRow subclass of rows with these columns, the first of two of one name winning."""
    index: dict[str, int] = {}
    for number, name in enumerate(names):
        index.setdefault(name, number)
    return type("PgRow", (PgRow,), {"__slots__": (), "_index": index})


def _rows(cursor: Any) -> Any:
    """psycopg row factory: the PgRow class of the cursor's columns."""
    return _row_class(tuple(column.name for column in cursor.description or ()))


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    """The store's SQL with psycopg's placeholders: `?` -> `%s`, `%` -> `%%`, outside
    quoted literals and identifiers."""
    out: list[str] = []
    quote = ""
    for char in sql:
        if quote:
            out.append("%%" if char == "%" else char)
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out)


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise DriverMissing(
            "a PostgreSQL state needs psycopg: pip install 'broker[postgres]'"
        ) from None
    return psycopg


def open_postgres(
    location: DatabaseUrl, clock: Clock, *, busy_timeout: float, read_only: bool
) -> tuple[PostgresBackend, PgConnection]:
    """Connect and migrate (read-only: check the schema is current, change nothing)."""
    backend = PostgresBackend(location, busy_timeout=busy_timeout)
    conn = backend.connect()
    try:
        check_schema(backend, conn, clock, read_only=read_only)
        if read_only:
            conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    except BaseException:
        conn.close()
        raise
    return backend, conn


def check_schema(
    backend: PostgresBackend, conn: PgConnection, clock: Clock, *, read_only: bool
) -> None:
    """Refuse a schema newer than this broker's; migrate an older one (read-only:
    refuse it, changing nothing)."""
    location = backend.location
    found, newest = schema.schema_version(conn, backend), schema.MIGRATIONS[-1].version
    if found > newest:
        raise schema.too_new(found, newest, location.shown)
    if not read_only:
        schema.migrate(conn, ts_text(clock.now()), backend=backend)
    elif found < newest:
        raise StateError(
            f"the state database {location.shown} has schema version {found} and this "
            f"broker needs {newest}: run a command that writes it (e.g. broker submit)"
        )


@contextmanager
def connected(location: DatabaseUrl) -> Iterator[PgConnection]:
    """A bare connection (no migration), closed after: for tools (`broker state migrate`)."""
    conn = PostgresBackend(location).connect()
    try:
        yield conn
    finally:
        conn.close()


def refused(exc: Exception) -> bool:
    """Whether a failed connect is the server refusing us (a wrong password, no such
    role or database) rather than a server that is down, starting or full: the SQLSTATE
    when there is one, else the server's (English) text. Unrecognised: not refused, so
    `broker run` waits, as it does for a database that is down."""
    sqlstate = exc.sqlstate if isinstance(exc, _driver().Error) else None
    if sqlstate:
        return sqlstate[:2] in REFUSED_CLASSES
    text = str(exc).lower()
    return "fatal:" in text and any(marker in text for marker in REFUSED_TEXTS)
