"""What an ended attempt is charged: the ledger entries `StateStore.finish_attempt` writes.

- Its billed hours at the hourly price in force when it launched (the attempt's
  price, market, source and as-of): kind "onprem" on an on-prem pool (the pool's
  amortised rate), "compute" on a cloud.
- Egress for the data it moved, priced by `pricing.egress` (the sender's cloud
  bills it, so the entry carries the sender's cloud and region): every input with
  a known location, copied in once per attempt; the checkpoints it wrote, one per
  full checkpoint interval of billed time plus the one the job contract writes on
  an interruption notice; and the checkpoint restored into it, when an earlier
  attempt of the job wrote one. Free moves (same region, the on-prem network)
  write nothing.

An attempt that never ran (no billed time) is charged nothing: no data moved either.
Pure: plain data in, entry mappings out; the store writes them in the transaction
that ends the attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from broker.state.model import multiply, to_decimal

if TYPE_CHECKING:
    from broker.spec import JobSpec
    from broker.state.model import Attempt
    from pricing.regions import Place


def attempt_charges(
    attempt: Attempt,
    hours: Any,
    spec: JobSpec | None,
    outcome: str = "",
    earlier: Iterable[Attempt] = (),
    countries: Mapping[tuple[str, str], str] | None = None,
) -> list[dict[str, Any]]:
    """Ledger entries for `attempt` after `hours` of billed time, ending with `outcome`.

    `spec` is the job's spec (None: bill the time only); `earlier`, the job's
    attempts (those numbered before this one count: did one write a checkpoint?);
    `countries`, the country of on-prem regions (cloud ones are known), for scopes.
    """
    billed = to_decimal(hours)
    if billed <= 0:
        return []
    placed = attempt.placed_on
    kind = "onprem" if placed.cloud == "onprem" else "compute"
    entries: list[dict[str, Any]] = [{"kind": kind}]
    if spec is None:
        return entries
    here = (placed.cloud, placed.region)
    moves: list[tuple[Place, tuple[str, str], Decimal, str]] = []
    for item in spec.data:
        if item.location is not None and item.size_gb > 0:
            moves.append((item.location, here, to_decimal(item.size_gb), f"input {item.uri}"))
    ckpt = spec.checkpoint
    if ckpt is not None and ckpt.location is not None and ckpt.size_gb > 0:
        if any(
            _writes(a.billed_hours or 0, ckpt.interval_minutes, a.state)
            for a in earlier
            if a.number < attempt.number
        ):
            restore = f"checkpoint restore {ckpt.uri}"
            moves.append((ckpt.location, here, to_decimal(ckpt.size_gb), restore))
        writes = _writes(billed, ckpt.interval_minutes, outcome)
        if writes:
            target = (ckpt.location.cloud, ckpt.location.region)
            what = f"checkpoint writes {ckpt.uri} ({writes} x {ckpt.size_gb:g} GB)"
            size = multiply(to_decimal(writes), to_decimal(ckpt.size_gb))  # exact
            moves.append((_place(here), target, size, what))
    for source, target, size_gb, what in moves:
        entry = egress_entry(source, target, size_gb, what, countries or {})
        if entry is not None:
            entries.append(entry)
    return entries


def _writes(hours: Any, interval_minutes: float, outcome: str) -> int:
    """Checkpoints written in `hours`: one per full interval, and one on an interruption."""
    full = int(to_decimal(hours) * 60 // to_decimal(interval_minutes))
    return full + (1 if outcome == "interrupted" and to_decimal(hours) > 0 else 0)


def _place(pair: tuple[str, str]) -> Place:
    from pricing.regions import Place

    return Place(*pair)


def egress_entry(
    source: Place,
    target: tuple[str, str],
    size_gb: Decimal,
    what: str,
    countries: Mapping[tuple[str, str], str],
) -> dict[str, Any] | None:
    """One egress entry, or None when the move is free or has no known price."""
    from pricing.egress import egress_price
    from pricing.regions import Place

    src = Place(
        source.cloud, source.region, country=countries.get((source.cloud, source.region), "")
    )
    dst = Place(*target, country=countries.get(target, ""))
    try:
        price = egress_price(src, dst)
    except ValueError:  # no price known: unknown is missing, never 0
        return None
    if to_decimal(price.price_per_gb) == Decimal(0):
        return None
    return {
        "kind": "egress",
        "quantity": size_gb,
        "unit": "GB",
        "unit_price_usd": price.price_per_gb,
        "price_source": price.source,
        "price_as_of": price.as_of,
        "cloud": source.cloud,
        "region": source.region,
        "detail": f"{what}: {source.cloud}:{source.region} -> {target[0]}:{target[1]}"
        f" ({price.scope.replace('_', ' ')})",
    }


def charged_usd(attempt: Attempt, hours: Decimal, entries: Iterable[Mapping[str, Any]]) -> Decimal:
    """What `entries` (of `attempt_charges`, for `hours` of billed time) come to in USD,
    as the ledger would write them: each amount quantity x unit price, rounded once."""
    from broker.state.model import total
    from broker.state.money import money

    amounts = []
    for entry in entries:
        if "amount_usd" in entry:
            amounts.append(money(entry["amount_usd"]))
            continue
        quantity = to_decimal(entry.get("quantity", hours))
        price = to_decimal(entry.get("unit_price_usd", attempt.price_per_hour))
        amounts.append(money(multiply(quantity, price)))
    return total(amounts)
