"""State file safety: a file that is not a broker state file is refused before SQLite
touches it (not a byte written, no -wal or -shm made), a newer one says which version it
needs, a read-only location serves reads and refuses writes, read commands never create
a state file or the sandbox folder. The rules that are the store's, not the file's (a
read-only store, a newer schema, what is stored redacted), run on PostgreSQL too."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from broker.clock import FixedClock
from broker.state import SchemaTooNew, StateStore
from broker.state.files import APPLICATION_ID, DamagedState, NotAStateFile
from tests.cli.runner import run_cli
from tests.state_backends import execute, is_postgres, query, sql_error, tables

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "examples" / "jobs" / "tokenize-cpu.yaml"
CLOCK = FixedClock(datetime(2026, 11, 1, tzinfo=UTC))


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A state file holding one submitted job."""
    from broker.manifest.load import load_manifests
    from broker.submit import submit_manifests

    path = tmp_path_factory.mktemp("good") / "state.db"
    with StateStore.open(path, CLOCK) as store:
        submit_manifests(store, load_manifests([JOB]).manifests)
    return path


def _bad(kind: str, good: Path, folder: Path) -> Path:
    data, path = good.read_bytes(), folder / "state.db"
    made = {
        "truncated": data[: len(data) // 2 + 100],
        "header-only": data[:100],
        "header-cut": data[:16],
        "random": random.Random(3).randbytes(8192),
        "text": b"name,price\nx,1\n",
        "flipped-page": data[:100] + bytes(b ^ 0xFF for b in data[100:4096]) + data[4096:],
    }
    if kind in made:
        path.write_bytes(made[kind])
    elif kind == "directory":
        path.mkdir()
    elif kind == "newer-schema":
        shutil.copyfile(good, path)
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO schema_migrations VALUES (7, 'future', '2030-01-01')")
        conn.commit()
        conn.close()  # closed: its -wal is folded back and removed
    else:  # another program's SQLite file: with an id of its own, without, in WAL mode
        conn = sqlite3.connect(path)
        if kind == "foreign-id":
            conn.execute("PRAGMA application_id = 1234")
        if kind == "foreign-wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE notes (x TEXT)")
        conn.commit()
        conn.close()
    return path


BAD = {
    "truncated": (NotAStateFile, "truncated"),
    "header-only": (NotAStateFile, "truncated"),
    "header-cut": (NotAStateFile, "header cut short"),
    "random": (NotAStateFile, "not an SQLite database"),
    "text": (NotAStateFile, "not an SQLite database"),
    "flipped-page": (DamagedState, "is damaged"),
    "directory": (NotAStateFile, "a directory"),
    "newer-schema": (SchemaTooNew, "schema version 7.*knows schema version 7"),
    "foreign": (NotAStateFile, "without the broker's tables"),
    "foreign-id": (NotAStateFile, "another program"),
    "foreign-wal": (NotAStateFile, "without the broker's tables"),
}


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "dir"
        for p in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize("read_only", [False, True])
def test_a_file_that_is_not_a_broker_state_file_is_refused_unchanged(
    good, tmp_path, kind, read_only
):
    path = _bad(kind, good, tmp_path)
    before = _snapshot(tmp_path)
    error, said = BAD[kind]
    with pytest.raises(error, match=said):
        StateStore.open(path, CLOCK, read_only=read_only)
    assert _snapshot(tmp_path) == before  # not a byte, no -wal, no -shm


@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize(
    "argv",
    [
        ("queue",), ("status", "tokenize-pile"), ("logs", "tokenize-pile"), ("cost-report",),
        ("cancel", "tokenize-pile"), ("submit", str(JOB)), ("run", "--once"),
    ],
    ids=lambda argv: argv[0],
)  # fmt: skip
def test_every_command_refuses_it_in_one_line(capsys, good, tmp_path, kind, argv):
    path = _bad(kind, good, tmp_path)
    before = _snapshot(tmp_path)
    result = run_cli(capsys, *argv, "--state", str(path))
    assert result.code == 2, result.stderr
    (line,) = [text for text in result.stderr.splitlines() if text.strip()]
    assert line.startswith("broker: error:") and str(path) in line
    if BAD[kind][0] is NotAStateFile:
        assert f"not a broker state file: {path}" in line
    assert _snapshot(tmp_path) == before  # nothing written, no state-sandbox/ beside it


