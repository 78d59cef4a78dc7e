"""What step 1 of planning gives the cost model: the feasible candidates of a batch in
cost groups (`Candidates`), and the tally of what each filter removed (`Tally`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from broker.planner.decision import Rejection, Rejections
from broker.spec import Requirements

if TYPE_CHECKING:
    import numpy as np


class Candidates(NamedTuple):
    """Feasible (requirements, offer, market) triples of a batch, in cost groups.

    A cost group is the candidates of one requirements that share every input of
    the cost model but the price: GPU alternative, place (cloud region), market
    and interruption rate. Within a group the expected hours are the same and the
    expected cost grows with the price, so candidates are sorted by (price, row)
    and a group can be priced once. Group g holds candidates
    `group_start[g]:group_end[g]` (requirements sharing a slice share its
    candidates); the groups of requirements r are `req_groups[r]:req_groups[r+1]`.
    """

    row: np.ndarray  # per candidate: position in the offers table
    price_per_hour: np.ndarray  # per candidate: USD for all nodes, in its market
    group_start: np.ndarray  # per group: first candidate
    group_end: np.ndarray  # per group: one past its last candidate
    group_alternative: np.ndarray  # per group: index into the accelerators (0 for CPU-only)
    group_place: np.ndarray  # per group: place id (Partitions.places)
    group_spot: np.ndarray  # per group: bool
    group_rate: np.ndarray  # per group: interruptions per hour (0 on-demand)
    group_rate_from_catalog: np.ndarray  # per group: bool
    group_nodes: np.ndarray  # per group: its requirements' nodes (a gang's size)
    req_groups: np.ndarray  # len(reqs) + 1 offsets into the groups
    rejected: list[list[Rejection]]  # per requirements, in filter order
    considered: int  # offers in the table

    def rerated(self, spot_rate: np.ndarray) -> Candidates:
        """These candidates with each group at its rate in `spot_rate` (per row): over a
        table that differs in its rates alone, in the same order (`Partitions.rerated`)."""
        rate = group_rates(spot_rate, self.row[self.group_start], self.group_nodes, self.group_spot)
        return self._replace(group_rate=rate)


def group_rates(
    spot_rate: np.ndarray, first: np.ndarray, nodes: np.ndarray, spot: np.ndarray
) -> np.ndarray:
    """Each cost group's interruptions per hour: its first row's (`first`) in `spot_rate`
    for a gang of `nodes`, 0 on demand."""
    import numpy as np

    from broker.dispatch.gangs import gang_interruption_rate

    return np.where(spot, gang_interruption_rate(spot_rate[first], nodes), 0.0)


class Tally:
    """What the filters removed from each requirements, in filter order."""

    def __init__(
        self, reqs: list[Requirements], rejected: list[list[Rejection]], rejections: Rejections
    ) -> None:
        self.reqs, self.rejected, self.rejections = reqs, rejected, rejections

    def add(self, counts: np.ndarray, reason: Callable[[Requirements], str]) -> None:
        """A Rejection for each requirements with a nonzero count."""
        import numpy as np

        for r in np.flatnonzero(counts).tolist():
            self.rejected[r].append(self.rejections[reason(self.reqs[r]), int(counts[r])])

    def add_each(self, reqs: list[int], reasons: list[str], counts: list[int]) -> None:
        """A Rejection per (requirements, reason), the counts of equal pairs summed, in the
        order each pair first appears."""
        summed: dict[tuple[int, str], int] = {}
        for r, reason, count in zip(reqs, reasons, counts, strict=True):
            summed[(r, reason)] = summed.get((r, reason), 0) + count
        for (r, reason), count in summed.items():
            self.rejected[r].append(self.rejections[reason, count])
