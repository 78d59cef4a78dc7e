"""The fleet-scale engine: a cluster trace of tens of thousands of jobs in seconds.

The discrete-event engine (`engine.py`) drives the real controller over a SQLite
state store, one pass per event: faithful to production, and slow for a cluster trace.
Philly's 82,247 jobs need a leaner loop that keeps the same decisions, at the same
passes:

- **Passes**: everything due at one hour is one controller pass: runs that end and
  trace steps first, then steered on-demand runs that go back to spot, then every job
  that must decide, in the queue policy's order (`broker.sim.scale_order`). A job that
  waits is decided again at its own next pass (`broker.dispatch.cadence`: when a cool-down
  keeping it out ends, when its spot policy would answer otherwise), when spot frees or
  opens at one of its places, and at any pass within the step before that wake, as the
  controller would.
- **Placements** come from the production planner (`plan_many`), asked once per job
  shape and place of its checkpoint (`broker.sim.shapes`) with every market open. At
  each decision the job takes the first ranked placement open now: spot on sale with
  room at its place and not cooling down, a pool with free GPUs, on-demand always.
- **Market**: a deadline job with `spot: prefer` asks its spot policy through
  `broker.dispatch.market`, the question the controller asks; "spot" and "wait" then
  plan spot only (the `spot_strict` setting). A pool is open to every choice.
- **Full pool**: waited for or burst from as `broker.dispatch.pool` says
  (`broker.sim.scale_pool`); **stay_home** as `broker.dispatch.home` says.
- **Spot**: reclaims, cool-downs, back to spot and one pass's view of spot room
  (`broker.sim.scale_spot`).
- **Egress**: a job resuming away from its checkpoint pays its copy as the ledger
  prices it (`broker.state.charges.egress_entry`).

State lives in lists, events in a heap; ties break on sequence numbers, so the same
inputs give the same figures. Not modelled here (engine.py has them): learned
interruption rates (plans use the catalog's), quotas and budgets, price traces.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.dispatch.cadence import first_change, grid_from
from broker.dispatch.home import stays_home
from broker.dispatch.market import MarketAsk, choose_market, spot_only
from broker.sim.manifests import manifest_deadline
from broker.sim.metrics import PolicyResult
from broker.sim.model import SimJob
from broker.sim.scale_figures import Totals, scale_result
from broker.sim.scale_order import TeamUsage, queue_order
from broker.sim.scale_pool import PoolSide
from broker.sim.scale_rates import LearnedRates
from broker.sim.scale_spot import BACK, END, MOVE, RETRY, SUBMIT, TICK, SpotSide
from broker.sim.shapes import Option, ShapePlans, changes

if TYPE_CHECKING:
    from broker.sim.engine import Scenario
    from broker.sim.policies import SimPolicy

_EPS = 1e-9


@dataclass(slots=True)
class _Run:
    job: int
    option: Option
    start: float
    seq: int
    finish: float = 0.0  # when it ends, unless reclaimed
    steered: bool = False  # on demand by the spot policy's say: may go back to spot


@dataclass(slots=True)
class _JobState:
    saved: float = 0.0  # work hours safe in the last checkpoint
    run: _Run | None = None
    first_start: float | None = None
    end: float | None = None
    waiting: int = 0  # the sequence number of its pending retry (0: none)
    retry_at: float = -1.0  # when that retry falls due
    pool: str | None = None  # the pool whose queue it waits in
    where: tuple[str, str] | None = None  # (cloud, region) of its last run: its checkpoint's
    written: set[tuple[str, str]] = field(default_factory=set)  # regions holding a checkpoint
    queued_at: float | None = None  # when it last entered the queue (None: its submission)
    back: int = 0  # the sequence number of its pending back-to-spot check (0: none)
    asked_open: bool = False  # what its policy was last told of spot
    moved: bool = False  # its last run stopped to move to cheaper spot (no stay-home)


def simulate_at_scale(
    scenario: Scenario,
    policy: SimPolicy,
    *,
    spot_scale: int = 8,
    progress: Callable[[float], None] | None = None,
) -> PolicyResult:
    """Run `scenario` under `policy` with the fleet-scale loop (module docstring).
    `spot_scale`: spot runs a trace count of 1 stands for. A full pool's waiting budget
    is the policy's `pool_wait_factor` (0: burst at once)."""
    return _Fleet(scenario, policy, spot_scale, progress).run()


