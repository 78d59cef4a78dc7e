"""`broker submit / queue / status / cancel / logs`: the queue as a team sees it."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, PROVIDER, fail
from broker.cli.options import (
    CatalogOption,
    FormatOption,
    InputFormat,
    OutputOption,
    OverlaysOption,
    PoolsOption,
    TeamOption,
    load_jobs,
    offers_in_force,
    split_list,
)
from broker.cli.render import Column, Output, number, render, usd

StateOption = typer.Option(
    None,
    "--state",
    help="State file [env: BROKER_STATE; default: ~/.local/state/broker/state.db].",
    show_default=False,
)


PolicyOption = typer.Option(
    None,
    "--policy",
    help="Queue policy YAML: quotas, budgets, shares [env: BROKER_POLICY; "
    "default: ~/.config/broker/policy.yaml when present].",
    show_default=False,
)


def load_policy_option(flag: Path | None):
    """The policy in force; a broken file exits 2 naming file, line and field."""
    from broker.queue import load_policy
    from pricing.userio.errors import UserInputError
    from pricing.userio.settings import resolve_path

    path = resolve_path("policy", flag, default_file="policy.yaml")
    try:
        return load_policy(path)
    except UserInputError as exc:
        fail(str(exc), BAD_INPUT)


def state_path(flag: Path | None) -> Path:
    from broker.state import default_state_path
    from pricing.userio.settings import resolve_path

    return resolve_path("state", flag) or default_state_path()


def enabled_clouds() -> tuple[str, ...]:
    """Clouds launched for real: BROKER_CLOUDS ("aws,gcp") or `clouds = [...]` in
    broker.toml; none by default (everything runs in the sandbox)."""
    from pricing.userio.settings import resolve
    from providers.checks import CLOUDS

    value = resolve("clouds").value
    clouds = split_list([value] if isinstance(value, str) else list(value or ()))
    unknown = [cloud for cloud in clouds if cloud not in CLOUDS]
    if unknown:
        fail(f"clouds setting: unknown cloud {unknown[0]!r}; known: {', '.join(CLOUDS)}", BAD_INPUT)
    return clouds


@contextmanager
def runtime(state: Path | None, catalog, pools, overlays, policy: Path | None = None):
    from broker.runtime import open_runtime
    from providers.errors import ProviderError
    from providers.registry import ProviderUnavailable

    rules = load_policy_option(policy)
    try:
        opened = open_runtime(
            state_path(state),
            offers_in_force(catalog, pools, overlays),
            policy=rules,
            clouds=enabled_clouds(),
        )
    except (ProviderUnavailable, ProviderError) as exc:  # e.g. an enabled cloud's credentials
        fail(str(exc), PROVIDER)
    try:
        yield opened
    finally:
        opened.close()


def submit(
    paths: list[Path] = typer.Argument(..., help="Manifest files or directories (recursive)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan without enqueueing."),
    output: Output = OutputOption,
    state: Path = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    input_format: InputFormat = FormatOption,
    team: str = TeamOption,
) -> None:
    """Validate manifests and enqueue them; prints job ids. Unchanged ones are a no-op."""
    loaded = load_jobs(paths, input_format, team)
    if loaded.errors:
        for error in loaded.errors:
            print(str(error), file=sys.stderr)
        fail(f"{len(loaded.errors)} error(s) in manifests; nothing submitted", BAD_INPUT)
    if dry_run:
        from broker.cli.plan import plan_manifests

        plan_manifests(loaded.manifests, 1, False, output, catalog, pools, overlays)
        return
    from broker.clock import SystemClock
    from broker.state import StateStore
    from broker.submit import prepare, submit_manifests

    ready, refused = prepare(loaded.manifests, state_path(state), enabled_clouds())
    if refused:
        for error in refused:
            print(error, file=sys.stderr)
        fail(f"{len(refused)} job(s) cannot be submitted; nothing submitted", BAD_INPUT)
    with StateStore.open(state_path(state), SystemClock()) as store:
        results = submit_manifests(store, ready)
    rows = [
        {
            "job": r.job_id,
            "name": m.spec.name,
            "team": m.spec.team,
            "version": r.version,
            "result": "new" if r.created else ("new version" if r.changed else "unchanged"),
        }
        for m, r in zip(loaded.manifests, results, strict=True)
    ]
    columns = (
        Column("job", "job id"),
        Column("team", "team"),
        Column("name", "name"),
        Column("version", "version", number, True),
        Column("result", "submitted"),
    )
    render(rows, columns, output, json_key="jobs")


QUEUE_COLUMNS = (
    Column("position", "#", number, True),
    Column("name", "job"),
    Column("team", "team"),
    Column("queue", "queue"),
    Column("priority", "prio", number, True),
    Column("state", "state"),
    Column("gpus", "GPUs"),
    Column("placement", "placement"),
    Column("expected_cost", "expected $", usd, True),
    Column("waiting", "waiting"),
    Column("why", "why"),
)


def queue(
    output: Output = OutputOption,
    state: Path = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    policy: Path = PolicyOption,
) -> None:
    """The queue: position, job, GPUs asked, planned placement and cost, and why it waits
    (quota, budget, capacity, fair share, lower priority)."""
    with runtime(state, catalog, pools, overlays, policy) as rt:
        from broker.cli.queue_rows import queue_rows

        rows = queue_rows(rt.controller.queue_lines(), rt.controller.clock.now())
    render(rows, QUEUE_COLUMNS, output, json_key="queue")


def status(
    job: str = typer.Argument(..., help="Job id, team/name, or name."),
    output: Output = OutputOption,
    state: Path = StateOption,
) -> None:
    """A job's timeline of events and its attempts with placement and cost."""
    from broker.clock import SystemClock
    from broker.state import StateStore, UnknownJob

    with StateStore.open(state_path(state), SystemClock()) as store:
        try:
            found = store.job(job)
        except UnknownJob as exc:
            fail(str(exc), BAD_INPUT)
        events = store.events(found.id)
        attempts = store.attempts(found.id)
        charges = store.ledger(job_id=found.id)
    cost = {}
    for entry in charges:
        cost[entry.attempt_id] = cost.get(entry.attempt_id, 0) + entry.amount_usd
    timeline = [
        {"time": e.time.isoformat(timespec="seconds"), "kind": e.kind, "message": e.message}
        for e in events
    ]
    tries = [
        {
            "attempt": a.id,
            "number": a.number,
            "state": str(a.state),
            "where": a.placed_on.where,
            "market": a.market,
            "price_per_hour": str(a.price_per_hour),
            "billed_hours": str(a.billed_hours or 0),
            "cost_usd": str(cost.get(a.id, 0)),
            "exit_code": a.exit_code,
        }
        for a in attempts
    ]
    if output == Output.json:
        import json

        json.dump(
            {
                "job": found.id,
                "name": found.name,
                "team": found.team,
                "state": str(found.state),
                "events": timeline,
                "attempts": tries,
            },
            sys.stdout,
            indent=2,
        )
        print()
        return
    print(f"{found.team}/{found.name} ({found.id}): {found.state}, version {found.version}")
    render(
        timeline,
        (Column("time", "time"), Column("kind", "event"), Column("message", "what")),
        output,
    )
    render(
        tries,
        (
            Column("number", "#", number, True),
            Column("attempt", "attempt"),
            Column("state", "state"),
            Column("where", "where"),
            Column("market", "market"),
            Column("price_per_hour", "$/h"),
            Column("billed_hours", "hours", number, True),  # exact in JSON, rounded here
            Column("cost_usd", "cost $", usd, True),
            Column("exit_code", "exit"),
        ),
        output,
    )


