"""The queue policy: priorities, fair share, quotas, budgets, preemption and backfill,
as pure functions over plain data (docs/policy.md). The controller calls `schedule`."""

from broker.queue.config import load_policy
from broker.queue.fairshare import decayed_usage, fair_share_factors
from broker.queue.policy import (
    Policy,
    QueuedJob,
    RunningJob,
    TeamPolicy,
    Verdict,
    job_scores,
    schedule,
)

__all__ = [
    "Policy",
    "QueuedJob",
    "RunningJob",
    "TeamPolicy",
    "Verdict",
    "decayed_usage",
    "fair_share_factors",
    "job_scores",
    "load_policy",
    "schedule",
]
