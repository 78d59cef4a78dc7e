"""Planning and launching: the third step of the reconcile pass, and the queue view.

The queued jobs are planned in one batch over the offers as the provider sells them
now (spot closed where it cools down, learned interruption rates), each spec steered
by `broker.dispatch` (market, stay-home); the queue policy orders and gates them; a
job held for a full pool waits or bursts (`broker.dispatch.pool`); what may start is
planned on its first placement with room, its attempt recorded, then launched.
`queue_lines` answers the same questions without acting, for `broker queue`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from broker.controller.isolation import ERROR
from broker.controller.pools import bursts, first_cloud
from broker.controller.steering import steer
from broker.dispatch.home import stays_home
from broker.dispatch.market import spot_only
from broker.state import IllegalTransition, JobState
from broker.state.placed import PlacedOn

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.controller.reconcile import PassReport
    from broker.dispatch.settings import DispatchSettings
    from broker.planner.decision import Decision, Placement
    from broker.queue import Policy, Verdict
    from broker.spec import JobSpec
    from broker.state import Job, StateStore
    from pricing.query import OfferIndex
    from providers.base import Provider
    from providers.capabilities import Capacity, SpotMarket

_FULL = "capacity: every planned place is full"


def _job_id(job: Job) -> str:
    return job.id


@dataclass(frozen=True, slots=True)
class QueueLine:
    """One row of the queue as the controller sees it now: an active job with its
    placement, or a queued one with the plan it would get and why it waits."""

    job: Job
    placed: PlacedOn | None
    why: str
    position: int | None  # in the policy's order; None for an active job


@dataclass(frozen=True, slots=True)
class _Planned:
    """A queued job in the policy's order, with its plan (None: held by an error) and
    verdict."""

    job: Job
    decision: Decision | None
    verdict: Verdict
    best: Placement | None


class Launching:
    """The controller's planning and launching: a part of `Controller`, which provides
    the attributes below and `_spec`, `active`, `preempt` and `_instance_of`."""

    store: StateStore
    provider: Provider
    clock: Clock
    index_of: Callable[[Provider], OfferIndex]
    policy: Policy | None
    pool_gpus: dict[tuple[str, str], float]
    settings: DispatchSettings
    _steered: dict[str, str]
    _held: set[str]  # jobs held by an error on the last look (tried alone first)
    _capacity: Capacity | None
    _spot_market: SpotMarket | None

    def queue_lines(self) -> list[QueueLine]:
        """The queue now: active jobs, then queued ones in the policy's order, with the
        plan each would get and why it waits (what `broker queue` shows)."""
        lines = []
        for job in self.active():
            attempts = self.store.attempts(job.id)
            lines.append(QueueLine(job, attempts[-1].placed_on if attempts else None, "", None))
        queued = self.store.queued()
        if not queued:
            return lines
        room = self._room()
        for position, item in enumerate(self._queue(queued), 1):
            verdict = item.verdict
            placement = None
            if verdict.action == "launch":
                placement = self._first_free(item.decision, room)
            failing = self._launch_error(item.job) if placement is not None else None
            if failing is not None:  # its last launch raised: it waits held (isolation)
                lines.append(QueueLine(item.job, PlacedOn.of(placement), failing, position))
                continue
            if placement is not None:
                self._take(room, placement)
                why = "starts on the next pass" + (f" ({verdict.reason})" if verdict.reason else "")
                lines.append(QueueLine(item.job, PlacedOn.of(placement), why, position))
                continue
            shown = PlacedOn.of(item.best) if item.best is not None else None
            why = verdict.reason if verdict.action == "wait" else _FULL
            lines.append(QueueLine(item.job, shown, why, position))
        return lines

    # --- (3) plan and launch --------------------------------------------------------

    def _launch(self, report: PassReport) -> None:
        """Plan the queue, let the policy order and gate it, launch what may start."""
        queued = self.store.queued()
        if not queued:
            return
        room = self._room()
        running = None  # read once, when a full pool first asks
        ahead: dict[str, float] = {}  # pool -> GPUs of the jobs this pass left waiting for it
        for item in self._queue(queued):
            job, verdict, best = item.job, item.verdict, item.best
            if verdict.category == ERROR:
                self._hold(job, verdict.reason, report)
                continue
            try:
                burst = False  # held for a pool, it takes its best cloud placement instead
                if verdict.action != "launch":
                    from broker.controller.pools import pool_full

                    held = pool_full(verdict, best)
                    if held and running is None:
                        running = self._running()
                    burst = held and self._bursts(job, item.decision, running, ahead)
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
                self._place(job, item.decision, burst, room, report)
            except Exception as exc:  # noqa: BLE001 (one job's error: broker.controller.isolation)
                self._failed_launch(job, exc, report)

    def _launch_error(self, job: Job) -> str | None:
        """The error its last launch raised, while nothing happened to the job since."""
        events = self.store.events(job.id)
        last = events[-1] if events else None
        if last is not None and last.kind == "error" and last.attempt_id is None:
            return str(last.data.get("reason", last.message))
        return None

    def _hold(self, job: Job, reason: str, report: PassReport) -> None:
        """Keep a job the broker's code raised on in the queue, its error noted once."""
        self.store.record_error(job.id, reason)
        report.waiting[job.name] = reason

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
        self, job: Job, decision: Decision, burst: bool, room: dict, report: PassReport
    ) -> None:
        """Plan `job` on its first placement with room (its best cloud one when it
        bursts: it never takes the pool's room, which the queue policy kept), start
        its attempt and launch it."""
        placement = first_cloud(decision) if burst else self._first_free(decision, room)
        if placement is None:
            report.waiting[job.name] = _FULL
            return
        # on demand by the spot policy's call, not the price's: may go back to spot
        placed = PlacedOn.of(placement, steered=self._steered.get(job.id) == "on-demand")
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
            attempt_id = self.store.start_attempt(job.id, placed)
        except IllegalTransition:
            return  # another controller re-queued it meanwhile (see _recover)
        self._instance_of(job, self.store.attempt(attempt_id), report)
        report.launched.append((job.name, f"{placed.where} {placement.market}"))

    def _queue(self, queued: list[Job]) -> list[_Planned]:
        """The queued jobs with their plans and verdicts, in the policy's order; a job
        whose planning or ordering raises is held at the end, its error as its reason
        (broker.controller.isolation)."""
        from broker.queue import Verdict

        jobs, decisions, broken = self._decisions(queued)
        items, unordered = self._ordered(jobs, decisions)
        broken |= unordered
        self._held = set(broken)
        for job in queued:
            if job.id in broken:
                verdict = Verdict(job.id, "wait", broken[job.id], category=ERROR)
                items.append(_Planned(job, None, verdict, None))
        return items

    def _decisions(self, queued: list[Job]) -> tuple[list[Job], list[Decision], dict[str, str]]:
        """One plan per queued job, in one batch, over the offers as the provider sells
        them now (spot closed where it cools down, learned interruption rates): the jobs
        planned, their plans, and why the others could not be."""
        from broker.controller.isolation import isolate
        from broker.planner.plan import plan_many
        from broker.recovery import adjust_index

        now = self.clock.now()
        index = adjust_index(
            self.index_of(self.provider), self.store, now, self.settings.cooldown_scale
        )
        if self.settings.pool_wait_factor > 0 and self.pool_gpus:
            from broker.scheduling import with_whole_pools

            index = with_whole_pools(index, self.pool_gpus)  # a full pool may be waited for

        def plan(jobs: list[Job]) -> list[Decision]:
            return plan_many([self._steered_spec(job, now) for job in jobs], index, now)

        return isolate(queued, plan, _job_id, "planning", sorted(self._held))

    def _steered_spec(self, job: Job, now) -> JobSpec:
        """The spec to plan now: its checkpoint where it lives, its market as its spot
        policy says (broker.dispatch.market), its spot kept home while it would wait
        there (broker.dispatch.home)."""
        from broker.recovery import checkpoint_place, with_checkpoint_at

        home = checkpoint_place(self.store, job)
        spec = with_checkpoint_at(self._spec(job), home)
        spec, choice = steer(
            spec, job, self.store, now, self.settings, spot_available=self._spot_open(spec)
        )
        self._steered[job.id] = choice
        if not spot_only(choice, self.settings):
            return spec
        requirements = replace(spec.requirements, spot="only")
        checkpoint = spec.checkpoint
        if home is not None and stays_home(
            self.settings,
            has_home=True,
            checkpoint_gb=checkpoint.size_gb if checkpoint else 0.0,
            choice=choice,
            choice_without_spot=lambda: steer(
                spec, job, self.store, now, self.settings, spot_available=False
            )[1],
        ):
            requirements = replace(requirements, clouds=(home.cloud,), regions=(home.region,))
        return replace(spec, requirements=requirements)

    def _spot_open(self, spec: JobSpec) -> bool:
        """Whether spot is on sale for the job's GPUs, where the provider can tell and
        the settings ask (spot_strict); else assumed so."""
        if not self.settings.spot_strict or self._spot_market is None:
            return True
        return self._spot_market.spot_open(tuple(a.gpu for a in spec.requirements.accelerators))

    def _running(self) -> list:
        from broker.scheduling import running_jobs

        return running_jobs(self.store, self.active(), self._spec)

    def _bursts(self, job: Job, decision: Decision, running: list, ahead: dict) -> bool:
        """broker.controller.pools.bursts, for `job` now."""
        from broker.scheduling import free_pool_gpus

        pool = decision.placements[0]
        free = free_pool_gpus(self.pool_gpus, running).get(("onprem", pool.zone), 0.0)
        return bursts(
            decision,
            self._spec(job),
            now=self.clock.now(),
            submitted=self.store.version(job.id, job.version).submitted_at,
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

    def _ordered(
        self, queued: list[Job], decisions: list[Decision]
    ) -> tuple[list[_Planned], dict[str, str]]:
        """The queued jobs with their plans and verdicts, in the policy's order, and why
        the jobs whose ordering raised could not be ordered."""
        from broker.controller.isolation import isolate
        from broker.queue import Policy
        from broker.scheduling import verdicts

        active, now = self.active(), self.clock.now()

        def decide(pairs: list[tuple[Job, Decision]]) -> dict:
            jobs, plans = [job for job, _ in pairs], [decision for _, decision in pairs]
            policy = self.policy or Policy()
            return verdicts(
                self.store, policy, jobs, plans, self._spec, active, now, self.pool_gpus
            )

        pairs = list(zip(queued, decisions, strict=True))
        kept, decided, broken = isolate(
            pairs, decide, lambda pair: pair[0].id, "ordering", sorted(self._held)
        )
        items = [_Planned(job, decision, *decided[job.id]) for job, decision in kept]
        items.sort(key=lambda item: (item.verdict.position or 10**9, item.job.queued_at))
        return items, broken

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
        return self._capacity.free_nodes() if self._capacity is not None else {}

    @staticmethod
    def _take(room: dict[tuple[str, str], int], placement: Placement) -> None:
        key = (placement.cloud, placement.region)
        if key in room:
            room[key] -= placement.nodes


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
