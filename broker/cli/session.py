"""What the commands that touch the queue share: the state file, the queue policy, the
enabled clouds, and opening a broker session (store + provider + controller) over them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from broker.cli.exits import BAD_INPUT, PROVIDER, fail
from broker.cli.options import offers_in_force, split_list

if TYPE_CHECKING:
    from broker.runtime import BrokerSession
    from broker.state import StateStore

StateOption = typer.Option(
    None,
    "--state",
    "--state-file",
    help="State file [env: BROKER_STATE; default: ~/.local/state/broker/state.db].",
    show_default=False,
)
# `broker jobs` filters by job state with --state (as sacct does): its file is --state-file.
StateFileOption = typer.Option(
    None,
    "--state-file",
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
    """The state file by the config precedence: --state, BROKER_STATE, config, default."""
    from broker.state import default_state_path
    from pricing.userio.settings import resolve_path

    return resolve_path("state", flag) or default_state_path()


@contextmanager
def reading_store(flag: Path | None) -> Iterator[StateStore]:
    """The state store for a command that only reads it (`jobs`, `status`)."""
    from broker.clock import SystemClock
    from broker.state import StateStore

    with StateStore.open(state_path(flag), SystemClock()) as store:
        yield store


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
def runtime(
    state: Path | None,
    catalog,
    pools,
    overlays,
    policy: Path | None = None,
    time_scale: float = 1.0,
    sandbox_only: bool = False,
) -> Iterator[BrokerSession]:
    """A broker session over the state file and the offers in force (the sandbox billing
    `time_scale` seconds per wall second; with `sandbox_only`, no cloud is launched for
    real whatever the clouds setting says); an enabled cloud that cannot be reached
    (e.g. no credentials) exits 5."""
    from broker.runtime import open_runtime
    from providers.errors import ProviderError
    from providers.registry import ProviderUnavailable

    rules = load_policy_option(policy)
    try:
        opened = open_runtime(
            state_path(state),
            offers_in_force(catalog, pools, overlays),
            policy=rules,
            clouds=() if sandbox_only else enabled_clouds(),
            time_scale=time_scale,
        )
    except (ProviderUnavailable, ProviderError) as exc:  # e.g. an enabled cloud's credentials
        fail(str(exc), PROVIDER)
    try:
        yield opened
    finally:
        opened.close()
