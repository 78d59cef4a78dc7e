"""Ledger lines to grouped totals, exactly.

A `Line` is one ledger entry with what a report groups it by and the figures
derived from it (GPU-hours, lost work, the on-demand baseline). Grouping only
adds: every money figure of a group is an exact Decimal sum of its lines, so the
groups of any grouping add up to the grand total to the last digit. Ratios
(spot share) are the only divisions, and they are not money.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from broker.state.model import multiply, total

GROUPINGS = ("job", "team", "queue", "cloud", "region", "gpu", "market", "kind", "day", "month")
HOURLY = ("compute", "onprem")  # kinds billed by the hour on GPUs; the rest is egress
ZERO = Decimal(0)


class UnknownGrouping(ValueError):
    """A `--by` name that is not one of GROUPINGS."""


@dataclass(frozen=True, slots=True)
class Line:
    """One ledger entry, ready to group."""

    entry_id: int
    attempt_id: str | None
    kind: str  # compute | onprem | egress
    amount: Decimal  # USD, as written in the ledger
    quantity: Decimal  # hours (compute, onprem) or GB (egress)
    unit: str
    unit_price: Decimal
    market: str
    period_end: datetime
    keys: Mapping[str, str]  # grouping name -> value, for every name of GROUPINGS
    detail: str = ""
    gpus: Decimal = ZERO  # GPUs the attempt held (per node x nodes); 0 for egress
    lost_hours: Decimal = ZERO  # hours of this entry lost to an interruption
    lost_usd: Decimal = ZERO
    baseline_usd: Decimal | None = None  # on-demand cost of the same work (hourly kinds)

    @property
    def hourly(self) -> bool:
        return self.kind in HOURLY

    @property
    def gpu_hours(self) -> Decimal:
        return multiply(self.quantity, self.gpus) if self.hourly else ZERO


@dataclass(frozen=True, slots=True)
class Figures:
    """The sums a report shows for a set of lines (a group, or all of them)."""

    entries: int = 0
    total: Decimal = ZERO  # every kind
    compute: Decimal = ZERO
    onprem: Decimal = ZERO
    egress: Decimal = ZERO
    spot: Decimal = ZERO  # hourly kinds on the spot market
    gpu_hours: Decimal = ZERO
    lost_gpu_hours: Decimal = ZERO
    lost: Decimal = ZERO  # USD of lost work
    baseline: Decimal = ZERO  # on-demand cost of the hourly lines that have a baseline
    priced: Decimal = ZERO  # what those same lines cost
    unpriced: int = 0  # hourly lines without a baseline (no such GPUs on sale)

    @property
    def savings(self) -> Decimal:
        """On-demand baseline minus actual cost, over the lines that have a baseline."""
        return total((self.baseline, -self.priced))

    @property
    def spot_share(self) -> Decimal | None:
        """Share of GPU spend (compute + on-prem) on spot; None without GPU spend."""
        hourly = self.compute + self.onprem
        if hourly == 0:
            return None
        return (self.spot / hourly).quantize(Decimal("0.0001"))

    def as_dict(self) -> dict[str, object]:
        return {
            "entries": self.entries,
            "total_usd": self.total,
            "compute_usd": self.compute,
            "onprem_usd": self.onprem,
            "egress_usd": self.egress,
            "spot_usd": self.spot,
            "spot_share": self.spot_share,
            "gpu_hours": self.gpu_hours,
            "lost_gpu_hours": self.lost_gpu_hours,
            "lost_usd": self.lost,
            "on_demand_usd": self.baseline,
            "savings_usd": self.savings,
            "unpriced": self.unpriced,
        }


def figures(lines: Iterable[Line]) -> Figures:
    """The exact sums over `lines`."""
    lines = list(lines)
    hourly = [line for line in lines if line.hourly]
    priced = [line for line in hourly if line.baseline_usd is not None]
    return Figures(
        entries=len(lines),
        total=total(line.amount for line in lines),
        compute=total(line.amount for line in lines if line.kind == "compute"),
        onprem=total(line.amount for line in lines if line.kind == "onprem"),
        egress=total(line.amount for line in lines if line.kind == "egress"),
        spot=total(line.amount for line in hourly if line.market == "spot"),
        gpu_hours=total(line.gpu_hours for line in hourly),
        lost_gpu_hours=total(multiply(line.lost_hours, line.gpus) for line in hourly),
        lost=total(line.lost_usd for line in hourly),
        baseline=total(line.baseline_usd for line in priced if line.baseline_usd is not None),
        priced=total(line.amount for line in priced),
        unpriced=len(hourly) - len(priced),
    )


@dataclass(frozen=True, slots=True)
class Group:
    """One row of a report: the values of the grouping keys and the group's figures."""

    keys: tuple[str, ...]
    figures: Figures = field(default_factory=Figures)


def parse_by(names: Sequence[str]) -> tuple[str, ...]:
    """Validated grouping names, in the order given, without repeats."""
    import difflib

    chosen: list[str] = []
    for name in names:
        key = name.strip().lower()
        if key not in GROUPINGS:
            close = difflib.get_close_matches(key, GROUPINGS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownGrouping(
                f"cannot group by {name!r}{hint}; choose from {', '.join(GROUPINGS)}"
            )
        if key not in chosen:
            chosen.append(key)
    return tuple(chosen)


def group(lines: Iterable[Line], by: Sequence[str]) -> list[Group]:
    """Lines grouped by the values of `by`, in key order; `by` empty: one group."""
    buckets: dict[tuple[str, ...], list[Line]] = {}
    for line in lines:
        buckets.setdefault(tuple(line.keys[name] for name in by), []).append(line)
    return [Group(keys, figures(members)) for keys, members in sorted(buckets.items())]


def daily(lines: Iterable[Line], by: Sequence[str]) -> tuple[list[str], dict[str, list[Decimal]]]:
    """Spend per day (UTC, by period end) per group: (days, {group label: amount per day}).

    Days run from the first to the last day with spend, gaps included; `day` and
    `month` in `by` are ignored (days are the axis); no other key: one group "total".
    """
    from datetime import date, timedelta

    keys = [name for name in by if name not in ("day", "month")]
    spend: dict[str, dict[str, list[Decimal]]] = {}
    for line in lines:
        label = " / ".join(line.keys[name] for name in keys) or "total"
        spend.setdefault(label, {}).setdefault(line.keys["day"], []).append(line.amount)
    found = sorted({day for per_day in spend.values() for day in per_day})
    if not found:
        return [], {}
    first, last = date.fromisoformat(found[0]), date.fromisoformat(found[-1])
    days = [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]
    series = {
        label: [total(per_day.get(day, ())) for day in days]
        for label, per_day in sorted(spend.items())
    }
    return days, series
