"""The controller: one reconcile pass at a time, between the state store and a provider.

A pass (1) looks at every open attempt and brings the store up to date with what
the provider reports (running, ended, interrupted), billing ended attempts in
the same transaction that closes them; (2) terminates instances the store does
not know or no longer wants (cancelled jobs, orphans of a crash); (3) plans the
queued jobs in one batch, asks the queue policy which may start, and launches
them. Launches are crash-safe: the attempt id exists in the store before the
provider sees it, and providers launch idempotently per attempt id, so a
controller killed at any point and restarted finds, relaunches or terminates
exactly what it should.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.clock import Clock
from broker.state import IllegalTransition, JobState
from broker.state.placed import PlacedOn

if TYPE_CHECKING:
    from broker.planner.decision import Decision, Placement
    from broker.queue import Policy
    from broker.spec import JobSpec
    from broker.state import Attempt, Job, StateStore
    from pricing.query import OfferIndex
    from providers.base import Instance, LaunchRequest, Provider

ACTIVE = (
    JobState.PLANNED,
    JobState.LAUNCHING,
    JobState.RUNNING,
    JobState.INTERRUPTED,
    JobState.MIGRATING,
)
INTERRUPT_EXIT_CODES = (143,)  # SIGTERM after a notice: the job checkpointed and left
INFRA_RETRIES = 3  # relaunches after an attempt that ended with no exit code of its own


@dataclass
class PassReport:
    """What one pass did, for the live view and the logs."""

    launched: list[tuple[str, str]] = field(default_factory=list)  # (job name, where)
    finished: list[tuple[str, str]] = field(default_factory=list)  # (job name, outcome)
    waiting: dict[str, str] = field(default_factory=dict)  # job name -> reason
    terminated: list[str] = field(default_factory=list)  # instance ids
    unreachable: list[str] = field(default_factory=list)  # "<instance id>: <why>", retried

    @property
    def changed(self) -> bool:
        return bool(self.launched or self.finished or self.terminated)


@dataclass
class Controller:
    """Reconciles `store` with `provider`; `index_of` turns the provider's offers
    (with current capacity) into the index the planner reads."""

    store: StateStore
    provider: Provider
    clock: Clock
    index_of: Callable[[Provider], OfferIndex]
    policy: Policy | None = None  # None: broker.queue.Policy() defaults
    pool_gpus: dict[tuple[str, str], float] = field(default_factory=dict)  # on-prem pools
    spot_policy: Any = None  # broker.spotpolicy policy for deadline jobs; None: deadline-aware
    # Simulator hook (issue 8): when True, a deadline job whose spot policy says "spot" or
    # "wait" is planned on spot only (it waits queued while no spot is on sale), and the
    # policy is told whether spot is on sale now (the provider's optional `spot_open(gpus)`).
    spot_strict: bool = False
    # Simulator hook (issue 8): scales the reclaim cool-down of broker.recovery (1: as in
    # production; 0: a reclaimed place is offered again as soon as it sells spot).
    cooldown_scale: float = 1.0
    # Simulator hook (issue 8), with spot_strict: while a reclaimed job's spot policy would
    # still wait for spot, plan its spot only in the region holding its checkpoint, as
    # moving it costs egress that waiting for its own region to return saves.
    stay_home: bool = False
    # Simulator hooks (issue 8) for the spot policy's state (broker.recovery.steer_market):
    # the true (re)start overhead, when known (None: the planner's estimate), and the
    # interval between passes (0: asked continuously).
    restart_hours: float | None = None
    pass_hours: float = 0.0
    # A job whose cheapest placement is a full on-prem pool waits for it while waiting
    # stays cheaper, fits its deadline and this budget (x the job's hours, counted from
    # when it last entered the queue), then bursts to the best cloud placement
    # (broker.queue.bursting, Starburst). 0: burst at once.
    pool_wait_factor: float = 1.0
    _specs: dict[tuple[str, int], JobSpec] = field(default_factory=dict)
    _steered: dict[str, str] = field(default_factory=dict)  # job id -> the spot policy's say

    # --- the pass ------------------------------------------------------------------

    def run_pass(self) -> PassReport:
        report = PassReport()
        self._recover()
        self._observe(report)
        self._sweep(report)
        self._launch(report)
        return report

    def cancel(self, job_id: str) -> bool:
        """Cancel a job: it keeps its record; a live instance is terminated and its
        attempt billed up to now. False when the job had already finished."""
        from broker.state import TERMINAL

        job = self.store.job(job_id)
        if job.state in TERMINAL:
            return False
        self.store.transition(job.id, JobState.CANCELLED, "cancelled by user")
        self._stop(job.id, "cancelled", "cancelled by user")
        return True

    def queue_view(self) -> list[dict]:
        """Rows for `broker queue`: active jobs, then queued ones in the policy's order,
        with the plan each would get now and why it waits."""
        now = self.clock.now()
        rows = []
        for job in self.active():
            attempts = self.store.attempts(job.id)
            placed = attempts[-1].placed_on if attempts else None
            rows.append(_row(job, now, placed, placed.expected_cost if placed else None, ""))
        queued = self.store.queued()
        if not queued:
            return rows
        room = self._room()
        ordered = self._ordered(queued, self._decisions(queued))
        for position, (job, decision, (verdict, best)) in enumerate(ordered, 1):
            placement = self._first_free(decision, room) if verdict.action == "launch" else None
            if placement is not None:
                self._take(room, placement)
                why = "starts on the next pass" + (f" ({verdict.reason})" if verdict.reason else "")
                row = _row(job, now, PlacedOn.of(placement), placement.expected_cost, why)
            else:
                shown = PlacedOn.of(best) if best is not None else None
                why = (
                    verdict.reason
                    if verdict.action == "wait"
                    else "capacity: every planned place is full"
                )
                row = _row(job, now, shown, shown.expected_cost if shown else None, why)
            rows.append(row | {"position": position})
        return rows

    def active(self) -> list[Job]:
        """Jobs with work in flight (not queued, not finished)."""
        return self.store.jobs(states=ACTIVE)

    # --- (0) jobs a killed controller left between two writes -------------------------

    def _recover(self) -> None:
        """A job PLANNED or INTERRUPTED with no attempt in flight was left there by a
        controller that died between two writes (planned, not yet started; interrupted,
        not yet re-queued): it goes back to the queue. Compare-and-set, so a live
        controller that is between those writes only loses the race, never a job."""
        from broker.state import AttemptState

        open_states = (AttemptState.LAUNCHING, AttemptState.RUNNING)
        for job in self.store.jobs(states=(JobState.PLANNED, JobState.INTERRUPTED)):
            if not self.store.attempts(job.id, states=open_states):
                self.store.transition(
                    job.id, JobState.QUEUED, "re-queued: no attempt in flight", expect=job.state
                )

    # --- (1) what the provider says about open attempts -----------------------------

    def _observe(self, report: PassReport) -> None:
        from broker.state import AttemptState

        open_states = (AttemptState.LAUNCHING, AttemptState.RUNNING)
        for job in self.store.jobs(states=(*ACTIVE, JobState.CANCELLED)):
            for attempt in self.store.attempts(job.id, states=open_states):
                instance = self._instance_of(job, attempt, report)
                if instance is None:
                    continue
                if job.state is JobState.CANCELLED and instance.active:
                    self.provider.terminate(instance.id)
                    report.terminated.append(instance.id)
                    instance = self.provider.describe(instance.id)
                if instance.active:
                    if attempt.state is AttemptState.LAUNCHING:
                        self.store.attempt_running(attempt.id, _instance_row(instance))
                    elif self._back_to_spot(job, attempt):
                        self.preempt(job.id, "back to spot: the deadline's slack is rebuilt")
                        report.finished.append((job.name, "back to spot"))
                    continue
                outcome = self._finish(job, attempt, instance)
                report.finished.append((job.name, outcome))
                if instance.state == "interrupted":
                    self._release(instance, report)

    def _instance_of(self, job: Job, attempt: Attempt, report: PassReport) -> Instance | None:
        """The attempt's instance; relaunched (idempotently) when the store has none yet,
        which is where a controller killed between `start_attempt` and the launch resumes.
        A provider that cannot answer now (throttled, unreachable) leaves the attempt as it
        is for the next pass: only NotFound means the instance is gone."""
        from providers.errors import NotFound, ProviderError

        known = self.store.instances(attempt_id=attempt.id)
        if known:
            try:
                return self.provider.describe(known[0].provider_id)
            except NotFound:
                self._close(attempt, "failed", None, "instance vanished", 0.0, JobState.QUEUED)
                return None
            except ProviderError as exc:
                report.unreachable.append(f"{known[0].provider_id}: {exc}")
                return None
        try:
            self._migrate(job, attempt)
        except ProviderError as exc:
            report.unreachable.append(f"checkpoint copy for attempt {attempt.id}: {exc}")
            if exc.retryable:
                return None  # try the copy again on the next pass
            # A copy that can never succeed: start there from what its store holds.
        try:
            request = self._request(job, attempt)
        except ValueError as exc:  # the job cannot run on this provider (e.g. no command)
            self._close(attempt, "failed", None, f"cannot launch: {exc}", 0.0, None)
            return None
        try:
            instance = self.provider.launch(request)
        except ProviderError as exc:
            # Capacity, quota, throttling: back to the queue; the error is recorded.
            retry = JobState.QUEUED if exc.retryable else None
            self._close(attempt, "failed", None, str(exc), 0.0, retry)
            return None
        self.store.attempt_running(attempt.id, _instance_row(instance))
        return instance

    def _finish(self, job: Job, attempt: Attempt, instance: Instance) -> str:
        """Close an ended attempt: outcome, billing and the job's next state in one write."""
        spec = self._spec(job)
        hours = self._billed_hours(instance)
        code = instance.exit_code
        restarts_used = sum(1 for a in self.store.attempts(job.id) if a.state == "failed")
        if job.state is JobState.CANCELLED or instance.state == "terminated":
            outcome, to = "cancelled", None
        elif (
            instance.state == "interrupted"
            or code in spec.recover_on_exit_codes
            or (code in INTERRUPT_EXIT_CODES and instance.state != "failed")
        ):
            outcome, to = "interrupted", None
        elif code == 0:
            outcome, to = "succeeded", None
        elif code is None:
            # Ended without an exit code: never started (a launcher killed before the
            # gate opened) or killed from outside. Not the job's fault: retried, a few times.
            unknown = sum(
                1
                for a in self.store.attempts(job.id)
                if a.exit_code is None and a.state == "failed"
            )
            outcome, to = "failed", (JobState.QUEUED if unknown < INFRA_RETRIES else None)
        else:
            retry = restarts_used < spec.max_restarts_on_error
            outcome, to = "failed", (JobState.QUEUED if retry else None)
        reason = f"exit code {code}" if code is not None else f"{instance.state}, no exit code"
        if outcome == "interrupted":
            reason += self._lost_work(job, attempt, instance, hours)
        self._close(attempt, outcome, code, reason, hours, to)
        if outcome == "interrupted":
            # Back to the queue: the next plan prices moving the checkpoint from where it
            # lives, the reclaimed place is closed for spot a while (broker.recovery).
            self.store.transition(
                job.id, JobState.QUEUED, "re-queued after interruption", expect=JobState.INTERRUPTED
            )
        return outcome

    def _close(
        self,
        attempt: Attempt,
        outcome: str,
        code: int | None,
        reason: str,
        hours: float,
        to: JobState | None,
    ) -> None:
        from broker.recovery import with_checkpoint_at
        from broker.state.charges import attempt_charges
        from pricing.regions import Place

        spec = self._spec(self.store.job(attempt.job_id)) if hours > 0 else None
        earlier = self.store.attempts(attempt.job_id) if hours > 0 else []
        moved = []
        p = attempt.placed_on
        if spec is not None and spec.checkpoint is not None:
            if self._checkpoint_store(attempt.job_id, p.cloud, p.region) is not None:
                # Checkpoints live in the place's own store: writes and restores are local;
                # what crossed places is the migration, charged once, from where it came.
                spec = with_checkpoint_at(spec, Place(p.cloud, p.region))
                moved = self._migration_charge(attempt, spec)
        entries = attempt_charges(attempt, hours, spec, outcome, earlier) + moved
        self.store.finish_attempt(attempt.id, outcome, code, reason, hours, entries, job_to=to)

    def _billed_hours(self, instance: Instance) -> float:
        from providers.base import launch_to_end_hours
        from providers.capabilities import Billing

        if isinstance(self.provider, Billing):
            return float(self.provider.billed_hours(instance))
        return launch_to_end_hours(instance)

    # --- (2) instances nobody wants -------------------------------------------------

    def _sweep(self, report: PassReport) -> None:
        """Terminate running broker instances whose attempt is unknown or closed."""
        from broker.state import AttemptState, UnknownAttempt
        from providers.errors import ProviderError

        try:
            instances = self.provider.list_instances()
        except ProviderError as exc:  # unreachable now: sweep on a later pass
            report.unreachable.append(f"list: {exc}")
            return
        for instance in instances:
            if not instance.active:
                continue
            attempt_id = dict(instance.tags).get("broker-attempt", "")
            try:
                attempt = self.store.attempt(attempt_id)
                wanted = attempt.state in (AttemptState.LAUNCHING, AttemptState.RUNNING)
            except UnknownAttempt:
                wanted = False
            if not wanted:
                self.provider.terminate(instance.id)
                report.terminated.append(instance.id)

    # --- (3) plan and launch --------------------------------------------------------

    def _launch(self, report: PassReport) -> None:
        """Plan the queue, let the policy order and gate it, launch what may start."""
        queued = self.store.queued()
        if not queued:
            return
        decisions = self._decisions(queued)
        room = self._room()
        running = None  # read once, when a full pool first asks
        ahead: dict[str, float] = {}  # pool -> GPUs of the jobs this pass left waiting for it
        for job, decision, (verdict, best) in self._ordered(queued, decisions):
            burst = False  # held for a pool, it takes its best cloud placement instead
            if verdict.action != "launch":
                held = _pool_full(verdict, best)
                if held and running is None:
                    running = self._running()
                burst = held and self._bursts(job, decision, running, ahead)
                if not burst:
                    if held:
                        gpus = best.accelerator_count * best.nodes
                        ahead[best.zone] = ahead.get(best.zone, 0.0) + gpus
                    report.waiting[job.name] = verdict.reason
                    continue
            for victim in verdict.preempts:
                self.preempt(victim, f"preempted by {job.team}/{job.name}")
            if verdict.preempts:
                room = self._room()  # the victims' nodes are free again
            # a burst never takes the pool's room: the queue policy kept it for others
            placement = _first_cloud(decision) if burst else self._first_free(decision, room)
            if placement is None:
                report.waiting[job.name] = "capacity: every planned place is full"
                continue
            # on demand by the spot policy's call, not the price's: may go back to spot
            steered = self._steered.get(job.id) == "on-demand"
            placed = PlacedOn.of(placement, steered=steered)
            where = placed.where
            if not self.store.transition(
                job.id,
                JobState.PLANNED,
                f"planned on {where}: {_decision_figures(placement)}",
                {"placement": placed.to_row()},
                expect=JobState.QUEUED,
            ):
                continue  # another controller took it
            self._take(room, placement)
            try:
                attempt_id = self.store.start_attempt(job.id, placed)
            except IllegalTransition:
                continue  # another controller re-queued it meanwhile (see _recover)
            self._instance_of(job, self.store.attempt(attempt_id), report)
            report.launched.append((job.name, f"{where} {placement.market}"))

    def _decisions(self, queued: list[Job]) -> list[Decision]:
        from broker.planner.plan import plan_many
        from broker.recovery import adjust_index, checkpoint_place, steer_market, with_checkpoint_at

        now = self.clock.now()
        specs = []
        for job in queued:
            home = checkpoint_place(self.store, job)
            spec = with_checkpoint_at(self._spec(job), home)
            spec, choice = steer_market(
                spec, job, self.store, now, self.spot_policy, **self._steer_hooks(spec)
            )
            if self.spot_strict and choice in ("spot", "wait"):  # simulator hook (issue 8)
                requirements = replace(spec.requirements, spot="only")
                if self._stays_home(spec, home) and self._may_wait(spec, job, now):
                    requirements = replace(
                        requirements, clouds=(home.cloud,), regions=(home.region,)
                    )
                spec = replace(spec, requirements=requirements)
            self._steered[job.id] = choice
            specs.append(spec)
        index = adjust_index(self.index_of(self.provider), self.store, now, self.cooldown_scale)
        if self.pool_wait_factor > 0 and self.pool_gpus:
            from broker.scheduling import with_whole_pools

            index = with_whole_pools(index, self.pool_gpus)  # a full pool may be waited for
        return plan_many(specs, index, now)

    def _stays_home(self, spec: JobSpec, home) -> bool:
        """stay_home applies where moving costs egress: a checkpoint with data, elsewhere.
        Without data a move costs only the restart that a relaunch at home pays too."""
        checkpoint = spec.checkpoint
        return bool(self.stay_home and home is not None and checkpoint and checkpoint.size_gb > 0)

    def _may_wait(self, spec: JobSpec, job: Job, now) -> bool:
        """Whether the job's spot policy would still wait were no spot on sale at all."""
        from broker.recovery import steer_market

        hooks = {**self._steer_hooks(spec), "spot_available": False}
        _, choice = steer_market(spec, job, self.store, now, self.spot_policy, **hooks)
        return choice == "wait"

    def _running(self) -> list:
        from broker.scheduling import running_jobs

        return running_jobs(self.store, self.active(), self._spec)

    def _bursts(self, job: Job, decision: Decision, running: list, ahead: dict[str, float]) -> bool:
        """For a job whose best placement is a full pool: True when it should take the
        best cloud placement now rather than wait (broker.queue.bursting). The pool is
        expected to have room once its running jobs' ends free this job's GPUs plus those
        of the jobs ahead of it still waiting for the pool (`ahead`)."""
        from broker.queue.bursting import expected_pool_start, wait_for_pool
        from broker.scheduling import free_pool_gpus

        pool, cloud = decision.placements[0], _first_cloud(decision)
        if cloud is None:
            return False
        if self.pool_wait_factor <= 0:
            return True
        now = self.clock.now()
        key = ("onprem", pool.zone)
        free = free_pool_gpus(self.pool_gpus, running).get(key, 0.0)
        ends = [((r.expected_end - now).total_seconds() / 3600, r.gpus)
                for r in running if (r.cloud, r.region) == key]  # fmt: skip
        need = pool.accelerator_count * pool.nodes + ahead.get(pool.zone, 0.0)
        spec = self._spec(job)
        deadline_at = spec.runtime.deadline_at(self.store.version(job.id, job.version).submitted_at)
        work = spec.runtime.estimate_hours
        return not wait_for_pool(
            now=0.0,
            pool_start=expected_pool_start(free, need, ends, 0.0),
            work_hours=work,
            restart_hours=max(0.0, pool.expected_hours - work),
            deadline=None if deadline_at is None else (deadline_at - now).total_seconds() / 3600,
            pool_cost=pool.expected_cost,
            cloud_cost=cloud.expected_cost,
            max_wait_factor=self.pool_wait_factor,
            waited=max(0.0, (now - self._queued_since(job)).total_seconds() / 3600),
        )

    def _queued_since(self, job: Job):
        """When the job last entered the queue: its queueing, or the end of its last
        attempt (a reclaimed or preempted job waits afresh)."""
        ends = [a.ended_at for a in self.store.attempts(job.id) if a.ended_at is not None]
        return max([job.queued_at, *ends])

    def _steer_hooks(self, spec: JobSpec) -> dict[str, Any]:
        """Simulator hooks (issue 8) for steer_market: `spot_available` when `spot_strict`
        (the provider's `spot_open`), the true restart overhead and the pass interval."""
        hooks: dict[str, Any] = {"restart_hours": self.restart_hours, "step_hours": self.pass_hours}
        from providers.capabilities import SpotMarket

        if self.spot_strict and isinstance(self.provider, SpotMarket):
            gpus = tuple(a.gpu for a in spec.requirements.accelerators)
            hooks["spot_available"] = self.provider.spot_open(gpus)
        return hooks

    def _ordered(self, queued: list[Job], decisions: list[Decision]):
        """(job, decision, (verdict, placement)) in the policy's order."""
        from broker.queue import Policy
        from broker.scheduling import verdicts

        decided = verdicts(
            self.store,
            self.policy or Policy(),
            queued,
            decisions,
            self._spec,
            self.active(),
            self.clock.now(),
            self.pool_gpus,
        )
        rows = list(zip(queued, decisions, (decided[job.id] for job in queued), strict=True))
        return sorted(rows, key=lambda row: (row[2][0].position or 10**9, row[0].queued_at))

    def _stop(self, job_id: str, outcome: str, reason: str) -> None:
        """Terminate the job's live instances and close their attempts, billed up to now."""
        from broker.state import AttemptState

        open_states = (AttemptState.LAUNCHING, AttemptState.RUNNING)
        for attempt in self.store.attempts(job_id, states=open_states):
            for known in self.store.instances(attempt_id=attempt.id):
                self.provider.terminate(known.provider_id)
                instance = self.provider.describe(known.provider_id)
                hours = self._billed_hours(instance)
                self._close(attempt, outcome, instance.exit_code, reason, hours, None)

    def preempt(self, job_id: str, reason: str) -> None:
        """Stop a running job to make room: its attempt ends interrupted (billed), and the
        job goes back to the queue to resume from its checkpoint."""

        job = self.store.job(job_id)
        self._stop(job.id, "interrupted", reason)
        self.store.transition(job.id, JobState.QUEUED, reason, expect=JobState.INTERRUPTED)

    def _first_free(self, decision: Decision, room: dict[tuple[str, str], int]) -> Placement | None:
        """The best placement whose place still has room (`room`: nodes left per place
        in this pass; places not listed are unlimited)."""
        for placement in decision.placements:
            left = room.get((placement.cloud, placement.region))
            if left is None or left >= placement.nodes:
                return placement
        return None

    def _room(self) -> dict[tuple[str, str], int]:
        """Nodes free per place now, read once per pass."""
        from providers.capabilities import Capacity

        return self.provider.free_nodes() if isinstance(self.provider, Capacity) else {}

    @staticmethod
    def _take(room: dict[tuple[str, str], int], placement: Placement) -> None:
        key = (placement.cloud, placement.region)
        if key in room:
            room[key] -= placement.nodes

    # --- spot survival: checkpoints that move with the job -----------------------------

    def _back_to_spot(self, job: Job, attempt: Attempt) -> bool:
        """True when a job the spot policy sent to on-demand may go back to spot now (it
        stops gracefully: SIGTERM, checkpoint, re-plan). Only policy-steered attempts:
        an on-demand placement chosen on price stays."""
        from broker.recovery import steer_market

        if not attempt.placed_on.steered:
            return False
        now = self.clock.now()
        spec = self._spec(job)
        _, choice = steer_market(
            spec, job, self.store, now, self.spot_policy, "on-demand", **self._steer_hooks(spec)
        )
        return choice == "spot"

    def _release(self, instance: Instance, report: PassReport) -> None:
        """Delete what a reclaimed instance leaves behind (a deallocated Azure VM, a
        stopped GCE VM keep their disks, which cost money); safe to repeat."""
        from providers.errors import NotFound, ProviderError

        try:
            self.provider.terminate(instance.id)
        except NotFound:
            pass  # the cloud deleted it itself
        except ProviderError as exc:
            report.unreachable.append(f"{instance.id}: {exc}")

    def _checkpoint_store(self, job_id: str, cloud: str, region: str) -> str | None:
        """The provider's checkpoint store for a job in (cloud, region), as a path or URI;
        None when the provider keeps none per place (clouds read the manifest's URI)."""
        from providers.capabilities import CheckpointStores

        if not isinstance(self.provider, CheckpointStores):
            return None
        return self.provider.checkpoint_store(job_id, cloud, region)

    def _migrate(self, job: Job, attempt: Attempt) -> None:
        """Before a resumed attempt starts elsewhere, copy the job's checkpoint from the
        store where it was written to the new place's store (streamed by the ObjectStore).
        Done once per attempt: the copy is recorded, so a controller killed mid-copy
        copies again on restart (same bytes) and one that died after it does not."""
        from broker.recovery import checkpoint_place

        spec = self._spec(job)
        if attempt.number == 1 or spec.checkpoint is None or self.store.migration(attempt.id):
            return
        source, p = checkpoint_place(self.store, job), attempt.placed_on
        if source is None or (source.cloud, source.region) == (p.cloud, p.region):
            return
        src = self._checkpoint_store(job.id, source.cloud, source.region)
        dst = self._checkpoint_store(job.id, p.cloud, p.region)
        if src is None or dst is None or not Path(src).is_dir() or not any(Path(src).iterdir()):
            return  # nothing written yet, or the clouds read the durable URI in place
        from providers.storage import ObjectStore

        copied = ObjectStore().copy_tree(Path(src).as_uri(), Path(dst).as_uri())
        self.store.record_migration(
            attempt.id,
            f"{source.cloud}/{source.region}",
            f"{p.cloud}/{p.region}",
            sum(item.size for item in copied),
        )

    def _migration_charge(self, attempt: Attempt, spec: JobSpec) -> list[dict]:
        """The egress entry of the checkpoint copy into this attempt, priced at the
        manifest's checkpoint size (what the plan priced), billed by the sending cloud."""
        from broker.state.charges import egress_entry
        from broker.state.model import to_decimal
        from pricing.regions import Place

        moved = self.store.migration(attempt.id)
        if moved is None or spec.checkpoint is None or not spec.checkpoint.size_gb:
            return []
        cloud, _, region = moved["from"].partition("/")
        p = attempt.placed_on
        entry = egress_entry(
            Place(cloud, region),
            (p.cloud, p.region),
            to_decimal(spec.checkpoint.size_gb),
            f"checkpoint migration {spec.checkpoint.uri}",
            {},
        )
        return [entry] if entry is not None else []

    def _lost_work(self, job: Job, attempt: Attempt, instance: Instance, hours: float) -> str:
        """Record when the interrupted attempt last checkpointed; say how much work it lost
        (billed hours since that checkpoint, or since its start without one)."""
        p = attempt.placed_on
        from providers.capabilities import CheckpointStores

        at = None
        if isinstance(self.provider, CheckpointStores):
            at = self.provider.last_checkpoint_at(job.id, p.cloud, p.region)
        start, end = instance.launched_at, instance.ended_at
        if at is not None and start is not None and at > start:
            self.store.record_checkpoint(attempt.id, at)
        else:
            at = start
        if at is None or start is None or end is None or end <= start:
            return ""
        lost = hours * max(0.0, (end - at).total_seconds()) / (end - start).total_seconds()
        return f"; lost {lost:.2f} h of work since the last checkpoint"

    # --- helpers --------------------------------------------------------------------

    def _spec(self, job: Job) -> JobSpec:
        """The job's spec in the version in force, as the store keeps it (decoded once)."""
        key = (job.id, job.version)
        if key not in self._specs:
            self._specs[key] = self.store.version(job.id, job.version).spec
        return self._specs[key]

    def _request(self, job: Job, attempt: Attempt) -> LaunchRequest:
        """The launch request of an attempt: rebuilt identically on every call, which is
        what makes a relaunch after a crash idempotent."""
        from providers.base import LaunchRequest

        spec = self._spec(job)
        p = attempt.placed_on
        resume = ""
        if attempt.number > 1 and spec.checkpoint is not None:
            store = self._checkpoint_store(job.id, p.cloud, p.region)
            resume = store if store is not None else spec.checkpoint.uri
        return LaunchRequest(
            attempt_id=attempt.id,
            job_id=job.id,
            job_name=job.name,
            team=job.team,
            cloud=p.cloud,
            region=p.region,
            zone=p.zone,
            instance_type=p.instance_type,
            market=attempt.market,
            nodes=p.nodes,
            accelerator=p.accelerator,
            accelerator_count=p.accelerator_count,
            command=spec.run.command,
            image=spec.run.image or "",
            env=spec.run.env,
            checkpoint_uri=spec.checkpoint.uri if spec.checkpoint else "",
            resume_from=str(resume),
            max_price_per_hour=spec.requirements.max_price_per_hour,
        )


