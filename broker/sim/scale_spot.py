"""The fleet-scale engine's spot side, as the controller has it: trace steps and reclaims,
cool-downs, a policy-steered on-demand run going back to spot, and one pass's view of
spot room.

- **Reclaims**: a place holds at most the trace's count x `spot_scale` spot runs; when
  the count drops, the newest runs are reclaimed and keep the work of their last
  checkpoint (lost work counted as the reports count it).
- **Cool-downs** (`broker.recovery.cooldown`): a place that reclaimed a run sells no spot
  to the engine for 10 minutes, doubling with each reclaim there in the last 4 hours
  (`broker.recovery.HISTORY`; at most 4 hours), times the settings' `cooldown_scale`. The
  spot policy is still told spot is on sale there (the controller asks the provider, which
  knows nothing of cool-downs).
- **Back to spot** (`Controller._back_to_spot`): a run the spot policy sent to on-demand
  stops gracefully (nothing lost) at the first pass at which the policy, asked with the
  run counted, says "spot"; the job then decides again in that pass.
- **To cheaper spot** (`Controller._cheaper_spot`, `broker.dispatch.move`): at every pass
  a steered spot run is compared with the first spot option open elsewhere (learned
  rates, cool-downs), and stops gracefully to move there when the rule says so; the job
  then decides in that pass, without stay-home. A cool-down's end is a pass for it, as
  the detailed engine's cadence has it.
- **One pass's view**: the controller plans every queued job over the offers as they
  were when the pass began, so two jobs may pick the last instance of a place; the
  second launch fails for capacity and that job is planned again on the next pass.
"""

from __future__ import annotations

import math
from collections import deque
from datetime import timedelta
from typing import TYPE_CHECKING

from broker.dispatch.cadence import grid_after, grid_from
from broker.learned_rates import at_least_prior
from broker.recovery import HISTORY

if TYPE_CHECKING:
    from broker.sim.scale_runs import Run as _Run

END, TICK, BACK, SUBMIT, RETRY, MOVE = 0, 1, 2, 3, 4, 5  # the loop's events, in that order
_EPS = 1e-9
_HISTORY = HISTORY / timedelta(hours=1)  # hours a reclaim counts towards the doubling


