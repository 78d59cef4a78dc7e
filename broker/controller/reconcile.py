"""The reconcile pass: one pass at a time, between the state store and a provider.

Several controllers may share one state: each job's next step is held by a lease
(broker.state.leases), taken in the same transaction as the write it guards; a
controller skips the jobs another one holds, and takes over those whose lease expired.

A pass (0) re-queues jobs a killed controller left between two writes; (1) looks at
every open attempt and brings the store up to date with what the provider reports
(running, ended, interrupted), billing ended attempts in the same transaction that
closes them, and records interruption notices; (2) terminates instances the store
does not know or no longer wants (cancelled jobs, orphans of a crash); (3) plans the
queued jobs in one batch, asks the queue policy which may start, and launches them.
Launches are crash-safe: the attempt id exists in the store before the provider sees
it, and providers launch idempotently per attempt id, so a controller killed at any
point and restarted finds, relaunches or terminates exactly what it should.

The decisions themselves are values from `broker.dispatch` (market, stay-home,
wait-or-burst), `broker.queue` (order, quotas, preemption) and the planner; this
module keeps the books.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from broker.clock import Clock
from broker.controller.budgets import Budgets
from broker.controller.checkpoints import Checkpoints
from broker.controller.closing import Closing
from broker.controller.launching import Launching
from broker.controller.observing import ACTIVE, Observing
from broker.controller.specs import Specs
from broker.dispatch.settings import DispatchSettings
from broker.state import JobState
from broker.state.leases import Holder
from providers.capabilities import Billing, Capacity, CheckpointStores, PoolShares, SpotMarket

if TYPE_CHECKING:
    from broker.learned_runtime import History
    from broker.planner.decision import Decision
    from broker.queue import Policy
    from broker.recovery import Adjuster
    from broker.spec import JobSpec
    from broker.state import Job, StateStore
    from pricing.query import OfferIndex
    from providers.base import Provider
    from providers.errors import ProviderError


@dataclass
class PassReport:
    """What one pass did, for the live view and the logs."""

    launched: list[tuple[str, str]] = field(default_factory=list)  # (job name, where)
    finished: list[tuple[str, str]] = field(default_factory=list)  # (job name, outcome)
    waiting: dict[str, str] = field(default_factory=dict)  # job name -> reason
    waiting_for: dict[str, str] = field(default_factory=dict)  # job name -> its category
    terminated: list[str] = field(default_factory=list)  # instance ids
    unreachable: list[str] = field(default_factory=list)  # "<instance id>: <why>", retried
    wake_at: datetime | None = None  # the first cool-down a waiting job waits for ends
    blocked: list[str] = field(default_factory=list)  # what a human must fix (credentials)

    @property
    def changed(self) -> bool:
        return bool(self.launched or self.finished or self.terminated)

    def cannot_reach(self, what: str, exc: ProviderError) -> None:
        """A provider call failed; it is retried on the next pass, but a credentials
        error blocks every pass until a human acts (`broker run` stops on it, exit 5)."""
        from providers.errors import CredentialsError

        self.unreachable.append(f"{what}: {exc}")
        if isinstance(exc, CredentialsError):
            self.blocked.append(str(exc))


@dataclass
class Controller(Observing, Launching, Closing, Budgets):
    """Reconciles `store` with `provider`; `index_of` turns the provider's offers
    (with current capacity) into the index the planner reads."""

    store: StateStore
    provider: Provider
    clock: Clock
    index_of: Callable[[Provider], OfferIndex]
    policy: Policy | None = None  # None: broker.queue.Policy() defaults
    pool_gpus: dict[tuple[str, str], float] = field(default_factory=dict)  # on-prem pools
    settings: DispatchSettings = field(default_factory=DispatchSettings)
    holder: Holder = field(default_factory=Holder.new)  # whose leases this controller takes
    # the planner's plan_many (None: broker.planner.plan's); the simulator remembers answers
    planner: Callable[[list[JobSpec], OfferIndex, datetime], list[Decision]] | None = None
    # the offers adjusted for cool-downs and learned rates (None: broker.recovery's
    # adjust_index); the simulator remembers its answers while nothing is written
    adjuster: Adjuster | None = None
    _specs: Specs = field(default_factory=Specs, init=False)  # decoded once, kept
    _learned: dict[tuple[str, int], JobSpec] = field(default_factory=dict, init=False)
    _steered: dict[str, str] = field(default_factory=dict, init=False)  # job id -> say
    _started: bool = field(default=False, init=False)
    _held: set[str] = field(default_factory=set, init=False)  # job ids held by an error
    _looked: dict[str, float] = field(default_factory=dict, init=False)  # budgets
    _committed: dict[str, float] = field(default_factory=dict, init=False)  # budgets
    _history: History | None = field(default=None, init=False)  # learned runtimes, per pass
    _offered: tuple[object, OfferIndex] | None = field(default=None, init=False)  # per pass
    _reopened: tuple[object, bytes, OfferIndex] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.store.hold_as(self.holder)
        provider = self.provider  # its optional abilities, checked once
        self.checkpoints = Checkpoints(
            self.store, provider, provider if isinstance(provider, CheckpointStores) else None
        )
        self._capacity = provider if isinstance(provider, Capacity) else None
        self._pool_shares = provider if isinstance(provider, PoolShares) else None
        self._billing = provider if isinstance(provider, Billing) else None
        self._spot_market = provider if isinstance(provider, SpotMarket) else None

    # --- the pass ------------------------------------------------------------------

    def run_pass(self) -> PassReport:
        report = PassReport()
        self.store.heartbeat()  # the leases this controller holds outlive a long pass
        self._history = None
        if not self._started:  # instance rows a broker from before left live
            self.store.close_stale_instances()
            self._started = True
        self._recover()
        self._observe(report)
        self._enforce_budgets(report)
        self._sweep(report)
        self._launch(report)
        return report

    def cancel(self, job_id: str, by: str = "user", forced: bool = False) -> bool:
        """Cancel a job: it keeps its record (the event names `by`, and whether it was
        someone else's job, `forced`); a live instance is terminated and its attempt
        billed up to now. False when the job had already finished."""
        from broker.state import TERMINAL

        job = self.store.job(job_id)
        if job.state in TERMINAL:
            return False
        why = f"cancelled by {by}" + (f" (submitted by {job.submitter})" if forced else "")
        data = {"by": by, "forced": forced, "submitter": job.submitter}
        self.store.transition(job.id, JobState.CANCELLED, why, data)
        if self.store.claim(job.id, "cancel"):  # else its holder stops what it launched
            self._stop(job.id, "cancelled", why)
            self.store.release(job.id)
        return True

    def preempt(self, job_id: str, reason: str) -> None:
        """Stop a running job to make room: its attempt ends interrupted (billed), and the
        job goes back to the queue to resume from its checkpoint."""
        job = self.store.job(job_id)
        self._stop(job.id, "interrupted", reason)
        self.store.transition(job.id, JobState.QUEUED, reason, expect=JobState.INTERRUPTED)

    def active(self) -> list[Job]:
        """Jobs with work in flight (not queued, not finished)."""
        return self.store.jobs(states=ACTIVE)

    # --- (0) jobs a killed controller left between two writes -------------------------

    def _recover(self) -> None:
        """A job PLANNED or INTERRUPTED with no attempt in flight was left there by a
        controller that died between two writes (planned, not yet started; interrupted,
        not yet re-queued): it goes back to the queue. Compare-and-set, so a live
        controller that is between those writes only loses the race, never a job."""
        from broker.state import OPEN_ATTEMPT

        for job in self.store.jobs(states=(JobState.PLANNED, JobState.INTERRUPTED)):
            if not self.store.attempts(job.id, states=OPEN_ATTEMPT):
                self.store.transition(
                    job.id, JobState.QUEUED, "re-queued: no attempt in flight", expect=job.state
                )

    # --- (2) instances nobody wants -------------------------------------------------

    def _sweep(self, report: PassReport) -> None:
        """Terminate running broker instances whose attempt is unknown or closed."""
        from broker.state import OPEN_ATTEMPT
        from providers.base import TAG_ATTEMPT
        from providers.errors import ProviderError

        try:
            instances = self.provider.list_instances()
        except ProviderError as exc:  # unreachable now: sweep on a later pass
            report.cannot_reach("list", exc)
            return
        wanted = {a.id for a in self.store.attempts(states=OPEN_ATTEMPT)}  # read after the list
        for instance in instances:
            if instance.active and instance.tag(TAG_ATTEMPT) not in wanted:
                self.provider.terminate(instance.id)
                report.terminated.append(instance.id)

    def _spec(self, job: Job) -> JobSpec:
        """The job's spec in the version in force, as the store keeps it (decoded once),
        with its runtime estimate: an `auto` one learned from history once, and raised
        when the job has run up to it (broker.learned_runtime), so the planner's cost,
        the deadline policy and the budget check read the same figure."""
        spec = self._specs.get(self.store, job)
        if not spec.runtime.auto:
            return spec
        key = (job.id, job.version)
        if key not in self._learned:
            from broker.learned_runtime import History, history_estimate

            if self._history is None:  # one per pass: runs that end are history next
                self._history = History(self.store)
            runtime = history_estimate(self._history, spec, None)
            self._learned[key] = replace(spec, runtime=runtime)
        spec = self._learned[key]
        if not spec.runtime.auto:
            return spec
        from broker.learned_runtime import raised_by_work

        runtime = raised_by_work(self.store, job, spec, spec.runtime, self.clock.now())
        return spec if runtime is spec.runtime else replace(spec, runtime=runtime)