class _Fleet(SpotSide, PoolSide):
    def __init__(self, scenario, policy, spot_scale, progress) -> None:
        self.scenario, self.policy, self.progress = scenario, policy, progress
        self.jobs: list[SimJob] = sorted(scenario.jobs, key=lambda j: j.submit_hours)
        self.state = [_JobState() for _ in self.jobs]
        self.restart = scenario.restart_hours
        self.step = scenario.reconcile_hours
        self.scale = spot_scale
        self.settings = policy.settings(scenario.restart_hours, scenario.reconcile_hours)
        self.wait_factor = self.settings.pool_wait_factor
        self.plans = ShapePlans(scenario, policy, self.jobs)
        self.rates = LearnedRates()
        self.totals = Totals()
        self.events: list[tuple[float, int, int, object]] = []
        self.soon: list[tuple[float, int, int]] = []  # (wake, seq, job): see _due
        self.usage = TeamUsage(_default_half_life())
        self.teams: set[str] = set()
        self.priority = [j.priority for j in self.jobs]
        self.deadline = [manifest_deadline(j) for j in self.jobs]  # as the manifests say
        self.team = [j.team for j in self.jobs]
        self._places_of: dict[int, list] = {}
        self._wakes: dict[tuple, tuple] = {}  # (job, open) -> (saved, answers, wake)
        self._cooled: dict[int, set] = {}  # waiting job -> the cooling places it waits out
        self._usage: tuple[float, dict[str, float]] = (-1.0, {})
        self.seq = 0
        self.now = 0.0
        self.done = 0
        self._init_spot_side()
        self._init_pool_side()

    # --- the loop ---------------------------------------------------------------------

    def run(self) -> PolicyResult:
        for i, job in enumerate(self.jobs):
            self._push(job.submit_hours, SUBMIT, i)
        self.changes = changes(self.scenario.spot, self.scenario.horizon_hours)
        for t in self.changes:
            self._push(t, TICK, None)
        horizon = self.scenario.horizon_hours
        report_every = max(1, len(self.jobs) // 100)
        while self.events and self.done < len(self.jobs):
            if self.events[0][0] > horizon:
                break
            self.now = self.events[0][0]
            before = self.done
            self._pass()
            if self.progress is not None and self.done // report_every > before // report_every:
                self.progress(self.done / len(self.jobs))
        return scale_result(
            self.policy, self.scale, self.jobs, self.state, self.totals, self.pool_total, self.now
        )

    def _push(self, t: float, kind: int, item: object) -> int:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, item))
        return self.seq

    def _pass(self) -> None:
        """Everything due now, as one controller pass (module docstring)."""
        deciding: dict[int, None] = {}
        backs: list[int] = []
        passed = False
        self.freed = {}
        while self.events and self.events[0][0] <= self.now + _EPS:
            _t, kind, seq, item = heapq.heappop(self.events)
            if kind == END:
                passed |= self._end(item)  # type: ignore[arg-type]
            elif kind == TICK:
                deciding.update(dict.fromkeys(self._tick(_t)))
                passed = True
            elif kind == SUBMIT:
                deciding[item] = None  # type: ignore[index]
                passed = True
            elif kind == BACK and self.state[item].back == seq:  # type: ignore[index]
                backs.append(item)  # type: ignore[arg-type]
                passed = True
            elif kind == RETRY and self.state[item].waiting == seq:  # type: ignore[index]
                self.state[item].waiting = 0  # type: ignore[index]
                deciding[item] = None  # type: ignore[index]
                passed = True
            elif kind == MOVE:
                passed = True
        if not passed:
            return  # stale events only: no pass
        soon_wait, soon_back = self._due()
        moved = self._moved_openness()
        # observe: steered on-demand runs that go back to spot
        check = set(backs) | set(soon_back) | {i for i in moved if self.state[i].run}
        check |= set(self.spot_movers)  # steered spot runs: the move rule is asked too
        for i in sorted(check):
            if self._back_to_spot(i) or self._to_cheaper_spot(i):
                deciding[i] = None
        # launch: every job that may act now, in the queue's order
        deciding.update(dict.fromkeys(soon_wait))
        for place in list(self.freed):
            deciding.update(dict.fromkeys(self._waiters_for(place)))
        told = [i for i in moved if self.state[i].run is None and i not in deciding]
        self.rates.plan()
        for i in self._in_queue_order([*deciding, *told]):
            if i in deciding:
                self._decide(i)
            else:
                self._reconsider(i)
        self.rates.planned()

    def _due(self) -> tuple[list[int], list[int]]:
        """Jobs woken within the next step (waiting, and on steered runs): a pass now may
        already see them act (their cool-down over, their policy's answer changed since
        the last grid pass). Each stays due at its wake unless decided again."""
        due = []
        while self.soon and self.soon[0][0] < self.now + self.step - _EPS:
            due.append(heapq.heappop(self.soon))
        waiting, backs = [], []
        for wake, seq, i in due:
            if wake <= self.now + _EPS:
                continue  # its own event handles it
            st = self.state[i]
            if st.waiting == seq:
                if self._may_act(i):
                    waiting.append(i)
            elif st.back == seq:
                backs.append(i)
            else:
                continue
            heapq.heappush(self.soon, (wake, seq, i))
        return waiting, backs

    def _may_act(self, i: int) -> bool:
        """Whether waiting job `i` may act at this pass before its wake: a cool-down that
        kept it out is over, or its policy answers otherwise than when it last waited."""
        if any(
            self._cooling_until(k) is None and k in self._cooled.get(i, ())
            for k in self._spot_places(i)
        ):
            return True
        st = self.state[i]
        known = self._wakes.get((i, st.asked_open))
        if known is None:
            return True
        said = (self._choice(i, self.now, st.asked_open),
                self._choice(i, self.now, False) if st.where is not None else "")  # fmt: skip
        return said != known[1]

    def _remember(self, i: int, wake: float, seq: int) -> None:
        heapq.heappush(self.soon, (wake, seq, i))

    def _waiters_for(self, place: int) -> list[int]:
        """The jobs waiting for `place` that its freed room can take, first in the queue's
        order first. (The controller plans every queued job in the pass, and the others
        would lose the race for the room and wait again: they are left waiting.)"""
        room = self._spot_left(place)
        if room <= 0 or not self.spot_waiters[place]:
            return []
        waiting = [i for i in self.spot_waiters[place] if self._queued(i)]
        if room >= len(waiting):
            return waiting  # all of them: the pass decides them in the queue's order
        return self._in_queue_order(waiting)[: int(room)]

    def _reconsider(self, i: int) -> None:
        """Waiting job `i` is told otherwise of spot: its policy's answer, and so its next
        wake, may change; it decides again only if the answer is now on-demand (room that
        freed in this pass went to the waiters the room could take)."""
        _, choice = self._markets(i)
        if choice in ("on-demand", ""):
            return self._decide(i)
        wakes = [self._next_change(i)]
        reopens = self._reopening(i)
        if reopens is not None:
            wakes.append(reopens)
        self._retry(i, min(wakes))

    def _team_usage(self) -> dict[str, float]:
        if self._usage[0] != self.now:  # launches now add nothing yet: once per pass
            self._usage = (self.now, self.usage.usage(self.now))
        return self._usage[1]

    def _queued(self, i: int) -> bool:
        return self.state[i].run is None and self.state[i].end is None

    def _in_queue_order(self, jobs) -> list[int]:
        chosen = [i for i in jobs if self._queued(i)]
        if len(chosen) < 2:
            return chosen
        return queue_order(
            chosen,
            priority=self.priority,
            team=self.team,
            queued_at={i: self.jobs[i].submit_hours for i in chosen},  # the store's: kept
            usage=self._team_usage(),
            teams=self.teams,
        )

    # --- one job's decision ---------------------------------------------------------------

    def _decide(self, i: int) -> None:
        st = self.state[i]
        if st.run is not None or st.end is not None:
            return
        for place in self._spot_places(i):
            self.spot_waiters[place].pop(i, None)
        self._unwatch(i)
        self._unqueue(i)
        markets, choice = self._markets(i)
        home = self._home(i, choice)
        pool_pick: Option | None = None
        cloud: Option | None = None
        for option in self.rates.ranked(self._options(i), self.now):
            if option.kind == "pool":
                if self._pool_has_room(option):
                    return self._launch(i, option, steered=choice == "on-demand")
                if pool_pick is None and self.wait_factor > 0:
                    pool_pick = option
                continue
            if option.kind not in markets:
                continue
            if option.kind == "spot" and (
                self._seen_left(option.key) <= 0 or self._cooling_until(option.key) is not None
            ):
                continue
            if home is not None and option.region != home:
                continue
            cloud = option
            break
        if pool_pick is not None and self._wait_for_pool(i, pool_pick, cloud):
            return
        if cloud is not None and cloud.kind == "spot" and self._spot_left(cloud.key) <= 0:
            return self._lost_race(i, cloud)
        if cloud is not None:
            return self._launch(i, cloud, steered=choice == "on-demand")
        self._wait(i, choice)

    def _markets(self, i: int) -> tuple[tuple[str, ...], str]:
        """The cloud markets this decision may use, and the spot policy's choice ("" when
        not asked): the manifests' spot setting, and for deadline jobs with `spot:
        prefer`, what the policy says (broker.dispatch.market)."""
        spot_setting = self.policy.spot
        if spot_setting == "never":
            return ("on-demand",), ""
        if spot_setting == "only":
            return ("spot",), ""
        if self.jobs[i].deadline_hours is None:
            return ("spot", "on-demand"), ""
        self.state[i].asked_open = is_open = self._spot_open(i)
        choice = self._choice(i, self.now, is_open)
        if choice == "on-demand":
            return ("on-demand",), choice
        if spot_only(choice, self.settings):
            return ("spot",), choice
        return ("spot", "on-demand"), choice

    def _choice(self, i: int, at: float, spot_open: bool, current: str | None = None) -> str:
        """The spot policy's answer for job `i` at hour `at` (`current`: what runs, whose
        progress then counts)."""
        ask = self._ask(i, at, current)
        return choose_market(ask, self.settings, current=current, spot_available=spot_open)

    def _ask(self, i: int, at: float, current: str | None = None) -> MarketAsk:
        """Job `i`'s situation at hour `at`, as the controller's `market_ask` has it."""
        job, st = self.jobs[i], self.state[i]
        done = st.saved
        if current is not None and st.run is not None:
            done += max(0.0, at - st.run.start - self.restart)
        ask = MarketAsk(
            elapsed=max(0.0, at - job.submit_hours),  # events within 1e-9 h are one pass
            deadline=self.deadline[i],  # type: ignore[arg-type]
            work_total=job.hours,
            work_done=done,
            restart_hours=self.restart,
            checkpoint_hours=job.checkpoint_minutes / 60 if job.checkpoint_minutes else None,
        )
        return ask

    def _next_change(self, i: int) -> float:
        """The first pass at which idle job `i`'s spot policy would answer otherwise, as
        spot is on sale now and, for a job with a checkpoint somewhere, as if none were
        (what stay-home asks); its deadline when neither changes."""
        job, step, st = self.jobs[i], self.step, self.state[i]
        deadline = job.submit_hours + self.deadline[i]  # type: ignore[operator]
        is_open, home = st.asked_open, st.where is not None
        said = (self._choice(i, self.now, is_open),
                self._choice(i, self.now, False) if home else "")  # fmt: skip
        known = self._wakes.get((i, is_open))
        # the same question with the same answers now as at the last wake asked: the same
        # first change (every pass between answered as then)
        if known is not None and known[:2] == (st.saved, said) and self.now < known[2]:
            return known[2]
        wakes = [first_change(lambda t: self._choice(i, t, is_open), self.now, step, deadline)]
        if home:
            wakes.append(first_change(lambda t: self._choice(i, t, False), self.now, step,
                                      deadline))  # fmt: skip
        found = [w for w in wakes if w is not None]
        wake = min(found) if found else grid_from(deadline, step)
        self._wakes[(i, is_open)] = (st.saved, said, wake)
        return wake

    def _home(self, i: int, choice: str) -> tuple[str, str] | None:
        """The checkpoint's region, when the job's spot is kept there now
        (broker.dispatch.home)."""
        home = self.state[i].where
        reclaimed = not self.state[i].moved  # a job that moved by choice is not kept home
        kept = stays_home(
            self.settings,
            has_home=home is not None and self.jobs[i].checkpoint_minutes is not None and reclaimed,
            choice=choice,
            choice_without_spot=lambda: self._choice(i, self.now, False),
        )
        return home if kept else None

    def _options(self, i: int) -> list[Option]:
        """Job `i`'s ranked options now: planned with its checkpoint where it last ran."""
        return self.plans.options(i, self.state[i].where)

    def _wait(self, i: int, choice: str) -> None:
        """Nothing open fits: wait for spot. Decided again when spot frees or opens, when
        a cool-down keeping it out ends, and for a steered job when its spot policy
        would answer otherwise."""
        for place in self._spot_places(i):
            self.spot_waiters[place][i] = None
        wakes = []
        if choice:
            self._watch(i)
            wakes.append(self._next_change(i))
        reopens = self._reopening(i)
        if reopens is not None:
            wakes.append(reopens)
            self._cooled[i] = {k for k in self._spot_places(i) if self._cooling_until(k)}
        if wakes:
            self._retry(i, min(wakes))

    def _retry(self, i: int, at: float) -> None:
        """Decide job `i` again at `at` (replacing any retry pending)."""
        st = self.state[i]
        if st.waiting and st.retry_at == at:
            return  # already due then
        st.waiting, st.retry_at = self._push(at, RETRY, i), at
        self._remember(i, at, st.waiting)

    def _spot_places(self, i: int) -> list[int]:
        """The traced spot places among job `i`'s options (shared per shape, memoised)."""
        options = self.plans.options(i)
        places = self._places_of.get(id(options))
        if places is None:
            places = [o.key for o in options if o.kind == "spot" and o.key is not None]
            self._places_of[id(options)] = places
        return places

    # --- runs ------------------------------------------------------------------------------

    def _launch(self, i: int, option: Option, steered: bool = False) -> None:
        st, job = self.state[i], self.jobs[i]
        self._unqueue(i)
        run = _Run(i, option, self.now, 0, steered=steered and option.kind != "spot")
        st.run, st.waiting, st.moved = run, 0, False
        if st.first_start is None:
            st.first_start = self.now
        self._move_checkpoint(i, option.region)
        st.where = option.region
        if option.kind == "pool":
            self._pool_started(run)
        elif option.kind == "spot" and option.key is not None:
            self.spot_runs[option.key].append(run)  # type: ignore[index]
            self._spot_started(option.key)
        if self._may_move(i):
            self.spot_movers[i] = None
        run.finish = self.now + self.restart + job.hours - st.saved
        run.seq = self._push(run.finish, END, run)
        if option.kind == "spot":
            self.rates.start(option.rate_key, run.seq, self.now)  # type: ignore[arg-type]
        self.teams.add(job.team)
        self.usage.start(job.team, run.seq, option.gpus, self.now)
        if run.steered:
            self._watch(i)
            self._back_wake(i)

    def _move_checkpoint(self, i: int, to: tuple[str, str]) -> None:
        """A job resuming away from its checkpoint pays to copy it there, once, at the
        checkpoint's size: the egress the ledger charges (broker.state.charges)."""
        st, job = self.state[i], self.jobs[i]
        if st.where is None or st.where == to or st.where not in st.written:
            return
        st.written.add(to)
        if not job.checkpoint_gb > 0:
            return
        from broker.state.charges import egress_entry
        from broker.state.model import multiply, to_decimal
        from pricing.regions import Place

        size = to_decimal(job.checkpoint_gb)
        entry = egress_entry(Place(*st.where), to, size, "checkpoint migration", {})
        if entry is None:
            return
        self._bill(float(multiply(size, to_decimal(entry["unit_price_usd"]))), egress=True)

    def _bill(self, usd: float, egress: bool = False) -> None:
        self.totals.cost += usd
        if egress:
            self.totals.egress += usd
        day = int(self.now // 24)
        self.totals.daily[day] = self.totals.daily.get(day, 0.0) + usd

    def _end(self, run: _Run) -> bool:
        """The run's work is done (False: it was stopped before, nothing happens)."""
        st = self.state[run.job]
        if st.run is not run:
            return False
        self._close(run)
        st.saved = self.jobs[run.job].hours
        st.written.add(run.option.region)
        st.end = self.now
        self.done += 1
        return True

    def _close(self, run: _Run, reclaimed: bool = False) -> None:
        """Bill the run up to now and give its capacity back."""
        hours = self.now - run.start
        option = run.option
        cost = option.price * hours
        self._bill(cost)
        st = self.state[run.job]
        st.run, st.back = None, 0
        self.spot_movers.pop(run.job, None)
        self._unwatch(run.job)
        self.usage.end(self.jobs[run.job].team, run.seq, self.now)
        if option.kind == "pool":
            self._pool_stopped(run, hours)
        elif option.kind == "spot":
            self.totals.spot_cost += cost
            self.rates.end(option.rate_key, run.seq, self.now, reclaimed)  # type: ignore[arg-type]
            if option.key is not None:
                self.spot_runs[option.key].remove(run)  # type: ignore[index]
                self._spot_stopped(option.key)


def _default_half_life() -> float:
    from broker.queue import Policy

    return Policy().fair_share_half_life_hours
