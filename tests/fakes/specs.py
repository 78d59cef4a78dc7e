"""Small JobSpecs and placements for tests that need a job in the store but no manifest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from broker.spec import JobSpec, Requirements
from broker.state.model import to_decimal
from broker.state.placed import PlacedOn


def job_spec(
    name: str = "llama",
    team: str = "ml",
    queue: str = "default",
    priority: int = 0,
    clouds: Sequence[str] = (),
) -> JobSpec:
    """A CPU-only spec named team/name, in `queue` at `priority`."""
    requirements = Requirements(clouds=tuple(clouds))
    return JobSpec(name=name, team=team, requirements=requirements, queue=queue, priority=priority)


def placed(
    where: Mapping[str, Any], price: Any, market: str, source: str = "", as_of: str = ""
) -> PlacedOn:
    """An attempt's placement from plan-style keys (`cloud`, `region`, ...), at `price`
    USD per hour (exactly as written) in `market`."""
    return PlacedOn(
        **where,
        market=market,
        price_per_hour=to_decimal(price),
        price_source=source,
        price_as_of=as_of,
    )
