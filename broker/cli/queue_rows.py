"""The rows of `broker queue`, from the controller's queue lines (values, no formatting
below the CLI)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.controller import QueueLine


def queue_rows(lines: list[QueueLine], now: datetime) -> list[dict[str, Any]]:
    """One row per line: position, job, team, GPUs, placement, expected cost, how long
    it has waited and why."""
    rows = []
    for line in lines:
        job, placed = line.job, line.placed
        waited = now - job.queued_at
        rows.append(
            {
                "position": line.position,
                "job": job.id,
                "name": job.name,
                "team": job.team,
                "queue": job.queue,
                "priority": job.priority,
                "state": str(job.state),
                "gpus": placed.gpu_label if placed else "",
                "placement": f"{placed.where} {placed.market}" if placed else "",
                "expected_cost": placed.expected_cost if placed else None,
                "waiting": f"{int(waited.total_seconds() // 60)} min",
                "why": line.why,
            }
        )
    return rows
