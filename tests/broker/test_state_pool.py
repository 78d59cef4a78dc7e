"""The PostgreSQL connection pool (broker.state.pg_pool) against a real PostgreSQL 15:
scrape threads share a few connections while a writer commits and each sees a
consistent, growing count; a connection the server dropped is replaced; a database
that is not there fails a borrow in one line without its password; `broker metrics
serve` on a database URL answers concurrent scrapes through the pool."""

from __future__ import annotations

import socket
import threading
import urllib.request
from datetime import UTC, datetime

import pytest

from broker.clock import FixedClock
from broker.state import StateStore
from broker.state.backend import StateUnavailable
from broker.state.location import DatabaseUrl
from broker.state.pg_pool import StorePool
from tests.fakes.specs import job_spec
from tests.state_backends import execute, query
from tests.waiting import wait_until

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _connections(url: str, database: str) -> int:
    """Client connections to `database` the server holds now (application broker)."""
    sql = (
        "SELECT COUNT(*) FROM pg_stat_activity"
        " WHERE datname = ? AND application_name = 'broker' AND backend_type = 'client backend'"
    )
    return int(query(url, sql, (database,))[0][0])


def test_scrapes_share_the_pool_while_a_writer_commits(postgres_cluster):
    url = postgres_cluster.fresh_database()
    database = url.rsplit("/", 1)[1]
    writer = StateStore.open(url, FixedClock(T0))
    pool = StorePool(DatabaseUrl(url), FixedClock(T0), max_size=3).open()
    seen: dict[int, list[int]] = {n: [] for n in range(6)}
    errors: list[BaseException] = []
    done = threading.Event()

    def scrape(n: int) -> None:
        try:
            while not done.is_set() or len(seen[n]) < 3:
                with pool.store() as reads, reads.snapshot():
                    seen[n].append(sum(reads.job_counts().values()))
        except BaseException as exc:  # noqa: BLE001 (reported by the test below)
            errors.append(exc)

    threads = [threading.Thread(target=scrape, args=(n,)) for n in range(6)]
    try:
        for thread in threads:
            thread.start()
        for i in range(40):
            writer.submit(job_spec(f"job-{i}", "ml"), f"text {i}", f"digest-{i}")
        most = _connections(postgres_cluster.url(), database)
        done.set()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        for counts in seen.values():
            assert counts == sorted(counts), counts  # committed jobs never disappear
            assert all(0 <= c <= 40 for c in counts)
        assert max(c for counts in seen.values() for c in counts) == 40
        assert most <= 3 + 1  # the pool's three and the writer's one, whatever the threads
        stats = pool.stats()
        assert stats["requests_num"] >= 18 and stats.get("connections_num", 0) <= 3
    finally:
        done.set()
        pool.close()
        writer.close()
    assert wait_until(lambda: _connections(postgres_cluster.url(), database) == 0, 30)


def test_a_dropped_connection_is_replaced(postgres_cluster):
    url = postgres_cluster.fresh_database()
    StateStore.open(url, FixedClock(T0)).close()  # migrated
    with StorePool(DatabaseUrl(url), FixedClock(T0), min_size=1, max_size=1) as pool:
        with pool.store() as reads:
            (first,) = reads._conn.execute("SELECT pg_backend_pid()").fetchone()
        execute(postgres_cluster.url(), "SELECT pg_terminate_backend(?)", (first,))
        assert wait_until(lambda: _pid_gone(postgres_cluster.url(), first), 30)
        with pool.store() as reads:  # lent after a check: a new connection
            (second,) = reads._conn.execute("SELECT pg_backend_pid()").fetchone()
            assert reads.job_counts() == {}
        assert second != first
        with pool.store() as reads:  # dropped while lent: that use fails, in one line
            execute(postgres_cluster.url(), "SELECT pg_terminate_backend(?)", (second,))
            assert wait_until(lambda: _pid_gone(postgres_cluster.url(), second), 30)
            with pytest.raises(StateUnavailable, match="is unavailable"):
                reads.job_counts()
        with pool.store() as reads:  # and the pool has a working one again
            assert reads.job_counts() == {}


def _pid_gone(url: str, pid: int) -> bool:
    return not query(url, "SELECT 1 FROM pg_stat_activity WHERE pid = ?", (pid,))


def test_a_database_that_is_not_there_fails_in_one_line_without_its_password(
    postgres_cluster, caplog
):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    secret = "s3cr3t-pw-123"
    url = DatabaseUrl(f"postgresql://postgres:{secret}@127.0.0.1:{port}/broker")
    pool = StorePool(url, FixedClock(T0), reconnect_s=0.5)
    with pytest.raises(StateUnavailable) as raised:
        pool.open()
    text = str(raised.value)
    assert "postgresql://postgres:***@127.0.0.1" in text and secret not in text
    assert "\n" not in text
    assert secret not in caplog.text
    # A wrong password on the real server: refused, the password in no message.
    wrong = DatabaseUrl(postgres_cluster.url().replace(postgres_cluster.password, secret))
    with pytest.raises(StateUnavailable) as raised:
        StorePool(wrong, FixedClock(T0), reconnect_s=0.5).open()
    assert secret not in str(raised.value) and secret not in caplog.text


def test_metrics_serve_on_a_database_answers_concurrent_scrapes(postgres_cluster, tmp_path):
    import os
    import subprocess
    import sys

    url = postgres_cluster.fresh_database()
    database = url.rsplit("/", 1)[1]
    with StateStore.open(url, FixedClock(T0)) as store:
        for i in range(3):
            store.submit(job_spec(f"job-{i}", "ml"), f"text {i}", f"digest-{i}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg")}
    serve = subprocess.Popen(
        [sys.executable, "-m", "broker", "metrics", "serve", "--state", url, "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/metrics"
    try:
        assert wait_until(lambda: _answers(base), 60), "metrics serve did not start"
        bodies: list[str] = []
        threads = [threading.Thread(target=lambda: bodies.append(_get(base))) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(bodies) == 8
        for body in bodies:
            assert 'broker_jobs{queue="default",state="queued",team="ml"} 3.0' in body
        assert 1 <= _connections(postgres_cluster.url(), database) <= 4  # the pool's
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=30)
    assert postgres_cluster.password not in err


def _answers(url: str) -> bool:
    try:
        _get(url)
    except OSError:
        return False
    return True


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()
