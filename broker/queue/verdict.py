"""What the queue policy says of one queued job: launch or wait, and why, as values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Why a job waits (or how it launches): the first words of its reason, as a value.
Category = Literal[
    "", "quota", "budget", "capacity", "lower priority", "fair share", "backfill",
    "preemption", "infeasible", "cooling down", "held", "error",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with one queued job in this pass.

    `category` says why: for "wait" one of quota, budget, capacity, lower priority,
    fair share, backfill, infeasible (no placement at all), cooling down (its only
    places are closed for spot a while), held (reclaimed lately: broker.dispatch.hold),
    error (the broker's code raised on the job: broker.controller.isolation); for
    "launch" it is ""
    unless the launch is a backfill or preempts. `reason` is the sentence users read,
    which starts with the category ("quota: team nlp at 8/8 GPUs, ...").
    """

    job_id: str
    action: Literal["launch", "wait"]
    reason: str
    preempts: tuple[str, ...] = ()  # running job ids to preempt first (launch only)
    position: int = 0  # 1-based order in the queue as the policy sees it
    category: Category = ""


@dataclass(frozen=True, slots=True)
class Why:
    """A category and its detail; `text` is the reason users read."""

    category: Category
    detail: str

    @property
    def text(self) -> str:
        return f"{self.category}: {self.detail}"
