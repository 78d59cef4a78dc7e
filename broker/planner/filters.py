"""Step 1 of planning: which offer x market pairs satisfy a job's Requirements.

Filters are chained in a fixed order over numpy arrays; each one records how
many candidates it removed and why, so that `broker plan --explain` can show
where the offers went. The result depends on Requirements only, so a batch of
jobs with the same requirements shares one `Candidates`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.planner.decision import Rejection
from broker.spec import Amount, Requirements

if TYPE_CHECKING:
    import numpy as np

    from pricing.query import OfferIndex


@dataclass(frozen=True)
class Candidates:
    """Offer x market pairs that pass every requirement (arrays of equal length)."""

    rows: np.ndarray  # positions in the offers table
    alternative: np.ndarray  # index into requirements.accelerators (0 for CPU-only)
    spot: np.ndarray  # bool: True = spot market, False = on-demand
    price_per_hour: np.ndarray  # USD for all nodes, in that market
    rejected: tuple[Rejection, ...]
    considered: int  # offers in the table

    def __len__(self) -> int:
        return len(self.rows)


class _Tally:
    """Keeps the surviving rows and counts what each filter removed."""

    def __init__(self, rows: np.ndarray, alternative: np.ndarray) -> None:
        self.rows, self.alternative = rows, alternative
        self.rejected: list[Rejection] = []

    def keep(self, mask: np.ndarray, reason: str) -> None:
        removed = int(len(mask) - mask.sum())
        if removed:
            self.rejected.append(Rejection(reason, removed))
            self.rows, self.alternative = self.rows[mask], self.alternative[mask]


def _amount_text(amount: Amount) -> str:
    return f"{amount.value:g}{'+' if amount.at_least else ''}"


def _amount_mask(values: np.ndarray, amount: Amount) -> np.ndarray:
    return values >= amount.value if amount.at_least else values == amount.value


def find_candidates(req: Requirements, index: OfferIndex) -> Candidates:
    """Every offer x market pair that satisfies `req`, with the rejected counts."""
    import numpy as np

    table = index.offers
    numbers, codes = table.numbers, table.codes
    total = len(table)
    if req.accelerators:
        parts = [index.rows_of_gpu(ask.gpu) for ask in req.accelerators]
        # One offer can appear once even if the request lists its GPU twice (A100:4, A100:8).
        rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        alternative = np.concatenate(
            [np.full(len(part), i, dtype=np.int64) for i, part in enumerate(parts)]
        )
        wanted = " or ".join(f"{a.gpu}:{a.count:g}" for a in req.accelerators)
        distinct = len(np.unique(rows))
        tally = _Tally(rows, alternative)
        if total - distinct:
            tally.rejected.append(Rejection(f"GPU model is not {wanted}", total - distinct))
        counts = np.array([ask.count for ask in req.accelerators])
        tally.keep(
            numbers["accelerator_count"][tally.rows] == counts[tally.alternative],
            f"GPU count per node is not {wanted}",
        )
    else:
        rows = index.rows_of_gpu("")
        tally = _Tally(rows, np.zeros(len(rows), dtype=np.int64))
        if total - len(rows):
            tally.rejected.append(Rejection("has GPUs (the job asks for none)", total - len(rows)))
    if req.clouds:
        tally.keep(
            index.category_mask("cloud", req.clouds)[codes["cloud"][tally.rows]],
            f"cloud not in {', '.join(req.clouds)}",
        )
    if req.exclude_clouds:
        excluded = index.category_mask("cloud", req.exclude_clouds)
        tally.keep(
            ~excluded[codes["cloud"][tally.rows]],
            f"cloud excluded ({', '.join(req.exclude_clouds)})",
        )
    if req.regions:
        tally.keep(
            index.category_mask("region", req.regions)[codes["region"][tally.rows]],
            f"region not in {', '.join(req.regions)}",
        )
    if req.countries:
        allowed = index.category_mask("country", req.countries)
        tally.keep(
            allowed[index.country_codes()[tally.rows]],
            f"country not in {', '.join(req.countries)} (data residency)",
        )
    if req.cpus is not None:
        tally.keep(
            _amount_mask(numbers["vcpus"][tally.rows], req.cpus),
            f"vCPUs not {_amount_text(req.cpus)}",
        )
    if req.memory_gib is not None:
        tally.keep(
            _amount_mask(numbers["memory_gib"][tally.rows], req.memory_gib),
            f"memory not {_amount_text(req.memory_gib)} GiB",
        )
    if req.interconnect:
        has = _interconnect_mask(table.categories["interconnect"], req.interconnect)
        tally.keep(has[codes["interconnect"][tally.rows]], f"no {req.interconnect} interconnect")
    capacity = numbers["capacity"][tally.rows]
    tally.keep(
        np.isnan(capacity) | (capacity >= req.nodes),
        f"not enough free capacity for {req.nodes} node(s)",
    )
    return _split_markets(req, index, tally, total)


def _interconnect_mask(categories: np.ndarray, wanted: str) -> np.ndarray:
    import numpy as np

    return np.array([wanted in value.split("+") for value in categories], dtype=bool)


def _split_markets(req: Requirements, index: OfferIndex, tally: _Tally, total: int) -> Candidates:
    """One candidate per allowed market with a price; then the max-price filter."""
    import numpy as np

    numbers = index.offers.numbers
    markets = {"never": (False,), "only": (True,), "prefer": (False, True)}[req.spot]
    rows, alternative, spot, price = [], [], [], []
    rejected = list(tally.rejected)
    for is_spot in markets:
        column = "price_spot" if is_spot else "price_on_demand"
        market_price = numbers[column][tally.rows]
        known = ~np.isnan(market_price)
        missing = int(len(known) - known.sum())
        if missing:
            rejected.append(Rejection(f"no {'spot' if is_spot else 'on-demand'} price", missing))
        rows.append(tally.rows[known])
        alternative.append(tally.alternative[known])
        spot.append(np.full(int(known.sum()), is_spot))
        price.append(market_price[known] * req.nodes)
    rows_all = np.concatenate(rows)
    alternative_all = np.concatenate(alternative)
    spot_all = np.concatenate(spot)
    price_all = np.concatenate(price)
    if req.max_price_per_hour is not None:
        ok = price_all <= req.max_price_per_hour
        removed = int(len(ok) - ok.sum())
        if removed:
            rejected.append(
                Rejection(f"over max_price_per_hour {req.max_price_per_hour:g} USD", removed)
            )
            rows_all, alternative_all = rows_all[ok], alternative_all[ok]
            spot_all, price_all = spot_all[ok], price_all[ok]
    return Candidates(rows_all, alternative_all, spot_all, price_all, tuple(rejected), total)
