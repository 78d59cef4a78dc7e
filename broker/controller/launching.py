"""Launching: the third step of the reconcile pass, after planning the queue.

In the policy's order (broker.controller.planning), a job held for a full pool waits or
bursts (`broker.dispatch.pool`); what may start is planned on its first placement with
room, its attempt recorded, then launched. A job held by an error stays queued; an
error while launching one job is that job's (broker.controller.isolation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from broker.controller.isolation import ERROR, not_one_jobs
from broker.controller.planning import FULL, Planning
from broker.state import IllegalTransition, JobState
from broker.state.leases import LeaseHeld
from broker.state.limits import TeamLimitReached
from broker.state.placed import PlacedOn

if TYPE_CHECKING:
    from broker.controller.planning import Planned
    from broker.controller.reconcile import PassReport
    from broker.controller.room import Room
    from broker.planner.decision import Decision, Placement
    from broker.state import Attempt, Job
    from broker.state.limits import TeamLimits
    from providers.base import Instance


class Launching(Planning):
    """The controller's launching: a part of `Controller`, which provides the attributes
    of `Planning` and those below, `preempt`, `_close` and `_fail_attempt`."""

    _looked: dict[str, float]  # budgets: attempt id -> hours of burn looked at
    _close: Callable[..., None]
    _fail_attempt: Callable[[Job, Attempt, str, Exception], None]
    preempt: Callable[[str, str], None]

    # --- (3) plan and launch --------------------------------------------------------

    def _launch(self, report: PassReport) -> None:
        """Plan the queue, let the policy order and gate it, launch what may start."""
        queued = self.store.queued()
        if not queued:
            return
        room = self._room()
        up: list[tuple[Job, str, dict]] = []  # launched, their "running" not recorded yet
        try:
            self._launch_queue(queued, room, report, up)
        finally:
            self._record_running(up, report)

    def _record_running(self, up: list[tuple[Job, str, dict]], report: PassReport) -> None:
        """The pass's launches recorded running, in one commit: a controller killed before
        it leaves them launching, and the next pass relaunches them (idempotently: the
        provider returns the instance it launched for the attempt)."""
        if not up:
            return
        with self.store.together():
            for job, attempt_id, instance in up:
                with self._one_jobs(job, report):  # LeaseHeld: its lease ran out, taken over
                    self.store.attempt_running(attempt_id, instance)

    def _launch_queue(
        self, queued: list[Job], room: Room, report: PassReport, up: list[tuple[Job, str, dict]]
    ) -> None:
        """`_launch` down the queue in the policy's order, in runs that end before a job
        that preempts (its victims are stopped first, then the room is read again): a
        run's plans and starts commit together (no provider call among them), then its
        attempts launch, each instance put on `up` to be recorded running with the others.
        A kill between the two leaves attempts launching with no instance: the next pass
        launches them (`Observing._instance_of`), as after a kill between any start and
        its launch."""
        walk = _Walk(room)
        for run in _runs(self._queue(queued)):
            if run[0].verdict.preempts and not self._preempt_for(run[0], walk, report):
                run = run[1:]  # its preemption raised or is another's: it waits
            starting: list[tuple[Job, str, str]] = []  # (job, attempt id, where launched)
            with self.store.together():
                for item in run:
                    self._consider(item, walk, report, starting)
            started = _by_id(self.store.attempts_of(job.id for job, _, _ in starting))
            for job, attempt_id, where in starting:
                with self._one_jobs(job, report):  # start_attempt took its lease: no claim
                    self._start(job, started[attempt_id], report, up)
                    report.launched.append((job.name, where))

    def _preempt_for(self, item: Planned, walk: _Walk, report: PassReport) -> bool:
        """Stop the victims `item`'s verdict names and read the room again; False when
        that raised (the job is held) or another controller holds a victim."""
        job, done = item.job, False
        with self._one_jobs(job, report):
            for victim in item.verdict.preempts:
                self.preempt(victim, f"preempted by {job.team}/{job.name}")
            walk.room = self._room()  # the victims' nodes are free again
            done = True
        return done

    @contextmanager
    def _one_jobs(self, job: Job, report: PassReport) -> Iterator[None]:
        """A step of `job`'s launch: skipped when another controller holds the job (its
        step, not this pass's); an error of the job's own fails its launch, not the pass
        (broker.controller.isolation)."""
        try:
            yield
        except LeaseHeld:
            return
        except Exception as exc:  # noqa: BLE001 (one job's error: broker.controller.isolation)
            if not_one_jobs(exc):
                raise
            self._failed_launch(job, exc, report)

    def _consider(
        self, item: Planned, walk: _Walk, report: PassReport, starting: list[tuple[Job, str, str]]
    ) -> None:
        """One queued job: held, waiting (for a full pool, unless it bursts), or planned
        and started (put on `starting`, to launch once its run is committed)."""
        job, verdict, best = item.job, item.verdict, item.best
        if verdict.category == ERROR:
            self._hold(job, verdict.reason, report)
            return
        if verdict.action == "launch" and self._first_free(item.decision, walk.room) is None:
            _full(job, report)  # what `_place` finds: most of a long queue, read at a glance
            return
        with self._one_jobs(job, report):
            burst = False  # held for a pool, it takes its best cloud placement instead
            if verdict.action != "launch":
                from broker.controller.pools import pool_full

                held = pool_full(verdict, best)
                if held and walk.running is None:
                    walk.running = self._running()
                burst = held and self._bursts(job, item.decision, walk.running, walk.ahead)
                if not burst:
                    if held:
                        gpus = best.accelerator_count * best.nodes
                        walk.ahead[best.zone] = walk.ahead.get(best.zone, 0.0) + gpus
                    report.waiting[job.name] = verdict.reason
                    report.waiting_for[job.name] = verdict.category
                    if item.wake is not None:  # it may start by itself then
                        report.wake_at = min(item.wake, report.wake_at or item.wake)
                    return
            self._place(job, item.decision, burst, walk.room, report, starting)

    def _start(
        self, job: Job, attempt: Attempt, report: PassReport, up: list | None = None
    ) -> Instance | None:
        """Copy the checkpoint where the attempt runs, then launch it; None when it did
        not start (the attempt is closed, or left for a retry on the next pass). Its
        instance is recorded running, or put on `up` for the caller to record."""
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
        submitted = self._specs.submitted_at(self.store, job.id, attempt.version)
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
        if up is None:
            self.store.attempt_running(attempt.id, instance_row(instance))
        else:
            up.append((job, attempt.id, instance_row(instance)))
        self._looked[attempt.id] = 0.0  # its burn by the next pass is all it will run
        return instance

    def _hold(self, job: Job, reason: str, report: PassReport) -> None:
        """Keep a job the broker's code raised on in the queue, its error noted once."""
        self.store.record_error(job.id, reason)
        report.waiting[job.name] = reason
        report.waiting_for[job.name] = ERROR

    def _failed_launch(self, job: Job, exc: Exception, report: PassReport) -> None:
        """Launching `job` raised: an attempt it opened is closed failed (retried a few
        times); without one, the job is held, back in the queue if it was planned."""
        from broker.controller.isolation import error_reason
        from broker.state import OPEN_ATTEMPT

        open_attempts = self.store.attempts(job.id, states=OPEN_ATTEMPT)
        for attempt in open_attempts:
            self._fail_attempt(job, attempt, "launching", exc)
            report.finished.append((job.name, "failed"))
        if open_attempts:
            return
        reason = error_reason("launching", exc)
        if self.store.job(job.id).state is JobState.PLANNED:
            self.store.transition(job.id, JobState.QUEUED, reason, expect=JobState.PLANNED)
        self._hold(job, reason, report)

    def _place(
        self,
        job: Job,
        decision: Decision,
        burst: bool,
        room: Room,
        report: PassReport,
        starting: list[tuple[Job, str, str]],
    ) -> None:
        """Plan `job` on its first placement with room (its best cloud one when it
        bursts: it never takes the pool's room, which the queue policy kept) and start
        its attempt, put on `starting` to launch (`_launch_queue`)."""
        from broker.controller.pools import first_cloud

        placement = first_cloud(decision) if burst else self._first_free(decision, room)
        if placement is None:
            _full(job, report)
            return
        # on demand by the spot policy's call, not the price's: may go back to spot
        placed = PlacedOn.of(placement, steered=self._steered.get(job.id) == "on-demand")
        if self._billing is not None:
            scale = self._billing.time_scale(placed.cloud, placed.pool)
            placed = replace(placed, time_scale=scale)
        if not self.store.transition(
            job.id,
            JobState.PLANNED,
            f"planned on {placed.where}: {_decision_figures(placement)}",
            {"placement": placed.to_row()},
            expect=JobState.QUEUED,
        ):
            return  # another controller took it
        self._take(room, placement)
        try:
            attempt_id = self.store.start_attempt(job.id, placed, self._limits(job.team))
        except IllegalTransition:
            return  # another controller re-queued it meanwhile (see _recover)
        except TeamLimitReached as exc:  # another controller's start took the room
            self.store.transition(job.id, JobState.QUEUED, str(exc), expect=JobState.PLANNED)
            report.waiting[job.name] = str(exc)
            report.waiting_for[job.name] = exc.category
            return
        starting.append((job, attempt_id, f"{placed.where} {placement.market}"))

    def _limits(self, team: str) -> TeamLimits:
        """The team's quota and budget, for `start_attempt` to check against the shared
        store (broker.state.limits), with what this pass's projection commits."""
        from datetime import UTC, datetime

        from broker.queue import Policy
        from broker.state.limits import TeamLimits

        rule = (self.policy or Policy()).team(team)
        now = self.clock.now()
        return TeamLimits(
            team=team,
            month_start=datetime(now.year, now.month, 1, tzinfo=UTC),
            max_gpus=rule.max_gpus,
            max_gpus_by_model=dict(rule.max_gpus_by_model),
            monthly_budget=rule.monthly_budget,
            committed=self._committed,
        )

    def _running(self) -> list:
        from broker.scheduling import running_jobs

        return running_jobs(self.store, self.active(), self._spec)

    def _bursts(self, job: Job, decision: Decision, running: list, ahead: dict) -> bool:
        """broker.controller.pools.bursts, for `job` now."""
        from broker.controller.pools import bursts
        from broker.scheduling import free_pool_gpus

        pool = decision.placements[0]
        free = free_pool_gpus(self.pool_gpus, running).get(("onprem", pool.zone), 0.0)
        return bursts(
            decision,
            self._spec(job),
            now=self.clock.now(),
            submitted=self._specs.submitted_at(self.store, job.id, job.version),
            queued_since=self._queued_since(job),
            free_gpus=free,
            running=running,
            ahead_gpus=ahead.get(pool.zone, 0.0),
            max_wait_factor=self.settings.pool_wait_factor,
        )

    def _queued_since(self, job: Job):
        """When the job last entered the queue: its queueing, or the end of its last
        attempt (a reclaimed or preempted job waits afresh)."""
        ends = [a.ended_at for a in self.store.attempts(job.id) if a.ended_at is not None]
        return max([job.queued_at, *ends])


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


def instance_row(instance: Instance) -> dict:
    """What the store records of a launched instance (`StateStore.attempt_running`)."""
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


@dataclass(slots=True)
class _Walk:
    """What the walk down the queue carries from one job to the next."""

    room: Room  # what may still launch this pass
    running: list | None = None  # the running jobs, read once, when a full pool first asks
    # pool -> GPUs of the jobs this pass left waiting for it
    ahead: dict[str, float] = field(default_factory=dict)


def _full(job: Job, report: PassReport) -> None:
    """`job` waits: every place its plan has is full this pass."""
    report.waiting[job.name] = FULL
    report.waiting_for[job.name] = "capacity"


def _by_id(attempts_of: dict[str, list[Attempt]]) -> dict[str, Attempt]:
    """The attempts of `StateStore.attempts_of`, by their ids."""
    return {a.id: a for attempts in attempts_of.values() for a in attempts}


def _runs(items: list[Planned]) -> list[list[Planned]]:
    """`items` in runs, each new one starting at a job whose verdict preempts."""
    runs: list[list[Planned]] = []
    for item in items:
        if not runs or item.verdict.preempts:
            runs.append([])
        runs[-1].append(item)
    return runs