def test_new_files_carry_the_application_id_and_old_ones_are_recognised(good, tmp_path):
    assert struct.unpack(">I", good.read_bytes()[68:72])[0] == APPLICATION_ID
    legacy = tmp_path / "legacy.db"
    shutil.copyfile(good, legacy)
    conn = sqlite3.connect(legacy)  # as a broker wrote it before the id existed
    conn.execute("PRAGMA application_id = 0")
    conn.close()
    with StateStore.open(legacy, CLOCK, read_only=True) as store:
        assert [job.name for job in store.jobs()] == ["tokenize-pile"]
    assert struct.unpack(">I", legacy.read_bytes()[68:72])[0] == 0  # a read changed nothing
    with StateStore.open(legacy, CLOCK) as store:
        assert store.jobs()
    assert struct.unpack(">I", legacy.read_bytes()[68:72])[0] == APPLICATION_ID


def test_a_read_only_open_writes_nothing_and_refuses_writes(good, tmp_path):
    from broker.manifest.load import load_manifests

    copy = tmp_path / "state.db"
    shutil.copyfile(good, copy)
    before = _snapshot(tmp_path)
    with StateStore.open(copy, CLOCK, read_only=True) as store:
        assert store.jobs()[0].name == "tokenize-pile"
        manifest = load_manifests([JOB]).manifests[0]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.submit(manifest.spec, "changed", "another digest")
    assert _snapshot(tmp_path) == before


# --- the same rules at the store, on both backends (tests/state_backends.py) -------------


def _stored(location) -> dict[str, list[tuple]]:
    """Every row of every table, straight from the database."""
    return {t: sorted(map(repr, query(location, f"SELECT * FROM {t}"))) for t in tables(location)}


def test_a_read_only_store_refuses_writes_and_changes_nothing(state_location):
    from broker.manifest.load import load_manifests
    from broker.submit import submit_manifests

    manifest = load_manifests([JOB]).manifests[0]
    with StateStore.open(state_location, CLOCK) as store:
        submit_manifests(store, [manifest])
    before = _stored(state_location)
    with StateStore.open(state_location, CLOCK, read_only=True) as store:
        assert [job.name for job in store.jobs()] == ["tokenize-pile"]
        with pytest.raises(sql_error(state_location), match="(?i)read-?only"):
            store.submit(manifest.spec, "changed", "another digest")
    assert _stored(state_location) == before


def test_a_newer_schema_is_refused_before_anything_is_written(state_location):
    with StateStore.open(state_location, CLOCK):
        pass
    execute(state_location, "INSERT INTO schema_migrations VALUES (7, 'future', '2030-01-01')")
    before = _stored(state_location)
    for read_only in (False, True):
        with pytest.raises(SchemaTooNew, match="schema version 7.*knows schema version 7"):
            StateStore.open(state_location, CLOCK, read_only=read_only)
    assert _stored(state_location) == before


def test_read_commands_on_a_missing_state_file_create_nothing(capsys, tmp_path):
    missing = tmp_path / "typo" / "stat.db"
    for argv in (("queue",), ("cost-report",), ("cost-report", "-o", "json")):
        result = run_cli(capsys, *argv, "--state", str(missing))
        assert result.code == 0, result.stderr
        assert (
            result.stderr.strip()
            == f"broker: no state file at {missing} yet: nothing was submitted"
        )
    assert run_cli(capsys, "status", "x", "--state", str(missing)).code == 2
    assert run_cli(capsys, "logs", "x", "--state", str(missing)).code == 2
    assert not (tmp_path / "typo").exists()


