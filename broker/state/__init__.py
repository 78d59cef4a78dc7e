"""Durable broker state: one SQLite file, one writer (`StateStore`), rows as frozen values.

    with StateStore.open(default_state_path(), SystemClock()) as store:
        result = store.submit(manifest.spec, manifest.text, manifest.digest)
        store.transition(result.job_id, JobState.PLANNED, expect=JobState.QUEUED)

See docs/state.md for the tables, the state machine and the concurrency rules.
"""

from broker.state.model import (
    IN_FLIGHT,
    OPEN_ATTEMPT,
    TERMINAL,
    TRANSITIONS,
    Attempt,
    AttemptState,
    Event,
    IllegalTransition,
    InstanceRow,
    Job,
    JobState,
    JobVersion,
    LedgerEntry,
    StateError,
    SubmitResult,
    UnknownAttempt,
    UnknownJob,
    can_transition,
)
from broker.state.runs import RunInFlight
from broker.state.schema import SchemaTooNew
from broker.state.store import StateStore, default_state_path

__all__ = [
    "IN_FLIGHT",
    "OPEN_ATTEMPT",
    "TERMINAL",
    "TRANSITIONS",
    "Attempt",
    "AttemptState",
    "Event",
    "IllegalTransition",
    "InstanceRow",
    "Job",
    "JobState",
    "JobVersion",
    "LedgerEntry",
    "RunInFlight",
    "SchemaTooNew",
    "StateError",
    "StateStore",
    "SubmitResult",
    "UnknownAttempt",
    "UnknownJob",
    "can_transition",
    "default_state_path",
]
