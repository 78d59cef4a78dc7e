"""`SimulatedProvider`: the Provider protocol on virtual time, with spot capacity from a trace.

- Offers: the scenario's catalog rows; a row's spot price is the trace's price when it
  has one, and missing (not sold) while its place has no free spot instance or when no
  trace governs it (`untraced_spot="closed"`). On-prem rows carry their free nodes.
- Launch: spot needs a free instance at its place now, else InsufficientCapacity.
- A running instance pays `restart_hours` (boot, image pull, restore) and then makes
  progress on its job's true work at the speed of its GPU relative to the job's own;
  it checkpoints every `checkpoint_hours` of progress-making time and ends "succeeded"
  (exit code 0) when the work is done.
- Preemption: at a trace step where a place's count falls below the spot instances
  running there, the newest ones are reclaimed ("interrupted", a notice); the work
  since their last checkpoint is lost. A relaunch with BROKER_RESUME_FROM set resumes
  from the job's last checkpoint; without it, from zero.
Call `sync()` after moving the clock: it plays every trace step and instance end up
to now, in time order. All state is in memory; ids are "sim-<attempt id>".
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from broker.sim.instances import EPS, ID_PREFIX, NAME, SimRun, Work, instance_of
from broker.sim.model import SpotTrace, TracePlace
from broker.sim.sale import Sale, sale_key
from providers.base import Instance, InterruptionNotice, LaunchRequest
from providers.capabilities import Billing, Capacity, CheckpointStores, SpotMarket
from providers.errors import InsufficientCapacity, InvalidRequest, NotFound

if TYPE_CHECKING:
    from broker.clock import FixedClock
    from pricing.table import OfferTable

TABLES_KEPT = 64  # the distinct sales remembered (spot on or off, a few capacities)


class SimulatedProvider(Capacity, Billing, CheckpointStores, SpotMarket):
    """See the module docstring. `speed(gpu)` gives a GPU's relative throughput."""

    name = NAME

    def __init__(
        self,
        offers: OfferTable,
        spot: SpotTrace,
        clock: FixedClock,
        origin: datetime,
        workdir: Path,
        *,
        restart_hours: float = 0.1,
        untraced_spot: str = "closed",
        speed: Mapping[str, float] | None = None,
    ) -> None:
        self._sale = Sale(offers, spot, untraced_spot)
        self.spot = spot
        self.clock = clock
        self.origin = origin
        self.workdir = Path(workdir)
        self.restart_hours = restart_hours
        self.untraced_spot = untraced_spot
        self.speed = dict(speed or {})
        self.work: dict[str, Work] = {}
        self.saved: dict[str, float] = {}  # job id -> progress at its last checkpoint
        self._runs: dict[str, SimRun] = {}
        self._notices: list[InterruptionNotice] = []
        self._synced: tuple[float, int] | None = None  # (now, moves) after the last sync
        self._ticks = sorted({t for a in spot.places.values() for t in a.changes()})
        self._tick_at = 0
        self.preemptions = 0
        self._moves = 0  # instances launched or ended so far
        self._sold: tuple[tuple[float, int], OfferTable] | None = None  # offers() last made
        self._tables: dict[tuple[bytes, bytes], OfferTable] = {}  # by what each sells
        self.lost_gpu_hours = 0.0
        self._folders: dict[tuple[str, str, str], str] = {}  # `_checkpoint_folder`'s answers

    # --- time ------------------------------------------------------------------------

    def hours(self, moment: datetime | None = None) -> float:
        moment = moment or self.clock.now()
        return (moment - self.origin).total_seconds() / 3600.0

    def at(self, hours: float) -> datetime:
        return self.origin + timedelta(hours=hours)

    def next_event(self) -> float | None:
        """Hours of the next thing that will happen by itself: a trace step that changes
        capacity or price, or an instance ending."""
        ends = [r.finish for r in self._runs.values() if r.ended is None]
        tick = self._ticks[self._tick_at] if self._tick_at < len(self._ticks) else None
        candidates = [t for t in (*ends, tick) if t is not None]
        return min(candidates) if candidates else None

    def alive(self) -> bool:
        """Whether some instance is running (a trace step may then end it)."""
        return any(r.ended is None for r in self._runs.values())

    def sync(self) -> None:
        """Play every trace step and instance end up to the clock's now, in time order."""
        now = self.hours()
        if self._synced == (now, self._moves):  # nothing launched or ended since, no time
            return  # passed: nothing is due that was not played then (a pass syncs often)
        while self._tick_at < len(self._ticks) and self._ticks[self._tick_at] <= now + EPS:
            tick = self._ticks[self._tick_at]
            self._finish_until(tick)
            self._preempt_at(tick)
            self._tick_at += 1
        self._finish_until(now)
        self._synced = (now, self._moves)

    def _finish_until(self, t: float) -> None:
        """End the runs whose work is done by `t`, in the order they finished (the runs
        still going are picked first: a pass syncs many times, most with none to end)."""
        due = [r for r in self._runs.values() if r.ended is None and r.finish <= t + EPS]
        for run in sorted(due, key=lambda r: (r.finish, r.request.attempt_id)):
            run.ended, run.state = run.finish, "succeeded"
            self._moves += 1
            run.progress_at_end = run.work.hours
            run.saved_at_end = run.work.hours
            run.last_checkpoint = run.finish
            self.saved[run.request.job_id] = run.work.hours
            self._write_checkpoint(run)

    def _preempt_at(self, t: float) -> None:
        running: dict[TracePlace, list[SimRun]] = {}
        for run in self._runs.values():
            if run.ended is None and run.request.market == "spot" and run.place is not None:
                running.setdefault(run.place, []).append(run)
        for place, runs in sorted(running.items(), key=lambda kv: str(kv[0])):
            available = self.spot.places[place].count_at(t)
            used = sum(r.request.nodes for r in runs)
            victims = sorted(runs, key=lambda r: (r.launched, r.request.attempt_id), reverse=True)
            for run in victims:
                if used <= available:
                    break
                self._end(run, t, "interrupted")
                used -= run.request.nodes

    def _end(self, run: SimRun, t: float, state: str) -> None:
        progress = run.progress(t)
        saved, when = run.saved(t)
        if state == "terminated":  # a graceful stop: the job checkpoints on SIGTERM
            saved, when = progress, t
        run.ended, run.state = t, state
        self._moves += 1
        run.progress_at_end, run.saved_at_end, run.last_checkpoint = progress, saved, when
        job = run.request.job_id
        if when is not None:
            self.saved[job] = saved
            self._write_checkpoint(run)
        if state == "interrupted":
            self.preemptions += 1
            gpus = max(1.0, float(run.request.accelerator_count)) * run.request.nodes
            self.lost_gpu_hours += max(0.0, progress - saved) / max(run.rate, EPS) * gpus
            instance_id = ID_PREFIX + run.request.attempt_id
            self._notices.append(
                InterruptionNotice(instance_id, NAME, "spot-reclaim", self.at(t), self.at(t))
            )

    # --- the Provider contract ------------------------------------------------------------

    def offers(self) -> OfferTable:

        self.sync()
        now = self.hours()
        key = (now, self._moves)  # the same moment and the same instances: the same table
        if self._sold is not None and self._sold[0] == key:
            return self._sold[1]
        table = self._sale.table_at(now, self._alive())
        # what is sold was sold before (spot comes and goes): that table, so the indexes
        # made of it are reused (`engine._index_of`, `Cadence`)
        if len(self._tables) >= TABLES_KEPT:
            self._tables.clear()
        table = self._tables.setdefault(sale_key(table), table)
        self._sold = (key, table)
        return table

    def launch(self, request: LaunchRequest) -> Instance:
        known = self._runs.get(request.attempt_id)
        if known is not None:
            if known.request != request:
                raise InvalidRequest(
                    NAME, f"attempt {request.attempt_id} was launched with another request"
                )
            return self._instance(known)
        row = self._row(request)
        place = self._sale.place[row]
        now = self.hours()
        if request.market == "spot":
            price = self.offers().numbers["price_spot"][row]
            if math.isnan(price):
                where = f"{request.cloud}/{request.zone or request.region}"
                raise InsufficientCapacity(NAME, f"no spot {request.instance_type} free in {where}")
        elif self._sale.text["cloud"][row] == "onprem":
            if self._sale.onprem_free(self._alive()).get(row, 1) < request.nodes:
                raise InsufficientCapacity(NAME, f"pool {request.region} is full")
        work = self.work.get(request.job_id, Work(hours=1.0))
        start = self.saved.get(request.job_id, 0.0) if request.resume_from else 0.0
        rate = self._rate(work, self._sale.text["accelerator"][row])
        overhead = self.restart_hours
        run = SimRun(
            request=request,
            row=row,
            place=place,
            zone=self._sale.text["zone"][row],
            launched=now,
            overhead=overhead,
            rate=rate,
            start_progress=start,
            work=work,
            finish=now + overhead + max(0.0, work.hours - start) / rate,
        )
        self._runs[request.attempt_id] = run
        self._moves += 1
        return self._instance(run)

    def describe(self, instance_id: str) -> Instance:
        self.sync()
        return self._instance(self._require(instance_id))

    def terminate(self, instance_id: str) -> bool:
        self.sync()
        run = self._require(instance_id)
        if run.ended is not None:
            return False
        self._end(run, self.hours(), "terminated")
        return True

    def list_instances(self) -> list[Instance]:
        self.sync()
        runs = sorted(self._runs.values(), key=lambda r: (r.launched, r.request.attempt_id))
        return [self._instance(r) for r in runs]

    def interruptions(self) -> list[InterruptionNotice]:
        self.sync()
        notices, self._notices = self._notices, []
        return notices

    def object_store(self):
        from providers.storage import ObjectStore

        return ObjectStore()

    # --- capabilities (providers.capabilities) ---------------------------------------------

    def billed_hours(self, instance: Instance) -> float:
        run = self._require(instance.id)
        end = run.ended if run.ended is not None else self.hours()
        return max(0.0, end - run.launched)

    def time_scale(self, cloud: str, pool: str = "") -> float:
        """Virtual time is billed as it passes."""
        return 1.0

    def free_nodes(self) -> dict[tuple[str, str], int]:
        """Free nodes of the on-prem pools (clouds are not limited here)."""
        free: dict[tuple[str, str], int] = {}
        for i, n in self._sale.onprem_free(self._alive()).items():
            key = ("onprem", self._sale.text["region"][i])
            free[key] = max(free.get(key, 0), int(n))
        return free

    def checkpoint_store(self, job_id: str, cloud: str, region: str) -> str:
        return self._checkpoint_folder(job_id, cloud, region)

    def _checkpoint_folder(self, job_id: str, cloud: str, region: str) -> str:
        """`<workdir>/checkpoints/<cloud>/<region>/<job>`, made once per place and job: the
        controller asks it at every reclaim and launch."""
        key = (job_id, cloud, region)
        folder = self._folders.get(key)
        if folder is None:
            folder = self._folders[key] = os.path.join(
                self.workdir, "checkpoints", cloud, region, job_id
            )
        return folder

    def last_checkpoint_at(self, job_id: str, cloud: str, region: str) -> datetime | None:
        runs = [
            r
            for r in self._runs.values()
            if r.request.job_id == job_id and (r.request.cloud, r.request.region) == (cloud, region)
        ]
        times = [r.last_checkpoint for r in runs if r.last_checkpoint is not None]
        return self.at(max(times)) if times else None

    def spot_open(self, gpus: tuple[str, ...]) -> bool:
        """Whether some traced place sells spot now for one of `gpus` (any when empty)."""
        table = self.offers()
        acc = self._sale.text["accelerator"]
        prices = table.numbers["price_spot"]
        return any(
            not math.isnan(prices[i]) and (not gpus or acc[i] in gpus) for i in range(len(acc))
        )

    # --- helpers ---------------------------------------------------------------------------

    def _alive(self) -> list[SimRun]:
        return [r for r in self._runs.values() if r.ended is None]

    def _row(self, request: LaunchRequest) -> int:
        row = self._sale.row_of(request)
        if row is None:
            raise InvalidRequest(
                NAME, f"{request.instance_type} not sold in {request.cloud}/{request.region}"
            )
        return row

    def _rate(self, work: Work, accelerator: str) -> float:
        mine, theirs = self.speed.get(accelerator), self.speed.get(work.gpu)
        if not mine or not theirs:
            return 1.0
        return mine / theirs

    def _write_checkpoint(self, run: SimRun) -> None:
        """A marker file in the place's checkpoint store, so the controller's migration
        (copy and egress charge) sees a checkpoint there."""
        folder = self._checkpoint_folder(run.request.job_id, run.request.cloud, run.request.region)
        marker = os.path.join(folder, "checkpoint")
        try:
            file = open(marker, "w", encoding="utf-8")  # noqa: SIM115 (closed below)
        except FileNotFoundError:  # the folder's first checkpoint
            os.makedirs(folder, exist_ok=True)
            file = open(marker, "w", encoding="utf-8")  # noqa: SIM115
        with file:
            file.write(f"{run.saved_at_end:.6f}\n")

    def _require(self, instance_id: str) -> SimRun:
        run = self._runs.get(instance_id.removeprefix(ID_PREFIX))
        if run is None or not instance_id.startswith(ID_PREFIX):
            raise NotFound(NAME, f"no instance {instance_id}")
        return run

    def _instance(self, run: SimRun) -> Instance:
        return instance_of(run, self.origin)