def cancel(
    job: str = typer.Argument(..., help="Job id, team/name, or name."),
    state: Path = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
) -> None:
    """Cancel a job: its instance is terminated, its record kept."""
    from broker.state import UnknownJob

    with runtime(state, catalog, pools, overlays) as rt:
        try:
            done = rt.controller.cancel(rt.store.job(job).id)
        except UnknownJob as exc:
            fail(str(exc), BAD_INPUT)
    print(f"{job}: {'cancelled' if done else 'already finished'}", file=sys.stderr)


def logs(
    job: str = typer.Argument(..., help="Job id, team/name, or name."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until it ends."),
    state: Path = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
) -> None:
    """Print the output of a job's latest attempt."""
    import time

    from broker.state import UnknownJob

    with runtime(state, catalog, pools, overlays) as rt:
        try:
            found = rt.store.job(job)
        except UnknownJob as exc:
            fail(str(exc), BAD_INPUT)
        attempts = rt.store.attempts(found.id)
        known = rt.store.instances(attempt_id=attempts[-1].id) if attempts else []
        if not known:
            fail(f"{job}: no attempt has started yet", 1)
        instance = rt.provider.describe(known[0].provider_id)
        path, offset, ended = Path(instance.log_path), 0, False
        while True:
            if path.exists():
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                    offset += len(chunk)
                    sys.stdout.write(chunk.decode("utf-8", "replace"))
                    sys.stdout.flush()
            if not follow or ended:
                break
            ended = rt.provider.describe(instance.id).ended_at is not None  # one last read
            if not ended:
                time.sleep(0.5)  # following a log is polling a file; nothing to wait on
