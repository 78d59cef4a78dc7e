"""Played spot reclaims for the sandbox: how a user tries spot survival without a cloud.

`ReclaimOnce` is the demo's single reclaim of one job, once it has checkpointed;
`RandomReclaims` reclaims running spot attempts at random, at a rate per billed hour
(`broker run --sandbox-reclaim-rate`). Both run after a controller pass and act
through the provider's own `interrupt` (the sandbox's SIGTERM, notice and deadline).
"""

from __future__ import annotations

import math
import random
import sys

from providers.capabilities import Billing, CheckpointStores, PlayedReclaims


class ReclaimOnce:
    """Plays one spot reclaim on a job's first attempt, once it has checkpointed: what
    the demo shows of spot survival (`broker sandbox interrupt` does it by hand). With
    `crunch`, a spot capacity crunch on that attempt's cloud follows (the sandbox's
    `crunch_spot`): the job must resume on another cloud, its checkpoint crossing."""

    def __init__(self, job_name: str, crunch: bool = False) -> None:
        self.job_name = job_name
        self.crunch = crunch
        self.done = False

    def __call__(self, rt) -> None:
        if self.done:
            return
        jobs = [j for j in rt.store.jobs() if j.name == self.job_name]
        attempts = rt.store.attempts(jobs[0].id) if jobs else []
        if len(attempts) != 1 or attempts[0].market != "spot":
            self.done = len(attempts) > 1 or bool(attempts)  # gone past it, or on demand
            return
        first, provider = attempts[0], rt.provider
        if not isinstance(provider, CheckpointStores) or not isinstance(provider, PlayedReclaims):
            self.done = True  # a real cloud reclaims by itself
            return
        place = first.placed_on
        if provider.last_checkpoint_at(first.job_id, place.cloud, place.region) is None:
            return  # not checkpointed yet
        for instance in rt.store.instances(attempt_id=first.id):
            provider.interrupt(instance.provider_id)
            print(
                f"demo: spot reclaim of {self.job_name} on {instance.provider_id} ({place.where})",
                file=sys.stderr,
            )
        if self.crunch:
            provider.crunch_spot(place.cloud)
            print(
                f"demo: spot capacity crunch on {place.cloud} (played): no {place.cloud} "
                "region sells spot any more",
                file=sys.stderr,
            )
        self.done = True


class RandomReclaims:
    """Reclaim each running spot attempt with probability 1 - exp(-rate x hours), where
    hours is the billed time since the previous pass: a Poisson process per instance."""

    def __init__(self, rate_per_hour: float, seed: int = 0) -> None:
        self.rate = rate_per_hour
        self.random = random.Random(seed)
        self.seen: dict[str, float] = {}  # instance id -> billed hours at the last look

    def __call__(self, rt) -> None:
        provider = rt.provider
        if not isinstance(provider, PlayedReclaims) or not isinstance(provider, Billing):
            return  # a real cloud reclaims by itself
        for known in rt.store.instances(state="running"):
            attempt = rt.store.attempt(known.attempt_id)
            if attempt.market != "spot":
                continue
            try:
                hours = provider.billed_hours(provider.describe(known.provider_id))
            except Exception:  # noqa: BLE001 (gone meanwhile: nothing to reclaim)
                continue
            elapsed = max(0.0, hours - self.seen.get(known.provider_id, 0.0))
            self.seen[known.provider_id] = hours
            if self.random.random() < 1 - math.exp(-self.rate * elapsed):
                provider.interrupt(known.provider_id)
                print(f"sandbox: spot reclaim of {known.provider_id}", file=sys.stderr)
