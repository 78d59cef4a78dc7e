"""`broker status / logs / cancel`: one job (or a few) up close: its timeline and
attempts, its output, stopping it. Jobs are named by id, team/name or name."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from broker.cli.exits import BAD_INPUT, FAILED, OVER_BUDGET, PROVIDER, fail
from broker.cli.formats import count, hours
from broker.cli.options import (
    CatalogOption,
    OutputOption,
    OverlaysOption,
    PoolsOption,
    WideOption,
)
from broker.cli.render import Column, Output, render, state_colour, usd, write_json
from broker.cli.session import StateOption, reading_store, runtime

if TYPE_CHECKING:
    from broker.state import Job, StateStore

EVENT_COLUMNS = (
    Column("time", "time", keep=2),
    Column("kind", "event", keep=2),
    Column("message", "what", keep=3),
)
ATTEMPT_COLUMNS = (
    Column("number", "#", count, keep=3),
    Column("attempt", "attempt", keep=0),
    Column("state", "state", keep=3, colour=state_colour),
    Column("where", "where", keep=3),
    Column("market", "market", keep=2),
    Column("price_per_hour", "$/h", usd),
    Column("billed_hours", "hours", hours, keep=2),
    Column("cost_usd", "cost $", usd, keep=3),
    Column("exit_code", "exit", count, keep=0),
    Column("time_scale", "billed s per wall s", count, keep=0),
)
NODE_COLUMNS = (
    Column("number", "#", count, keep=3),
    Column("rank", "rank", count, keep=3),
    Column("node", "node", keep=2),
    Column("where", "where", keep=3),
    Column("address", "address", keep=0),
    Column("state", "state", keep=3, colour=state_colour),
    Column("exit_code", "exit", count, keep=0),
)
NO_JOB = "give a job: id, team/name or name (`broker jobs` lists every job, finished ones too)"


def status(
    jobs: list[str] = typer.Argument(None, help="Jobs: id, team/name (newest run) or name."),
    output: Output = OutputOption,
    state: str = StateOption,
    wide: bool = WideOption,
) -> None:
    """A job's timeline of events and its attempts with placement and cost
    (`broker jobs` lists every job)."""
    from broker.cli.jobref import find_jobs

    if not jobs:
        fail(NO_JOB, BAD_INPUT)
    with reading_store(state) as store:
        if store is None:
            fail(f"no job {jobs[0]!r}: there is no state file yet", BAD_INPUT)
        views = [_view(store, job) for job in find_jobs(store, jobs)]
    if output == Output.json:
        write_json(views[0] if len(views) == 1 else {"jobs": views})
    elif output == Output.csv:  # one table: every attempt, with its job
        rows = [{"job": v["job"]} | a for v in views for a in v["attempts"]]
        columns = (Column("job", "job"), *ATTEMPT_COLUMNS)
        render(rows, columns, output, empty="no attempt has started yet")
    else:
        for view in views:
            print(
                f"{view['team']}/{view['name']} ({view['job']}): {view['state']}, "
                f"run {view['run']}, version {view['version']}, "
                f"submitted by {view['user'] or 'an unrecorded user'}"
            )
            print(_runtime_line(view["runtime"]))
            render(view["events"], EVENT_COLUMNS, output, wide=wide)
            render(
                view["attempts"],
                ATTEMPT_COLUMNS,
                output,
                empty="no attempt has started yet",
                wide=wide,
                notes=_scale_notes(view["attempts"]),
            )
            nodes = [{"number": a["number"]} | n for a in view["attempts"] for n in a["nodes"]]
            if nodes:  # a gang: each node of each attempt
                render(nodes, NODE_COLUMNS, output, wide=wide)


def _view(store: StateStore, job: Job) -> dict[str, Any]:
    """One job as `status` shows it (money as exact decimal text)."""
    from decimal import Decimal

    from broker.state.model import decimal_text, total
    from broker.state.money import money_text

    charges: dict[str | None, list] = {}
    for entry in store.ledger(job_id=job.id):
        charges.setdefault(entry.attempt_id, []).append(entry.amount_usd)
    events = [
        {"time": e.time.isoformat(timespec="seconds"), "kind": e.kind, "message": e.message}
        for e in store.events(job.id)
    ]
    attempts = [
        {
            "attempt": a.id,
            "number": a.number,
            "state": str(a.state),
            "where": a.placed_on.where,
            "market": a.market,
            "price_per_hour": decimal_text(a.price_per_hour),
            "billed_hours": format(a.billed_hours or Decimal(0), "f"),  # as stored: 6 places
            "cost_usd": money_text(total(charges.get(a.id, []))),
            "exit_code": a.exit_code,
            "time_scale": a.placed_on.time_scale,
            "nodes": _nodes(store, a.id, a.placed_on.where),
        }
        for a in store.attempts(job.id)
    ]
    return {
        "job": job.id,
        "name": job.name,
        "team": job.team,
        "run": job.run,
        "user": job.submitter,
        "version": job.version,
        "state": str(job.state),
        "runtime": _runtime(store, job),
        "events": events,
        "attempts": attempts,
    }


def _runtime(store: StateStore, job: Job) -> dict[str, Any]:
    """The job's runtime estimate as the controller plans with it now, where it came
    from, and (once it succeeded) the hours it took (broker.learned_runtime)."""
    from broker.clock import SystemClock
    from broker.learned_runtime import History, actual_hours, runtime_of

    spec = store.version(job.id, job.version).spec
    estimate = runtime_of(History(store), spec, job, SystemClock().now())
    return {
        "estimate_hours": estimate.estimate_hours,
        "source": estimate.source,
        "auto": estimate.auto,
        "actual_hours": actual_hours(store, job, spec),
    }


def _runtime_line(runtime: dict[str, Any]) -> str:
    actual = runtime["actual_hours"]
    took = f"; it took {actual:.2f} h" if actual is not None else ""
    return f"runtime estimate: {runtime['estimate_hours']:.2f} h ({runtime['source']}){took}"


def _nodes(store: StateStore, attempt_id: str, where: str) -> list[dict[str, Any]]:
    """The nodes of a gang attempt by rank, as the controller last saw them ([] for one
    node)."""
    return [
        {
            "rank": m.rank,
            "node": m.node_id,
            "where": f"{where} ({m.zone})" if m.zone else where,
            "address": m.address,
            "state": m.state,
            "exit_code": m.exit_code,
        }
        for instance in store.instances(attempt_id=attempt_id)
        for m in instance.members
    ]


def _scale_notes(attempts: list[dict[str, Any]]) -> list[str]:
    """Say so when an attempt ran on the sandbox's fast clock (its hours are not wall
    hours)."""
    fast = [a for a in attempts if a["time_scale"] and a["time_scale"] != 1]
    if not fast:
        return []
    scales = sorted({a["time_scale"] for a in fast})
    return [
        "sandbox time: attempt(s) "
        + ", ".join(str(a["number"]) for a in fast)
        + " billed "
        + " / ".join(f"{s:g}" for s in scales)
        + " s per wall second (--sandbox-time-scale)"
    ]


def cancel(
    jobs: list[str] = typer.Argument(None, help="Jobs: id, team/name (newest run) or name."),
    team: str = typer.Option(None, "--team", help="With --all: the team whose jobs to cancel."),
    every: bool = typer.Option(False, "--all", help="Cancel every unfinished job of --team."),
    force: bool = typer.Option(
        False, "--force", help="Cancel jobs other users submitted too (recorded with my name)."
    ),
    state: str = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
) -> None:
    """Cancel jobs: their instances are terminated, their records kept. Someone else's
    job needs --force; every cancel is an event naming who cancelled."""
    from broker.cli.jobref import find_jobs
    from broker.state import TERMINAL, JobState
    from broker.users import current_user
    from providers.errors import ProviderError

    if every and jobs:
        fail("give jobs, or --team T --all, not both", BAD_INPUT)
    if every and not team:
        fail("--all cancels a team's jobs: add --team T", BAD_INPUT)
    if team and not every:
        fail("--team goes with --all (name the jobs otherwise)", BAD_INPUT)
    if not jobs and not every:
        fail("give jobs to cancel, or --team T --all", BAD_INPUT)
    with runtime(state, catalog, pools, overlays, mode="update") as rt:
        if every:
            open_states = [s for s in JobState if s not in TERMINAL]
            chosen = rt.store.jobs(states=open_states, team=team)
            if not chosen:
                print(f"team {team!r} has no unfinished job", file=sys.stderr)
        else:
            chosen = find_jobs(rt.store, jobs)
        me = current_user()
        theirs = [j for j in chosen if j.submitter not in ("", me) and j.state not in TERMINAL]
        if theirs and not force:  # checked for all before any is cancelled
            named = ", ".join(f"{j.team}/{j.name} ({j.submitter})" for j in theirs)
            fail(f"not yours to cancel: {named}; add --force to cancel as {me}", OVER_BUDGET)
        for job in chosen:
            try:
                done = rt.controller.cancel(job.id, by=me, forced=job in theirs)
            except ProviderError as exc:
                fail(
                    f"{job.team}/{job.name} ({job.id}) is cancelled, but its instance could "
                    f"not be terminated now: {exc}; `broker run` terminates it once the "
                    "provider answers",
                    PROVIDER,
                )
            said = "cancelled" if done else f"already {rt.store.job(job.id).state}"
            print(f"{job.team}/{job.name} ({job.id}): {said}", file=sys.stderr)


# Where a cloud instance's output is, for `broker logs` of a job that ran there.
CLOUD_LOGS = {
    "aws": "`aws ec2 get-console-output --region {region} --instance-id {instance}` "
    "(on the instance: /var/log/cloud-init-output.log)",
    "gcp": "`gcloud compute instances get-serial-port-output {instance} --zone {zone}` "
    "(on the instance: `journalctl -u google-startup-scripts`)",
    "azure": "`az vm boot-diagnostics get-boot-log --name {instance}` "
    "(on the instance: /var/log/cloud-init-output.log)",
}


def logs(
    job: str = typer.Argument(..., help="Job: id, team/name (newest run) or name."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until it ends."),
    state: str = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
) -> None:
    """Print the output of a job's latest attempt (for a job on a cloud: where it is)."""
    from broker.cli.jobref import find_job

    with runtime(state, catalog, pools, overlays, mode="read") as rt:
        if rt is None:
            fail(f"no job {job!r}: there is no state file yet", BAD_INPUT)
        found = find_job(rt.store, job)
        attempts = rt.store.attempts(found.id)
        known = rt.store.instances(attempt_id=attempts[-1].id) if attempts else []
        if not known:
            fail(f"{found.team}/{found.name}: no attempt has started yet ({found.state})", FAILED)
        instance = rt.provider.describe(known[0].provider_id)
        if not instance.log_path:
            _say_where(found, attempts[-1].number, instance)
            return
        _print_log(rt.provider, instance, follow)


