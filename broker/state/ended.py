"""What one process's own writes ended: the jobs it moved to a final state and the
attempts it closed. `broker run` sums only these in its closing line, so a controller
sharing a queue with others (issue 20) does not report their work as its own; the state
says who ended what only per process, so it is kept here, in memory, from the writes
that went through."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Ended:
    """Job and attempt ids ended by this store's writes (only writes that went through:
    a write rolled back notes nothing)."""

    jobs: set[str] = field(default_factory=set)
    attempts: set[str] = field(default_factory=set)

    def note(self, ending: Iterable[tuple[str, str]]) -> None:
        """Add one write's ("job" | "attempt", id) pairs."""
        for kind, id_ in ending:
            (self.jobs if kind == "job" else self.attempts).add(id_)
