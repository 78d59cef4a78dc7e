"""What the broker does with a provider's interruption notice: one table, kind -> action.

Providers report notices (`Provider.interruptions()`) before or as they take an
instance back. The instance's end is what closes its attempt (the outcome table in
`broker.controller.outcomes` reads the provider's "interrupted" state); a notice says
earlier that it is coming, and why. As Karpenter keeps one table from interruption
kind to action, the broker keeps this one, and the controller looks each notice up
here rather than deciding by the provider's words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Action = Literal["expect-reclaim", "record"]


@dataclass(frozen=True, slots=True)
class Handling:
    """What a kind of notice means for the attempt it names."""

    action: Action
    meaning: str  # recorded with the notice, shown in `broker status`


# Kinds the adapters report (providers.base.InterruptionNotice.kind).
TABLE: dict[str, Handling] = {
    "spot-reclaim": Handling(
        "expect-reclaim",
        "the cloud is taking the spot instance back: the job gets SIGTERM to checkpoint, "
        "and is re-planned elsewhere when it ends",
    ),
    "preemption": Handling(
        "expect-reclaim",
        "the instance is being preempted: the job gets SIGTERM to checkpoint, and is "
        "re-planned when it ends",
    ),
    "maintenance": Handling(
        "record", "the cloud plans maintenance on the host; the instance keeps running"
    ),
}
UNKNOWN = Handling("record", "a notice of a kind the broker does not act on")


def handling(kind: str) -> Handling:
    """The table's entry for `kind` (an unknown kind is only recorded)."""
    return TABLE.get(kind, UNKNOWN)
