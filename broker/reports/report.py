"""One cost report: the ledger of a period, grouped, with its totals and daily series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from broker.reports.lines import Ledger, to_lines
from broker.reports.query import Figures, Group, Line, daily, figures, group

if TYPE_CHECKING:
    from broker.reports.savings import OnDemandPrices
    from broker.state import StateStore


@dataclass(frozen=True)
class Report:
    by: tuple[str, ...]
    since: datetime | None
    until: datetime | None
    ledger: Ledger
    lines: list[Line]
    groups: list[Group]
    totals: Figures
    days: list[str]
    series: dict[str, list[Decimal]]

    @property
    def egress(self) -> list[Line]:
        return [line for line in self.lines if line.kind == "egress"]


def build_report(
    store: StateStore | None,
    by: Sequence[str],
    since: datetime | None = None,
    until: datetime | None = None,
    prices: OnDemandPrices | None = None,
) -> Report:
    """The report of ledger entries whose period ended in [since, until), grouped by `by`.

    `prices`: the on-demand prices in force, for savings (None: no baselines). No
    `store` (no state file yet) is an empty ledger: a report of nothing, not an error.
    """
    ledger = Ledger.read(store, since, until) if store is not None else Ledger.empty()
    lines = to_lines(ledger, prices)
    days, series = daily(lines, by)
    return Report(
        tuple(by), since, until, ledger, lines, group(lines, by), figures(lines), days, series
    )
