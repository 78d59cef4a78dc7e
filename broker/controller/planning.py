"""Planning the queue: the queued jobs planned in one batch and ordered by the queue
policy, and the queue view (`broker queue`).

The queued jobs are planned in one batch over the offers as the provider sells them
now (spot closed where it cools down, learned interruption rates), each spec steered
by `broker.dispatch` (market, stay-home); the queue policy orders and gates them.
A job whose only places are cooling down waits for the first to reopen; a job whose
planning or ordering raises is held (broker.controller.isolation). `queue_lines`
answers what the pass would do, without acting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from broker.controller.isolation import ERROR, not_one_jobs
from broker.controller.room import Room
from broker.controller.steering import holds_at, market_asks, reclaims_often_in, steer
from broker.dispatch.home import stays_home
from broker.dispatch.market import spot_only
from broker.dispatch.steered import steered
from broker.recovery import checkpoint_place, with_checkpoint_at
from broker.state import JobState
from broker.state.placed import PlacedOn

if TYPE_CHECKING:
    from datetime import datetime

    from broker.clock import Clock
    from broker.controller.checkpoints import Checkpoints
    from broker.controller.specs import Specs
    from broker.dispatch.hold import Hold
    from broker.dispatch.market import MarketAsk
    from broker.dispatch.settings import DispatchSettings
    from broker.planner.decision import Decision, Placement
    from broker.queue import Policy, Verdict
    from broker.recovery import Adjuster, Cooling
    from broker.spec import JobSpec
    from broker.state import Job, StateStore
    from pricing.query import OfferIndex
    from providers.base import Provider
    from providers.capabilities import Billing, Capacity, PoolShares, SpotMarket

FULL = "capacity: every planned place is full"


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
class Planned:
    """A queued job in the policy's order, with its plan (None: held by an error) and
    verdict."""

    job: Job
    decision: Decision | None
    verdict: Verdict
    best: Placement | None
    wake: datetime | None = None  # cooling down: when its first place reopens


@dataclass(frozen=True, slots=True)
class Plans:
    """One batch of plans: the jobs planned, their plans, why the others could not be
    planned, the cool-down each infeasible job waits for, and the jobs held after a
    reclaim (each with an empty plan)."""

    jobs: list[Job]
    decisions: list[Decision]
    broken: dict[str, str]
    cooling: dict[str, tuple[Cooling, Placement]]
    holds: dict[str, Hold]  # job id -> its hold, for the jobs held now (planned nothing)


class Planning:
    """The controller's planning of the queue: a part of `Controller`, which provides
    the attributes below and `_spec` and `active`."""

    store: StateStore
    provider: Provider
    clock: Clock
    index_of: Callable[[Provider], OfferIndex]
    planner: Callable[[list[JobSpec], OfferIndex, datetime], list[Decision]] | None
    adjuster: Adjuster | None
    policy: Policy | None
    pool_gpus: dict[tuple[str, str], float]
    settings: DispatchSettings
    _steered: dict[str, str]
    checkpoints: Checkpoints
    _held: set[str]  # jobs held by an error on the last look (tried alone first)
    _capacity: Capacity | None
    _pool_shares: PoolShares | None
    _billing: Billing | None
    _spot_market: SpotMarket | None
    _committed: dict[str, float]  # job id -> USD its running attempt counts for (budgets)
    _reopened: tuple[object, bytes, OfferIndex] | None  # `_cooling`'s last index, its rows
    _specs: Specs
    _spec: Callable[[Job], JobSpec]
    _projection: Callable[[], tuple[dict[str, float], list]]
    active: Callable[[], list[Job]]

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
        _, burning = self._projection()  # what running jobs commit of their budgets
        self._committed = {b.job_id: b.accrued + b.burn for b in burning}
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
            why = verdict.reason if verdict.action == "wait" else FULL
            lines.append(QueueLine(item.job, shown, why, position))
        return lines

    def _launch_error(self, job: Job) -> str | None:
        """The error its last launch raised, while nothing happened to the job since."""
        events = self.store.events(job.id)
        last = events[-1] if events else None
        if last is not None and last.kind == "error" and last.attempt_id is None:
            return str(last.data.get("reason", last.message))
        return None

    def _queue(self, queued: list[Job]) -> list[Planned]:
        """The queued jobs with their plans and verdicts, in the policy's order; a job
        whose planning or ordering raises is held at the end, its error as its reason
        (broker.controller.isolation)."""
        from broker.queue import Verdict

        self._specs.load(self.store, queued, (JobState.QUEUED,))  # one query, not one a job
        plans = self._decisions(queued)
        items, unordered = self._ordered(plans.jobs, plans.decisions)
        broken = plans.broken | unordered
        self._held = set(broken)
        if plans.cooling:
            items = [_cooled(item, plans.cooling) for item in items]
        if plans.holds:
            items = [_holding(item, plans.holds, self.clock.now()) for item in items]
        for job in queued:
            if job.id in broken:
                verdict = Verdict(job.id, "wait", broken[job.id], category=ERROR)
                items.append(Planned(job, None, verdict, None))
        return items

    def _decisions(self, queued: list[Job]) -> Plans:
        """One plan per queued job, in one batch, over the offers as the provider sells
        them now (spot closed where it cools down, learned interruption rates): the jobs
        planned, their plans, why the others could not be, and what cool-down each job
        without a placement waits for."""
        from broker.controller.isolation import isolate
        from broker.recovery import cooling_places, recent_reclaims

        now = self.clock.now()
        offered = self.index_of(self.provider)
        reclaims = recent_reclaims(self.store, now)
        scale = self.settings.cooldown_scale
        index = self._pools(self.adjusted_offers(now, offered, reclaims))
        specs: dict[str, JobSpec] = {}  # steered once per pass, whoever plans it
        holds: dict[str, Hold] = {}  # held after a reclaim: planned nothing
        often = reclaims_often_in(self.store, offered.offers)

        def plan(jobs: list[Job]) -> list[Decision]:
            for job in jobs:
                if job.id in specs or job.id in holds:
                    continue
                spec = self._spec(job)
                asks = None  # its question to the spot policy and the hold, made once
                if steered(spec.requirements.spot, spec.runtime.deadline is not None):
                    holding = often if self.settings.hold_hours > 0 else None
                    asks = market_asks(self.store, job, spec, self.settings, holding)
                held = holds_at(spec, job, self.store, self.settings, often, asks)(now)
                if held.held:
                    holds[job.id] = held
                else:
                    specs[job.id] = self._steered_spec(job, now, asks)
            batch = [specs[job.id] for job in jobs if job.id in specs]
            planned = iter(self._plan_many(batch, self._gangs(index, batch), now))
            return [next(planned) if job.id in specs else _nothing(job) for job in jobs]

        jobs, decisions, broken = isolate(queued, plan, _job_id, "planning", sorted(self._held))
        cooling = cooling_places(reclaims, now, scale)
        waits = {}
        if cooling:
            free = [(job, d) for job, d in zip(jobs, decisions, strict=True) if job.id not in holds]
            waits = self._cooling(
                [job for job, _ in free], [d for _, d in free], specs, offered, cooling
            )
        return Plans(jobs, decisions, broken, waits, holds)

    def adjusted_offers(
        self, now: datetime, offered: OfferIndex | None = None, reclaims: list | None = None
    ) -> OfferIndex:
        """The offers a pass at `now` plans on before pools and gangs: as the provider sells
        them (`offered`, asked when not given), spot closed where it cools down after
        `reclaims` (read when not given), learned interruption rates. The simulator's
        refusal proof (broker.sim.refusal) asks the same."""
        from broker.recovery import adjust_index

        offered = self.index_of(self.provider) if offered is None else offered
        adjust = adjust_index if self.adjuster is None else self.adjuster
        return adjust(offered, self.store, now, self.settings.cooldown_scale, reclaims)

    def places(self, spec: JobSpec, adjusted: OfferIndex, now: datetime) -> bool:
        """Whether a pass would place `spec` alone on `adjusted` (`adjusted_offers`), with
        the pools and gangs a pass adds."""
        (decision,) = self._plan_many([spec], self._gangs(self._pools(adjusted), [spec]), now)
        return bool(decision.placements)

    def spec_to_plan(self, job: Job, now: datetime) -> JobSpec:
        """The spec a pass would plan for `job` now (`_steered_spec`), asked without
        recording the spot policy's choice: a question, not a pass."""
        saved = dict(self._steered)
        try:
            return self._steered_spec(job, now)
        finally:
            self._steered.clear()
            self._steered.update(saved)

    def _plan_many(self, specs: list[JobSpec], index: OfferIndex, now: datetime) -> list[Decision]:
        """The planner's decisions: `plan_many`, or the `planner` this controller was given
        (the same function of the same inputs; the simulator's remembers its answers)."""
        if self.planner is not None:
            return self.planner(specs, index, now)
        from broker.planner.plan import plan_many

        return plan_many(specs, index, now)

    def _gangs(self, index: OfferIndex, specs: list[JobSpec]) -> OfferIndex:
        """`index` with the provider's gang limits when a job of `specs` is a gang
        (broker.dispatch.gangs: N nodes only where the provider holds N)."""
        from broker.dispatch.gangs import with_gang_limits

        return with_gang_limits(index, self.provider, [s.requirements.nodes for s in specs])

    def _pools(self, index: OfferIndex) -> OfferIndex:
        """`index` with every pool node offered when a full pool may be waited for."""
        if self.settings.pool_wait_factor > 0 and self.pool_gpus:
            from broker.scheduling import with_whole_pools

            return with_whole_pools(index, self.pool_gpus)
        return index

    def _cooling(
        self,
        jobs: list[Job],
        decisions: list[Decision],
        specs: dict[str, JobSpec],
        offered: OfferIndex,
        cooling: list[Cooling],
    ) -> dict[str, tuple[Cooling, Placement]]:
        """Job id -> (the cool-down it waits for, the placement that reopens then), for
        each job without a placement that would have one were no place cooling down:
        planned again, in one batch, on the cooling places alone, sold as the provider
        sells them (spot open); a job that plans there waits for them, and nowhere else."""
        from broker.recovery import cooling_wait
        from pricing.query import OfferIndex

        infeasible = [job for job, d in zip(jobs, decisions, strict=True) if not d.placements]
        rows = _rows_at(offered.offers, cooling) if infeasible else []
        if not len(rows):
            return {}
        last = self._reopened  # the same rows of the same table: the same index
        if last is not None and last[0] is offered and last[1] == rows.tobytes():
            reopened = last[2]
        else:
            table = offered.offers.take(rows)
            reopened = OfferIndex(table, extra_countries=offered.extra_countries)
            self._reopened = (offered, rows.tobytes(), reopened)
        now = self.clock.now()
        try:
            batch = [specs[job.id] for job in infeasible]
            plans = self._plan_many(batch, self._gangs(reopened, batch), now)
        except Exception as exc:  # noqa: BLE001 (it planned in the batch: this is only a hint)
            if not_one_jobs(exc):
                raise
            return {}
        waits = {}
        for job, decision in zip(infeasible, plans, strict=True):
            wait = cooling_wait(decision.placements, cooling)
            if wait is not None:
                waits[job.id] = wait
        return waits

    def _steered_spec(
        self, job: Job, now, asks: Callable[[datetime], MarketAsk] | None = None
    ) -> JobSpec:
        """The spec to plan now: its checkpoint where it lives, its market as its spot
        policy says (broker.dispatch.market), its spot kept home while it would wait
        there (broker.dispatch.home). `asks`: the job's `market_asks` now, when made
        already (where its checkpoint lies does not enter the question)."""
        spec = self._spec(job)
        if spec.checkpoint is None and not steered(
            spec.requirements.spot, spec.runtime.deadline is not None
        ):  # no home and no spot policy to ask: planned as it is (most of a queue)
            self._steered[job.id] = ""
            return spec
        from broker.controller.moving import moved_by_choice

        # where its checkpoint lives; a job without one has no home (read only with one)
        home = checkpoint_place(self.store, job) if spec.checkpoint is not None else None
        spec = with_checkpoint_at(spec, home, self.checkpoints.stores is not None)
        spec, choice = steer(
            spec, job, self.store, now, self.settings, spot_available=self._spot_open(spec),
            asks=asks,
        )  # fmt: skip
        self._steered[job.id] = choice
        if not spot_only(choice, self.settings):
            return spec
        requirements = replace(spec.requirements, spot="only")
        if home is not None and stays_home(
            self.settings,
            has_home=spec.checkpoint is not None and not moved_by_choice(self.store, job),
            choice=choice,
            choice_without_spot=lambda: steer(
                spec, job, self.store, now, self.settings, spot_available=False, asks=asks
            )[1],
        ):
            requirements = replace(requirements, clouds=(home.cloud,), regions=(home.region,))
        # The policy owns the deadline now (it sends the job to on-demand in time), so the
        # planner does not judge this spot against it (docs/planner.md, "Deadline").
        runtime = replace(spec.runtime, deadline=None)
        return replace(spec, requirements=requirements, runtime=runtime)

    def _spot_open(self, spec: JobSpec) -> bool:
        """Whether spot is on sale for the job's GPUs, where the provider can tell and
        the settings ask (spot_strict); else assumed so."""
        if not self.settings.spot_strict or self._spot_market is None:
            return True
        return self._spot_market.spot_open(tuple(a.gpu for a in spec.requirements.accelerators))

    def _ordered(
        self, queued: list[Job], decisions: list[Decision]
    ) -> tuple[list[Planned], dict[str, str]]:
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
                self.store, policy, jobs, plans, self._spec, active, now, self.pool_gpus,
                committed=self._committed,
            )  # fmt: skip

        pairs = list(zip(queued, decisions, strict=True))
        kept, decided, broken = isolate(
            pairs, decide, lambda pair: pair[0].id, "ordering", sorted(self._held)
        )
        items = [Planned(job, decision, *decided[job.id]) for job, decision in kept]
        items.sort(key=lambda item: (item.verdict.position or 10**9, item.job.queued_at))
        return items, broken

    def _first_free(self, decision: Decision, room: Room) -> Placement | None:
        """The best placement whose place still has room in this pass."""
        return room.first_free(decision.placements)

    def _room(self) -> Room:
        """Room per place now, read once per pass."""
        nodes = self._capacity.free_nodes() if self._capacity is not None else {}
        gpus = self._pool_shares.free_gpus() if self._pool_shares is not None else {}
        return Room(nodes, gpus)

    @staticmethod
    def _take(room: Room, placement: Placement) -> None:
        room.take(placement)


