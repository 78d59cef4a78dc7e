"""The detailed engine's pass cadence: the controller's poll grid, less the passes that
provably change nothing.

The controller passes every `reconcile_hours` (its poll interval) and after whatever
happens. Replaying every pass of that grid is faithful and slow: a job waiting days for
spot costs thousands of identical passes. `Cadence.next_pass` gives the next pass that
may act, which is either the next pass of the grid, or, when every job the controller
could act on is provably idle until later, that later pass:

- a **queued job** is idle while it is planned on spot only (its policy said "spot" or
  "wait" under `spot_strict`, or its manifest says `spot: only`) and no place it may use
  sells spot, or every such place is cooling down after a reclaim. It may act again at a
  provider event (the engine passes there anyway), when a cool-down ends, when a reclaim
  leaves the cool-down's 4-hour window (`broker.recovery.HISTORY`), or at the first pass
  at which its spot policy would answer otherwise (`broker.dispatch.cadence.first_change`;
  asked with and without spot on sale, as stay-home asks both);
- a queued job **held after a reclaim** (`broker.dispatch.hold`) plans nothing until its
  hold ends: W after the reclaim, or the first pass its spare no longer affords it;
- a **policy-steered on-demand run** may go back to spot (`Controller._back_to_spot`) at
  the first pass at which its policy would say "spot";
- a plain running attempt is never acted on between events.

Anything else (a job held for a pool, by the queue policy, a launch left for a retry)
takes the next pass of the grid. `every_step=True` replays every pass of the grid while
any job is unfinished: the reference the skipping is tested against.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from broker.dispatch.cadence import first_change, grid_after, grid_from
from broker.sim.store import SimStateStore

if TYPE_CHECKING:
    from broker.controller import Controller
    from broker.dispatch.hold import Hold
    from broker.sim.provider import SimulatedProvider
    from broker.spec import JobSpec
    from broker.state import Job


@dataclass
class Cadence:
    controller: Controller
    provider: SimulatedProvider
    origin: datetime
    step: float  # hours between passes
    every_step: bool = False
    # the fast path's shortcuts: skip the passes the planner provably refuses
    # (broker.sim.refusal), keep a running job's wake while nothing changes
    shortcuts: bool = True
    _specs: dict[tuple[str, int], JobSpec] = field(default_factory=dict)
    # the last refusal proven: ((job id, store changes), offers table, through when)
    _refusal: tuple[tuple[str, int], object, float] | None = None
    # a policy's first change per job and question: (store changes, answer, wake)
    _woken: dict[tuple, tuple[int, str, float | None]] = field(default_factory=dict)
    # a queued job's wake: job id -> ((version, moment, store changes), offers, wake)
    _asked: dict[str, tuple[tuple, object, object]] = field(default_factory=dict)
    # a job's reads: job id -> ((version, store changes), reads)
    _reads: dict[str, tuple[tuple[int, int], _JobReads]] = field(default_factory=dict)
    # the rows selling spot in the provider's last table: (table, rows)
    _sold: tuple[object, list] | None = None

    def next_pass(self, now: float) -> float | None:
        """The next pass that may act after the one at `now` (hours from the origin);
        None when only a provider event or a submission can start anything."""
        from broker.state import JobState

        store = self.controller.store
        unfinished = store.jobs(states=_unfinished_states())
        if not unfinished:
            return None
        grid = grid_after(now, self.step)
        if self.every_step:
            return grid
        wakes: list[float] = []
        if any(job.state is JobState.QUEUED for job in unfinished) or self._may_move(unfinished):
            wakes.append(self._cooling_wake(now))  # a place reopening may end a wait, or a run
        for job in unfinished:
            if job.state is JobState.RUNNING:
                wake = self._running_wake(job, now)
            elif job.state is JobState.QUEUED:
                wake = self._queued_wake(job, now)
            else:
                return grid  # between two writes: let the next pass settle it
            if wake is _ANY:
                return grid
            if isinstance(wake, float):
                wakes.append(wake)
        wake = min(wakes, default=float("inf"))
        return max(grid, wake) if wake < float("inf") else None

    def idle_at(self, now: float) -> bool:
        """Whether a pass at `now` (store and provider as they are at `now`) provably
        does nothing: every unfinished job is queued and idle by the rules above. The
        engine then skips a trace step's pass (the step moved no instance)."""
        from broker.state import JobState

        if self.every_step:
            return False
        store = self.controller.store
        unfinished = store.jobs(states=_unfinished_states())
        if any(job.state is not JobState.QUEUED for job in unfinished):
            return False
        return all(self._queued_wake(job, now) is not _ANY for job in unfinished)

    # --- a queued job -----------------------------------------------------------------

    def _queued_wake(self, job: Job, now: float) -> float | None | object:
        """`_queued_wake_now`, kept per job for one moment while nothing is written and
        the same offers are sold: the engine asks `idle_at(now)`, then `next_pass(now)`."""
        store = self.controller.store
        if not self.shortcuts or not isinstance(store, SimStateStore):
            return self._queued_wake_now(job, now)
        state, offers = (job.version, now, store.changes), self.provider.offers()
        known = self._asked.get(job.id)
        if known is not None and known[0] == state and known[1] is offers:
            return known[2]
        wake = self._queued_wake_now(job, now)
        self._asked[job.id] = (state, offers, wake)
        return wake

    def _queued_wake_now(self, job: Job, now: float) -> float | None | object:
        from broker.controller.moving import moved_by_choice
        from broker.controller.steering import choices
        from broker.dispatch.home import stays_home
        from broker.dispatch.market import spot_only
        from broker.recovery import checkpoint_place, with_checkpoint_at

        settings = self.controller.settings
        reads = self._reads_of(job)
        store = reads.store
        held = self._held_wake(job, reads, now)
        if held is not None:
            return held
        if reads.spec is None:
            reads.home = checkpoint_place(store, job)
            reads.spec = with_checkpoint_at(self._spec(job), reads.home, True)  # a store per place
        home, spec = reads.home, reads.spec
        requirements = spec.requirements
        is_open = self._spot_open(spec)
        asked = reads.said

        def said(available: bool) -> Callable[[float], str]:
            """The policy's choice at a moment (`steer`'s, as a pass asks it then), asked
            once per moment and store: the bisections below ask `now` again, and a later
            moment with nothing written asks the same function."""
            if available not in asked:
                choice_at = choices(spec, job, store, settings, spot_available=available)
                answers: dict[float, str] = {}

                def answer(t: float) -> str:
                    if t not in answers:
                        answers[t] = choice_at(self._at(t))
                    return answers[t]

                asked[available] = answer
            return asked[available]

        choice = ""
        if requirements.spot != "only":
            choice = said(is_open)(now)
            if not spot_only(choice, settings):
                return _ANY
        clouds, regions = requirements.clouds, requirements.regions
        if home is not None and stays_home(
            settings,
            has_home=spec.checkpoint is not None and not moved_by_choice(store, job),
            choice=choice,
            choice_without_spot=lambda: said(False)(now),
        ):
            clouds, regions = (home.cloud,), (home.region,)
        refused = None  # on sale, but the planner provably refuses the job until then
        if self._sells_spot(spec, clouds, regions):
            refused = self._refused(job, now)
            if refused is None:
                return _ANY
        if not choice:
            return refused  # spot only: only an event, a cool-down or the refusal's end
        deadline = self._deadline(job, spec)
        wakes = [self._first_change((job.id, is_open), said(is_open), now, deadline)]
        if home is not None:  # stay-home also asks as if no spot were on sale
            wakes.append(self._first_change((job.id, None), said(False), now, deadline))
        found = [w for w in wakes if w is not None]
        wake = min(found) if found else grid_from(deadline, self.step)
        return wake if refused is None else min(wake, refused)

    def _reads_of(self, job: Job) -> _JobReads:
        """The job's reads and the questions made of them, kept while nothing is
        written (`store.changes`): each is a function of the store alone (the moment is
        asked of them), so a later moment asks the same; made afresh otherwise."""
        store = self.controller.store
        if not self.shortcuts or not isinstance(store, SimStateStore):
            return _JobReads(_Reads(store))
        state = (job.version, store.changes)
        known = self._reads.get(job.id)
        if known is None or known[0] != state:
            known = self._reads[job.id] = (state, _JobReads(_Reads(store)))
        return known[1]

    def _held_wake(self, job: Job, reads: _JobReads, now: float) -> float | None:
        """For a job held after a reclaim (`broker.dispatch.hold`), the first pass at which
        it no longer is: W after the reclaim, or earlier when its spare stops affording
        the hold (it only shrinks while the job waits), found by bisection. None when it
        is not held now. The learned rate it asks is the one known at the reclaim, so
        other jobs' runs change nothing. The hold's function is kept with the job's reads
        for the provider's table (its catalog rate is the reclaim's prior)."""
        from broker.controller.steering import holds_at, reclaims_often_in

        controller = self.controller
        table = self.provider.offers()

        def often(attempt) -> bool:  # asked only of a steered job's reclaim (most are not)
            offers = controller.index_of(self.provider).offers
            return reclaims_often_in(controller.store, offers)(attempt)

        if reads.held is None or reads.held[0] is not table:
            made = holds_at(self._spec(job), job, reads.store, controller.settings, often)
            reads.held = (table, made)
        held_at = reads.held[1]
        now_held = held_at(self._at(now))
        if not now_held.held:
            return None
        until = grid_from(now + now_held.ends_in, self.step)
        wake = self._first_change(
            ("held", job.id), lambda t: str(held_at(self._at(t)).held), now, until
        )
        return wake if wake is not None else grid_after(until, self.step)

    def _refused(self, job: Job, now: float) -> float | None:
        """The first pass after the planner's provable refusal of `job` ends
        (`broker.sim.refusal`); None when it may place the job now, or when no bound is
        claimed (an instance alive adds evidence; the reference runs without it)."""
        from broker.sim.refusal import refused_through

        store = self.controller.store
        if not self.shortcuts or self.provider.alive() or not isinstance(store, SimStateStore):
            return None
        # a refusal proven through T holds at every moment up to T while nothing is
        # written and the same offers are sold: asked again at a later trace step
        state = (job.id, store.changes, self.provider.offers())
        known = self._refusal
        if known is not None and known[0] == state[:2] and known[1] is state[2]:
            if now <= known[2]:
                return grid_after(known[2], self.step)
        through = refused_through(
            self.controller, job, now, self.step, self._cooling_wake(now), self._at
        )
        if through is None:
            return None
        self._refusal = (state[:2], state[2], through)
        return grid_after(through, self.step)

    def _sells_spot(self, spec: JobSpec, clouds: tuple, regions: tuple) -> bool:
        """Whether some place the job may use sells spot for its GPUs now and is not
        cooling down. Looser than the planner (only exact clouds and regions narrow it),
        so a False is sure."""
        gpus = {a.gpu for a in spec.requirements.accelerators}
        exact = tuple(r for r in regions if not any(c in r for c in "*?["))
        if len(exact) < len(regions):
            exact = ()  # a glob: do not narrow
        sold = self._spot_rows()
        if not sold:  # the common case on a trace's empty steps: nothing more to read
            return False
        closed = self._closed()
        for accelerator, key in sold:
            if gpus and accelerator not in gpus:
                continue
            if clouds and key[0] not in clouds:
                continue
            if exact and key[1] not in exact:
                continue
            if key not in closed:
                return True
        return False

    def _spot_rows(self) -> list[tuple[str, tuple[str, str, str, str]]]:
        """The provider's rows that sell spot now, in the table's order, as (accelerator,
        (cloud, region, zone, instance type)); read once per table it hands out."""
        import math

        table = self.provider.offers()
        if self._sold is not None and self._sold[0] is table:
            return self._sold[1]
        prices = table.numbers["price_spot"].tolist()
        rows = [i for i, price in enumerate(prices) if not math.isnan(price)]
        text = [table.text(n) for n in ("cloud", "region", "zone", "instance_type")]
        accelerator = table.text("accelerator")
        sold = [(accelerator[i], tuple(t[i] for t in text)) for i in rows]
        self._sold = (table, sold)
        return sold

    # --- a running job ----------------------------------------------------------------

    def _running_wake(self, job: Job, now: float) -> float | None:
        """When a policy-steered on-demand run would go back to spot (None: a plain run,
        nothing to wake it for)."""
        from broker.controller.steering import choices
        from broker.state import OPEN_ATTEMPT

        attempts = self.controller.store.attempts(job.id, states=OPEN_ATTEMPT)
        if not any(a.market == "on-demand" and a.placed_on.steered for a in attempts):
            return None
        reads = self._reads_of(job)
        spec = self._spec(job)
        settings = self.controller.settings
        is_open = self._spot_open(spec)
        asked = ("on-demand", is_open)
        if asked not in reads.said:
            choice_at = choices(
                spec, job, reads.store, settings, current="on-demand", spot_available=is_open
            )
            reads.said[asked] = lambda t: choice_at(self._at(t))
        return self._first_change(
            ("running", job.id, is_open), reads.said[asked], now, self._deadline(job, spec)
        )

    def _first_change(
        self, key: tuple, said: Callable[[float], str], now: float, until: float
    ) -> float | None:
        """`first_change(said, now, ...)`, kept under `key` (the job and how it is asked)
        while nothing is written: while the answer is still what it was when found, the
        first change is the same pass (it moves one way in time; `dispatch.cadence`)."""
        store = self.controller.store
        changes = store.changes if isinstance(store, SimStateStore) else None
        known = self._woken.get(key)
        if self.shortcuts and changes is not None and known is not None and known[0] == changes:
            wake = known[2]
            if (wake is None or now < wake - 1e-9) and said(now) == known[1]:
                return wake
        wake = first_change(said, now, self.step, until)
        if self.shortcuts and changes is not None:
            self._woken[key] = (changes, said(now), wake)
        return wake

    def _may_move(self, unfinished: list[Job]) -> bool:
        """Whether a steered spot run may move to cheaper spot (broker.dispatch.move): it
        may when a place reopens after a cool-down, or at a provider event."""
        from broker.state import OPEN_ATTEMPT, JobState

        if self.controller.settings.move_below <= 0:
            return False
        for job in unfinished:
            if job.state is not JobState.RUNNING:
                continue
            spec = self._spec(job)
            if spec.runtime.deadline is None or spec.requirements.spot != "prefer":
                continue
            attempts = self.controller.store.attempts(job.id, states=OPEN_ATTEMPT)
            if any(a.market == "spot" for a in attempts):
                return True
        return False

    # --- cool-downs ---------------------------------------------------------------------

    def _closed(self) -> set[tuple[str, str, str, str]]:
        from broker.recovery import cooling_places, recent_reclaims

        now = self.controller.clock.now()
        reclaims = recent_reclaims(self.controller.store, now)
        cooling = cooling_places(reclaims, now, self.controller.settings.cooldown_scale)
        return {(c.cloud, c.region, c.zone, c.instance_type) for c in cooling}

    def _cooling_wake(self, now: float) -> float:
        """The first pass at which a cool-down may end: a closed place reopens, or a
        reclaim leaves the HISTORY window (the next cool-down there is shorter)."""
        from broker.recovery import HISTORY, cooling_until, recent_reclaims

        when = self._at(now)
        reclaims = recent_reclaims(self.controller.store, when)
        scale = self.controller.settings.cooldown_scale
        times: dict[tuple, list[datetime]] = {}
        for r in reclaims:
            times.setdefault((r.cloud, r.region, r.zone, r.instance_type), []).append(r.at)
        moments = [cooling_until(sorted(ts), scale) for ts in times.values()]
        moments += [r.at + HISTORY for r in reclaims]
        later = [self._hours(m) for m in moments if m > when]
        return grid_from(min(later), self.step) if later else float("inf")

    # --- helpers ------------------------------------------------------------------------

    def _spot_open(self, spec: JobSpec) -> bool:
        """What the controller tells the policy (`Launching._spot_open`)."""
        if not self.controller.settings.spot_strict:
            return True
        return self.provider.spot_open(tuple(a.gpu for a in spec.requirements.accelerators))

    def _deadline(self, job: Job, spec: JobSpec) -> float:
        submitted = self.controller.store.version(job.id, job.version).submitted_at
        deadline = spec.runtime.deadline_at(submitted)
        return self._hours(deadline) if deadline is not None else float("inf")

    def _spec(self, job: Job) -> JobSpec:
        key = (job.id, job.version)
        if key not in self._specs:
            self._specs[key] = self.controller.store.version(job.id, job.version).spec
        return self._specs[key]

    def _at(self, hours: float) -> datetime:
        return self.origin + timedelta(hours=hours)

    def _hours(self, moment: datetime) -> float:
        return (moment - self.origin).total_seconds() / 3600.0


