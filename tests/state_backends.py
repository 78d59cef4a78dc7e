"""The state store's two backends for tests: `state_location`, a fresh SQLite file or a
fresh database on a real PostgreSQL cluster, parametrised so that every store test runs
on both; the cluster (`postgres_cluster`) is started once per session by
.ci/services/pg-up.sh and stopped by PID (pg-down.sh). Where PostgreSQL is not
installed the PostgreSQL cases skip with the reason, and fail in CI
(TEST_SERVICES=required, tests/services.py)."""

from __future__ import annotations

import glob
import os
import secrets
import signal
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

BACKENDS = ("sqlite", "postgresql")


def postgres_bin() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin with pg_ctl (Debian's layout), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    return Path(found[-1]).parent if found else None


def _version(path: str) -> tuple[int, ...]:
    part = Path(path).parents[1].name
    return tuple(int(p) for p in part.split(".") if p.isdigit())


@dataclass(frozen=True)
class PostgresCluster:
    """The cluster of pg-up.sh: 127.0.0.1:`port`, superuser postgres / `password`."""

    port: int
    password: str = field(repr=False)
    directory: Path = field(repr=False)
    env: dict[str, str] = field(repr=False)

    def url(self, database: str = "postgres", password: bool = True) -> str:
        secret = f":{self.password}" if password else ""
        return f"postgresql://postgres{secret}@127.0.0.1:{self.port}/{database}"

    def fresh_database(self) -> str:
        """A new empty database (CREATE DATABASE); its URL."""
        import psycopg

        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    @property
    def pid(self) -> int | None:
        pidfile = self.directory / "pg" / "data" / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        """Stop the server by its PID (SIGINT: fast shutdown, connections dropped)."""
        from tests.waiting import wait_until

        pid = self.pid
        assert pid is not None, "the cluster is not running"
        os.kill(pid, signal.SIGINT)
        assert wait_until(lambda: not _alive(pid), 30), f"postgres {pid} did not stop"

    def start(self) -> None:
        _script("pg-up.sh", self.env)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _script(name: str, env: dict[str, str]) -> str:
    """Run one of .ci/services/ (tests/conftest.py's runner of the Slurm and sshd ones)."""
    from tests.conftest import _service

    return _service(name, env)


def need_postgres() -> None:
    """Skip (outside CI) or fail (in CI) unless PostgreSQL and psycopg are here."""
    from tests.services import required

    why = ""
    if postgres_bin() is None:
        why = "PostgreSQL not installed (apt-get install postgresql-15)"
    else:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            why = "psycopg not installed (pip install 'broker[postgres]')"
    if why and required():
        pytest.fail(f"PostgreSQL tests are required here but {why}")
    if why:
        pytest.skip(f"PostgreSQL backend tests skipped: {why}")


@pytest.fixture(scope="session")
def postgres_cluster(services_dir: Path) -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster for the session (pg-up.sh), stopped by PID after."""
    from tests.conftest import _free_ports

    need_postgres()
    env = {**os.environ, "SVC_DIR": str(services_dir), "PG_PORT": str(_free_ports(1))}
    env["PG_PASSWORD"] = secrets.token_urlsafe(12)
    cluster = PostgresCluster(int(env["PG_PORT"]), env["PG_PASSWORD"], services_dir, env)
    try:
        _script("pg-up.sh", env)
        yield cluster
    finally:
        _script("pg-down.sh", env)


@pytest.fixture(params=BACKENDS)
def state_location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test's state lives: a fresh SQLite file, or a fresh PostgreSQL database
    (its URL), one test run for each."""
    if request.param == "sqlite":
        return tmp_path / "state" / "state.db"
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    return cluster.fresh_database()


def is_postgres(location: Any) -> bool:
    return _url(location).startswith("postgresql://")


def _url(location: Any) -> str:
    """A location's text: a path, or a URL (a store's `DatabaseUrl` with its password)."""
    from broker.state.location import DatabaseUrl

    return location.url if isinstance(location, DatabaseUrl) else str(location)


def query(location: Path | str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows read straight from the database (not through the store), `?` placeholders."""
    if is_postgres(location):
        import psycopg

        with psycopg.connect(_url(location), autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), tuple(params))]
    with sqlite3.connect(location) as conn:
        rows = [tuple(r) for r in conn.execute(sql, tuple(params))]
    conn.close()
    return rows


def execute(location: Path | str, sql: str, params: Sequence[Any] = ()) -> None:
    """One statement run straight on the database, committed."""
    if is_postgres(location):
        import psycopg

        with psycopg.connect(_url(location), autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s"), tuple(params))
        return
    conn = sqlite3.connect(location)
    with conn:
        conn.execute(sql, tuple(params))
    conn.close()


def tables(location: Path | str) -> set[str]:
    """The names of the database's tables."""
    if is_postgres(location):
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    return {row[0] for row in query(location, sql)}


def sql_error(location: Path | str) -> type[Exception]:
    """What the database's driver raises for a statement it cannot run."""
    if is_postgres(location):
        import psycopg

        return psycopg.Error
    return sqlite3.OperationalError


def lock_timeout(location: Path | str) -> tuple[type[Exception], str]:
    """What a write raises, and says, when another writer holds its lock too long."""
    if is_postgres(location):
        from psycopg.errors import LockNotAvailable

        return LockNotAvailable, "lock timeout"
    return sqlite3.OperationalError, "locked"


@pytest.fixture(params=BACKENDS)
def new_state_location(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A maker of fresh state locations on one backend (for hypothesis, whose examples
    each want their own): a new file, or a new database, per call."""
    made = iter(range(1_000_000))
    if request.param == "sqlite":
        return lambda: tmp_path / f"state-{next(made)}.db"
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    return cluster.fresh_database
