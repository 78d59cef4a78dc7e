"""One bad job never blocks the queue: what the controller does when its own code raises
for one job (a spec nothing validated, a bug reached by one job's data).

- **Batch stages** (planning and ordering the queue) run once for all jobs, as before;
  only when the batch raises is each job tried alone, to find the ones that raise. They
  are held (they stay queued, with the error as their reason and as an event), and the
  batch runs again without them. A job held this way is tried alone on every pass, so
  one whose error goes away runs again.
- **Per-job stages** (launching one job, observing or finishing one attempt) catch what
  one job raises; an attempt open at that moment is closed as failed with no exit code
  of its own, which the outcome table retries a few times and then fails
  (`broker.controller.outcomes.INFRA_RETRIES`).

KeyboardInterrupt and SystemExit are not caught, nor the state store's own errors
(`broker.state.backend.is_store_error`: a locked or broken file, a database that is
down, is no job's fault): they stop the pass, as
before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

ERROR = "error"  # the category (and first word) of the reason of a job held by an error


def not_one_jobs(exc: BaseException) -> bool:
    """Whether `exc` is the state store's (or the machine's), not one job's: it stops
    the pass rather than holding or failing a job."""
    from broker.state.backend import is_store_error

    return isinstance(exc, MemoryError) or is_store_error(exc)


def error_reason(stage: str, exc: BaseException) -> str:
    """`error while planning: OverflowError: date value out of range` (one line)."""
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{ERROR} while {stage}: {type(exc).__name__}: {text[:300]}"


def isolate(
    items: Sequence[T],
    batch: Callable[[list[T]], R],
    key: Callable[[T], str],
    stage: str,
    suspects: Sequence[str] = (),
) -> tuple[list[T], R, dict[str, str]]:
    """(the items kept, `batch` over them, {key: reason} of the items that raise alone).

    The batch runs once over every item but the `suspects` (keys held on an earlier
    pass), which are tried alone first; only when the batch raises is every item tried
    alone. An error the batch raises without any item raising alone is not one job's:
    it propagates."""
    broken: dict[str, str] = {}
    held = set(suspects)
    for item in items:
        if key(item) in held:
            _alone(item, batch, key, stage, broken)
    kept = [item for item in items if key(item) not in broken]
    try:
        return kept, batch(kept), broken
    except Exception as exc:  # noqa: BLE001 (which job? each is tried alone below)
        if not_one_jobs(exc):
            raise
    for item in kept:
        _alone(item, batch, key, stage, broken)
    kept = [item for item in kept if key(item) not in broken]
    return kept, batch(kept), broken


def _alone(
    item: T, batch: Callable[[list[T]], R], key: Callable[[T], str], stage: str, broken: dict
) -> None:
    try:
        batch([item])
    except Exception as exc:  # noqa: BLE001 (this job's own error: it is held)
        if not_one_jobs(exc):
            raise
        broken[key(item)] = error_reason(stage, exc)
