"""A team's quota and budget, checked again inside the transaction that starts an attempt.

Each controller's queue policy decides from what it read at the start of its pass; two
controllers on one queue could each see room for one more job of a capped team and both
start one. So `start_attempt` takes the team's limits and checks them against the store
as it is under the write lock: the GPUs of the team's open attempts (every controller's)
and its ledger spend this month plus what its open attempts commit. An open attempt
counts, as in the policy's launch check, for the larger of its plan's expected cost and
what the caller's projection says it accrued and will burn by the next pass (an attempt
another controller started since the projection: its expected cost). A start that would go over is
refused with `TeamLimitReached` and nothing is written.

On PostgreSQL the check must also serialise the team's starts (two transactions see no
row of each other's): `TEAM_LOCK` is the statement the backend runs first.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from broker.state.model import OPEN_ATTEMPT, StateError, ts_text
from broker.state.placed import PlacedOn

_EPS = 1e-9  # as broker.queue: a sum of floats within this of a limit is at the limit
TEAM_LOCK = {"sqlite": None, "postgresql": "SELECT pg_advisory_xact_lock(hashtext(?))"}


class TeamLimitReached(StateError):
    """Starting the attempt would take its team over a quota or its monthly budget."""

    def __init__(self, category: str, detail: str) -> None:
        super().__init__(f"{category}: {detail}")
        self.category, self.detail = category, detail


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """What a team may use at once and spend this month (broker.queue.Team's limits)."""

    team: str
    month_start: datetime
    max_gpus: float | None = None
    max_gpus_by_model: Mapping[str, float] = field(default_factory=dict)
    monthly_budget: float | None = None
    committed: Mapping[str, float] = field(default_factory=dict)  # job id -> USD (projection)

    @property
    def limited(self) -> bool:
        return (
            self.max_gpus is not None
            or bool(self.max_gpus_by_model)
            or self.monthly_budget is not None
        )


def check_limits(
    conn: sqlite3.Connection, limits: TeamLimits, placed: PlacedOn, dialect: str = "sqlite"
) -> None:
    """TeamLimitReached when starting an attempt on `placed` would take the team over."""
    if not limits.limited:
        return
    lock = TEAM_LOCK[dialect]
    if lock is not None:
        conn.execute(lock, (limits.team,))
    marks = ",".join("?" * len(OPEN_ATTEMPT))
    sql = (
        "SELECT a.job_id, a.placement_json FROM attempts a JOIN jobs j ON j.id = a.job_id"
        f" WHERE j.team = ? AND a.state IN ({marks})"
    )
    running = [
        (row["job_id"], PlacedOn.from_row(json.loads(row["placement_json"])))
        for row in conn.execute(sql, (limits.team, *OPEN_ATTEMPT))
    ]
    _check_gpus(limits, placed, [p for _, p in running])
    if limits.monthly_budget is None or placed.expected_cost <= 0:
        return
    sql = (
        "SELECT l.amount_usd FROM ledger l JOIN jobs j ON j.id = l.job_id"
        " WHERE j.team = ? AND l.period_end >= ?"
    )
    rows = conn.execute(sql, (limits.team, ts_text(limits.month_start)))
    spent = float(sum((Decimal(row[0]) for row in rows), Decimal(0)))
    committed = sum(max(p.expected_cost, limits.committed.get(job, 0.0)) for job, p in running)
    cap = limits.monthly_budget
    if spent + committed + placed.expected_cost > cap + _EPS:
        raise TeamLimitReached(
            "budget",
            f"team {limits.team} at ${spent:,.2f} billed and ${committed:,.2f} committed of "
            f"${cap:,.2f} this month (every controller's), job needs "
            f"${placed.expected_cost:,.2f}",
        )


def _check_gpus(limits: TeamLimits, placed: PlacedOn, running: list[PlacedOn]) -> None:
    gpus = placed.accelerator_count * placed.nodes
    if gpus <= 0:
        return
    used = sum(p.accelerator_count * p.nodes for p in running)
    if limits.max_gpus is not None and used + gpus > limits.max_gpus + _EPS:
        raise TeamLimitReached(
            "quota",
            f"team {limits.team} at {used:g}/{limits.max_gpus:g} GPUs (every controller's), "
            f"job needs {gpus:g}",
        )
    model = placed.accelerator.casefold()
    for name, limit in limits.max_gpus_by_model.items():
        if name.casefold() != model:
            continue
        same = sum(
            p.accelerator_count * p.nodes for p in running if p.accelerator.casefold() == model
        )
        if same + gpus > limit + _EPS:
            raise TeamLimitReached(
                "quota",
                f"team {limits.team} at {same:g}/{limit:g} {placed.accelerator} GPUs "
                f"(every controller's), job needs {gpus:g}",
            )
