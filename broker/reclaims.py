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
from pathlib import Path


class ReclaimOnce:
    """Plays one spot reclaim on a job's first attempt, once it has checkpointed: what
    the demo shows of spot survival (`broker sandbox interrupt` does it by hand)."""

    def __init__(self, job_name: str) -> None:
        self.job_name = job_name
        self.done = False

    def __call__(self, rt) -> None:
        if self.done:
            return
        jobs = [j for j in rt.store.jobs() if j.name == self.job_name]
        attempts = rt.store.attempts(jobs[0].id) if jobs else []
        if len(attempts) != 1 or attempts[0].market != "spot":
            self.done = len(attempts) > 1 or bool(attempts)  # gone past it, or on demand
            return
        first, keeper = attempts[0], getattr(rt.provider, "checkpoint_dir", None)
        place = first.placement
        folder = keeper(first.job_id, place["cloud"], place["region"]) if keeper else None
        if folder is None or not any(Path(folder).glob("*")):
            return  # not checkpointed yet
        for instance in rt.store.instances(attempt_id=first.id):
            rt.provider.interrupt(instance.provider_id)
            print(
                f"demo: spot reclaim of {self.job_name} on {instance.provider_id}", file=sys.stderr
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
        interrupt = getattr(rt.provider, "interrupt", None)
        billed = getattr(rt.provider, "billed_hours", None)
        if interrupt is None or billed is None:
            return  # a real cloud reclaims by itself
        for known in rt.store.instances(state="running"):
            attempt = rt.store.attempt(known.attempt_id)
            if attempt.market != "spot":
                continue
            try:
                hours = billed(rt.provider.describe(known.provider_id))
            except Exception:  # noqa: BLE001 (gone meanwhile: nothing to reclaim)
                continue
            elapsed = max(0.0, hours - self.seen.get(known.provider_id, 0.0))
            self.seen[known.provider_id] = hours
            if self.random.random() < 1 - math.exp(-self.rate * elapsed):
                interrupt(known.provider_id)
                print(f"sandbox: spot reclaim of {known.provider_id}", file=sys.stderr)
