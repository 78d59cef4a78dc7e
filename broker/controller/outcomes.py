"""How an ended attempt is judged: one ordered table from what the provider reported
to the attempt's outcome and the job's next state.

The first rule that matches decides. A job is retried (back to the queue) only where
the table says so: a failure with restarts left (`recovery.max_restarts_on_error`),
or an end with no exit code of its own (the instance never started or was killed
from outside), a few times. An interrupted job goes back to the queue after its
attempt is closed, to resume from its checkpoint (the controller does that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.state import JobState

INTERRUPT_EXIT_CODES = (143,)  # SIGTERM after a notice: the job checkpointed and left
INFRA_RETRIES = 3  # relaunches after an attempt that ended with no exit code of its own


@dataclass(frozen=True, slots=True)
class Ending:
    """What is known when an attempt's instance has ended."""

    instance_state: str  # providers.base.InstanceState
    exit_code: int | None
    job_cancelled: bool
    recover_on_exit_codes: tuple[int, ...]  # the manifest's codes that mean "interrupted"
    failed_before: int  # the job's earlier attempts that failed
    failed_without_code: int  # ... of which ended with no exit code
    max_restarts_on_error: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """An ended attempt's outcome, the job's next state (None: the outcome's own), and
    the reason recorded with it."""

    outcome: str  # succeeded | failed | interrupted | cancelled
    next_state: JobState | None
    reason: str


def _interrupted(e: Ending) -> bool:
    if e.instance_state == "interrupted" or e.exit_code in e.recover_on_exit_codes:
        return True
    return e.exit_code in INTERRUPT_EXIT_CODES and e.instance_state != "failed"


def _retry_unexplained(e: Ending) -> JobState | None:
    return JobState.QUEUED if e.failed_without_code < INFRA_RETRIES else None


def _retry_failed(e: Ending) -> JobState | None:
    return JobState.QUEUED if e.failed_before < e.max_restarts_on_error else None


def _stay(e: Ending) -> JobState | None:
    return None


# (when, outcome, next state): in order, the first match decides.
RULES: tuple[tuple[Callable[[Ending], bool], str, Callable[[Ending], JobState | None]], ...] = (
    (lambda e: e.job_cancelled, "cancelled", _stay),
    # terminated with no cancel recorded: the broker stopped it (a budget, a preemption,
    # a move) and died before closing the attempt, or someone stopped it outside the
    # broker. Neither is the user's cancel: the job is recovered as after a reclaim.
    (lambda e: e.instance_state == "terminated", "interrupted", _stay),
    (_interrupted, "interrupted", _stay),
    (lambda e: e.exit_code == 0, "succeeded", _stay),
    (lambda e: e.exit_code is None, "failed", _retry_unexplained),  # not the job's fault
    (lambda e: True, "failed", _retry_failed),
)


def judge(ending: Ending) -> Verdict:
    """The verdict of the first rule of RULES that matches."""
    code = ending.exit_code
    if code is not None:
        reason = f"exit code {code}"
    else:
        reason = f"{ending.instance_state}, no exit code"
    for matches, outcome, next_state in RULES:
        if matches(ending):
            return Verdict(outcome, next_state(ending), reason)
    raise AssertionError("the last rule always matches")