_ANY = object()  # the job may act at any pass: take the next one


@functools.cache
def _unfinished_states() -> tuple:
    """The job states that are not terminal, in the enum's order (one tuple: the store
    keys a read by its hashable arguments)."""
    from broker.state import TERMINAL, JobState

    return tuple(s for s in JobState if s not in TERMINAL)


@dataclass
class _JobReads:
    """A job's reads (`Cadence._reads_of`): the store's, where a queued job's checkpoint
    lies and the spec priced there, the policy's choice per `spot_available` (a
    steered on-demand run's per ("on-demand", `spot_available`)), and its hold."""

    store: _Reads
    home: object = None
    spec: JobSpec | None = None
    said: dict[object, Callable[[float], str]] = field(default_factory=dict)
    held: tuple[object, Callable[[datetime], Hold]] | None = None  # (offers table, hold)


class _Reads:
    """The store's reads that steering asks, each read once: the store does not change
    while the cadence asks its questions, and a bisection asks the same ones many times."""

    def __init__(self, store) -> None:
        self._store = store
        self._attempts: dict[str, list] = {}
        self._versions: dict[tuple[str, int | None], object] = {}
        self._checkpoints: dict | None = None
        self._lost: dict[str | None, dict] = {}

    def attempts(self, job_id: str):
        if job_id not in self._attempts:
            self._attempts[job_id] = self._store.attempts(job_id)
        return self._attempts[job_id]

    def version(self, job_id: str, number: int | None = None):
        key = (job_id, number)
        if key not in self._versions:
            self._versions[key] = self._store.version(job_id, number)
        return self._versions[key]

    def checkpoints(self):
        if self._checkpoints is None:
            self._checkpoints = self._store.checkpoints()
        return self._checkpoints

    def lost_shares(self, job_id: str | None = None):
        if job_id not in self._lost:
            self._lost[job_id] = self._store.lost_shares(job_id)
        return self._lost[job_id]
