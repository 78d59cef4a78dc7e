"""A PostgreSQL connection lost in the middle of a pipelined write (psycopg's pipeline
mode, `broker.state.pg_backend.PgConnection.begin_pipelined`) is "the database is
unavailable", whatever psycopg raised for it: the write is retried on a new connection,
or, lost at its COMMIT, reported as CommitUnknown (a StateUnavailable), never a bare
psycopg error that would stop `broker run` rather than make it wait.

The server ends the connection at a chosen statement, with no sleeps: another session
holds a lock the write will wait for (a row lock, or an advisory lock a deferred
constraint trigger takes at the COMMIT), and once the backend waits for it
(pg_stat_activity) it is terminated (pg_terminate_backend: the FATAL a shutting-down
server sends). What `test_broker_run_waits_for_the_database_and_goes_on[while it runs]`
once met, psycopg's "cannot exit pipeline mode while busy" escaping, needs the server's
FATAL to be read before its close; no test here makes that ordering happen on demand,
so the state it leaves (libpq unable to leave pipeline mode, the connection not yet
broken) is made at a COMMIT by a query sent beneath psycopg, and the classification
(`connection_gone`) is checked on real errors of a real server."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from broker.clock import FixedClock
from broker.state import JobState, StateStore
from broker.state.backend import CommitUnknown
from broker.state.pg_backend import PgConnection, connection_gone
from tests.fakes.specs import job_spec
from tests.state_backends import query
from tests.waiting import wait_until

psycopg = pytest.importorskip("psycopg")

T0 = datetime(2026, 12, 1, tzinfo=UTC)
LOCK = 4242
HELD_COMMIT = f"""
CREATE FUNCTION held_commit() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_advisory_xact_lock({LOCK}); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER held AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION held_commit();
"""


class Terminator:
    """Another session that takes a lock the store's backend `pid` will wait for, and
    terminates that backend once it waits for it (pg_stat_activity's wait event `event`:
    in a pipeline its `query` is not the statement that waits), then lets the lock go:
    a write run again does not wait for it."""

    def __init__(self, url: str, pid: int, event: str, *setup: str) -> None:
        self._url, self._pid, self._event, self._setup = url, pid, event, setup
        self._holding = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self.failure: BaseException | None = None

    def __enter__(self) -> Terminator:
        self._thread.start()
        assert self._holding.wait(30), "the lock was never taken"
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join()
        assert self.failure is None, self.failure

    def _run(self) -> None:
        try:
            with psycopg.connect(self._url, autocommit=True) as conn:
                conn.execute("BEGIN")
                for sql in self._setup:
                    conn.execute(sql)
                self._holding.set()
                sql = "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s"
                assert wait_until(lambda: self._waits(conn.execute(sql, (self._pid,))), 30)
                conn.execute("SELECT pg_terminate_backend(%s)", (self._pid,))
                conn.execute("ROLLBACK")
        except BaseException as exc:  # noqa: BLE001 (the test reports it)
            self.failure = exc
            self._holding.set()

    def _waits(self, cursor: object) -> bool:
        kind, event = cursor.fetchone()  # type: ignore[attr-defined]
        return kind == "Lock" and event == self._event


def waits_for_lock(conn: psycopg.Connection, pid: int, event: str) -> bool:
    sql = "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s"
    return conn.execute(sql, (pid,)).fetchone() == ("Lock", event)


def test_a_connection_lost_at_a_pipelined_commit_is_a_commit_unknown(postgres_cluster):
    """The COMMIT is sent and waits (the deferred trigger's lock) when the backend is
    terminated: the write may or may not have happened, so it is not run again."""
    url = postgres_cluster.fresh_database()
    with StateStore.open(url, FixedClock(T0)) as store:
        job = store.submit(job_spec("j", "ml"), "x", "d").job_id
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(HELD_COMMIT)
        (pid,) = store._conn.execute("SELECT pg_backend_pid()").fetchone()
        with Terminator(url, pid, "advisory", f"SELECT pg_advisory_xact_lock({LOCK})"):
            with pytest.raises(CommitUnknown, match="unavailable.*while committing"):
                store.transition(job, JobState.PLANNED)
        assert not store._conn.in_transaction
        assert query(url, "SELECT state FROM jobs") == [("queued",)]  # it was not made
        assert store.transition(job, JobState.PLANNED)  # a new connection, the same rules
        assert store.job(job).state is JobState.PLANNED


def test_a_pipeline_that_cannot_be_left_at_commit_is_the_database_going(postgres_cluster):
    """psycopg raises "cannot exit pipeline mode ..." over the server's FATAL when that
    FATAL was read before the connection's close (libpq still waits for the Sync's
    answer, the connection not yet seen broken). A query psycopg does not know of,
    sent on the connection (libpq's own call), leaves libpq that way for real: the
    COMMIT is then the database going away (CommitUnknown), the connection is dropped
    and the next write opens a new one."""
    url = postgres_cluster.fresh_database()
    with StateStore.open(url, FixedClock(T0)) as store:
        job = store.submit(job_spec("j", "ml"), "x", "d").job_id
        raw = store._conn._raw
        commit = PgConnection._end_pipeline

        def stray_then_commit(conn: PgConnection, quiet: bool = False) -> None:
            if not quiet:
                conn._raw.pgconn.send_query_params(b"SELECT 1", None)
            commit(conn, quiet)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(PgConnection, "_end_pipeline", stray_then_commit)
            with pytest.raises(CommitUnknown, match="cannot exit pipeline mode"):
                store.transition(job, JobState.PLANNED)
        assert raw.closed and not store._conn.in_transaction
        assert store.job(job).state is JobState.PLANNED  # here it was (the stray came after)
        assert store._conn._raw is not raw
        assert store.transition(job, JobState.CANCELLED)  # and writes go on


def test_a_connection_lost_at_a_pipelined_read_is_retried_on_a_new_one(postgres_cluster):
    """Lost before its COMMIT (waiting for a row lock), the write had not happened: it
    runs again on a new connection, and is made once."""
    url = postgres_cluster.fresh_database()
    with StateStore.open(url, FixedClock(T0)) as store:
        job = store.submit(job_spec("j", "ml"), "x", "d").job_id
        (pid,) = store._conn.execute("SELECT pg_backend_pid()").fetchone()
        with Terminator(url, pid, "transactionid", "SELECT * FROM jobs FOR UPDATE"):
            assert store.transition(job, JobState.PLANNED)
        (new_pid,) = store._conn.execute("SELECT pg_backend_pid()").fetchone()
        assert new_pid != pid and store.job(job).state is JobState.PLANNED
        moves = query(url, "SELECT count(*) FROM events WHERE data_json LIKE ?", ("%planned%",))
        assert moves == [(1,)]


def test_what_says_a_connection_is_gone(postgres_cluster):
    """A statement's own error (a lock timeout, a constraint) leaves the connection in
    use; a FATAL, psycopg's "cannot exit pipeline mode" left over it, a closed
    connection, each say it is gone."""
    from psycopg import errors

    with psycopg.connect(postgres_cluster.url(), autocommit=True) as raw:
        with pytest.raises(errors.DivisionByZero) as own:
            raw.execute("SELECT 1 / 0")
        assert not connection_gone(raw, own.value, pipelined=False)
        with psycopg.connect(postgres_cluster.url(), autocommit=True) as other:
            (pid,) = raw.execute("SELECT pg_backend_pid()").fetchone()
            other.execute("SELECT pg_terminate_backend(%s, 30000)", (pid,))
        with pytest.raises(psycopg.OperationalError) as fatal:
            raw.execute("SELECT 1")
        assert connection_gone(raw, fatal.value, pipelined=False)
    raw = psycopg.connect(postgres_cluster.url(), autocommit=True)
    try:
        raw.pgconn.enter_pipeline_mode()
        raw.pgconn.send_query_params(b"SELECT 1", None)
        with pytest.raises(psycopg.OperationalError, match="cannot exit pipeline mode") as stuck:
            raw.pgconn.exit_pipeline_mode()
        assert connection_gone(raw, stuck.value, pipelined=False)
        assert not connection_gone(raw, own.value, pipelined=True)  # inside a pipeline
    finally:
        raw.close()
    assert connection_gone(raw, own.value, pipelined=False)  # closed
