"""The state store's writes of attempts and instances: start, running, finish (billed
once, in the same transaction), checkpoints, interruption notices, migrations.

Part of `StateStore` (broker.state.store), which provides the connection, the write
transaction and the row helpers; the rules are in docs/state.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from broker.state.backend import Connection, retried
from broker.state.model import (
    LIVE_INSTANCE,
    OPEN_ATTEMPT,
    OUTCOME_JOB_STATE,
    TERMINATED,
    AttemptState,
    IllegalTransition,
    InstanceRow,
    JobState,
    Outcome,
    decimal_text,
    json_text,
    placed_of,
    total,
    ts_text,
)
from broker.state.money import billed_hours as billed
from broker.state.money import hours_figure, hours_text, ledger_columns, money_text
from broker.state.placed import PlacedOn

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from broker.state.limits import TeamLimits
    from providers.base import InterruptionNotice
    from providers.gang import GangMember


class AttemptWrites:
    """Writes of attempts and instances (a part of `StateStore`)."""

    _conn: Connection
    _write: Callable[[], AbstractContextManager[str]]
    _insert: Callable[..., None]
    _update: Callable[..., None]
    _event: Callable[..., None]
    _fresh_id: Callable[[str, str], str]
    _job_row: Callable[[str], Any]
    _job_to_claim: Callable[[str], Any]
    _keep_held: Callable[[str, Any, Mapping[str, Any]], None]
    _held_count: Callable[[str, str], int | None]
    _locked: Callable[[], str]
    _ending: list[tuple[str, str]]  # what the open write ends (broker.state.ended)
    _job_state: Callable[[str], JobState]
    _attempt_row: Callable[[str], Any]
    _is_latest: Callable[[Any], bool]
    _move: Callable[..., None]
    _settle: Callable[[str, str], None]
    _claim: Callable[..., Any]
    _rest_lease: Callable[[str], None]
    dialect: str
    instances: Callable[..., list[InstanceRow]]

    # --- attempts -------------------------------------------------------------------

    @retried
    def start_attempt(self, job_id: str, placed: PlacedOn, limits: TeamLimits | None = None) -> str:
        """A new attempt on `placed` for a PLANNED (or MIGRATING) job, which moves to
        LAUNCHING; its id. The price, market and price source in force are the record's.

        The id exists before any instance does: providers use it as the launch's
        idempotency key and tag, so a restarted controller finds what it launched.
        With `limits`, the team's quota and budget are checked in this transaction
        against every controller's attempts and the shared ledger (TeamLimitReached:
        broker.state.limits); LeaseHeld when another controller holds the job.
        """
        from broker.state.limits import check_limits

        market = placed.market
        attempt = {"placement_json": json_text(placed.to_row()), "market": market}
        attempt |= {"price_per_hour_usd": decimal_text(placed.price_per_hour), "reason": ""}
        attempt |= {"price_source": placed.price_source, "price_as_of": placed.price_as_of}
        with self._write() as now:
            row = self._job_to_claim(job_id)
            state = JobState(row["state"])
            if state not in (JobState.PLANNED, JobState.MIGRATING):
                why = "an attempt starts from planned or migrating"
                raise IllegalTransition(job_id, state, JobState.LAUNCHING, why)
            self._claim(job_id, now, "launch")
            if limits is not None:
                check_limits(self._conn, limits, placed, self.dialect)
            made = self._held_count(job_id, "attempts_made")  # read by the claim, if any
            if made is None:
                sql = "SELECT COUNT(*) FROM attempts WHERE job_id = ?"
                (made,) = self._conn.execute(sql, (job_id,)).fetchone()
            number = made + 1
            attempt_id = self._fresh_id("a-", "attempts")
            attempt |= {"id": attempt_id, "job_id": job_id, "number": number}
            attempt |= {"version": row["version"], "state": AttemptState.LAUNCHING}
            self._insert("attempts", attempt | {"started_at": now})
            self._keep_held("jobs", job_id, {"attempts_made": number, "latest_attempt": number})
            data = {"attempt": attempt_id, "number": number, "market": market}
            data["price_per_hour_usd"] = attempt["price_per_hour_usd"]
            reason = f"attempt {number} on {placed.where}"
            self._move(job_id, state, JobState.LAUNCHING, now, reason, data, attempt_id)
            return attempt_id

    @retried
    def attempt_running(self, attempt_id: str, instance: Mapping[str, Any]) -> bool:
        """The attempt's instance is up: record it, and move its job LAUNCHING -> RUNNING.

        False (no change) when the attempt was not launching (already seen, or ended).
        A cancelled job stays cancelled; its instance is still recorded, to be terminated.
        `instance` has `provider_id` and optionally cloud, region, zone, instance_type
        (default: the placement's), tags and state (default "running").
        """
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            if att["state"] != AttemptState.LAUNCHING:
                return False
            placed = placed_of(att["placement_json"])
            planned = {"cloud": placed.cloud, "region": placed.region, "zone": placed.zone}
            planned["instance_type"] = placed.instance_type
            found = {k: instance.get(k, default) for k, default in planned.items()}
            found |= {"state": "running", **instance, "attempt_id": attempt_id}
            old = self._claim(att["job_id"], now, "launch", lambda: self._instance_read(found))
            running = {"state": AttemptState.RUNNING, "running_at": now}
            self._update("attempts", {"id": attempt_id}, running)
            self._upsert_instance(now, found, old)
            job_id, provider_id = att["job_id"], instance["provider_id"]
            message = f"attempt {att['number']} running on {provider_id}"
            data = {"provider_id": provider_id}
            if self._job_state(job_id) is JobState.LAUNCHING and self._is_latest(att):
                up = (JobState.LAUNCHING, JobState.RUNNING)
                self._move(job_id, *up, now, message, data, attempt_id)
            self._event(job_id, attempt_id, now, "attempt_running", message, data)
            self._rest_lease(job_id)
            return True

    @retried
    def finish_attempt(
        self,
        attempt_id: str,
        outcome: Outcome,
        exit_code: int | None = None,
        reason: str = "",
        billed_hours: Any = 0,
        ledger_entries: Sequence[Mapping[str, Any]] = (),
        job_to: JobState | None = None,
        instance_state: str = TERMINATED,
        lost_share: Decimal | None = None,
    ) -> bool:
        """End an attempt, move its job, write its ledger entries and close its instance
        rows (to `instance_state`, what the provider last reported), in one transaction.

        False (no change, nothing billed) when the attempt has already ended: a
        restarted or second controller cannot bill twice. The job moves to
        `job_to`, by default the outcome's state (e.g. QUEUED to retry a
        recoverable failure), when the job is still LAUNCHING or RUNNING on this
        attempt; a job that moved on (cancelled, interrupted) keeps its state.
        Ledger entries: see `broker.state.money.ledger_columns`. `lost_share`: of an
        interrupted attempt, the share of its billed time the interruption threw away
        (reports read it back: `lost_shares`).
        """
        if outcome not in OUTCOME_JOB_STATE:
            raise ValueError(f"outcome must be one of {sorted(OUTCOME_JOB_STATE)}: {outcome!r}")
        hours = billed(billed_hours)  # whole seconds (broker.state.money)
        target = JobState(job_to) if job_to is not None else OUTCOME_JOB_STATE[outcome]
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            if att["state"] not in OPEN_ATTEMPT:
                return False
            job_id = att["job_id"]
            self._claim(job_id, now, "finish")
            rows = [ledger_columns(entry, att, hours, now) for entry in ledger_entries]
            ended = {"state": AttemptState(outcome), "ended_at": now, "exit_code": exit_code}
            ended |= {"reason": reason, "billed_hours": hours_text(hours)}
            self._update("attempts", {"id": attempt_id}, ended)
            self._ending.append(("attempt", attempt_id))
            for columns in rows:
                ids = {"job_id": job_id, "attempt_id": attempt_id, "created_at": now}
                self._insert("ledger", columns | ids)
            charged = money_text(total(Decimal(columns["amount_usd"]) for columns in rows))
            message = f"attempt {att['number']} {outcome}" + (f": {reason}" if reason else "")
            data = {"outcome": outcome, "exit_code": exit_code, "billed_hours": hours_text(hours)}
            data["charged_usd"] = charged
            if lost_share is not None:
                data["lost_share"] = decimal_text(lost_share)
                data["lost_hours"] = format(hours_figure(hours * lost_share), "f")
            closed = self._close_instances(attempt_id, instance_state, now)
            if closed:
                data["instances"] = closed
            state = self._job_state(job_id)
            if state in (JobState.LAUNCHING, JobState.RUNNING) and self._is_latest(att):
                self._move(job_id, state, target, now, message, data, attempt_id)
            self._event(job_id, attempt_id, now, "attempt_finished", message, data)
            self._settle(job_id, now)
            self._rest_lease(job_id)
            return True

    @retried
    def record_checkpoint(self, attempt_id: str, at: datetime | None = None, uri: str = "") -> None:
        """Note that an attempt's work up to `at` (default now) is safe in a checkpoint.

        An event (kind "checkpoint"), nothing else: reports count an interrupted
        attempt's lost work from its last checkpoint rather than from its start.
        """
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            data = {"at": ts_text(at) if at is not None else now, "uri": uri}
            message = f"attempt {att['number']} checkpointed"
            self._event(att["job_id"], attempt_id, now, "checkpoint", message, data)

    @retried
    def record_error(self, job_id: str, reason: str, attempt_id: str | None = None) -> bool:
        """Note that the broker's own code failed on a job (`reason`: the stage and the
        error, one line): an event of kind "error", written once while the reason stays
        the same (a job held on every pass is not noted on every pass). False when the
        job's last error event already says it."""
        with self._write() as now:
            self._job_row(job_id)
            sql = (
                "SELECT data_json FROM events WHERE kind = 'error' AND job_id = ?"
                " ORDER BY id DESC LIMIT 1"
            )
            last = self._conn.execute(sql, (job_id,)).fetchone()
            if last is not None and json.loads(last["data_json"]).get("reason") == reason:
                return False
            self._event(job_id, attempt_id, now, "error", reason, {"reason": reason})
            return True

    @retried
    def record_notice(
        self, attempt_id: str, notice: InterruptionNotice, action: str, meaning: str
    ) -> bool:
        """Note a provider's interruption notice on its attempt (an event of kind
        "interruption_notice"), once per attempt and kind: a restarted controller that
        is told again records nothing. False when it was known already."""
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            sql = (
                "SELECT data_json FROM events WHERE kind = 'interruption_notice' AND attempt_id = ?"
            )
            for row in self._conn.execute(sql, (attempt_id,)):
                if json.loads(row["data_json"]).get("kind") == notice.kind:
                    return False
            deadline = ts_text(notice.deadline) if notice.deadline is not None else None
            data = {"kind": notice.kind, "noticed_at": ts_text(notice.noticed_at)}
            data |= {"deadline": deadline, "action": action}
            until = f", stops at {deadline}" if deadline else ""
            message = f"attempt {att['number']}: {notice.kind} notice{until}: {meaning}"
            self._event(att["job_id"], attempt_id, now, "interruption_notice", message, data)
            return True

    @retried
    def record_migration(self, attempt_id: str, source: str, target: str, size: int) -> None:
        """Note that the checkpoint an attempt resumes from was copied from `source` to
        `target` (`size` bytes): once per attempt, so a restarted controller does not
        copy again."""
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            data = {"from": source, "to": target, "bytes": size}
            message = f"attempt {att['number']}: checkpoint copied from {source} to {target}"
            self._event(att["job_id"], attempt_id, now, "checkpoint_migrated", message, data)

    def migration(self, attempt_id: str) -> dict[str, Any] | None:
        """The recorded checkpoint copy of an attempt, or None."""
        sql = "SELECT data_json FROM events WHERE kind = 'checkpoint_migrated' AND attempt_id = ?"
        row = self._conn.execute(sql, (attempt_id,)).fetchone()
        return json.loads(row["data_json"]) if row is not None else None

    # --- instances ------------------------------------------------------------------

    @retried
    def close_stale_instances(self) -> int:
        """Close the instance rows still live whose attempt has ended (left by a broker
        from before attempts closed their instances); how many. A controller runs it on
        start-up; it writes only when there is something to close."""
        marks = ",".join("?" * len(OPEN_ATTEMPT))
        live = ",".join("?" * len(LIVE_INSTANCE))
        sql = (
            "SELECT DISTINCT i.attempt_id FROM instances i JOIN attempts a ON a.id = i.attempt_id"
            f" WHERE i.state IN ({live}) AND a.state NOT IN ({marks})"
        )
        stale = [row[0] for row in self._conn.execute(sql, (*LIVE_INSTANCE, *OPEN_ATTEMPT))]
        if not stale:
            return 0
        count = 0
        with self._write() as now:
            for attempt_id in stale:
                if self._attempt_row(attempt_id)["state"] not in OPEN_ATTEMPT:  # still ended
                    count += len(self._close_instances(attempt_id, TERMINATED, now))
        return count

    def _close_instances(self, attempt_id: str, state: str, now: str) -> list[str]:
        """Mark the attempt's live instance rows ended (`state`, stamped gone now); their
        provider ids. Inside a write transaction."""
        live = ",".join("?" * len(LIVE_INSTANCE))
        sql = f"SELECT provider_id FROM instances WHERE attempt_id = ? AND state IN ({live})"
        ids = [row[0] for row in self._conn.execute(sql, (attempt_id, *LIVE_INSTANCE))]
        ended = state if state not in LIVE_INSTANCE else TERMINATED
        update = (
            "UPDATE instances SET state = ?, updated_at = ?, terminated_at = COALESCE("
            f"terminated_at, ?) WHERE attempt_id = ? AND state IN ({live})"
        )
        self._conn.execute(update, (ended, now, now, attempt_id, *LIVE_INSTANCE))
        return ids

    @retried
    def record_instance(
        self,
        cloud: str,
        provider_id: str,
        state: str,
        *,
        attempt_id: str | None = None,
        region: str | None = None,
        zone: str | None = None,
        instance_type: str | None = None,
        tags: Mapping[str, str] | None = None,
        members: Sequence[GangMember] | None = None,
    ) -> InstanceRow:
        """Record what a provider reports about an instance (None keeps what is known;
        `members`: a gang's nodes).

        `provider_id` is unique within its cloud (adapters qualify names that are
        not, e.g. GCP's `zone/name`). An ended state stamps `terminated_at` (when the
        instance was seen gone).
        """
        given = {"region": region, "zone": zone, "instance_type": instance_type, "tags": tags}
        given["members"] = members
        found = {k: v for k, v in given.items() if v is not None}
        found |= {"cloud": cloud, "provider_id": provider_id, "state": state}
        with self._write() as now:
            if attempt_id is not None:
                found["attempt_id"] = self._attempt_row(attempt_id)["id"]
            self._upsert_instance(now, found)
        return self.instances(cloud=cloud, provider_id=provider_id)[0]

    def _instance_read(self, found: Mapping[str, Any]) -> Any:
        """The locking read of the instance row `found` names, sent (not yet read)."""
        key = (found["cloud"], str(found["provider_id"]))
        sql = f"SELECT * FROM instances WHERE cloud = ? AND provider_id = ?{self._locked()}"
        return self._conn.execute(sql, key)

    def _upsert_instance(self, now: str, found: Mapping[str, Any], sent: Any = None) -> None:
        """Insert or update one instance from the reported fields (absent ones are kept);
        `sent`: its `_instance_read`, when the caller sent it with an earlier statement."""
        key = {"cloud": found["cloud"], "provider_id": str(found["provider_id"])}
        old = (sent if sent is not None else self._instance_read(found)).fetchone()
        fields = ("region", "zone", "instance_type")
        row = dict(old) if old else {**dict.fromkeys(fields, ""), "tags_json": "{}"}
        row |= {k: found[k] for k in (*fields, "attempt_id") if k in found}
        if "tags" in found:
            row["tags_json"] = json_text(dict(found["tags"]))
        if "members" in found:  # a gang's nodes (providers.gang.GangMember)
            row["members_json"] = json_text([asdict(m) for m in found["members"]])
        state = str(found["state"])
        row |= {"state": state, "updated_at": now}
        if state not in LIVE_INSTANCE and not row.get("terminated_at"):
            row["terminated_at"] = now
        if old is None:
            self._insert("instances", row | key | {"created_at": now})
        else:
            self._update("instances", key, row)
        attempt_id = row.get("attempt_id")
        if attempt_id is not None and (old is None or old["state"] != state):
            job_id = self._attempt_row(attempt_id)["job_id"]
            message = f"instance {key['provider_id']} on {key['cloud']} {state}"
            self._event(job_id, attempt_id, now, "instance", message, {**key, "state": state})