def _cooled(item: Planned, cooling: dict[str, tuple[Cooling, Placement]]) -> Planned:
    """`item`, waiting for the cool-down its places are in rather than as infeasible."""
    from broker.recovery import cooling_reason

    wait = cooling.get(item.job.id)
    if wait is None or item.verdict.category != "infeasible":
        return item
    until, placement = wait
    verdict = replace(item.verdict, reason=cooling_reason(until), category="cooling down")
    return Planned(item.job, item.decision, verdict, placement, until.until)


def _nothing(job: Job) -> Decision:
    """The plan of a held job: no placement (it plans nothing while held)."""
    from broker.planner.decision import Decision

    return Decision(job.name, (), (), 0)


def _holding(item: Planned, holds: dict[str, Hold], now: datetime) -> Planned:
    """`item`, waiting for its hold's end (`broker.dispatch.hold`) when it is held."""
    from datetime import timedelta

    held = holds.get(item.job.id)
    if held is None:
        return item
    verdict = replace(item.verdict, action="wait", reason=held.reason, category="held")
    return Planned(item.job, item.decision, verdict, None, now + timedelta(hours=held.ends_in))


def _rows_at(table, cooling: list[Cooling]):
    """Rows of `table` at a cooling place (a zone-less cool-down covers its region)."""
    import numpy as np

    cloud, region, zone, itype = (
        table.text(n) for n in ("cloud", "region", "zone", "instance_type")
    )
    mask = np.zeros(len(table), dtype=bool)
    for c in cooling:
        here = (cloud == c.cloud) & (region == c.region) & (itype == c.instance_type)
        mask |= here & (zone == c.zone) if c.zone else here
    return np.flatnonzero(mask)
