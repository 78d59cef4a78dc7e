"""The fleet-scale engine's decision for one job at one pass: which markets its spot
policy allows, whether its spot stays home, the first ranked option open now, or a wait
with the pass at which it is decided again.

The questions are the controller's (`broker.dispatch.market`, `broker.dispatch.home`,
`broker.dispatch.cadence`); the answers are taken as `broker.sim.scale` describes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

from broker.dispatch.cadence import first_change, grid_after, grid_from, grid_index_after
from broker.dispatch.hold import hold
from broker.dispatch.home import stays_home
from broker.dispatch.market import MarketAsk, choose_market, spot_only
from broker.sim.scale_spot import RETRY
from broker.sim.shapes import Option

_MEMO = 1_000_000  # answers kept before a memo starts afresh (any size gives the same figures)


class DecideSide:
    """A part of the fleet-scale engine (`broker.sim.scale._Fleet`), which provides the
    attributes and the `_launch`, `_push`, `_remember` and the spot and pool sides'
    questions used here."""

    def _decide(self, i: int) -> None:
        st = self.state[i]
        if st.run is not None or st.end is not None:
            return
        for place in self._spot_places(i):
            self.spot_waiters[place].pop(i, None)
        self._unwatch(i)
        self._unqueue(i)
        if self._held(i):
            return
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
            if option.kind == "spot" and not self._sells_now(option.key):
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

    def _held(self, i: int) -> bool:
        """Whether job `i` is held after its last reclaim (`broker.dispatch.hold`): then it
        plans nothing and is decided again at the first pass its hold no longer holds (W
        after the reclaim, or earlier when its spare stops affording it)."""
        st = self.state[i]
        if st.reclaimed_at is None or self.jobs[i].deadline_hours is None:
            return False
        if self.policy.spot != "prefer":
            return False
        held = hold(self._ask(i, self.now, st.saved), self.settings)
        if not held.held:
            return False
        until = grid_from(self.now + held.ends_in, self.step)

        def answer(t: float) -> str:
            return str(hold(self._ask(i, t, st.saved), self.settings).held)

        wake = self._first_change((i, "held", st.reclaimed_at, st.saved), answer, until)
        self._retry(i, wake if wake is not None else grid_after(until, self.step))
        return True

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
        progress then counts). The policy is a pure function of what it is asked
        (`broker.spotpolicy.model`), so each answer is asked once and kept: a wake's
        bisection and the checks of one pass ask the same questions again and again. The
        key is all the answer depends on: the job (its fixed size, deadline, checkpoint),
        the hour, what it is told of spot, what runs and the work done; the settings are
        the run's. (A move by choice changes none of it: it only turns stay-home off.)"""
        done = self._done(i, at, current)
        key = (i, at, spot_open, current, done)
        said = self._said.get(key)
        if said is None:
            if len(self._said) >= _MEMO:
                self._said.clear()
            ask = self._ask(i, at, done)
            said = self._said[key] = choose_market(
                ask, self.settings, current=current, spot_available=spot_open
            )
        return said

    def _done(self, i: int, at: float, current: str | None) -> float:
        """Job `i`'s work done at hour `at`: its checkpoint's, plus the run's progress
        when what runs (`current`) counts."""
        st = self.state[i]
        done = st.saved
        if current is not None and st.run is not None:
            done += max(0.0, at - st.run.start - self.restart)
        return done

    def _ask(self, i: int, at: float, done: float) -> MarketAsk:
        """Job `i`'s situation at hour `at`, as the controller's `market_ask` has it."""
        job, st = self.jobs[i], self.state[i]
        return MarketAsk(
            elapsed=max(0.0, at - job.submit_hours),  # events within 1e-9 h are one pass
            deadline=self.deadline[i],  # type: ignore[arg-type]
            work_total=job.hours,
            work_done=done,
            restart_hours=self.restart,
            checkpoint_hours=job.checkpoint_minutes / 60 if job.checkpoint_minutes else None,
            since_reclaim=at - st.reclaimed_at if st.reclaimed_at is not None else math.inf,
            reclaimed_often=st.reclaimed_often,
        )

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
        wakes = [
            self._first_change(
                (i, None, is_open, st.saved), lambda t: self._choice(i, t, is_open), deadline
            )
        ]
        if home:
            wakes.append(
                self._first_change(
                    (i, None, False, st.saved), lambda t: self._choice(i, t, False), deadline
                )
            )
        found = [w for w in wakes if w is not None]
        wake = min(found) if found else grid_from(deadline, step)
        self._wakes[(i, is_open)] = (st.saved, said, wake)
        return wake

    def _first_change(
        self, question: Hashable, answer: Callable[[float], str], until: float
    ) -> float | None:
        """`broker.dispatch.cadence.first_change` from now, kept per `question` (what
        fixes `answer` at every hour: the job, what runs since when, its saved work, what
        it is told of spot). Two passes in one step of the grid that hear the same answer
        now bisect the same grid passes, so the second takes the first's result."""
        key = (question, grid_index_after(self.now, self.step), until, answer(self.now))
        wake = self._changes.get(key, False)
        if wake is False:
            if len(self._changes) >= _MEMO:
                self._changes.clear()
            wake = self._changes[key] = first_change(answer, self.now, self.step, until)
        return wake  # type: ignore[return-value]

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
        places = self._places_by_job[i]
        if places is None:
            options = self.plans.options(i)
            places = self._places_of.get(id(options))
            if places is None:
                places = [o.key for o in options if o.kind == "spot" and o.key is not None]
                self._places_of[id(options)] = places
            self._places_by_job[i] = places
        return places
