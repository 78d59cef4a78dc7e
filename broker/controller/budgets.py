"""Budgets as hard caps: each pass, the controller projects every budgeted team's spend
by the next pass and stops what would take it over (the rule: `broker.queue.budget`).

A running attempt's accrued cost is what closing it now would charge (its billed time
at its launch price, the data it moved); its burn until the next pass is its hourly
price times the billed hours it ran since the controller's previous look, which is
one pass interval (the settings' `pass_hours` when no interval is known yet). A job
over the cap is stopped gracefully, as a preemption is (SIGTERM, its checkpoint, then
the stop: `Provider.terminate`), and goes back to the queue, where the launch check
holds it with reason `budget` while its expected cost does not fit.

A part of `Controller`; teams without a budget cost nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.controller.reconcile import PassReport
    from broker.dispatch.settings import DispatchSettings
    from broker.queue import Policy
    from broker.queue.budget import Burning
    from broker.state import Attempt, StateStore
    from providers.base import Instance, Provider
    from providers.capabilities import Billing


class Budgets:
    """The controller's budget caps (a part of `Controller`)."""

    store: StateStore
    provider: Provider
    clock: Clock
    policy: Policy | None
    settings: DispatchSettings
    _billing: Billing | None
    _looked: dict[str, float]  # attempt id -> its billed hours at the previous look
    _committed: dict[str, float]  # job id -> USD its running attempt is counted for
    _charges: Callable[..., list[dict]]
    preempt: Callable[[str, str], None]

    def _enforce_budgets(self, report: PassReport) -> None:
        """Stop the running jobs that would take their team over its monthly budget
        before the next pass; remember what the others commit (the launch check)."""
        from broker.queue.budget import over_budget
        from broker.state.leases import LeaseHeld
        from providers.errors import ProviderError

        spent, burning = self._projection()
        self._committed = {b.job_id: b.accrued + b.burn for b in burning}
        if not burning:
            return
        for job_id, why in over_budget(self._policy(), spent, burning):
            job = self.store.job(job_id)
            try:
                self.preempt(job_id, why.text)
            except ProviderError as exc:  # cannot stop it now: the next pass tries again
                report.cannot_reach(f"budget stop of {job.team}/{job.name}", exc)
                continue
            except LeaseHeld:  # another controller is on it (it stops it, or finishes it)
                continue
            self._committed.pop(job_id, None)
            report.finished.append((job.name, "stopped: budget"))

    def _projection(self) -> tuple[dict[str, float], list[Burning]]:
        """(team -> the ledger's spend this month, the running attempts of budgeted
        teams with what they accrued and will burn); nothing without budgets."""
        from broker.queue.budget import Burning
        from broker.state import OPEN_ATTEMPT

        teams = {
            name for name, rule in self._policy().teams.items() if rule.monthly_budget is not None
        }
        if not teams:
            return {}, []
        now = self.clock.now()
        spent: dict[str, float] = {}
        for entry in self.store.ledger(since=datetime(now.year, now.month, 1, tzinfo=UTC)):
            if entry.team in teams:
                spent[entry.team] = spent.get(entry.team, 0.0) + float(entry.amount_usd)
        jobs = {job.id: job for job in self.store.jobs() if job.team in teams}
        looks: list[tuple[Attempt, str, int, float, float | None]] = []
        for attempt in self.store.attempts(states=OPEN_ATTEMPT):
            job = jobs.get(attempt.job_id)
            instance = self._live_instance(attempt) if job is not None else None
            if job is None or instance is None:
                continue
            hours = self._hours_so_far(instance, now)
            looks.append((attempt, job.team, job.priority, hours, self._looked.get(attempt.id)))
            self._looked[attempt.id] = hours
        known = [hours - before for _, _, _, hours, before in looks if before is not None]
        interval = max([*known, self.settings.pass_hours])  # hours until the next pass
        burning = []
        for attempt, team, priority, hours, before in looks:
            ahead = hours - before if before is not None else interval
            accrued = self._accrued(attempt, hours)
            burn = float(attempt.price_per_hour) * max(0.0, ahead)
            burning.append(
                Burning(attempt.job_id, team, priority, attempt.started_at, accrued, burn)
            )
        return spent, burning

    def _live_instance(self, attempt: Attempt) -> Instance | None:
        from providers.errors import ProviderError

        known = self.store.instances(attempt_id=attempt.id)
        if not known:
            return None  # not launched yet: nothing accrued
        try:
            instance = self.provider.describe(known[0].provider_id)
        except ProviderError:
            return None
        return instance if instance.active else None

    def _hours_so_far(self, instance: Instance, now: datetime) -> float:
        """Billed hours of a running instance up to now."""
        if self._billing is not None:
            return float(self._billing.billed_hours(instance))
        if instance.launched_at is None:
            return 0.0
        return max(0.0, (now - instance.launched_at).total_seconds() / 3600)

    def _accrued(self, attempt: Attempt, hours: float) -> float:
        """USD stopping the attempt now would be charged (broker.state.charges)."""
        from broker.controller.isolation import not_one_jobs
        from broker.state.charges import charged_usd
        from broker.state.money import billed_hours

        billed = billed_hours(hours)
        try:
            entries = self._charges(attempt, billed, "interrupted")
        except Exception as exc:  # noqa: BLE001 (one job's data: count its time alone)
            if not_one_jobs(exc):
                raise
            entries = [{"kind": "compute"}]
        return float(charged_usd(attempt, billed, entries))

    def _policy(self) -> Policy:
        from broker.queue import Policy

        return self.policy or Policy()
