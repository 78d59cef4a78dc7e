"""`broker jobs` and `broker queue`: every job the broker knows (finished ones too,
newest first; with --attempts, one row per attempt, as `sacct` shows), and the queue as
it stands now (planned placement, expected cost, why each job waits)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from broker.cli.exits import BAD_INPUT, fail
from broker.cli.formats import count, hours, minute_text, when
from broker.cli.options import (
    CatalogOption,
    OutputOption,
    OverlaysOption,
    PoolsOption,
    WideOption,
    split_list,
)
from broker.cli.render import Column, Output, number, render, state_colour, usd
from broker.cli.session import (
    PolicyOption,
    StateFileOption,
    StateOption,
    reading_store,
    runtime,
)

if TYPE_CHECKING:
    from broker.state.listing import AttemptListing, JobListing

DEFAULT_LIMIT = 50
JOB_COLUMNS = (
    Column("job", "id", keep=2, cut=False),
    Column("job_name", "team/name", keep=3),
    Column("run", "run", count, keep=0),
    Column("user", "user", keep=1),
    Column("state", "state", keep=3, colour=state_colour),
    Column("where", "where", keep=2),
    Column("market", "market"),
    Column("attempts", "attempts", count, keep=0),
    Column("estimate_hours", "est. h", hours),
    Column("runtime_hours", "runtime h", hours),
    Column("gpu_hours", "GPU-h", hours),
    Column("cost_usd", "cost $", usd, keep=3),
    Column("submitted", "submitted", when, keep=2),
    Column("ended", "ended", when),
)
ATTEMPT_COLUMNS = (
    Column("attempt", "attempt", keep=2, cut=False),
    Column("job", "job id", keep=0, cut=False),
    Column("job_name", "team/name", keep=3),
    Column("run", "run", count, keep=0),
    Column("number", "#", count, keep=3),
    Column("state", "state", keep=3, colour=state_colour),
    Column("where", "where", keep=2),
    Column("market", "market"),
    Column("started", "started", when, keep=2),
    Column("ended", "ended", when),
    Column("billed_hours", "billed h", hours),
    Column("gpu_hours", "GPU-h", hours, keep=0),
    Column("cost_usd", "cost $", usd, keep=3),
    Column("exit_code", "exit", count, keep=0),
    Column("time_scale", "time scale", number, keep=0),
    Column("reason", "reason", keep=0),
)
# JSON and CSV carry team and name apart, and the run's version and queue.
_APART = (Column("team", "team"), Column("name", "name"))
JOB_DATA = (
    JOB_COLUMNS[0],
    *_APART,
    *JOB_COLUMNS[2:5],
    Column("version", "version"),
    Column("queue", "queue"),
    *JOB_COLUMNS[5:9],
    Column("estimate_source", "estimate source"),
    *JOB_COLUMNS[9:],
)
ATTEMPT_DATA = (*ATTEMPT_COLUMNS[:2], *_APART, *ATTEMPT_COLUMNS[3:])


def jobs(
    team: str = typer.Option(None, "--team", help="Only this team's jobs."),
    mine: bool = typer.Option(
        False, "--mine", help="Only the jobs I submitted (BROKER_USER, else my login)."
    ),
    user: str = typer.Option(None, "--user", "-u", help="Only the jobs this user submitted."),
    states: list[str] = typer.Option(
        None,
        "--state",
        "-s",
        help="Only jobs in these states (repeat or comma): queued, running, succeeded, "
        "failed, cancelled, ... (`active`: not finished; `finished`).",
        show_default=False,
    ),
    since: str = typer.Option(
        None, "--since", help="Jobs queued or running at or after this UTC date or time."
    ),
    until: str = typer.Option(
        None, "--until", help="Jobs submitted before the end of this UTC date (a time: before it)."
    ),
    limit: int = typer.Option(DEFAULT_LIMIT, "--limit", help="Newest jobs to show (0: every one)."),
    attempts: bool = typer.Option(
        False, "--attempts", help="One row per attempt of those jobs (the sacct view)."
    ),
    output: Output = OutputOption,
    state: str = StateFileOption,
    wide: bool = WideOption,
) -> None:
    """Every job the broker knows, newest first, finished ones included: where it ran,
    its attempts, GPU-hours and cost so far. Each run of a job is a row of its own."""
    from broker.cli.inputs import number_flag
    from broker.cli.options import time_flag

    number_flag(limit, "--limit", 0, 1_000_000_000)
    if mine and user is not None:
        fail("--mine and --user both say whose jobs: give one", BAD_INPUT)
    if mine:
        from broker.users import current_user

        user = current_user()
    start, end = time_flag(since, "--since"), time_flag(until, "--until", inclusive_day=True)
    if start is not None and end is not None and start >= end:
        fail("--since must be before --until", BAD_INPUT)
    wanted = _states(split_list(states))
    from broker.state.listing import Listing

    found = Listing(jobs=[], attempts=[], matched=0)  # no state file yet: nothing ran
    runtimes: dict[str, dict[str, Any]] = {}
    with reading_store(state) as store:
        if store is not None:
            found = store.listing(
                team=team, states=wanted, since=start, until=end, limit=limit or None,
                attempts=attempts, submitter=user,
            )  # fmt: skip
            runtimes = _runtimes(store, found.jobs) if not attempts else {}
    notes = []
    shown = len({a.job_id for a in found.attempts}) if attempts else len(found.jobs)
    if limit and found.matched > shown:
        notes.append(f"the newest {shown} of {found.matched} jobs; --limit 0 shows every one")
    if attempts:
        rows = [_attempt_row(a) for a in found.attempts]
        columns = ATTEMPT_DATA if _data(output) else ATTEMPT_COLUMNS
        render(
            rows, columns, output, json_key="attempts", notes=notes, wide=wide,
            empty="no attempt recorded" + _filtered(team, wanted, start, end, user),
            meta={"matched_jobs": found.matched},
        )  # fmt: skip
        return
    rows = [_job_row(j) | runtimes[j.id] for j in found.jobs]
    columns = JOB_DATA if _data(output) else JOB_COLUMNS
    render(
        rows, columns, output, json_key="jobs", notes=notes, wide=wide,
        empty="no jobs recorded" + _filtered(team, wanted, start, end, user),
        meta={"matched": found.matched},
    )  # fmt: skip


def _data(output: Output) -> bool:
    return output in (Output.json, Output.csv)


def _states(names: tuple[str, ...]) -> list | None:
    """The states asked for (`active` and `finished` stand for their groups)."""
    from broker.state import TERMINAL, JobState
    from pricing.userio.suggest import hint

    if not names:
        return None
    chosen: list[JobState] = []
    known = [s.value for s in JobState]
    for name in names:
        if name == "active":
            chosen += [s for s in JobState if s not in TERMINAL]
        elif name == "finished":
            chosen += sorted(TERMINAL)
        elif name in known:
            chosen.append(JobState(name))
        else:
            choices = [*known, "active", "finished"]
            file = " (the state file is --state-file here)" if "/" in name or "." in name else ""
            fail(f"--state: unknown job state {name!r}{hint(name, choices)}{file}", BAD_INPUT)
    return chosen


def _filtered(team, states, since, until, user=None) -> str:
    said = [f"team {team}"] if team else []
    said += [f"user {user}"] if user else []
    said += ["state " + ",".join(map(str, states))] if states else []
    said += [f"since {minute_text(since)}"] if since else []
    said += [f"until {minute_text(until)}"] if until else []
    return f" ({'; '.join(said)})" if said else ""


def _job_row(job: JobListing) -> dict[str, Any]:
    return {
        "job": job.id,
        "team": job.team,
        "name": job.name,
        "job_name": f"{job.team}/{job.name}",
        "run": job.run,
        "user": job.submitter,
        "state": str(job.state),
        "version": job.version,
        "queue": job.queue,
        "where": job.where,
        "market": job.market,
        "attempts": job.attempts,
        "gpu_hours": round(job.gpu_hours, 6),
        "cost_usd": job.cost_usd,
        "submitted": job.created_at,
        "ended": job.ended_at,
    }


def _runtimes(store, jobs: list[JobListing]) -> dict[str, dict[str, Any]]:
    """Per run: its runtime estimate and its source (a finished run's as its first
    attempt was planned, none when it never launched; else as it would be planned now)
    and, once it succeeded, the hours it took (broker.learned_runtime.as_listed), from
    only what those read of each run (`StateStore.listed_runs`)."""
    from broker.clock import SystemClock
    from broker.learned_runtime import History, as_listed

    history, now, out = History(store), SystemClock().now(), {}
    runs = store.listed_runs([job.id for job in jobs])
    for job in jobs:
        estimate, took = as_listed(history, job.state, runs[job.id], now)
        out[job.id] = {
            "estimate_hours": None if estimate is None else round(estimate.estimate_hours, 6),
            "estimate_source": "" if estimate is None else estimate.source,
            "runtime_hours": None if took is None else round(took, 6),
        }
    return out


def _attempt_row(attempt: AttemptListing) -> dict[str, Any]:
    where = f"{attempt.cloud}/{attempt.region}/{attempt.instance_type}"
    return {
        "attempt": attempt.id,
        "job": attempt.job_id,
        "team": attempt.team,
        "name": attempt.name,
        "job_name": f"{attempt.team}/{attempt.name}",
        "run": attempt.run,
        "number": attempt.number,
        "state": str(attempt.state),
        "where": where,
        "market": attempt.market,
        "started": attempt.started_at,
        "ended": attempt.ended_at,
        "billed_hours": attempt.billed_hours,
        "gpu_hours": round(attempt.gpu_hours, 6),
        "cost_usd": attempt.cost_usd,
        "exit_code": attempt.exit_code,
        "time_scale": attempt.time_scale,
        "reason": attempt.reason,
    }


QUEUE_COLUMNS = (
    Column("position", "#", count, keep=3),
    Column("name", "job", keep=3),
    Column("team", "team", keep=2),
    Column("queue", "queue", keep=0),
    Column("priority", "prio", count, keep=0),
    Column("state", "state", keep=2, colour=state_colour),
    Column("gpus", "GPUs", keep=2),
    Column("placement", "placement", keep=2),
    Column("expected_cost", "expected $", usd, keep=2),
    Column("waiting", "waiting"),
    Column("why", "why", keep=3),
)


def queue(
    output: Output = OutputOption,
    state: str = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    policy: Path = PolicyOption,
    wide: bool = WideOption,
) -> None:
    """The queue: position, job, GPUs asked, planned placement and cost, and why it waits
    (quota, budget, capacity, fair share, lower priority). Finished jobs: `broker jobs`."""
    with runtime(state, catalog, pools, overlays, policy, mode="read") as rt:
        from broker.cli.queue_rows import queue_rows

        rows = []
        if rt is not None:
            rows = queue_rows(rt.controller.queue_lines(), rt.controller.clock.now())
    empty = "no jobs queued or running (`broker jobs` lists finished ones)"
    render(rows, QUEUE_COLUMNS, output, json_key="queue", empty=empty, wide=wide)
