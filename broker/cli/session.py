"""What the commands that touch the queue share: the state file, the queue policy, the
enabled clouds, and opening a broker session (store + provider + controller) over them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer

from broker.cli.exits import BAD_INPUT, PROVIDER, fail
from broker.cli.inputs import offers_in_force, split_list
from broker.cli.statefile import Mode, opened_store, reading_store, state_path

__all__ = ["reading_store", "state_path"]  # where the commands find them

if TYPE_CHECKING:
    from broker.runtime import BrokerSession
    from broker.state.leases import Holder

StateOption = typer.Option(
    None,
    "--state",
    "--state-file",
    help="State file, or a postgresql://user@host/db URL [env: BROKER_STATE; default: "
    "~/.local/state/broker/state.db].",
    show_default=False,
)
# `broker jobs` filters by job state with --state (as sacct does): its file is --state-file.
StateFileOption = typer.Option(
    None,
    "--state-file",
    help="State file, or a postgresql://user@host/db URL [env: BROKER_STATE; default: "
    "~/.local/state/broker/state.db].",
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
    from pricing.userio.settings import origin_note, resolve_path

    path = resolve_path("policy", flag, default_file="policy.yaml")
    try:
        return load_policy(path)
    except UserInputError as exc:
        fail(f"{exc}{origin_note('policy', flag)}", BAD_INPUT)


def lease_holder(name: str, seconds: float, poll: float) -> Holder:
    """The lease holder `broker run --controller-id NAME --lease-seconds S` writes as
    (a fresh `host:pid:random` id without a name); a lease that cannot outlive one
    `--poll` pause is bad input."""
    from broker.state.leases import Holder

    if not seconds > 0:
        fail("--lease-seconds must be more than 0", BAD_INPUT)
    if not seconds > poll:
        fail(f"--lease-seconds must be longer than --poll ({poll:g} s)", BAD_INPUT)
    return Holder(name, seconds) if name else Holder.new(seconds)


def enabled_clouds() -> tuple[str, ...]:
    """Clouds launched for real: BROKER_CLOUDS ("aws,gcp") or `clouds = [...]` in
    broker.toml; none by default (everything runs in the sandbox)."""
    from pricing.userio.settings import resolve
    from providers.checks import CLOUDS

    setting = resolve("clouds")
    value, where = setting.value, f"{setting.origin}: clouds"
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        fail(f'{where}: expected cloud names such as ["aws", "gcp"], got {value!r}', BAD_INPUT)
    clouds = split_list(list(value))
    unknown = [cloud for cloud in clouds if cloud not in CLOUDS]
    if unknown:
        fail(f"{where}: unknown cloud {unknown[0]!r}; known: {', '.join(CLOUDS)}", BAD_INPUT)
    return clouds


@contextmanager
def runtime(
    state: str | None,
    catalog,
    pools,
    overlays,
    policy: Path | None = None,
    time_scale: float = 1.0,
    sandbox_only: bool = False,
    *,
    mode: Mode | Literal["launch"] = "launch",
    holder: Holder | None = None,
) -> Iterator[BrokerSession | None]:
    """A broker session over the state file and the offers in force (the sandbox billing
    `time_scale` seconds per wall second; with `sandbox_only`, no cloud is launched for
    real whatever the clouds setting says); an enabled cloud that cannot be reached
    (e.g. no credentials) exits 5.

    `mode` says what the command does with the state (`broker.cli.statefile`): "read"
    yields None for a missing state file and opens one in a read-only location
    read-only; "write" writes the state; "update" writes one that must exist (a
    missing one is refused, nothing created); "launch" also starts jobs, and only it makes
    the sandbox folder beside the state file. `holder`: whose leases its controller
    takes (`broker run --controller-id`; default a fresh id)."""
    from broker.runtime import open_runtime
    from providers.errors import ProviderError
    from providers.registry import ProviderUnavailable

    rules = load_policy_option(policy)  # every input is checked, with or without a state file
    view = offers_in_force(catalog, pools, overlays)
    clouds = () if sandbox_only else enabled_clouds()
    path = state_path(state)
    with opened_store(path, "write" if mode == "launch" else mode) as store:
        if store is None:
            yield None
            return
        try:
            opened = open_runtime(
                path,
                view,
                policy=rules,
                clouds=clouds,
                time_scale=time_scale,
                store=store,
                launching=mode == "launch",
                holder=holder,
            )
        except (ProviderUnavailable, ProviderError) as exc:  # e.g. an enabled cloud's credentials
            fail(str(exc), PROVIDER)
        try:
            yield opened
        finally:
            opened.close()
