"""Closing attempts: the outcome of an ended one, its charges, the work it lost, and
stops the broker makes itself (cancel, preemption, a budget, back to spot).

A part of `Controller` (broker.controller.reconcile), which provides the attributes
below and `_spec`. Every close is one `finish_attempt`: outcome, ledger entries, the
job's next state and the instance rows, in one transaction, so nothing is billed twice.
An attempt the broker's own code fails on is closed here too (`_fail_attempt`,
broker.controller.isolation).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING

from broker.controller.outcomes import INFRA_RETRIES, Ending, judge
from broker.state import JobState

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.controller.checkpoints import Checkpoints
    from broker.spec import JobSpec
    from broker.state import Attempt, Job, StateStore
    from providers.base import Instance, Provider
    from providers.capabilities import Billing


_LIVE = (JobState.LAUNCHING, JobState.RUNNING)


class Closing:
    """The controller's closing of attempts (a part of `Controller`)."""

    store: StateStore
    provider: Provider
    clock: Clock
    checkpoints: Checkpoints
    _billing: Billing | None
    _spec: Callable[[Job], JobSpec]

    def _finish(
        self, job: Job, attempt: Attempt, instance: Instance, later: list | None = None
    ) -> str:
        """Close an ended attempt: outcome, billing and the job's next state in one write
        (the outcome table: broker.controller.outcomes); with `later`, an attempt closed
        in that one write only puts it there, for the caller to make."""
        spec = self._spec(job)
        hours = self._billed_hours(instance)
        attempts = self.store.attempts(job.id)
        failed = [a for a in attempts if a.state == "failed"]
        verdict = judge(
            Ending(
                instance_state=instance.state,
                exit_code=instance.exit_code,
                job_cancelled=job.state is JobState.CANCELLED,
                recover_on_exit_codes=spec.recover_on_exit_codes,
                failed_before=len(failed),
                failed_without_code=sum(1 for a in failed if a.exit_code is None),
                max_restarts_on_error=spec.max_restarts_on_error,
            )
        )
        reason, lost, known = verdict.reason, None, (job, attempts)
        if verdict.outcome == "interrupted":
            lost = self.checkpoints.lost_work(job, attempt, instance, hours, self._told(attempt))
            reason += lost.text if lost is not None else ""
            known = (job, None)  # its checkpoint recorded since: the attempts read again
        code = instance.exit_code
        share = lost.share if lost is not None else None
        one_write = later if verdict.outcome != "interrupted" else None  # else: a re-queue
        self._close(
            attempt, verdict.outcome, code, reason, hours, verdict.next_state, instance, share,
            one_write, known,
        )  # fmt: skip
        if verdict.outcome == "interrupted":
            # Back to the queue: the next plan prices moving the checkpoint from where it
            # lives, the reclaimed place is closed for spot a while (broker.recovery).
            self.store.transition(
                job.id, JobState.QUEUED, "re-queued after interruption", expect=JobState.INTERRUPTED
            )
        return verdict.outcome

    def _close(
        self,
        attempt: Attempt,
        outcome: str,
        code: int | None,
        reason: str,
        hours: Decimal | float,
        to: JobState | None,
        instance: Instance | None = None,
        lost_share: Decimal | None = None,
        later: list | None = None,
        known: tuple[Job, list[Attempt] | None] | None = None,
    ) -> None:
        """End an attempt with its charges (time, data moved, the checkpoint's copy), and
        its instance rows as `instance` last reported (terminated: gone, or never up);
        with `later`, the write is put there for the caller to make. `known`: the job
        and its attempts (None: not read), as the caller has just read them."""
        entries = self._charges(attempt, hours, outcome, known)
        ended = instance.state if instance is not None else "terminated"
        write = partial(
            self.store.finish_attempt,
            attempt.id, outcome, code, reason, hours, entries, job_to=to, instance_state=ended,
            lost_share=lost_share,
        )  # fmt: skip
        if later is None:
            write()
        else:
            later.append(write)

    def _charges(
        self,
        attempt: Attempt,
        hours: Decimal | float,
        outcome: str,
        known: tuple[Job, list[Attempt] | None] | None = None,
    ) -> list[dict]:
        """What ending `attempt` after `hours` of billed time with `outcome` is charged:
        its time, the data it moved, the checkpoint's copy into it (ledger entries).
        `known`: as `_close` has it (what is not given is read)."""
        from broker.recovery import with_checkpoint_at
        from broker.state.charges import attempt_charges
        from pricing.regions import Place

        job, earlier = known if known is not None else (None, None)
        if hours > 0:
            spec = self._spec(job if job is not None else self.store.job(attempt.job_id))
            earlier = earlier if earlier is not None else self.store.attempts(attempt.job_id)
        else:
            spec, earlier = None, []
        moved = []
        here = attempt.placed_on
        if spec is not None and spec.checkpoint is not None:
            if self.checkpoints.kept_per_place(attempt.job_id, here.cloud, here.region):
                # Checkpoints live in the place's own store: writes and restores are local;
                # what crossed places is the migration, charged once, from where it came.
                spec = with_checkpoint_at(spec, Place(here.cloud, here.region))
                moved = self.checkpoints.migration_charge(attempt, spec)
        return attempt_charges(attempt, hours, spec, outcome, earlier) + moved

    def _billed_hours(self, instance: Instance) -> Decimal:
        """The instance's billed time, in whole seconds (`broker.state.money`)."""
        from broker.state.money import billed_hours
        from providers.base import launch_to_end_hours

        if self._billing is not None:
            return billed_hours(self._billing.billed_hours(instance))
        return billed_hours(launch_to_end_hours(instance))

    def _stop(self, job_id: str, outcome: str, reason: str) -> None:
        """Terminate the job's live instances and close their attempts, billed up to now."""
        from broker.state import OPEN_ATTEMPT

        job = self.store.job(job_id)
        for attempt in self.store.attempts(job_id, states=OPEN_ATTEMPT):
            for known in self.store.instances(attempt_id=attempt.id):
                told = self.clock.now()  # the SIGTERM: a job that saves on it lost nothing
                self.provider.terminate(known.provider_id)
                instance = self.provider.describe(known.provider_id)
                hours = self._billed_hours(instance)
                text, share = reason, None
                if outcome == "interrupted":
                    lost = self.checkpoints.lost_work(job, attempt, instance, hours, told)
                    if lost is not None:
                        text, share = reason + lost.text, lost.share
                code = instance.exit_code
                self._close(attempt, outcome, code, text, hours, None, instance, share)

    def _told(self, attempt: Attempt):
        """When the provider told the attempt to stop: its first notice that expects a
        reclaim (None: it was not told, as far as the store knows)."""
        from datetime import datetime

        times = [
            datetime.fromisoformat(event.data["noticed_at"])
            for event in self.store.events(attempt.job_id)
            if event.kind == "interruption_notice"
            and event.attempt_id == attempt.id
            and event.data.get("action") == "expect-reclaim"
        ]
        return min(times, default=None)

    def _fail_attempt(self, job: Job, attempt: Attempt, stage: str, exc: Exception) -> None:
        """Close an attempt the broker's own code raised on (`stage`: launching,
        observing, finishing): its instance is stopped, the attempt billed what the
        provider reports and closed as failed with no exit code of its own, which the
        outcome table retries a few times (INFRA_RETRIES), then fails. The error is an
        event of the job. Nothing, when another controller holds the job's lease."""
        from broker.controller.isolation import error_reason

        if not self.store.claim(job.id, "finish"):
            return  # another controller holds the job: its step, its close
        reason = error_reason(stage, exc)
        self.store.record_error(job.id, reason, attempt.id)
        instance, hours = self._stopped_instance(attempt)
        attempts = self.store.attempts(job.id)
        failed = [a for a in attempts if a.state == "failed"]
        unexplained = sum(1 for a in failed if a.exit_code is None)
        live = self.store.job(job.id).state in _LIVE  # not cancelled meanwhile
        to = JobState.QUEUED if unexplained < INFRA_RETRIES and live else None
        try:
            self._close(attempt, "failed", None, reason, hours, to, instance)
            return
        except Exception:  # noqa: BLE001 (the charges failed too: bill the time alone)
            pass
        from broker.state.charges import attempt_charges

        ended = instance.state if instance is not None else "terminated"
        try:
            entries = attempt_charges(attempt, hours, None, "failed")
        except Exception:  # noqa: BLE001 (nothing can be priced: close it unbilled)
            entries = []
        self.store.finish_attempt(
            attempt.id, "failed", None, reason, hours, entries, job_to=to, instance_state=ended
        )

    def _stopped_instance(self, attempt: Attempt) -> tuple[Instance | None, Decimal]:
        """The attempt's instance, terminated if it still ran, and its billed hours;
        (None, 0) when the provider cannot say."""
        from providers.errors import ProviderError

        known = self.store.instances(attempt_id=attempt.id)
        if not known:
            return None, Decimal(0)
        try:
            instance = self.provider.describe(known[0].provider_id)
            if instance.active:
                self.provider.terminate(instance.id)
                instance = self.provider.describe(instance.id)
            return instance, self._billed_hours(instance)
        except ProviderError:
            return None, Decimal(0)
        except Exception:  # noqa: BLE001 (the provider raised on it too: nothing to bill)
            return None, Decimal(0)
