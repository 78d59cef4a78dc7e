"""Which jobs a spot policy steers: the one rule, in a module of its own so that the
planner, which marks steered jobs in every batch, imports no spot policy to ask it."""

from __future__ import annotations


def steered(spot: str, has_deadline: bool) -> bool:
    """Whether the spot policy is asked for this job at all: `spot: prefer` with a
    deadline (docs/spot.md)."""
    return spot == "prefer" and has_deadline
