"""Observing: the first step of the reconcile pass, and what it decides for a job
that runs.

Every open attempt is looked at as the provider reports it: launched if it never was
(a controller killed between `start_attempt` and the launch resumes here), recorded
running, closed when it ended (billed in the same transaction: broker.controller.closing),
stopped when its job was cancelled. Interruption notices are recorded first, so an ended
attempt is judged knowing them. A running steered attempt may go back to spot, or move
to cheaper spot (broker.dispatch.move), when its spot policy says so.

A part of `Controller` (broker.controller.reconcile), which provides the attributes
below and `preempt`, `_spec`, `_start` (broker.controller.launching), `_finish`, `_close`
and `_fail_attempt` (broker.controller.closing), `_gangs` and `_spot_open`
(broker.controller.planning).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.controller.isolation import not_one_jobs
from broker.controller.launching import instance_row
from broker.controller.steering import steer
from broker.state import JobState
from broker.state.leases import LeaseHeld

if TYPE_CHECKING:
    from datetime import datetime

    from broker.clock import Clock
    from broker.controller.checkpoints import Checkpoints
    from broker.controller.reconcile import PassReport
    from broker.dispatch.settings import DispatchSettings
    from broker.planner.decision import Decision
    from broker.spec import JobSpec
    from broker.state import Attempt, InstanceRow, Job, StateStore
    from pricing.query import OfferIndex
    from providers.base import Instance, Provider

# an attempt to close with the pass's others: its job, itself, the write, what the report says
_Close = tuple["Job", "Attempt", Callable[[], object], tuple[str, str]]

ACTIVE = (
    JobState.PLANNED,
    JobState.LAUNCHING,
    JobState.RUNNING,
    JobState.INTERRUPTED,
    JobState.MIGRATING,
)


class Observing:
    """The controller's look at open attempts (see the module docstring)."""

    store: StateStore
    provider: Provider
    clock: Clock
    settings: DispatchSettings
    checkpoints: Checkpoints
    index_of: Callable[[Provider], OfferIndex]
    _offered: tuple[object, OfferIndex] | None
    _spec: Callable[[Job], JobSpec]
    _start: Callable[..., Instance | None]
    _finish: Callable[..., str]
    _close: Callable[..., None]
    _fail_attempt: Callable[[Job, Attempt, str, Exception], None]
    _gangs: Callable[[OfferIndex, list[JobSpec]], OfferIndex]
    _plan_many: Callable[[list[JobSpec], OfferIndex, datetime], list[Decision]]
    adjusted_offers: Callable[..., OfferIndex]
    _spot_open: Callable[[JobSpec], bool]
    preempt: Callable[[str, str], None]

    def _observe(self, report: PassReport) -> None:
        from providers.errors import ProviderError

        self._record_notices(report)  # first: an ended attempt is judged knowing them
        closes: list[_Close] = []
        try:
            jobs = self.store.jobs(states=(*ACTIVE, JobState.CANCELLED))
            attempts, instances = _open_attempts(self.store)  # one query each, not per job
            for job in jobs:
                for attempt in attempts.get(job.id, ()):
                    known = instances.get(attempt.id, [])
                    try:
                        self._observe_one(job, attempt, report, closes, known)
                    except LeaseHeld:  # another controller is on this job's next step
                        continue
                    except ProviderError as exc:  # the provider cannot answer now: next pass
                        report.cannot_reach(f"attempt {attempt.id}", exc)
                    except Exception as exc:  # noqa: BLE001 (one job's error: broker.controller.isolation)
                        if not_one_jobs(exc):
                            raise
                        self._fail_attempt(job, attempt, "observing", exc)
                        report.finished.append((job.name, "failed"))
        finally:
            self._record_closes(closes, report)

    def _record_closes(self, closes: list[_Close], report: PassReport) -> None:
        """The pass's closes of attempts that succeeded (one write each: `finish_attempt`)
        in one commit. A controller killed before it leaves them open, and the next pass
        closes them (billed once: finish_attempt is a compare-and-set)."""
        if not closes:
            return
        with self.store.together():
            for job, attempt, write, said in closes:
                try:
                    write()
                except LeaseHeld:  # another controller closes it: not this pass's
                    report.finished.remove(said)
                except Exception as exc:  # noqa: BLE001 (one job's error: broker.controller.isolation)
                    if not_one_jobs(exc):
                        raise
                    self._fail_attempt(job, attempt, "finishing", exc)
                    report.finished[report.finished.index(said)] = (job.name, "failed")

    def _observe_one(
        self,
        job: Job,
        attempt: Attempt,
        report: PassReport,
        closes: list[_Close],
        known: list[InstanceRow],
    ) -> None:
        """One open attempt (`known`: its instance rows as the pass read them): launched
        if it never was, running, or ended (closed; an attempt that succeeded is put on
        `closes`, to be closed with the pass's others)."""
        from broker.state import AttemptState

        instance = self._instance_of(job, attempt, report, known)
        if instance is None:
            return
        if instance.members:
            self._record_members(attempt.id, instance)
        if job.state is JobState.CANCELLED and instance.active:
            if not self.store.claim(job.id, "cancel"):
                return
            self.provider.terminate(instance.id)
            report.terminated.append(instance.id)
            instance = self.provider.describe(instance.id)
        if instance.active:
            if attempt.state is AttemptState.LAUNCHING:
                self.store.attempt_running(attempt.id, instance_row(instance))
            elif self._back_to_spot(job, attempt):
                self.preempt(job.id, "back to spot: the deadline's slack is rebuilt")
                report.finished.append((job.name, "back to spot"))
            elif self._cheaper_spot(job, attempt):
                from broker.controller.moving import MOVE_REASON

                self.preempt(job.id, MOVE_REASON)
                report.finished.append((job.name, "to cheaper spot"))
            return
        # An attempt that succeeded closes in one write, finish_attempt, which takes the
        # lease in its own transaction (LeaseHeld: another controller closes it), with the
        # pass's others; a close that writes more (a checkpoint, a re-queue) claims first.
        later = instance.state == "succeeded"
        if not later and not self._claimed_open(job, attempt, "finish"):
            return  # another controller closes it (or closed it since the pass read it)
        writes: list[Callable[[], object]] = []
        try:
            outcome = self._finish(job, attempt, instance, writes if later else None)
        except LeaseHeld:
            raise
        except Exception as exc:  # noqa: BLE001 (one job's error: broker.controller.isolation)
            if not_one_jobs(exc):
                raise
            self._fail_attempt(job, attempt, "finishing", exc)
            outcome, writes = "failed", []
        if not writes:
            self.store.release(job.id)  # the job is at rest: anyone may take its next step
        said = (job.name, outcome)
        report.finished.append(said)
        closes.extend((job, attempt, write, said) for write in writes)
        if instance.state == "interrupted":
            self._release(instance, report)

    def _instance_of(
        self, job: Job, attempt: Attempt, report: PassReport, known: list[InstanceRow]
    ) -> Instance | None:
        """The attempt's instance; relaunched (idempotently) when the store has none yet,
        which is where a controller killed between `start_attempt` and the launch resumes.
        A provider that cannot answer now (throttled, unreachable) leaves the attempt as it
        is for the next pass: only NotFound means the instance is gone."""
        from providers.errors import NotFound, ProviderError

        if not known:  # read again: another controller may have launched it since
            known = self.store.instances(attempt_id=attempt.id)
        if known:
            try:
                return self.provider.describe(known[0].provider_id)
            except NotFound:
                self._close(attempt, "failed", None, "instance vanished", 0.0, JobState.QUEUED)
                return None
            except ProviderError as exc:
                report.cannot_reach(known[0].provider_id, exc)
                return None
        if not self._claimed_open(job, attempt, "launch"):
            return None  # another controller is launching it (its lease is live), or closed it
        return self._start(job, attempt, report)

    def _claimed_open(self, job: Job, attempt: Attempt, step: str) -> bool:
        """Whether this controller holds the job's `step` and the attempt is still open.
        The pass read the open attempts once, and another controller may have closed one
        since: the lease is taken first and the attempt read afresh under it, and a lease
        on an attempt found closed is given back (never left on a finished job)."""
        from broker.state import OPEN_ATTEMPT

        if not self.store.claim(job.id, step):
            return False
        if self.store.attempt(attempt.id).state in OPEN_ATTEMPT:
            return True
        self.store.release(job.id)
        return False

    def _record_members(self, attempt_id: str, instance: Instance) -> None:
        """Keep a gang's nodes as last seen (ranks, places, states) for `broker status`;
        written only when they changed."""
        for known in self.store.instances(attempt_id=attempt_id):
            if known.provider_id == instance.id and known.members != instance.members:
                self.store.record_instance(
                    known.cloud, known.provider_id, known.state, members=instance.members
                )

    def _record_notices(self, report: PassReport) -> None:
        """Record each interruption notice on its attempt (broker.interruption's table);
        asked only while some spot attempt is open, as clouds answer per region."""
        from broker.interruption import handling
        from broker.state import OPEN_ATTEMPT
        from providers.errors import ProviderError

        if not any(a.market == "spot" for a in self.store.attempts(states=OPEN_ATTEMPT)):
            return
        try:
            notices = self.provider.interruptions()
        except ProviderError as exc:
            report.cannot_reach("interruptions", exc)
            return
        for notice in notices:
            for known in self.store.instances(provider_id=notice.instance_id):
                if known.attempt_id is not None:
                    what = handling(notice.kind)
                    self.store.record_notice(known.attempt_id, notice, what.action, what.meaning)

    # --- spot survival -----------------------------------------------------------------

    def _back_to_spot(self, job: Job, attempt: Attempt) -> bool:
        """True when a job the spot policy sent to on-demand may go back to spot now (it
        stops gracefully: SIGTERM, checkpoint, re-plan). Only policy-steered attempts:
        an on-demand placement chosen on price stays."""
        if not attempt.placed_on.steered:
            return False
        spec = self._spec(job)
        _, choice = steer(
            spec,
            job,
            self.store,
            self.clock.now(),
            self.settings,
            current="on-demand",
            spot_available=self._spot_open(spec),
        )
        return choice == "spot"

    def _cheaper_spot(self, job: Job, attempt: Attempt) -> bool:
        """True when a steered job's spot run should stop to move to cheaper spot on sale
        elsewhere (broker.dispatch.move), the offers as the next plan sees them."""
        from broker.controller.moving import moves_to_cheaper_spot, wants_a_look

        spec = self._spec(job)
        if not wants_a_look(spec, attempt, self.settings):
            return False
        now = self.clock.now()
        if self._offered is None or self._offered[0] != now:  # the offers, once per pass
            self._offered = (now, self.index_of(self.provider))
        index = self.adjusted_offers(now, self._offered[1])
        return moves_to_cheaper_spot(
            self.store, job, spec, attempt, self._gangs(index, [spec]), now, self.settings,
            self.checkpoints.stores is not None, self._plan_many,
        )  # fmt: skip

    def _release(self, instance: Instance, report: PassReport) -> None:
        """Delete what a reclaimed instance leaves behind (a deallocated Azure VM, a
        stopped GCE VM keep their disks, which cost money); safe to repeat."""
        from providers.errors import NotFound, ProviderError

        try:
            self.provider.terminate(instance.id)
        except NotFound:
            pass  # the cloud deleted it itself
        except ProviderError as exc:
            report.cannot_reach(instance.id, exc)


def _open_attempts(
    store: StateStore,
) -> tuple[dict[str, list[Attempt]], dict[str, list[InstanceRow]]]:
    """(job id -> its open attempts in order, attempt id -> its instance rows): the open
    attempts and their instances in two queries, whatever the number of jobs."""
    from broker.state import OPEN_ATTEMPT

    attempts: dict[str, list[Attempt]] = {}
    for attempt in store.attempts(states=OPEN_ATTEMPT):
        attempts.setdefault(attempt.job_id, []).append(attempt)
    instances: dict[str, list[InstanceRow]] = {}
    for row in store.instances(attempt_states=OPEN_ATTEMPT):
        if row.attempt_id is not None:
            instances.setdefault(row.attempt_id, []).append(row)
    return attempts, instances
