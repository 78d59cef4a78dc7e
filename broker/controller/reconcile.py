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
from broker.controller.isolation import not_one_jobs
from broker.controller.launching import Launching
from broker.controller.specs import Specs
from broker.controller.steering import steer
from broker.dispatch.settings import DispatchSettings
from broker.state import JobState
from broker.state.leases import Holder, LeaseHeld
from providers.capabilities import Billing, Capacity, CheckpointStores, PoolShares, SpotMarket

if TYPE_CHECKING:
    from broker.learned_runtime import History
    from broker.queue import Policy
    from broker.spec import JobSpec
    from broker.state import Attempt, InstanceRow, Job, StateStore
    from pricing.query import OfferIndex
    from providers.base import Instance, Provider
    from providers.errors import ProviderError

ACTIVE = (
    JobState.PLANNED,
    JobState.LAUNCHING,
    JobState.RUNNING,
    JobState.INTERRUPTED,
    JobState.MIGRATING,
)


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
class Controller(Launching, Closing, Budgets):
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
    _specs: Specs = field(default_factory=Specs, init=False)  # decoded once, kept
    _learned: dict[tuple[str, int], JobSpec] = field(default_factory=dict, init=False)
    _steered: dict[str, str] = field(default_factory=dict, init=False)  # job id -> say
    _started: bool = field(default=False, init=False)
    _held: set[str] = field(default_factory=set, init=False)  # job ids held by an error
    _looked: dict[str, float] = field(default_factory=dict, init=False)  # budgets
    _committed: dict[str, float] = field(default_factory=dict, init=False)  # budgets
    _history: History | None = field(default=None, init=False)  # learned runtimes, per pass
    _offered: tuple[object, OfferIndex] | None = field(default=None, init=False)  # per pass

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

    # --- (1) what the provider says about open attempts -----------------------------

    def _observe(self, report: PassReport) -> None:
        from providers.errors import ProviderError

        self._record_notices(report)  # first: an ended attempt is judged knowing them
        jobs = self.store.jobs(states=(*ACTIVE, JobState.CANCELLED))
        attempts, instances = _open_attempts(self.store)  # one query each, not one per job
        for job in jobs:
            for attempt in attempts.get(job.id, ()):
                try:
                    self._observe_one(job, attempt, report, instances.get(attempt.id, []))
                except LeaseHeld:  # another controller is on this job's next step
                    continue
                except ProviderError as exc:  # the provider cannot answer now: next pass
                    report.cannot_reach(f"attempt {attempt.id}", exc)
                except Exception as exc:  # noqa: BLE001 (one job's error: broker.controller.isolation)
                    if not_one_jobs(exc):
                        raise
                    self._fail_attempt(job, attempt, "observing", exc)
                    report.finished.append((job.name, "failed"))

    def _observe_one(
        self, job: Job, attempt: Attempt, report: PassReport, known: list[InstanceRow]
    ) -> None:
        """One open attempt (`known`: its instance rows as the pass read them): launched
        if it never was, running, or ended (closed)."""
        from broker.state import AttemptState

        instance = self._instance_of(job, attempt, report, known)
        if instance is None:
            return
        if instance.members:
            self._record_members(attempt.id, instance)
        if job.state is JobState.CANCELLED and instance.active:
            if not self.store.claim(job.id, "cancel"):
                return
            self.provider.terminate(instance.id)
            report.terminated.append(instance.id)
            instance = self.provider.describe(instance.id)
        if instance.active:
            if attempt.state is AttemptState.LAUNCHING:
                self.store.attempt_running(attempt.id, _instance_row(instance))
            elif self._back_to_spot(job, attempt):
                self.preempt(job.id, "back to spot: the deadline's slack is rebuilt")
                report.finished.append((job.name, "back to spot"))
            elif self._cheaper_spot(job, attempt):
                from broker.controller.moving import MOVE_REASON

                self.preempt(job.id, MOVE_REASON)
                report.finished.append((job.name, "to cheaper spot"))
            return
        if not self._still_open(attempt) or not self.store.claim(job.id, "finish"):
            return  # another controller closes it (or closed it since the pass read it)
        try:
            outcome = self._finish(job, attempt, instance)
        except LeaseHeld:
            raise
        except Exception as exc:  # noqa: BLE001 (one job's error: broker.controller.isolation)
            if not_one_jobs(exc):
                raise
            self._fail_attempt(job, attempt, "finishing", exc)
            outcome = "failed"
        self.store.release(job.id)  # the job is at rest: anyone may take its next step
        report.finished.append((job.name, outcome))
        if instance.state == "interrupted":
            self._release(instance, report)

    def _instance_of(
        self, job: Job, attempt: Attempt, report: PassReport, known: list[InstanceRow]
    ) -> Instance | None:
        """The attempt's instance; relaunched (idempotently) when the store has none yet,
        which is where a controller killed between `start_attempt` and the launch resumes.
        A provider that cannot answer now (throttled, unreachable) leaves the attempt as it
        is for the next pass: only NotFound means the instance is gone."""
        from providers.errors import NotFound, ProviderError

        if not known:  # read again: another controller may have launched it since
            known = self.store.instances(attempt_id=attempt.id)
        if known:
            try:
                return self.provider.describe(known[0].provider_id)
            except NotFound:
                self._close(attempt, "failed", None, "instance vanished", 0.0, JobState.QUEUED)
                return None
            except ProviderError as exc:
                report.cannot_reach(known[0].provider_id, exc)
                return None
        if not self._still_open(attempt) or not self.store.claim(job.id, "launch"):
            return None  # another controller is launching it (its lease is live), or closed it
        return self._start(job, attempt, report)

    def _still_open(self, attempt: Attempt) -> bool:
        """Whether the attempt is open now, read afresh before a step is claimed: the pass
        read the open attempts once, and another controller may have closed one since."""
        from broker.state import OPEN_ATTEMPT

        return self.store.attempt(attempt.id).state in OPEN_ATTEMPT

    def _record_members(self, attempt_id: str, instance: Instance) -> None:
        """Keep a gang's nodes as last seen (ranks, places, states) for `broker status`;
        written only when they changed."""
        for known in self.store.instances(attempt_id=attempt_id):
            if known.provider_id == instance.id and known.members != instance.members:
                self.store.record_instance(
                    known.cloud, known.provider_id, known.state, members=instance.members
                )

    def _start(self, job: Job, attempt: Attempt, report: PassReport) -> Instance | None:
        """Copy the checkpoint where the attempt runs, then launch it; None when it did
        not start (the attempt is closed, or left for a retry on the next pass)."""
        from broker.controller.requests import launch_request
        from providers.errors import ProviderError

        spec = self._spec(job)
        try:
            self.checkpoints.migrate(spec, job, attempt)
        except ProviderError as exc:
            report.cannot_reach(f"checkpoint copy for attempt {attempt.id}", exc)
            if exc.retryable:
                return None  # try the copy again on the next pass
            # A copy that can never succeed: start there from what its store holds.
        here = attempt.placed_on
        store = self.checkpoints.location(job.id, here.cloud, here.region)
        submitted = self.store.version(job.id, attempt.version).submitted_at
        try:
            request = launch_request(job, attempt, spec, store, spec.runtime.deadline_at(submitted))
        except ValueError as exc:  # the job cannot run on this provider (e.g. no command)
            self._close(attempt, "failed", None, f"cannot launch: {exc}", 0.0, None)
            return None
        try:
            instance = self.provider.launch(request)
        except ProviderError as exc:
            # Capacity, quota, throttling: back to the queue; the error is recorded with
            # its class (broker.launch_errors: the metrics count failures by it).
            from broker.launch_errors import launch_failure_reason

            retry = JobState.QUEUED if exc.retryable else None
            self._close(attempt, "failed", None, launch_failure_reason(exc), 0.0, retry)
            return None
        self.store.attempt_running(attempt.id, _instance_row(instance))
        self._looked[attempt.id] = 0.0  # its burn by the next pass is all it will run
        return instance

    def _record_notices(self, report: PassReport) -> None:
        """Record each interruption notice on its attempt (broker.interruption's table);
        asked only while some spot attempt is open, as clouds answer per region."""
        from broker.interruption import handling
        from broker.state import OPEN_ATTEMPT
        from providers.errors import ProviderError

        if not any(a.market == "spot" for a in self.store.attempts(states=OPEN_ATTEMPT)):
            return
        try:
            notices = self.provider.interruptions()
        except ProviderError as exc:
            report.cannot_reach("interruptions", exc)
            return
        for notice in notices:
            for known in self.store.instances(provider_id=notice.instance_id):
                if known.attempt_id is not None:
                    what = handling(notice.kind)
                    self.store.record_notice(known.attempt_id, notice, what.action, what.meaning)

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

    # --- spot survival -----------------------------------------------------------------

    def _back_to_spot(self, job: Job, attempt: Attempt) -> bool:
        """True when a job the spot policy sent to on-demand may go back to spot now (it
        stops gracefully: SIGTERM, checkpoint, re-plan). Only policy-steered attempts:
        an on-demand placement chosen on price stays."""
        if not attempt.placed_on.steered:
            return False
        spec = self._spec(job)
        _, choice = steer(
            spec,
            job,
            self.store,
            self.clock.now(),
            self.settings,
            current="on-demand",
            spot_available=self._spot_open(spec),
        )
        return choice == "spot"

    def _cheaper_spot(self, job: Job, attempt: Attempt) -> bool:
        """True when a steered job's spot run should stop to move to cheaper spot on sale
        elsewhere (broker.dispatch.move), the offers as the next plan sees them."""
        from broker.controller.moving import moves_to_cheaper_spot, wants_a_look
        from broker.recovery import adjust_index

        spec = self._spec(job)
        if not wants_a_look(spec, attempt, self.settings):
            return False
        now = self.clock.now()
        if self._offered is None or self._offered[0] != now:  # the offers, once per pass
            self._offered = (now, self.index_of(self.provider))
        index = adjust_index(self._offered[1], self.store, now, self.settings.cooldown_scale)
        return moves_to_cheaper_spot(
            self.store, job, spec, attempt, self._gangs(index, [spec]), now, self.settings,
            self.checkpoints.stores is not None,
        )  # fmt: skip

    def _release(self, instance: Instance, report: PassReport) -> None:
        """Delete what a reclaimed instance leaves behind (a deallocated Azure VM, a
        stopped GCE VM keep their disks, which cost money); safe to repeat."""
        from providers.errors import NotFound, ProviderError

        try:
            self.provider.terminate(instance.id)
        except NotFound:
            pass  # the cloud deleted it itself
        except ProviderError as exc:
            report.cannot_reach(instance.id, exc)

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


def _open_attempts(
    store: StateStore,
) -> tuple[dict[str, list[Attempt]], dict[str, list[InstanceRow]]]:
    """(job id -> its open attempts in order, attempt id -> its instance rows): the open
    attempts and their instances in two queries, whatever the number of jobs."""
    from broker.state import OPEN_ATTEMPT

    attempts: dict[str, list[Attempt]] = {}
    for attempt in store.attempts(states=OPEN_ATTEMPT):
        attempts.setdefault(attempt.job_id, []).append(attempt)
    instances: dict[str, list[InstanceRow]] = {}
    for row in store.instances(attempt_states=OPEN_ATTEMPT):
        if row.attempt_id is not None:
            instances.setdefault(row.attempt_id, []).append(row)
    return attempts, instances


def _instance_row(instance: Instance) -> dict:
    row = {
        "provider_id": instance.id,
        "cloud": instance.cloud,
        "region": instance.region,
        "zone": instance.zone,
        "instance_type": instance.instance_type,
        "tags": dict(instance.tags),
    }
    if instance.members:  # a gang: its nodes, for `broker status`
        row["members"] = instance.members
    return row
