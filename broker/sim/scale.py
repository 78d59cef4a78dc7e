"""The fleet-scale engine: a cluster trace of tens of thousands of jobs in seconds.

The discrete-event engine (`engine.py`) drives the real controller over a SQLite
state store, one pass per event: faithful to production, and slow for a cluster trace.
Philly's 82,247 jobs need a leaner loop that keeps the same decisions, at the same
passes:

- **Passes**: everything due at one hour is one controller pass: runs that end and
  trace steps first, then steered on-demand runs that go back to spot and steered spot
  runs that move to much cheaper spot (`broker.dispatch.move`), then every job
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
- **Spot**: reclaims, cool-downs, back to spot, moves and one pass's view of spot room
  (`broker.sim.scale_spot`).
- **Egress**: a job resuming away from its checkpoint pays its copy as the ledger
  prices it (`broker.state.charges.egress_entry`).
- **One job's decision** (`broker.sim.scale_decide`) and its **runs and books**
  (`broker.sim.scale_runs`); learned interruption rates (`broker.sim.scale_rates`).

State lives in lists, events in a heap; ties break on sequence numbers, so the same
inputs give the same figures. What a pass asks again and again is kept, never
approximated: the spot policy's answers (a pure function of what it is asked), the
first change a bisection found from the same grid step and answer, and one pass's view
of which places sell spot (tests/broker/test_sim_scale.py runs without them and
compares). Not modelled here (engine.py has them): quotas and budgets, price traces.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.sim.manifests import manifest_deadline
from broker.sim.metrics import PolicyResult
from broker.sim.model import SimJob
from broker.sim.scale_decide import DecideSide
from broker.sim.scale_figures import Totals, scale_result
from broker.sim.scale_order import TeamUsage, queue_order
from broker.sim.scale_pool import PoolSide
from broker.sim.scale_rates import LearnedRates
from broker.sim.scale_runs import JobState, RunSide
from broker.sim.scale_spot import BACK, END, MOVE, RETRY, SUBMIT, TICK, SpotSide
from broker.sim.shapes import ShapePlans, changes

if TYPE_CHECKING:
    from broker.sim.engine import Scenario
    from broker.sim.policies import SimPolicy

_EPS = 1e-9


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


class _Fleet(DecideSide, RunSide, SpotSide, PoolSide):
    def __init__(self, scenario, policy, spot_scale, progress) -> None:
        self.scenario, self.policy, self.progress = scenario, policy, progress
        self.jobs: list[SimJob] = sorted(scenario.jobs, key=lambda j: j.submit_hours)
        self.state = [JobState() for _ in self.jobs]
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
        self.submitted = [j.submit_hours for j in self.jobs]
        self._places_of: dict[int, list] = {}
        self._places_by_job: list[list[int] | None] = [None] * len(self.jobs)
        self._wakes: dict[tuple, tuple] = {}  # (job, open) -> (saved, answers, wake)
        self._cooled: dict[int, set] = {}  # waiting job -> the cooling places it waits out
        self._usage: tuple[float, dict[str, float]] = (-1.0, {})
        self._said: dict[tuple, str] = {}  # the spot policy's answers (DecideSide._choice)
        self._changes: dict[tuple, float | None] = {}  # first changes (_first_change)
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
        cooled = self._cooled.get(i)  # the cooling places among its own, when it waited
        if cooled and any(self._cooling_until(k) is None for k in cooled):
            return True
        st = self.state[i]
        known = self._wakes.get((i, st.asked_open))
        if known is None:
            return True
        # the answers now against those its wake was found with (each asked only if needed)
        if self._choice(i, self.now, st.asked_open) != known[1][0]:
            return True
        return (self._choice(i, self.now, False) if st.where is not None else "") != known[1][1]

    def _remember(self, i: int, wake: float, seq: int) -> None:
        heapq.heappush(self.soon, (wake, seq, i))

    def _waiters_for(self, place: int) -> list[int]:
        """The jobs waiting for `place`, when it has room again: all of them, decided in
        the queue's order, as the controller plans every queued job in the pass. Those
        the room cannot take lose the race (`_lost_race`); those whose decision takes
        them elsewhere (kept home, held after a reclaim) leave the room to the next.
        Deciding only as many as the room could take let a job kept home stand for one
        that would have launched (docs/benchmarks.md, "The hold after our own reclaims,
        built")."""
        if self._spot_left(place) <= 0 or not self.spot_waiters[place]:
            return []
        st = self.state
        return [i for i in self.spot_waiters[place] if st[i].run is None and st[i].end is None]

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

    def _in_queue_order(self, jobs) -> list[int]:
        state = self.state
        chosen = [i for i in jobs if state[i].run is None and state[i].end is None]
        if len(chosen) < 2:
            return chosen
        return queue_order(
            chosen,
            priority=self.priority,
            team=self.team,
            queued_at=self.submitted,  # the store's queued_at: a job's submission, kept
            usage=self._team_usage,
            teams=self.teams,
        )


def _default_half_life() -> float:
    from broker.queue import Policy

    return Policy().fair_share_half_life_hours
