"""Before, after and difference of each job a change touches, and the totals.

Jobs are matched by (team, name), the identity of a job (docs/manifest.md), so a
job moved to another file is the same job. A job whose manifest is the same at
both ends (same digest) costs the same and is left out. A job that had no
feasible placement counts 0 on that side and says so.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from broker.estimate import JobEstimate, total

ChangeKind = Literal["new", "changed", "deleted"]


@dataclass(frozen=True)
class JobChange:
    """One job's estimate before (None: new) and after (None: deleted) the change."""

    before: JobEstimate | None
    after: JobEstimate | None

    @property
    def kind(self) -> ChangeKind:
        if self.before is None:
            return "new"
        return "deleted" if self.after is None else "changed"

    @property
    def current(self) -> JobEstimate:
        """The version that describes the job now (the deleted one for a deletion)."""
        estimate = self.after or self.before
        assert estimate is not None
        return estimate

    @property
    def before_cost(self) -> float:
        return self.before.cost if self.before is not None else 0.0

    @property
    def after_cost(self) -> float:
        return self.after.cost if self.after is not None else 0.0

    @property
    def difference(self) -> float:
        return self.after_cost - self.before_cost


@dataclass(frozen=True)
class CostDiff:
    """The changed jobs and the expected cost of every job under the path, after and before."""

    changes: tuple[JobChange, ...]
    all_after: float  # every feasible job at head
    jobs_after: int  # jobs at head

    @property
    def before(self) -> float:
        return sum(c.before_cost for c in self.changes)

    @property
    def after(self) -> float:
        return sum(c.after_cost for c in self.changes)

    @property
    def difference(self) -> float:
        return self.after - self.before

    @property
    def all_before(self) -> float:
        """Every job at base: the unchanged ones cost what they cost at head."""
        return self.all_after - self.difference

    @property
    def percent(self) -> float:
        """The difference as a percentage of everything at base (inf when that was 0)."""
        if self.all_before > 0:
            return 100.0 * self.difference / self.all_before
        return 0.0 if self.difference == 0 else math.copysign(math.inf, self.difference)


def cost_diff(
    before: Sequence[JobEstimate],
    after: Sequence[JobEstimate],
    all_after: Sequence[JobEstimate],
    unreadable: Collection[Path] = (),
) -> CostDiff:
    """Match `before` (base versions of the changed files) with `after` (their head versions).

    `all_after` is every job at head, for the totals. A base job from a file in
    `unreadable` (a head file with errors) is left out rather than shown deleted:
    its fate is unknown until the file is fixed.
    """
    old = {e.key: e for e in before}
    new = {e.key: e for e in after}
    changes = []
    for key in sorted(old.keys() | new.keys()):
        b, a = old.get(key), new.get(key)
        if b is not None and a is not None and b.digest == a.digest:
            continue
        if a is None and b is not None and b.path in unreadable:
            continue
        changes.append(JobChange(b, a))
    return CostDiff(
        changes=tuple(changes),
        all_after=total(all_after),
        jobs_after=len(all_after),
    )
