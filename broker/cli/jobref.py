"""Job arguments, as every command takes them: an id (`j-...`), `team/name` (its newest
run) or a name one team uses; an unknown one exits 2 with the names close to it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.cli.exits import BAD_INPUT, fail

if TYPE_CHECKING:
    from broker.state import Job, StateStore


def find_job(store: StateStore, key: str) -> Job:
    """The job `key` names; exit 2, with a did-you-mean, when none (or several) does."""
    from broker.state import UnknownJob

    try:
        return store.job(key)
    except UnknownJob as exc:
        fail(f"{exc}{_close_to(store, key)}", BAD_INPUT)


def find_jobs(store: StateStore, keys: list[str]) -> list[Job]:
    """Each job `keys` names, in order and once each; every unknown one is reported
    before anything is done."""
    from broker.state import UnknownJob

    found: dict[str, Job] = {}
    wrong: list[str] = []
    for key in keys:
        try:
            job = store.job(key)
        except UnknownJob as exc:
            wrong.append(f"{exc}{_close_to(store, key)}")
            continue
        found.setdefault(job.id, job)
    if wrong:
        fail("; ".join(wrong), BAD_INPUT)
    return list(found.values())


def _close_to(store: StateStore, key: str) -> str:
    """A did-you-mean suffix (" (did you mean nlp/llama-ft?)"), or "" when nothing is close."""
    from pricing.userio.suggest import hint

    if key.startswith("j-"):
        return ""
    names = store.job_names()
    if "/" in key:
        return hint(key, [f"{team}/{name}" for team, name in names])
    return hint(key, sorted({name for _, name in names}))