def _say_where(job: Job, number: int, instance) -> None:
    """A job whose output stays on its cloud instance: where to read it."""
    name = instance.id.rsplit("/", 1)[-1].split(":")[-1]
    hint = CLOUD_LOGS.get(instance.cloud, "the cloud's console")
    where = hint.format(region=instance.region, zone=instance.zone, instance=name)
    print(
        f"{job.team}/{job.name} attempt {number} ran on {instance.cloud} ({instance.region}, "
        f"instance {name}): its output is on the instance; read it with {where}",
        file=sys.stderr,
    )


class LogTail:
    """What a growing log file holds beyond what was read of it, as text: a character
    split between two reads comes out whole with the second."""

    def __init__(self, path: Path) -> None:
        import codecs

        self.path, self.offset = path, 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def read(self) -> str:
        if not self.path.exists():
            return ""
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        self.offset += len(chunk)
        return self._decoder.decode(chunk)

    def rest(self) -> str:
        """The bytes of an unfinished character at the end, as a replacement character."""
        return self._decoder.decode(b"", final=True)


def _print_log(provider, instance, follow: bool) -> None:
    """Print the log file of a local (sandbox) instance; with `follow`, until it ends.
    What was printed is flushed even when Ctrl-C ends the follow (exit 130)."""
    import time

    tail, ended = LogTail(Path(instance.log_path)), False
    try:
        while True:
            sys.stdout.write(tail.read())
            sys.stdout.flush()
            if not follow or ended:
                break
            ended = provider.describe(instance.id).ended_at is not None  # one last read
            if not ended:
                time.sleep(0.5)  # following a log is polling a file; nothing to wait on
    finally:
        sys.stdout.write(tail.rest())
        sys.stdout.flush()
