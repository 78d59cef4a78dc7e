"""The state store on PostgreSQL beyond the shared suite: `broker state migrate` copies a
file's history exactly, a database that is down fails a command in one line (exit 1)
and is waited for by `broker run`, and a URL's password is never printed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.clock import FixedClock
from broker.state import JobState, StateStore
from broker.state.copy import TABLES
from broker.state.location import DatabaseUrl, parse_location, shown_url
from pricing.userio.redact import redact
from tests.cli.runner import run_cli
from tests.fakes.specs import job_spec, placed
from tests.state_backends import query
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 1, tzinfo=UTC)
WHERE = {"cloud": "aws", "region": "us-east-1", "zone": "us-east-1a", "instance_type": "p5"}


def history(path: Path) -> None:
    """A state file with runs, versions, attempts (ended, interrupted), instances, events
    and ledger lines whose amounts have all six places."""
    clock = FixedClock(T0)
    with StateStore.open(path, clock) as store:
        for n, price in enumerate(("32.7726", "0.000001", "12.9756")):
            job = store.submit(job_spec(f"job-{n}", "ml"), f"v1 {n}", f"d{n}").job_id
            store.submit(job_spec(f"job-{n}", "ml", priority=3), f"v2 {n}", f"e{n}")
            store.transition(job, JobState.PLANNED)
            attempt = store.start_attempt(job, placed(WHERE, price, "spot", "aws-api", "2026"))
            store.attempt_running(attempt, {"provider_id": f"i-{n}", "tags": {"n": str(n)}})
            clock.advance(timedelta(hours=2.5266200000000003))
            store.record_checkpoint(attempt, uri=f"s3://ckpt/{n}/")
            egress = {"kind": "egress", "quantity": "0.1", "unit_price_usd": "0.09"}
            outcome = "interrupted" if n == 1 else "succeeded"
            to = JobState.QUEUED if n == 1 else None
            store.finish_attempt(
                attempt, outcome, 0, "", 2.52662, [{"kind": "compute"}, egress], job_to=to
            )


def table_rows(location: Path | str, table: str, key: str) -> list[dict]:
    columns = [c for (c,) in _columns(location, table)]
    rows = query(location, f"SELECT {', '.join(columns)} FROM {table} ORDER BY {key}")
    return [dict(zip(columns, row, strict=True)) for row in rows]


def _columns(location: Path | str, table: str) -> list[tuple[str]]:
    if isinstance(location, Path):
        return [(r[1],) for r in query(location, f"PRAGMA table_info({table})")]
    sql = "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
    return query(location, sql + " ORDER BY ordinal_position", (table,))


def test_state_migrate_copies_every_row_exactly_and_refuses_a_second_copy(
    postgres_cluster, tmp_path, capsys
):
    source = tmp_path / "state.db"
    history(source)
    target = postgres_cluster.fresh_database()
    done = run_cli(capsys, "state", "migrate", "--from", str(source), "--to", target)
    assert done.code == 0, done.stderr
    assert postgres_cluster.password not in done.stderr
    for table, key in TABLES:
        rows = table_rows(source, table, key)
        assert rows, f"the history has no {table}"
        assert table_rows(target, table, key) == rows, table  # every column, text for text
    amounts = [r["amount_usd"] for r in table_rows(target, "ledger", "id")]
    assert all(len(a.split(".")[1]) == 6 for a in amounts)  # decimal text as written
    with StateStore.open(target, FixedClock(T0)) as copied:  # and it works as a store
        job = copied.submit(job_spec("after", "ml"), "x", "dx").job_id
        assert copied.events(job)[0].id > max(r["id"] for r in table_rows(source, "events", "id"))
    again = run_cli(capsys, "state", "migrate", "--from", str(source), "--to", target)
    assert again.code == 1 and "already has 4 job(s): nothing copied" in again.stderr
    assert "Traceback" not in again.stderr
    assert len(table_rows(target, "jobs", "id")) == 4


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("command", [["jobs", "--state-file"], ["queue", "--state"]])
def test_a_database_that_is_down_fails_a_command_in_one_line(command, capsys):
    url = f"postgresql://alice:s3cr3t-Pw@127.0.0.1:{_closed_port()}/broker"
    done = run_cli(capsys, *command, url)
    assert done.code == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "state database" in lines[0] and "unavailable" in lines[0]
    assert "s3cr3t-Pw" not in done.stderr and "postgresql://***@127.0.0.1" in done.stderr


def test_a_wrong_password_is_refused_in_one_line_without_showing_it(postgres_cluster, capsys):
    target = postgres_cluster.fresh_database().replace(postgres_cluster.password, "Wr0ng-pass")
    done = run_cli(capsys, "jobs", "--state-file", target)
    assert done.code == 1 and len(done.stderr.strip().splitlines()) == 1
    assert "password authentication failed" in done.stderr
    assert "Wr0ng-pass" not in done.stderr


def test_broker_state_url_from_the_environment_and_broker_toml(
    postgres_cluster, monkeypatch, capsys
):
    url = postgres_cluster.fresh_database()
    with StateStore.open(url, FixedClock(T0)) as store:
        store.submit(job_spec("from-env", "ml"), "x", "d")
    monkeypatch.setenv("BROKER_STATE", url)
    listed = run_cli(capsys, "jobs", "-o", "json")
    assert listed.code == 0 and "from-env" in listed.stdout
    monkeypatch.delenv("BROKER_STATE")
    Path("broker.toml").write_text(f'state = "{url}"\n')  # the test's own working folder
    listed = run_cli(capsys, "jobs", "-o", "json")
    assert listed.code == 0 and "from-env" in listed.stdout


def test_passwords_are_masked_in_urls_and_messages():
    url = "postgresql://alice:pa%40ss@db.example:5432/broker?sslmode=require&password=x2"
    assert shown_url(url) == (
        "postgresql://alice:***@db.example:5432/broker?sslmode=require&password=***"
    )
    location = parse_location(url)
    assert isinstance(location, DatabaseUrl)
    assert "pa%40ss" not in f"{location} {location!r}" and "x2" not in str(location)
    assert "pa%40ss" not in redact(f"cannot reach {url}")
    unescaped = "postgresql://bob:a/b?c#d@db:5432/broker"  # libpq wants it escaped; still masked
    assert redact(f"at {unescaped} now") == "at postgresql://***@db:5432/broker now"
    assert parse_location("postgres://db/broker") == DatabaseUrl("postgres://db/broker")
    assert parse_location("~/state.db") == Path.home() / "state.db"


JOB = """\
apiVersion: broker/v1
name: job-{i}
team: ml
resources:
  accelerators: T4:1
