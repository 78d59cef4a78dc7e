"""The fleet-scale engine: a cluster trace of tens of thousands of jobs in seconds.

The discrete-event engine (`engine.py`) drives the real controller over a SQLite
state store, one pass per event: faithful to production, and about one job per wall
second. Philly's 82,247 jobs need a leaner loop that keeps the same decisions:

- **Placements** come from the production planner (`plan_many`), asked once per job
  shape (GPU, count, market, duration and deadline bucket) with every market open. At
  each decision the job takes the first ranked placement open now: spot on sale with
  room at its place, a pool with free GPUs, on-demand always. That is what planning
  over the current offers ranks first, because a placement's expected cost does not
  depend on which other offers exist.
- **Market**: a deadline job with `spot: prefer` asks its spot policy through
  `broker.dispatch.market`, the question the controller asks in production; "spot"
  and "wait" then plan spot only (the `spot_strict` setting). A pool is open to every
  choice: it is no spot gamble.
- **Full pool**: with the policy's `pool_wait_factor` > 0 (`broker`), wait for it when
  `broker.dispatch.pool` says waiting is cheaper and fits the waiting budget and the
  deadline (Starburst), as the controller does; else (`burst-always`) take the next
  placement at once.
- **stay_home**: a reclaimed job's spot stays in its checkpoint's region while its spot
  policy would still wait (`broker.dispatch.home`, as in the controller).
- **Spot**: a place holds at most the trace's count x `spot_scale` spot runs. When the
  count drops, the newest runs there are reclaimed and lose the work since their last
  checkpoint; the job decides again at once.

State lives in lists, events in a heap; ties break on sequence numbers, so the same
inputs give the same figures. A job resuming away from its checkpoint pays its copy's
egress as the ledger prices it. Not modelled here (engine.py has them): an on-demand run
going back to spot (it runs to its end), cool-downs, learned interruption rates, queue
priorities, quotas and budgets, price traces.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.dispatch.home import stays_home
from broker.dispatch.market import MarketAsk, choose_market, spot_only
from broker.dispatch.pool import PoolWait, give_up_at, waits_for_pool
from broker.sim.metrics import PolicyResult
from broker.sim.model import SimJob
from broker.sim.scale_figures import Totals, scale_result
from broker.sim.shapes import Option, changes, plan_shapes

if TYPE_CHECKING:
    from broker.sim.engine import Scenario
    from broker.sim.policies import SimPolicy

_END, _TICK, _SUBMIT, _RETRY = 0, 1, 2, 3  # event order at one instant
_EPS = 1e-9
_MIN_RETRY = 1 / 60  # hours: a pool waiter is never re-decided twice in one instant


@dataclass(slots=True)
class _Run:
    job: int
    option: Option
    start: float
    seq: int
    finish: float = 0.0  # when it ends, unless reclaimed


@dataclass(slots=True)
class _JobState:
    saved: float = 0.0  # work hours safe in the last checkpoint
    run: _Run | None = None
    first_start: float | None = None
    end: float | None = None
    waiting: int = 0  # the sequence number of its pending retry (0: none)
    retry_at: float = -1.0  # when that retry falls due
    pool: str | None = None  # the pool whose queue it waits in
    home: tuple[str, str] | None = None  # (cloud, region) of its checkpoint, once reclaimed
    where: tuple[str, str] | None = None  # (cloud, region) of its last run: its checkpoint's
    queued_at: float | None = None  # when it last entered the queue (None: its submission)


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


class _Fleet:
    def __init__(self, scenario, policy, spot_scale, progress) -> None:
        self.scenario, self.policy, self.progress = scenario, policy, progress
        self.jobs: list[SimJob] = sorted(scenario.jobs, key=lambda j: j.submit_hours)
        self.state = [_JobState() for _ in self.jobs]
        self.restart = scenario.restart_hours
        self.scale = spot_scale
        self.settings = policy.settings(scenario.restart_hours, scenario.reconcile_hours)
        self.wait_factor = self.settings.pool_wait_factor
        self.options = plan_shapes(scenario, policy, self.jobs)
        self.spot = scenario.spot.places
        self.spot_room = [a.count_at(0.0) * spot_scale for a in self.spot.values()]
        self.spot_runs: list[list[_Run]] = [[] for _ in self.spot]
        self.pool_total = {name: gpus for (_c, name), gpus in scenario.pool_gpus.items()}
        self.pool_free = dict(self.pool_total)
        self.pool_runs: dict[str, dict[int, _Run]] = {name: {} for name in self.pool_total}
        self.pool_queue: dict[str, list[int]] = {name: [] for name in self.pool_total}
        self.pool_queued_gpus = dict.fromkeys(self.pool_total, 0.0)
        # jobs waiting for spot, per spot place they could use (insertion-ordered sets)
        self.spot_waiters: list[dict[int, None]] = [{} for _ in self.spot]
        self.totals = Totals()
        self.events: list[tuple[float, int, int, object]] = []
        self._places_of: dict[int, list] = {}
        self.seq = 0
        self.now = 0.0
        self.done = 0

    # --- the loop ---------------------------------------------------------------------

    def run(self) -> PolicyResult:
        for i, job in enumerate(self.jobs):
            self._push(job.submit_hours, _SUBMIT, i)
        self.changes = changes(self.scenario.spot, self.scenario.horizon_hours)
        for t in self.changes:
            self._push(t, _TICK, None)
        horizon = self.scenario.horizon_hours
        report_every = max(1, len(self.jobs) // 100)
        while self.events and self.done < len(self.jobs):
            t, kind, seq, item = heapq.heappop(self.events)
            if t > horizon:
                break
            self.now = t
            if kind == _END:
                self._end(item)  # type: ignore[arg-type]
            elif kind == _TICK:
                self._tick(t)
            elif kind == _SUBMIT:
                self._decide(item)  # type: ignore[arg-type]
            elif self.state[item].waiting == seq:  # type: ignore[index]
                self.state[item].waiting = 0  # type: ignore[index]
                self._decide(item)  # type: ignore[arg-type]
            if self.progress is not None and self.done % report_every == 0 and kind == _END:
                self.progress(self.done / len(self.jobs))
        return self._result()

    def _push(self, t: float, kind: int, item: object) -> int:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, item))
        return self.seq

    # --- one job's decision ---------------------------------------------------------------

    def _decide(self, i: int) -> None:
        st = self.state[i]
        if st.run is not None or st.end is not None:
            return
        for place in self._spot_places(i):
            self.spot_waiters[place].pop(i, None)
        self._unqueue(i)
        options = self.options[i]
        markets, choice = self._markets(i)
        home = self._home(i, choice)
        pool_pick: Option | None = None
        cloud: Option | None = None
        for option in options:
            if option.kind == "pool":
                if self.pool_free[option.key] + _EPS >= option.gpus and not self._queued(option):
                    return self._launch(i, option)
                if pool_pick is None and self.wait_factor > 0:
                    pool_pick = option
                continue
            if option.kind not in markets:
                continue
            if option.kind == "spot" and self._spot_left(option.key) <= 0:
                continue
            if home is not None and option.region != home:
                continue
            cloud = option
            break
        if pool_pick is not None and self._wait_for_pool(i, pool_pick, cloud):
            return
        if cloud is not None:
            return self._launch(i, cloud)
        self._wait(i)

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
        open_now = any(self._spot_left(k) > 0 for k in self._spot_places(i))
        choice = self._choice(i, self.now, open_now)
        if choice == "on-demand":
            return ("on-demand",), choice
        if spot_only(choice, self.settings):
            return ("spot",), choice
        return ("spot", "on-demand"), choice

    def _choice(self, i: int, at: float, spot_open: bool) -> str:
        """The spot policy's answer for idle job `i` at hour `at`."""
        job = self.jobs[i]
        ask = MarketAsk(
            elapsed=at - job.submit_hours,
            deadline=job.deadline_hours,  # type: ignore[arg-type]
            work_total=job.hours,
            work_done=self.state[i].saved,
            restart_hours=self.restart,
            checkpoint_hours=job.checkpoint_minutes / 60 if job.checkpoint_minutes else None,
        )
        return choose_market(ask, self.settings, spot_available=spot_open)

    def _next_change(self, i: int) -> float:
        """The first reconcile step at which idle job `i`'s spot policy would stop
        answering as it does now, were spot to stay closed: found by bisection, since
        while nothing runs the answers move one way in time (waiting turns to on-demand
        as the spare runs out). Re-deciding there equals re-deciding at every step."""
        job, step = self.jobs[i], self.scenario.reconcile_hours
        now_says = self._choice(i, self.now, False)
        last = job.submit_hours + job.deadline_hours  # type: ignore[operator]
        high = max(1, math.ceil((last - self.now) / step))
        if self._choice(i, self.now + high * step, False) == now_says:
            return self.now + high * step
        low = 0  # answers as now at low; differently at high
        while high - low > 1:
            mid = (low + high) // 2
            if self._choice(i, self.now + mid * step, False) == now_says:
                low = mid
            else:
                high = mid
        return self.now + high * step

    def _home(self, i: int, choice: str) -> tuple[str, str] | None:
        """The checkpoint's region, when a reclaimed job's spot is kept there now
        (broker.dispatch.home)."""
        home = self.state[i].home
        kept = stays_home(
            self.settings,
            has_home=home is not None,
            checkpoint_gb=self.jobs[i].checkpoint_gb,
            choice=choice,
            choice_without_spot=lambda: self._choice(i, self.now, False),
        )
        return home if kept else None

    def _queued(self, option: Option) -> bool:
        return bool(self.pool_queue[option.key])

    def _wait_for_pool(self, i: int, option: Option, cloud: Option | None) -> bool:
        job, name = self.jobs[i], option.key
        queue = self.pool_queue[name]
        queued_at = self.state[i].queued_at
        if queued_at is None:
            queued_at = job.submit_hours
        work = job.hours - self.state[i].saved
        deadline = None if job.deadline_hours is None else job.submit_hours + job.deadline_hours
        ask = PoolWait(
            now=self.now,
            free_gpus=self.pool_free[name],
            need_gpus=option.gpus + self.pool_queued_gpus[name],  # first come, first served
            ends=[(r.finish, r.option.gpus) for r in self.pool_runs[name].values()],
            work_hours=work,
            restart_hours=self.restart,
            deadline=deadline,
            pool_cost=option.cost_per_work_hour * work,
            cloud_cost=math.inf if cloud is None else cloud.cost_per_work_hour * work,
            waited=self.now - queued_at,
        )
        if not waits_for_pool(ask, self.wait_factor):
            return False
        queue.append(i)
        self.pool_queued_gpus[name] += option.gpus
        self.state[i].pool = name
        # decide again once the budget is spent or the deadline needs the cloud
        latest = give_up_at(queued_at, work, self.restart, deadline, self.wait_factor)
        self._retry(i, max(latest, self.now + _MIN_RETRY))
        return True

    def _unqueue(self, i: int) -> None:
        name = self.state[i].pool
        if name is not None:
            self.pool_queue[name].remove(i)
            self.pool_queued_gpus[name] -= self._pool_option(i, name).gpus
            self.state[i].pool = None

    def _pool_option(self, j: int, name: str) -> Option:
        return next(o for o in self.options[j] if o.kind == "pool" and o.key == name)

    def _wait(self, i: int) -> None:
        """Nothing open fits: wait for spot. Retried when spot frees or opens, and for
        a deadline job when its spot policy would turn to on-demand (_next_change)."""
        for place in self._spot_places(i):
            self.spot_waiters[place][i] = None
        st = self.state[i]
        pending = st.waiting and st.retry_at > self.now  # still right: the job stayed idle
        if self.jobs[i].deadline_hours is not None and self.policy.spot == "prefer":
            if not pending:
                self._retry(i, self._next_change(i))

    def _retry(self, i: int, at: float) -> None:
        """Decide job `i` again at `at` (replacing any retry pending)."""
        st = self.state[i]
        st.waiting, st.retry_at = self._push(at, _RETRY, i), at

    def _spot_places(self, i: int) -> list[int]:
        """The traced spot places among job `i`'s options (shared per shape, memoised)."""
        options = self.options[i]
        places = self._places_of.get(id(options))
        if places is None:
            places = [o.key for o in options if o.kind == "spot" and o.key is not None]
            self._places_of[id(options)] = places
        return places

    # --- runs ------------------------------------------------------------------------------

    def _launch(self, i: int, option: Option) -> None:
        st = self.state[i]
        self._unqueue(i)
        run = _Run(i, option, self.now, 0)
        st.run, st.waiting = run, 0
        if st.first_start is None:
            st.first_start = self.now
        self._move_checkpoint(i, option.region)
        st.where = option.region
        if option.kind == "pool":
            self.pool_free[option.key] -= option.gpus
            self.pool_runs[option.key][i] = run
        elif option.kind == "spot" and option.key is not None:
            self.spot_runs[option.key].append(run)  # type: ignore[index]
        run.finish = self.now + self._left(run)
        run.seq = self._push(run.finish, _END, run)

    def _move_checkpoint(self, i: int, to: tuple[str, str]) -> None:
        """A job resuming away from its checkpoint pays to copy it there, once, at the
        checkpoint's size: the egress the ledger charges (broker.state.charges)."""
        st, job = self.state[i], self.jobs[i]
        if st.where is None or st.where == to or st.saved <= 0 or not job.checkpoint_gb > 0:
            return
        from broker.state.charges import egress_entry
        from broker.state.model import multiply, to_decimal
        from pricing.regions import Place

        size = to_decimal(job.checkpoint_gb)
        entry = egress_entry(Place(*st.where), to, size, "checkpoint migration", {})
        if entry is None:
            return
        cost = float(multiply(size, to_decimal(entry["unit_price_usd"])))
        self.totals.cost += cost
        self.totals.egress += cost
        day = int(self.now // 24)
        self.totals.daily[day] = self.totals.daily.get(day, 0.0) + cost

    def _left(self, run: _Run) -> float:
        """Hours from the run's start to its end: restart, then the work left."""
        return self.restart + self.jobs[run.job].hours - self.state[run.job].saved

    def _end(self, run: _Run) -> None:
        st = self.state[run.job]
        if st.run is not run:
            return  # reclaimed before it finished
        self._close(run)
        st.saved = self.jobs[run.job].hours
        st.end = self.now
        self.done += 1

    def _close(self, run: _Run) -> None:
        """Bill the run up to now and give its capacity back."""
        hours = self.now - run.start
        option = run.option
        cost = option.price * hours
        totals = self.totals
        totals.cost += cost
        day = int(self.now // 24)
        totals.daily[day] = totals.daily.get(day, 0.0) + cost
        self.state[run.job].run = None
        if option.kind == "pool":
            totals.pool_gpu_hours += option.gpus * hours
            self.pool_free[option.key] += option.gpus
            del self.pool_runs[option.key][run.job]
            self._serve_pool(option.key)
        elif option.kind == "spot":
            totals.spot_cost += cost
            if option.key is not None:
                self.spot_runs[option.key].remove(run)  # type: ignore[index]
                self._serve_spot_waiters(option.key, 1)

    def _serve_pool(self, name: str) -> None:
        """First come, first served: start the waiting jobs the freed GPUs now fit."""
        queue = self.pool_queue[name]
        while queue:
            j = queue[0]
            option = self._pool_option(j, name)
            if option.gpus > self.pool_free[name] + _EPS:
                return
            self._launch(j, option)  # takes it off the queue

    def _serve_spot_waiters(self, place: int, slots: int) -> None:
        """Room for `slots` spot runs at `place`: the jobs waiting for it decide again,
        first come first served, until the room is taken."""
        waiting = self.spot_waiters[place]
        while waiting and self._spot_left(place) > 0 and slots > 0:
            j = next(iter(waiting))
            self._decide(j)
            waiting.pop(j, None)  # it waits again elsewhere if it did not start
            slots -= 1

    def _spot_left(self, place: object) -> float:
        """Spot runs a place can still take; untraced places (kept only when the scenario's
        `untraced_spot` is open) are unlimited."""
        if place is None:
            return math.inf
        return self.spot_room[place] - len(self.spot_runs[place])  # type: ignore[index]

    # --- trace steps -----------------------------------------------------------------------

    def _tick(self, t: float) -> None:
        """Apply every count that changes at `t` first, then let the reclaimed jobs decide
        again, then the jobs waiting where spot opened: no job lands on a place whose
        count falls at the same step."""
        opened, reclaimed = [], []
        for place, count in self.changes[t]:
            room = count * self.scale
            before = self.spot_room[place]
            self.spot_room[place] = room
            runs = self.spot_runs[place]
            while len(runs) > room:
                reclaimed.append(self._reclaim(runs[-1]))
            if room > before:
                opened.append(place)
        for i in reclaimed:
            self._decide(i)
        for place in opened:
            self._serve_spot_waiters(place, self._spot_left(place))

    def _reclaim(self, run: _Run) -> int:
        """End a spot run at a reclaim; the job (returned) keeps its checkpointed work."""
        job, st = self.jobs[run.job], self.state[run.job]
        ran = max(0.0, self.now - run.start - self.restart)
        every = job.checkpoint_minutes / 60 if job.checkpoint_minutes else None
        kept = math.floor(ran / every + _EPS) * every if every else 0.0
        # as the reports count it (broker.reports.lines.lost_share): the time since the
        # run's last checkpoint, or since its start (restart included) without one
        lost = ran - kept if kept > 0 else self.now - run.start
        self.totals.lost_gpu_hours += lost * run.option.gpus
        self.totals.preemptions += 1
        self._close(run)
        st.saved = min(job.hours, st.saved + kept)
        if every:
            st.home = run.option.region
        st.queued_at = self.now  # back in the queue: a fresh waiting budget, as in the controller
        return run.job

    def _result(self) -> PolicyResult:
        return scale_result(
            self.policy, self.scale, self.jobs, self.state, self.totals, self.pool_total, self.now
        )

