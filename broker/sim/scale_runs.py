"""The fleet-scale engine's runs and books: a job launched on an option, billed while
it runs, its capacity given back when it ends, is reclaimed or stops.

Each job's state (`JobState`) and its current run (`Run`) are plain slotted records
kept in lists by the loop (`broker.sim.scale`), for speed; a run's end is an END event
on the loop's heap, stale once the run was closed earlier (a reclaim, back to spot).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.sim.scale_spot import END
from broker.sim.shapes import Option


@dataclass(slots=True)
class Run:
    job: int
    option: Option
    start: float
    seq: int
    finish: float = 0.0  # when it ends, unless reclaimed
    steered: bool = False  # on demand by the spot policy's say: may go back to spot


@dataclass(slots=True)
class JobState:
    saved: float = 0.0  # work hours safe in the last checkpoint
    run: Run | None = None
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
    reclaimed_at: float | None = None  # the hour of its last reclaim (None: none yet)
    reclaimed_often: bool = False  # that place reclaimed at least as its catalog says then


class RunSide:
    """A part of the fleet-scale engine (`broker.sim.scale._Fleet`), which provides the
    attributes and the `_push`, `_unqueue`, `_watch`, `_back_wake`, `_may_move` and the
    spot and pool sides' bookkeeping used here."""

    def _launch(self, i: int, option: Option, steered: bool = False) -> None:
        st, job = self.state[i], self.jobs[i]
        self._unqueue(i)
        run = Run(i, option, self.now, 0, steered=steered and option.kind != "spot")
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

    def _end(self, run: Run) -> bool:
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

    def _close(self, run: Run, reclaimed: bool = False) -> None:
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