def _row(job: Job, now, placed: PlacedOn | None, cost, why: str) -> dict:
    waited = now - job.queued_at
    return {
        "position": None,
        "job": job.id,
        "name": job.name,
        "team": job.team,
        "queue": job.queue,
        "priority": job.priority,
        "state": str(job.state),
        "gpus": placed.gpu_label if placed else "",
        "placement": f"{placed.where} {placed.market}" if placed else "",
        "expected_cost": cost,
        "waiting": f"{int(waited.total_seconds() // 60)} min",
        "why": why,
    }


def _instance_row(instance: Instance) -> dict:
    return {
        "provider_id": instance.id,
        "cloud": instance.cloud,
        "region": instance.region,
        "zone": instance.zone,
        "instance_type": instance.instance_type,
        "tags": dict(instance.tags),
    }


def _decision_figures(placement: Placement) -> str:
    """The figures behind a placement, for the job's timeline (`broker status`)."""
    cost = placement.cost
    text = (
        f"{placement.market} {placement.price_per_hour:.4g} USD/h x "
        f"{placement.expected_hours:.3g} h expected = {placement.expected_cost:.2f} USD"
    )
    if cost.egress:
        text += f" incl. {cost.egress:.2f} USD egress"
    if cost.expected_interruptions:
        text += (
            f"; {cost.expected_interruptions:.2g} reclaims expected at "
            f"{cost.interruption_rate:.2g}/h ({cost.interruption_rate_source})"
        )
    return text


def _pool_full(verdict, best: Placement | None) -> bool:
    """The queue policy holds the job because its best placement, a pool, has no room for
    it now (too few GPUs free, taken by a job ranked ahead, or kept for one): not for its
    team's quota or budget, which a cloud would not lift."""
    if best is None or best.cloud != "onprem":
        return False
    return verdict.category not in ("quota", "budget")


def _first_cloud(decision: Decision) -> Placement | None:
    return next((p for p in decision.placements if p.cloud != "onprem"), None)