placement:
  clouds: [gcp, aws]
run:
  workdir: {examples}
  command: python3 train.py --steps 40
runtime:
  estimate_hours: 1
"""


@pytest.mark.parametrize("down", ["while it runs", "as it starts"])
def test_broker_run_waits_for_the_database_and_goes_on(postgres_cluster, tmp_path, down):
    url = postgres_cluster.fresh_database()
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(3):
        (jobs / f"job-{i}.yaml").write_text(JOB.format(i=i, examples=REPO / "examples"))
    env = dict(os.environ, BROKER_STATE=url, XDG_STATE_HOME=str(tmp_path / "xdg-state"))
    broker = [sys.executable, "-m", "broker"]
    subprocess.run([*broker, "submit", str(jobs)], env=env, check=True, capture_output=True)
    log = tmp_path / "run.log"
    if down == "as it starts":
        postgres_cluster.stop()
    try:
        with log.open("w") as err:
            run = subprocess.Popen([*broker, "run", "--poll", "0.1"], env=env, stderr=err)
        if down == "while it runs":
            with StateStore.open(url, FixedClock(T0)) as store:
                running = lambda: any(j.state is JobState.RUNNING for j in store.jobs())  # noqa: E731
                assert wait_until(running, 60)
            postgres_cluster.stop()
        try:
            assert wait_until(lambda: "trying again" in log.read_text(), 60), log.read_text()
            assert run.poll() is None  # still waiting, not exited
        finally:
            postgres_cluster.start()
        assert run.wait(timeout=180) == 0, log.read_text()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    said = log.read_text()
    assert "the state database is back" in said and "Traceback" not in said
    assert postgres_cluster.password not in said
    with StateStore.open(url, FixedClock(T0)) as store:
        assert {j.state for j in store.jobs()} == {JobState.SUCCEEDED}
        assert len(store.attempts()) == 3 and len(store.ledger()) == 3


def test_broker_run_does_not_wait_for_a_database_that_refuses_it(postgres_cluster, tmp_path):
    target = postgres_cluster.fresh_database().replace(postgres_cluster.password, "Wr0ng-pass")
    env = dict(os.environ, BROKER_STATE=target, XDG_STATE_HOME=str(tmp_path / "xdg-state"))
    done = subprocess.run(
        [sys.executable, "-m", "broker", "run"], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "password authentication failed" in lines[0], done.stderr
    assert "trying again" not in done.stderr and "Wr0ng-pass" not in done.stderr


def test_two_machines_submitting_one_new_name_make_one_job(postgres_cluster):
    """No row to lock yet: the second insert of run 1 hits the unique index, and the
    write runs again (`retried`), finding the first's job unchanged."""
    import threading

    url = postgres_cluster.fresh_database()
    StateStore.open(url, FixedClock(T0)).close()
    for round_ in range(5):
        results: list = []
        barrier = threading.Barrier(3)

        def submit(results=results, barrier=barrier, round_=round_) -> None:
            with StateStore.open(url, FixedClock(T0)) as store:
                barrier.wait()
                try:
                    results.append(store.submit(job_spec(f"new-{round_}", "ml"), "x", "d"))
                except Exception as exc:  # noqa: BLE001 (the test reports it)
                    results.append(exc)

        threads = [threading.Thread(target=submit) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(not isinstance(r, Exception) for r in results), results
        assert len({r.job_id for r in results}) == 1
        assert sorted(r.created for r in results) == [False, False, True]
    rows = query(url, "SELECT team, name, run FROM jobs ORDER BY name")
    assert rows == [("ml", f"new-{n}", 1) for n in range(5)]


def test_read_only_opens_change_nothing(postgres_cluster):
    import psycopg

    url = postgres_cluster.fresh_database()
    with StateStore.open(url, FixedClock(T0)) as store:
        job = store.submit(job_spec("kept", "ml"), "x", "d").job_id
    with StateStore.open(url, FixedClock(T0), read_only=True) as reader:
        assert reader.job(job).state is JobState.QUEUED
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            reader.transition(job, JobState.CANCELLED)
    assert query(url, "SELECT state FROM jobs") == [("queued",)]


def test_the_metrics_count_the_same_on_both_backends(postgres_cluster, tmp_path, capsys):
    """The metrics' reads (`broker.state.tallies`) of one history, copied exactly into
    PostgreSQL, give what they give on the file; `broker metrics serve` takes the URL."""
    source = tmp_path / "state.db"
    history(source)
    target = postgres_cluster.fresh_database()
    assert run_cli(capsys, "state", "migrate", "--from", str(source), "--to", target).code == 0
    with (
        StateStore.open(source, FixedClock(T0)) as file,
        StateStore.open(target, FixedClock(T0)) as db,
    ):
        with file.snapshot(), db.snapshot():
            assert db.job_counts() == file.job_counts()
            assert db.attempt_facts() == file.attempt_facts() and db.attempt_facts()
            assert db.charges() == file.charges()
    from broker.metrics.server import read_only_state

    opener = read_only_state(parse_location(target))
    try:
        with opener() as reader:
            assert reader is not None and sum(reader.job_counts().values()) == 3
    finally:
        opener.close()


def test_a_write_pipelines_its_statements_and_a_failed_one_rolls_it_back(postgres_cluster):
    """A write's statements whose results the store does not read go out together
    (psycopg's pipeline mode): fewer round trips than statements. A statement that fails
    inside it fails the whole write with its own error type, after which nothing of it
    is stored and the connection writes again."""
    from psycopg import errors

    url = postgres_cluster.fresh_database()
    with StateStore.open(url, FixedClock(T0)) as store:
        job = store.submit(job_spec("piped", "ml"), "x", "d").job_id
        sent, trips = store.statements_sent or 0, store.round_trips or 0
        store.transition(job, JobState.PLANNED)
        statements = (store.statements_sent or 0) - sent
        assert 0 < (store.round_trips or 0) - trips < statements
        before = table_rows(url, "events", "id")
        with pytest.raises(errors.UniqueViolation):
            with store._write() as now:  # a later insert of a queued batch fails
                store._event(job, None, now, "note", "queued first", {})
                store._conn.execute(
                    "INSERT INTO job_versions (job_id, version, digest, manifest_text,"
                    " spec_json, queue, priority, submitted_at) SELECT job_id, version,"
                    " digest, manifest_text, spec_json, queue, priority, submitted_at"
                    " FROM job_versions WHERE job_id = ?",
                    (job,),
                )
        assert table_rows(url, "events", "id") == before  # the queued event rolled back too
        assert not store._conn.in_transaction
        store.transition(job, JobState.QUEUED, "again")  # the connection writes again
        assert store.job(job).state is JobState.QUEUED


@pytest.mark.parametrize(
    ("text", "is_refused"),
    [
        ('failed: FATAL:  password authentication failed for user "me"', True),
        ('failed: FATAL:  database "nosuchdb" does not exist', True),
        ('failed: FATAL:  role "nobody" does not exist', True),
        ('failed: FATAL:  no pg_hba.conf entry for host "10.0.0.9"', True),
        ("failed: Connection refused\n\tIs the server running on that host?", False),
        ("failed: FATAL:  the database system is starting up", False),
        ("failed: FATAL:  sorry, too many clients already", False),
        ("failed: timeout expired", False),
    ],
)
def test_a_refusal_is_told_from_a_database_that_is_down(text, is_refused):
    psycopg = pytest.importorskip("psycopg", reason="psycopg is the postgres extra")
    from broker.state.pg_backend import refused

    assert refused(psycopg.OperationalError(f"connection to server at 127.0.0.1 {text}")) is (
        is_refused
    )
