"""The state store's submissions: runs and versions of a job (rules in docs/state.md).

A job is known by (team, name); each run of it is its own row with its own id, numbered
1, 2, ... (`run`), so a finished run keeps its history whole: a re-run, or a changed
manifest after a run ended, queues a new run. Within a run, versions of the manifest
replace each other while it is queued, and wait while an attempt may be alive.

Part of `StateStore` (broker.state.store), which provides the connection, the write
transaction and the row helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from broker.state.backend import Connection, retried
from broker.state.model import (
    TERMINAL,
    JobState,
    StateError,
    SubmitResult,
    json_text,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from broker.spec import JobSpec
    from broker.state.model import JobVersion

_VERSION_COLUMNS = (
    "digest",
    "manifest_text",
    "spec_json",
    "spec_key",
    "queue",
    "priority",
    "submitted_at",
)


class RunInFlight(StateError):
    """A re-run was asked of a job whose newest run has not ended."""


class RunWrites:
    """Submissions and re-runs (a part of `StateStore`)."""

    _conn: Connection
    _write: Callable[[], AbstractContextManager[str]]
    _insert: Callable[..., None]
    _event: Callable[..., None]
    _fresh_id: Callable[[str, str], str]
    _job_row: Callable[[str], Any]
    _locked: Callable[[], str]
    _set: Callable[..., None]
    _in_flight: Callable[[str, JobState], bool]
    _digest: Callable[[str, int], str]
    version: Callable[..., JobVersion]

    @retried
    def submit(
        self, spec: JobSpec, manifest_text: str, digest: str, submitter: str | None = None
    ) -> SubmitResult:
        """Enqueue a manifest's spec, or record its new version.

        The job is known by the spec's (team, name) and the submission goes to its
        newest run; `manifest_text` is the document as written and `digest` tells an
        unchanged manifest from a changed one. The spec is kept in `broker.spec_codec`'s
        encoding and read back decoded (`version().spec`). An unchanged manifest is a
        no-op (a finished run stays finished: `rerun` runs it again); a changed one
        replaces a queued version, waits for a live attempt, or starts a new run after a
        finished one. `submitter` (default: `broker.users.current_user()`) is recorded on
        a new run and named in the events of a new version.
        """
        from broker.spec_codec import encode, spec_key
        from broker.users import current_user
        from pricing.userio.redact import redact

        team, name = spec.team, spec.name
        # The text is kept to be shown, redacted; the spec (what runs) is kept whole.
        version = {"digest": digest, "manifest_text": redact(manifest_text), "queue": spec.queue}
        encoded = encode(spec)
        version |= {"spec_json": json_text(encoded), "spec_key": spec_key(encoded)}
        version["priority"] = spec.priority
        by = submitter if submitter is not None else current_user()
        with self._write() as now:
            version["submitted_at"] = now
            row = self._newest_run(team, name)
            if row is None:
                return self._new_run(team, name, 1, 1, version, now, {}, by)
            job_id, state, run = row["id"], JobState(row["state"]), row["run"]
            current, pending = row["version"], row["pending_version"]
            newest = pending or current
            if self._digest(job_id, newest) == digest:
                return SubmitResult(job_id, newest, False, False, run, pending is not None, state)
            if pending is not None and self._digest(job_id, current) == digest:
                self._set(job_id, now, pending_version=None)
                message = f"version {pending} withdrawn: the manifest is version {current} again"
                self._event(job_id, None, now, "version", message, {"dropped": pending})
                return SubmitResult(job_id, current, False, True, run, False, state)
            number = self._next_version(team, name)
            if state in TERMINAL and not self._in_flight(job_id, state):
                return self._new_run(team, name, run + 1, number, version, now, {}, by)
            self._insert("job_versions", {"job_id": job_id, "version": number, **version})
            if self._in_flight(job_id, state):
                self._set(job_id, now, pending_version=number)
                message = f"version {number} waits for the live attempt to end"
                data = {"version": number, "digest": digest, "waiting": True, "by": by}
                self._event(job_id, None, now, "version", message, data)
                return SubmitResult(job_id, number, False, True, run, True, state)
            self._put_in_force(job_id, state, current, number, now, by)
            return SubmitResult(job_id, number, False, True, run, False, JobState.QUEUED)

    @retried
    def rerun(self, job_id: str, submitter: str | None = None) -> SubmitResult:
        """Queue a new run of a finished job from the same manifest version (the one in
        force in `job_id`): a new job id, the next run number of its (team, name).

        Raises RunInFlight when the newest run of that (team, name) has not ended: one
        run at a time, as a changed manifest waits for the live attempt. The new run is
        `submitter`'s (default: the current user).
        """
        from broker.users import current_user

        by = submitter if submitter is not None else current_user()
        with self._write() as now:
            row = self._job_row(job_id)
            newest = self._newest_run(row["team"], row["name"])
            assert newest is not None  # `row` is one of its runs
            state = JobState(newest["state"])
            if state not in TERMINAL or self._in_flight(newest["id"], state):
                raise RunInFlight(
                    f"{row['team']}/{row['name']} run {newest['run']} ({newest['id']}) is "
                    f"{state}: a re-run starts once it has ended (or `broker cancel` it)"
                )
            number = row["version"]
            version = self._version_row(job_id, number, now)
            team, name, run = row["team"], row["name"], newest["run"] + 1
            data = {"rerun_of": job_id}
            return self._new_run(team, name, run, number, version, now, data, by)

    def job_names(self) -> list[tuple[str, str]]:
        """Every (team, name) with a run, sorted (what a mistyped name is compared with)."""
        sql = "SELECT DISTINCT team, name FROM jobs ORDER BY team, name"
        return [(r["team"], r["name"]) for r in self._conn.execute(sql)]

    # --- helpers (inside a write transaction) -------------------------------------------

    def _newest_run(self, team: str, name: str) -> Any:
        sql = "SELECT * FROM jobs WHERE team = ? AND name = ? ORDER BY run DESC LIMIT 1"
        sql += self._locked()
        return self._conn.execute(sql, (team, name)).fetchone()

    def _next_version(self, team: str, name: str) -> int:
        """Versions count across the runs of a (team, name): a new run's version is new."""
        (number,) = self._conn.execute(
            "SELECT COALESCE(MAX(v.version), 0) + 1 FROM job_versions v"
            " JOIN jobs j ON j.id = v.job_id WHERE j.team = ? AND j.name = ?",
            (team, name),
        ).fetchone()
        return int(number)

    def _new_run(
        self,
        team: str,
        name: str,
        run: int,
        number: int,
        version: Mapping[str, Any],
        now: str,
        data: Mapping[str, Any],
        submitter: str,
    ) -> SubmitResult:
        """A new job row (QUEUED at the back of its priority) for run `run` of (team,
        name), with `version` as its version `number`, submitted by `submitter`."""
        job_id = self._fresh_id("j-", "jobs")
        queue, priority = version["queue"], version["priority"]
        row = {"id": job_id, "team": team, "name": name, "queue": queue, "priority": priority}
        row |= {"state": JobState.QUEUED, "version": number, "run": run, "submitter": submitter}
        self._insert("jobs", row | {"created_at": now, "updated_at": now, "queued_at": now})
        self._insert("job_versions", {"job_id": job_id, "version": number, **version})
        which = f"version {number}" + (f", run {run}" if run > 1 else "")
        message = f"submitted {team}/{name} ({which}) by {submitter}"
        payload = {"version": number, "digest": version["digest"], "queue": queue, "by": submitter}
        payload |= {"priority": priority, "run": run, **data}
        self._event(job_id, None, now, "submitted", message, payload)
        return SubmitResult(job_id, number, True, True, run, False, JobState.QUEUED)

    def _put_in_force(
        self, job_id: str, state: JobState, old: int, number: int, now: str, by: str = ""
    ) -> None:
        """Make `number` the version in force of a run that has not ended, and queue it
        (a queued run keeps its place in the queue)."""
        version = self.version(job_id, number)
        columns: dict[str, Any] = {"version": number, "pending_version": None}
        columns |= {"queue": version.queue, "priority": version.priority, "state": JobState.QUEUED}
        self._set(job_id, now, **columns)
        data = {"version": number, "previous": old, "digest": version.digest}
        if by:
            data["by"] = by
        if state is JobState.QUEUED:
            message = f"version {number} replaces version {old}"
            self._event(job_id, None, now, "version", message, data)
        else:
            message = f"{state} -> {JobState.QUEUED}: version {number}"
            data |= {"from": state, "to": JobState.QUEUED}
            self._event(job_id, None, now, "transition", message, data)

    def _settle(self, job_id: str, now: str) -> None:
        """Put a waiting version in force once no attempt of the job may be alive: in the
        same run when it is back in the queue, as a new run when it has ended."""
        row = self._job_row(job_id)
        pending, state = row["pending_version"], JobState(row["state"])
        if pending is None or self._in_flight(job_id, state):
            return
        if state not in TERMINAL:
            self._put_in_force(job_id, state, row["version"], pending, now)
            return
        version = self._version_row(job_id, pending, now)
        self._set(job_id, now, pending_version=None)
        team, name, run = row["team"], row["name"], row["run"] + 1
        after = {"after": job_id}
        result = self._new_run(team, name, run, pending, version, now, after, row["submitter"])
        message = f"version {pending} runs as run {result.run} ({result.job_id})"
        data = {"version": pending, "run": result.run, "job": result.job_id}
        self._event(job_id, None, now, "version", message, data | {"digest": version["digest"]})

    def _version_row(self, job_id: str, number: int, now: str) -> dict[str, Any]:
        """A stored version's columns, to be stored again for a new run (submitted now)."""
        sql = "SELECT * FROM job_versions WHERE job_id = ? AND version = ?"
        stored = self._conn.execute(sql, (job_id, number)).fetchone()
        return {column: stored[column] for column in _VERSION_COLUMNS} | {"submitted_at": now}