def test_only_commands_that_launch_make_the_sandbox_folder(capsys, tmp_path):
    state = tmp_path / "state.db"
    assert run_cli(capsys, "submit", str(JOB), "--state", str(state)).code == 0
    assert run_cli(capsys, "queue", "--state", str(state)).code == 0
    assert run_cli(capsys, "cancel", "tokenize-pile", "--state", str(state)).code == 0
    assert not (tmp_path / "state-sandbox").exists()
    job = tmp_path / "echo.yaml"
    job.write_text("apiVersion: broker/v1\nname: echo\nteam: t\nrun: {command: echo hi}\n")
    assert run_cli(capsys, "submit", str(job), "--state", str(state)).code == 0
    assert run_cli(capsys, "run", "--once", "--state", str(state)).code == 0
    assert (tmp_path / "state-sandbox").is_dir()


def _read_only_mount(folder: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """`broker ARGV` with `folder` mounted read-only (a private mount namespace)."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    command = ["unshare", "-rm", "sh", "-c", script, str(folder), sys.executable, "-m", "broker"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    return subprocess.run([*command, *argv], capture_output=True, text=True, env=env, timeout=120)


def _can_mount_read_only(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0"'
    command = ["unshare", "-rm", "sh", "-c", script, str(tmp_path)]
    return subprocess.run(command, capture_output=True).returncode == 0


def test_a_read_only_location_serves_reads_and_refuses_writes(good, tmp_path):
    if not _can_mount_read_only(tmp_path):
        pytest.skip("no user namespaces here (unshare -rm): cannot make a read-only mount")
    folder = tmp_path / "ro"
    folder.mkdir()
    state = folder / "state.db"
    shutil.copyfile(good, state)
    before = _snapshot(folder)
    for argv in (["queue"], ["status", "tokenize-pile"], ["cost-report"]):
        done = _read_only_mount(folder, [*argv, "--state", str(state)])
        assert done.returncode == 0, (argv, done.stderr)
        assert "Traceback" not in done.stderr
    assert "tokenize-pile" in _read_only_mount(folder, ["queue", "--state", str(state)]).stdout
    for argv in (["submit", str(JOB)], ["run", "--once"], ["cancel", "tokenize-pile"]):
        done = _read_only_mount(folder, [*argv, "--state", str(state)])
        assert done.returncode == 1, (argv, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line == (
            f"broker: error: the state file {state} is in a read-only location: "
            "this command writes it"
        )
    assert _snapshot(folder) == before  # no WAL switch, no -shm, no state-sandbox/


def test_events_ledger_details_and_manifest_texts_are_stored_redacted(tmp_path, state_location):
    from broker.manifest.load import parse_manifest_text
    from broker.state import JobState
    from pricing.userio.redact import MASK

    text = (
        "# token: ghp_abcdefghijklmnopqrstuvwxyz0123456789\napiVersion: broker/v1\nname: x\n"
        "team: t\nrun: {command: x}\n"
        "data: [{uri: 's3://me:hunter2hunter2@bucket/in/', size_gb: 1}]\n"
    )
    (manifest,) = parse_manifest_text(text)
    assert manifest.spec.data[0].uri == "s3://bucket/in/"  # stored without its userinfo
    with StateStore.open(state_location, CLOCK) as store:
        job = store.submit(manifest.spec, manifest.text, manifest.digest).job_id
        store.transition(
            job, JobState.CANCELLED, reason="password=hunter2hunter2", data={"token": "t0k3n"}
        )
        stored = store.version(job, 1).manifest_text
        events = store.events(job)
    assert "ghp_" not in stored and "hunter2" not in stored and "apiVersion: broker/v1" in stored
    assert "hunter2" not in events[-1].message and events[-1].data["token"] == MASK
    everything = repr(_stored(state_location))  # every row of every table
    assert "hunter2" not in everything and "t0k3n" not in everything
    assert "apiVersion: broker/v1" in everything  # the manifest text is among them
    if not is_postgres(state_location):  # the file's bytes, its -wal too if left
        raw = b"".join(path.read_bytes() for path in Path(state_location).parent.glob("*.db*"))
        assert b"hunter2" not in raw and b"t0k3n" not in raw
