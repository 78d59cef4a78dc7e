"""The state store's reads: jobs, versions, attempts, instances, events, the ledger.

Part of `StateStore` (broker.state.store). Reads take no write lock: in WAL mode (and
on PostgreSQL) they see the last committed state and never block a writer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from broker.state.backend import Backend, Connection
from broker.state.listing import (
    ListedRun,
    Listing,
    attempt_listing,
    attempt_listing_sql,
    job_listing,
    job_listing_sql,
    listed_runs,
)
from broker.state.model import (
    TERMINAL,
    Attempt,
    AttemptState,
    Event,
    InstanceRow,
    Job,
    JobState,
    JobVersion,
    LedgerEntry,
    UnknownJob,
    attempt_of,
    event_of,
    instance_of,
    job_of,
    ledger_of,
    ts_text,
    version_of,
)
from broker.state.tallies import StateTallies

_PER_QUERY = 500  # ids bound in one IN (...): well under any backend's limit
JOB_SELECT = (
    "SELECT j.*, v.digest FROM jobs j"
    " JOIN job_versions v ON v.job_id = j.id AND v.version = j.version"
)
LEDGER_SELECT = "SELECT l.*, j.team FROM ledger l JOIN jobs j ON j.id = l.job_id"


class EncodedSpec(NamedTuple):
    """A job version's spec as the store keeps it (`StateStore.encoded_specs`)."""

    job_id: str
    version: int
    key: str | None  # `broker.spec_codec.spec_key`; None: written before spec keys
    name: str  # the job's, which its spec names too
    team: str
    submitted_at: datetime  # the version's


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A succeeded run with its attempts and, per interrupted attempt, the share of its
    billed time its interruption lost (as `lost_shares` gives it)."""

    job: Job
    attempts: list[Attempt]
    lost_shares: dict[str, Decimal]


class StateReads(StateTallies):
    """Reads of the state (a part of `StateStore`); the metrics' own: `StateTallies`."""

    _conn: Connection
    _backend: Backend
    _job_row: Callable[[str], Any]
    _attempt_row: Callable[[str], Any]

    _jobs_of: Callable[[Iterable[Any]], list[Job]]  # job_of, remembered (StateStore)

    # rows to values (the simulator's store remembers them: broker.sim.store)
    _attempt_of = staticmethod(attempt_of)
    _event_of = staticmethod(event_of)
    _ledger_of = staticmethod(ledger_of)

    # --- reads ----------------------------------------------------------------------

    def job(self, key: str) -> Job:
        """A job by id; by `team/name`, or a name only one team uses: its newest run."""
        rows = self._conn.execute(f"{JOB_SELECT} WHERE j.id = ?", (key,)).fetchall()
        if not rows and "/" in key:
            team, name = key.split("/", 1)
            rows = self._conn.execute(
                f"{JOB_SELECT} WHERE j.team = ? AND j.name = ? ORDER BY j.run DESC LIMIT 1",
                (team, name),
            ).fetchall()
        if not rows:
            newest = (
                f"{JOB_SELECT} WHERE j.name = ? AND j.run ="
                " (SELECT MAX(run) FROM jobs r WHERE r.team = j.team AND r.name = j.name)"
            )
            rows = self._conn.execute(newest, (key,)).fetchall()
        if len(rows) == 1:
            return job_of(rows[0])
        if not rows:
            raise UnknownJob(f"no job {key!r}")
        teams = ", ".join(sorted(f"{r['team']}/{r['name']}" for r in rows))
        raise UnknownJob(f"{key!r} is more than one job ({teams}): give team/name")

    def jobs(
        self,
        states: Iterable[JobState] | None = None,
        team: str | None = None,
        queue: str | None = None,
        submitter: str | None = None,
    ) -> list[Job]:
        """Jobs (every run) in creation order, optionally filtered."""
        where, params = _filters(
            ("j.state", states), ("j.team", team), ("j.queue", queue), ("j.submitter", submitter)
        )
        sql = f"{JOB_SELECT}{where} ORDER BY j.created_at, j.run, j.id"
        return self._jobs_of(self._conn.execute(sql, params))

    def queued(self, queue: str | None = None) -> list[Job]:
        """Queued jobs in the order they should be considered: priority, then FIFO."""
        where, params = _filters(("j.state", [JobState.QUEUED]), ("j.queue", queue))
        sql = f"{JOB_SELECT}{where} ORDER BY j.priority DESC, j.queued_at, j.id"
        return self._jobs_of(self._conn.execute(sql, params).fetchall())  # all at once: faster

    def version(self, job_id: str, number: int | None = None) -> JobVersion:
        """One version of a job's manifest; by default the one in force."""
        if number is None:
            number = self._job_row(job_id)["version"]
        row = self._conn.execute(
            "SELECT * FROM job_versions WHERE job_id = ? AND version = ?", (job_id, number)
        ).fetchone()
        if row is None:
            raise UnknownJob(f"job {job_id} has no version {number}")
        return version_of(row)

    def encoded_specs(self, states: Iterable[JobState]) -> list[EncodedSpec]:
        """What names the spec of every job in `states`, in the version in force (its
        `spec_key`, the job's name and team, when it was submitted): one narrow query
        for what a controller pass plans. Jobs from one template share a key, so the
        reader needs the text of one version per key (`spec_texts`), and decodes it once
        (broker.controller.specs)."""
        where, params = _filters(("j.state", states))
        sql = (
            "SELECT v.job_id, v.version, v.spec_key, j.name, j.team, v.submitted_at FROM jobs j"
            f" JOIN job_versions v ON v.job_id = j.id AND v.version = j.version{where}"
        )
        rows = self._conn.execute(sql, params).fetchall()  # than row by row, on PostgreSQL
        return [
            EncodedSpec(job_id, version, key, name, team, datetime.fromisoformat(at))
            for job_id, version, key, name, team, at in rows
        ]

    def spec_texts(self, versions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """(job id, version) -> the version's spec as JSON text (broker.spec_codec's
        encoding), one query per 500 jobs."""
        wanted = set(versions)
        ids = sorted({job_id for job_id, _ in wanted})
        found: dict[tuple[str, int], str] = {}
        for begin in range(0, len(ids), _PER_QUERY):
            where, params = _filters(("job_id", ids[begin : begin + _PER_QUERY]))
            sql = f"SELECT job_id, version, spec_json FROM job_versions{where}"
            for job_id, version, text in self._conn.execute(sql, params):
                if (job_id, version) in wanted:
                    found[job_id, version] = text
        return found

    def listed_runs(self, job_ids: Sequence[str]) -> dict[str, ListedRun]:
        """What `broker jobs` learns each run's runtime columns from (only that: no
        whole placement or spec is decoded; broker.state.listing.listed_runs)."""
        return listed_runs(self._conn, self._backend, job_ids)

    def job_teams(self, job_ids: Iterable[str] | None = None) -> dict[str, str]:
        """Job id -> its team, for every job, or for `job_ids` (one query per 500): what
        fair share needs to know of attempts."""
        if job_ids is None:
            return {r["id"]: r["team"] for r in self._conn.execute("SELECT id, team FROM jobs")}
        ids, teams = sorted(set(job_ids)), {}
        for begin in range(0, len(ids), _PER_QUERY):
            where, params = _filters(("id", ids[begin : begin + _PER_QUERY]))
            teams |= {
                r["id"]: r["team"]
                for r in self._conn.execute(f"SELECT id, team FROM jobs{where}", params)
            }
        return teams

    def versions(self, job_id: str) -> list[JobVersion]:
        sql = "SELECT * FROM job_versions WHERE job_id = ? ORDER BY version"
        return [version_of(r) for r in self._conn.execute(sql, (job_id,))]

    def attempt(self, attempt_id: str) -> Attempt:
        return self._attempt_of(self._attempt_row(attempt_id))

    def attempts(
        self, job_id: str | None = None, states: Iterable[AttemptState] | None = None
    ) -> list[Attempt]:
        """A job's attempts in order; or, with `states` (e.g. OPEN_ATTEMPT), any job's."""
        where, params = _filters(("job_id", job_id), ("state", states))
        sql = f"SELECT * FROM attempts{where} ORDER BY started_at, job_id, number"
        return [self._attempt_of(r) for r in self._conn.execute(sql, params)]

    def attempts_of(self, job_ids: Iterable[str]) -> dict[str, list[Attempt]]:
        """Each job's attempts in order (as `attempts(job_id)`), one query per 500 jobs
        rather than one per job: what a pass reads of the running jobs."""
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, list[Attempt]] = {job_id: [] for job_id in ids}
        for begin in range(0, len(ids), _PER_QUERY):
            where, params = _filters(("job_id", ids[begin : begin + _PER_QUERY]))
            sql = f"SELECT * FROM attempts{where} ORDER BY started_at, job_id, number"
            for row in self._conn.execute(sql, params):
                found[row["job_id"]].append(self._attempt_of(row))
        return found

    def finished_runs(
        self,
        team: str,
        name: str | None = None,
        *,
        before: datetime | None = None,
        limit: int = 2,
        within: int | None = None,
    ) -> list[FinishedRun]:
        """The team's newest succeeded runs (of job `name` only, when given; that ended
        before `before`, when given; among the newest `within` runs of the store, when
        given), newest first, at most `limit`, each with its attempts in order and the
        lost shares of its interrupted ones: the history that runtimes are learned from
        (`broker.learned_runtime`). `within` bounds a search across a team's names by
        the `created_at` index, whatever the team's size."""
        where, params = _filters(
            ("j.team", team), ("j.name", name), ("j.state", [JobState.SUCCEEDED])
        )
        if before is not None:
            where += " AND j.updated_at < ?"
            params.append(ts_text(before))
        select = JOB_SELECT
        if within is not None:  # the window drives: not every run of the team, scanned
            window = (
                "(SELECT r.id FROM jobs r ORDER BY r.created_at DESC, r.run DESC, r.id DESC"
                f" LIMIT ?) w {self._backend.index_join} jobs j ON j.id = w.id"
            )
            select = JOB_SELECT.replace("jobs j", window, 1)
            params.insert(0, within)
        # One run of a job at a time: its newest runs are its highest numbers (the
        # (team, name, run) index); across names, the newest to have ended.
        order = "j.run DESC" if name is not None else "j.updated_at DESC, j.run DESC, j.id DESC"
        sql = f"{select}{where} ORDER BY {order} LIMIT ?"
        jobs = [job_of(r) for r in self._conn.execute(sql, [*params, limit])]
        if not jobs:
            return []
        marks = ",".join("?" * len(jobs))
        tried: dict[str, list[Attempt]] = {job.id: [] for job in jobs}
        sql = f"SELECT * FROM attempts WHERE job_id IN ({marks}) ORDER BY job_id, number"
        for row in self._conn.execute(sql, [job.id for job in jobs]):
            tried[row["job_id"]].append(attempt_of(row))
        runs = []
        for job in jobs:
            attempts = tried[job.id]
            interrupted = any(a.state == AttemptState.INTERRUPTED for a in attempts)
            runs.append(FinishedRun(job, attempts, self.lost_shares(job.id) if interrupted else {}))
        return runs

    def instances(
        self,
        state: str | Iterable[str] | None = None,
        attempt_id: str | None = None,
        cloud: str | None = None,
        provider_id: str | None = None,
        attempt_states: Iterable[AttemptState] | None = None,
    ) -> list[InstanceRow]:
        """Instances as last recorded, for reconciliation with what providers report;
        `attempt_states` (e.g. OPEN_ATTEMPT): only those of attempts in those states."""
        where, params = _filters(
            ("i.state", [state] if isinstance(state, str) else state),
            ("i.attempt_id", attempt_id),
            ("i.cloud", cloud),
            ("i.provider_id", provider_id),
            ("a.state", attempt_states),
        )
        sql = (
            "SELECT i.*, a.job_id FROM instances i LEFT JOIN attempts a ON a.id = i.attempt_id"
            f"{where} ORDER BY i.created_at, i.cloud, i.provider_id"
        )
        return [instance_of(r) for r in self._conn.execute(sql, params)]

    def events(self, job_id: str, after: int = 0) -> list[Event]:
        """A job's events in order; `after` an event id, to follow new ones."""
        sql = "SELECT * FROM events WHERE job_id = ? AND id > ? ORDER BY id"
        return [self._event_of(r) for r in self._conn.execute(sql, (job_id, after))]

    def events_of_kind(self, kind: str) -> list[Event]:
        """Every job's events of one kind, oldest first: what the metrics count across
        jobs (e.g. "checkpoint_migrated") in one query rather than one per job."""
        sql = "SELECT * FROM events WHERE kind = ? ORDER BY id"
        return [event_of(r) for r in self._conn.execute(sql, (kind,))]

    def ledger(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
        team: str | None = None,
        job_id: str | None = None,
    ) -> list[LedgerEntry]:
        """Ledger entries whose period ended in [since, until), oldest first."""
        where, params = _filters(("j.team", team), ("l.job_id", job_id))
        where = _period_ended(where, params, since, until)
        sql = f"{LEDGER_SELECT}{where} ORDER BY l.period_end, l.id"
        return [self._ledger_of(r) for r in self._conn.execute(sql, params)]

    def listing(
        self,
        *,
        team: str | None = None,
        states: Iterable[JobState] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = None,
        attempts: bool = False,
        submitter: str | None = None,
    ) -> Listing:
        """Every run of every job (finished ones too), newest first, in one query: with
        `since`/`until`, the runs queued or running at some time in [since, until); at
        most `limit` runs; with `attempts`, one row per attempt of those runs instead;
        with `submitter`, only the runs that user submitted."""
        where, params = _filters(("j.team", team), ("j.state", states), ("j.submitter", submitter))
        if until is not None:
            where += f"{' AND' if where else ' WHERE'} j.created_at < ?"
            params.append(ts_text(until))
        if since is not None:
            terminal = ",".join("?" * len(TERMINAL))
            where += (
                f"{' AND' if where else ' WHERE'}"
                f" (j.state NOT IN ({terminal}) OR j.updated_at >= ?)"
            )
            params += [*map(str, TERMINAL), ts_text(since)]
        page = [] if limit is None else [limit]
        marks = ",".join("?" * len(TERMINAL))
        template = (attempt_listing_sql if attempts else job_listing_sql)(self._backend)
        sql = template.format(terminal=marks, where=where, limit=" LIMIT ?" if page else "")
        values = [*params, *map(str, TERMINAL), *params, *page]  # the count, then the page
        rows = self._conn.execute(sql, values).fetchall()
        if attempts:
            found = [attempt_listing(r) for r in rows]
            matched = rows[0]["matched"] if rows else self._matching(where, params)
            return Listing([], found, matched)
        return Listing([job_listing(r) for r in rows], [], rows[0]["matched"] if rows else 0)

    def _matching(self, where: str, params: list[Any]) -> int:
        """How many runs match (when the page's runs have no attempt to carry the count)."""
        (count,) = self._conn.execute(f"SELECT COUNT(*) FROM jobs j{where}", params).fetchone()
        return int(count)

    def time_scales(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> dict[float | None, int]:
        """How many attempts billed in [since, until) ran at each recorded time scale
        (billed seconds per wall second; None: recorded before the scale was)."""
        params: list[Any] = []
        where = _period_ended("", params, since, until)
        sql = (
            f"SELECT {self._backend.json_number('a.placement_json', 'time_scale')} AS scale,"
            " COUNT(DISTINCT a.id) AS n FROM attempts a JOIN ledger l ON l.attempt_id = a.id"
            f"{where} GROUP BY scale"
        )
        return {row["scale"]: row["n"] for row in self._conn.execute(sql, params)}

    def checkpoints(self) -> dict[str, datetime]:
        """The time of each attempt's last recorded checkpoint (attempts without one: absent)."""
        sql = "SELECT attempt_id, data_json FROM events WHERE kind = 'checkpoint'"
        last: dict[str, str] = {}
        for row in self._conn.execute(sql):
            at = json.loads(row["data_json"])["at"]
            if row["attempt_id"] is not None and at > last.get(row["attempt_id"], ""):
                last[row["attempt_id"]] = at
        return {attempt: datetime.fromisoformat(at) for attempt, at in last.items()}

    def lost_shares(self, job_id: str | None = None) -> dict[str, Decimal]:
        """The share of each interrupted attempt's billed time its interruption lost, as
        the controller judged it when closing the attempt (`finish_attempt`'s
        `lost_share`), of one job or all; attempts closed without one are absent."""
        sql = "SELECT attempt_id, data_json FROM events WHERE kind = 'attempt_finished'"
        params: tuple[str, ...] = ()
        if job_id is not None:
            sql, params = sql + " AND job_id = ?", (job_id,)
        shares: dict[str, Decimal] = {}
        for row in self._conn.execute(sql, params):
            share = json.loads(row["data_json"]).get("lost_share")
            if share is not None and row["attempt_id"] is not None:
                shares[row["attempt_id"]] = Decimal(share)
        return shares


def _period_ended(
    where: str, params: list[Any], since: datetime | None, until: datetime | None
) -> str:
    """`where` narrowed to ledger lines whose period ended in [since, until) (params
    appended)."""
    for op, moment in ((">=", since), ("<", until)):
        if moment is not None:
            where += f"{' AND' if where else ' WHERE'} l.period_end {op} ?"
            params.append(ts_text(moment))
    return where


def _filters(*pairs: tuple[str, Any]) -> tuple[str, list[Any]]:
    """` WHERE a = ? AND b IN (?, ?)` for the pairs whose value is not None."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in pairs:
        if value is None:
            continue
        if isinstance(value, str):
            clauses.append(f"{column} = ?")
            params.append(value)
        else:
            values = [str(v) for v in value]
            if not values:
                clauses.append("1 = 0")
                continue
            clauses.append(f"{column} IN ({','.join('?' * len(values))})")
            params.extend(values)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