class SpotSide:
    """A part of the fleet-scale engine (`broker.sim.scale._Fleet`), which provides the
    attributes and the `_decide`, `_close`, `_choice`, `_ask`, `_push` and `_retry` used
    here."""

    def _init_spot_side(self) -> None:
        self.spot = self.scenario.spot.places
        self.spot_room = [a.count_at(0.0) * self.scale for a in self.spot.values()]
        self.spot_runs: list[list[_Run]] = [[] for _ in self.spot]
        # jobs waiting for spot, per spot place they could use (insertion-ordered sets)
        self.spot_waiters: list[dict[int, None]] = [{} for _ in self.spot]
        # steered jobs (waiting, or on a steered on-demand run) per place they watch
        self.watchers: list[dict[int, None]] = [{} for _ in self.spot]
        self.spot_movers: dict[int, None] = {}  # jobs on a steered spot run (may move)
        self._cheapest: dict[int, tuple[list, float]] = {}  # id(options) -> (them, price)
        # reclaim hours per place within the cool-down's HISTORY (older ones pruned), and
        # every reclaim's count (the key of `_cooled_at`)
        self.reclaimed_at: list[deque[float]] = [deque() for _ in self.spot]
        self.reclaims = [0] * len(self.spot)
        self.reclaim_total = 0
        # place -> (hour asked, reclaims then, its answer): _cooling_until, once per pass
        self._cooled_at: dict[object, tuple[float, int, float | None]] = {}
        self.touched: set[int] = set()  # places whose room changed since the last pass
        # what `_spot_open` answered per place list, at (hour, spot_version): the room a
        # pass sees changes only when a trace steps or a spot run stops
        self.spot_version = 0
        self._open_at: tuple[float, int] = (-1.0, -1)
        self._open: dict[int, bool] = {}
        self._sells_at: tuple[float, int, int] = (-1.0, -1, -1)
        self._sells: dict[object, bool] = {}
        self.freed: dict[int, None] = {}  # places with room freed in this pass
        self.failed_launches = 0
        self.instant = -1.0  # the hour of the launches counted in `taken`
        self.taken: dict[object, int] = {}  # spot runs launched per place at that hour

    # --- room ---------------------------------------------------------------------------

    def _spot_left(self, place: object) -> float:
        """Spot runs a place can still take; untraced places (kept only when the scenario's
        `untraced_spot` is open) are unlimited."""
        if place is None:
            return math.inf
        return self.spot_room[place] - len(self.spot_runs[place])  # type: ignore[index]

    def _seen_left(self, place: object) -> float:
        """Room as this pass sees it: launches made in this pass are not seen yet."""
        return self._spot_left(place) + self._taken_now(place)

    def _taken_now(self, place: object) -> int:
        if self.instant != self.now:
            self.instant, self.taken = self.now, {}
        return self.taken.get(place, 0)

    def _spot_started(self, place: object) -> None:
        self._taken_now(place)
        self.taken[place] = self.taken.get(place, 0) + 1
        self.touched.add(place)  # type: ignore[arg-type]

    def _spot_stopped(self, place: object) -> None:
        self.spot_version += 1
        self.touched.add(place)  # type: ignore[arg-type]
        self.freed[place] = None  # type: ignore[index]

    def _sells_now(self, place: object) -> bool:
        """Whether `place` sells spot to a launch of this pass: room as the pass sees it,
        and not cooling down (kept per pass while no spot run stops, no trace steps and
        no reclaim happens: launches do not change what the pass sees)."""
        at = (self.now, self.spot_version, self.reclaim_total)
        if self._sells_at != at:
            self._sells_at, self._sells = at, {}
        sells = self._sells.get(place)
        if sells is None:
            sells = self._sells[place] = (
                self._seen_left(place) > 0 and self._cooling_until(place) is None
            )
        return sells

    def _spot_open(self, i: int) -> bool:
        """What the policy is told of spot (the controller's `_spot_open`): room at one
        of the job's places as the pass sees it, cooling down or not; always under
        non-strict settings."""
        if not self.settings.spot_strict:
            return True
        places = self._spot_places(i)
        if self._open_at != (self.now, self.spot_version):
            self._open_at, self._open = (self.now, self.spot_version), {}
        is_open = self._open.get(id(places))
        if is_open is None:
            is_open = self._open[id(places)] = any(self._seen_left(k) > 0 for k in places)
        return is_open

    def _lost_race(self, i: int, option) -> None:
        """Job `i` was planned on `option` where another job of the same pass took the
        last spot instance: its launch fails (no capacity, no time: evidence of nothing,
        as the controller's store records it); it is planned again on the next pass."""
        self.failed_launches -= 1  # ids apart from the runs'
        self.rates.start(option.rate_key, self.failed_launches, self.now)
        self.rates.end(option.rate_key, self.failed_launches, self.now, False)
        st = self.state[i]
        if st.first_start is None:
            st.first_start = self.now
        self._retry(i, grid_after(self.now, self.step))

    # --- cool-downs ---------------------------------------------------------------------

    def _cooling_until(self, place: object) -> float | None:
        """When `place` sells spot again, while it is cooling down now; else None."""
        from broker.recovery import cooling

        if place is None or not self.reclaimed_at[place]:  # type: ignore[index]
            return None
        seen = self.reclaims[place]  # type: ignore[index]
        known = self._cooled_at.get(place)
        if known is not None and known[0] == self.now and known[1] == seen:
            return known[2]
        times = self.reclaimed_at[place]  # type: ignore[index]
        while times and self.now - times[0] > _HISTORY + _EPS:
            times.popleft()  # out of the window for good: hours only grow
        answer = None
        if times:
            until, _ = cooling(times, self.settings.cooldown_scale)  # type: ignore[arg-type]
            answer = until if self.now < until - _EPS else None
        self._cooled_at[place] = (self.now, seen, answer)
        return answer

    def _reopening(self, i: int) -> float | None:
        """The first pass at which a cooling place of job `i` with room reopens."""
        ends = [self._cooling_until(k) for k in self._spot_places(i) if self._spot_left(k) > 0]
        found = [e for e in ends if e is not None]
        return grid_from(min(found), self.step) if found else None

    # --- trace steps --------------------------------------------------------------------

    def _tick(self, t: float) -> list[int]:
        """Apply every count that changes at `t`; the reclaimed jobs (returned) decide
        again in this pass, with the jobs waiting where spot opened."""
        reclaimed, where = [], []
        for place, count in self.changes[t]:
            room = count * self.scale
            before = self.spot_room[place]
            self.spot_room[place] = room
            self.spot_version += 1
            self.touched.add(place)
            runs = self.spot_runs[place]
            while len(runs) > room:
                where.append((runs[-1].option.rate_key, runs[-1].option.rate))
                reclaimed.append(self._reclaim(runs[-1]))
            if room > before:
                self.freed[place] = None
        # the learned rate as known at the reclaim, every reclaim of this step counted (the
        # controller reads them from the store: broker.learned_rates.reclaims_often)
        for i, (key, prior) in zip(reclaimed, where, strict=True):
            st = self.state[i]
            st.reclaimed_at = self.now
            seen = self.rates.evidence(key, self.now) if key is not None else None
            st.reclaimed_often = at_least_prior(prior, seen)
        return reclaimed

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
        if run.option.key is not None:
            self.reclaimed_at[run.option.key].append(self.now)  # type: ignore[index]
            self.reclaims[run.option.key] += 1  # type: ignore[index]
            self.reclaim_total += 1
            self._cooling_pass(run.option.key)
        self._close(run, reclaimed=True)
        st.saved = min(job.hours, st.saved + kept)
        if kept > 0:
            st.written.add(run.option.region)
        st.queued_at = self.now  # back in the queue: a fresh waiting budget
        return run.job

    # --- back to spot -------------------------------------------------------------------

    def _back_wake(self, i: int) -> None:
        """Schedule the check of job `i`'s steered on-demand run: the first pass at which
        its policy would send it back to spot."""
        st = self.state[i]
        run = st.run
        st.back = 0
        if run is None or not run.steered:
            return
        job = self.jobs[i]
        deadline = job.submit_hours + self.deadline[i]  # type: ignore[operator]
        st.asked_open = is_open = self._spot_open(i)

        def said(t: float) -> str:
            return self._choice(i, t, is_open, current="on-demand")

        if said(self.now) == "spot":
            wake: float | None = grid_after(self.now, self.step)
        else:
            question = (i, run.start, is_open, st.saved)
            wake = self._first_change(question, said, min(deadline, run.finish))
        if wake is not None:
            st.back = self._push(wake, BACK, i)
            self._remember(i, wake, st.back)

    def _back_to_spot(self, i: int) -> bool:
        """At a pass: a steered on-demand run whose policy says "spot" stops gracefully
        (SIGTERM, checkpoint: its progress is kept); True when it stopped (the job then
        decides in this pass). Otherwise its next check is scheduled."""
        st = self.state[i]
        run = st.run
        if run is None or not run.steered:
            return False
        if self._choice(i, self.now, self._spot_open(i), current="on-demand") != "spot":
            self._back_wake(i)
            return False
        self._stop_gracefully(i)
        return True

    def _stop_gracefully(self, i: int) -> None:
        """Job `i`'s run stops on the broker's say (SIGTERM, checkpoint): its progress is
        kept, its checkpoint is where it ran, and it is back in the queue."""
        st, job = self.state[i], self.jobs[i]
        run = st.run
        ran = max(0.0, self.now - run.start - self.restart)
        self._close(run)
        st.saved = min(job.hours, st.saved + ran)
        if job.checkpoint_minutes:
            st.written.add(run.option.region)
        st.queued_at = self.now

    # --- to cheaper spot -----------------------------------------------------------------

    def _may_move(self, i: int) -> bool:
        """Whether job `i` runs steered spot that the move rule is asked about."""
        run = self.state[i].run
        return (
            run is not None
            and run.option.kind == "spot"
            and self.settings.move_below > 0
            and self.policy.spot == "prefer"
            and self.deadline[i] is not None
        )

    def _to_cheaper_spot(self, i: int) -> bool:
        """At a pass: job `i`'s steered spot run stops to move to cheaper spot on sale
        elsewhere when `broker.dispatch.move` says so; True when it stopped."""
        from broker.dispatch.move import SpotMove, moves_spot
        from broker.learned_rates import posterior_rate

        if not self._may_move(i):
            return False
        st = self.state[i]
        run = st.run
        options = self.plans.options(i, run.option.region)
        if self._cheapest_spot(options) > self.settings.move_below * run.option.price:
            return False  # no spot anywhere is cheap enough (most runs, most passes)
        there = None
        for option in self.rates.ranked(options, self.now):
            if option.kind != "spot" or option.key == run.option.key:
                continue
            if not self._sells_now(option.key):
                continue
            there = option
            break
        if there is None:
            return False
        seen = self.rates.evidence(there.rate_key, self.now) if there.rate_key else None
        rate = there.rate if seen is None else posterior_rate(there.rate, seen)
        move = SpotMove(run.option.price, there.price, there.egress, rate)
        ask = self._ask(i, self.now, self._done(i, self.now, "spot"))
        if not moves_spot(ask, move, self.settings):
            return False
        self._stop_gracefully(i)
        st.moved = True
        return True

    def _cheapest_spot(self, options: list) -> float:
        """The lowest spot price among `options` (a shape's list, kept by ShapePlans)."""
        known = self._cheapest.get(id(options))
        if known is None or known[0] is not options:
            prices = [o.price for o in options if o.kind == "spot"]
            known = self._cheapest[id(options)] = (options, min(prices, default=math.inf))
        return known[1]

    def _cooling_pass(self, place: object) -> None:
        """A reclaim at `place`: its cool-down's end is a pass for the steered spot runs
        (the detailed engine passes there while one runs)."""
        until = self._cooling_until(place)
        if until is not None and self.settings.move_below > 0:
            self._push(grid_from(until, self.step), MOVE, None)

    def _watch(self, i: int) -> None:
        """Job `i` is steered and idle or on a steered run: what spot is on sale at its
        places matters to its next answer."""
        for k in self._spot_places(i):
            self.watchers[k][i] = None

    def _unwatch(self, i: int) -> None:
        for k in self._spot_places(i):
            self.watchers[k].pop(i, None)

    def _moved_openness(self) -> list[int]:
        """Watched jobs whose spot-on-sale answer changed since they were last asked."""
        seen: dict[int, None] = {}
        for k in sorted(self.touched):
            seen.update(self.watchers[k])
        self.touched = set()
        return [i for i in seen if self._spot_open(i) != self.state[i].asked_open]
