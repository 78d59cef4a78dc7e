"""The offers in force as the account can buy them now: the catalog, with each
enabled cloud's rows replaced by what its adapter says (zones that do not sell a
type, restricted SKUs, quota headroom as capacity).

Kept apart from `broker.offers` because it calls clouds: only `--live` pays for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.offers import OffersInForce
    from providers.cloud import Unavailable


def live_offers(
    view: OffersInForce, clouds: Sequence[str]
) -> tuple[OffersInForce, list[Unavailable]]:
    """`view` with the rows of `clouds` restricted by their adapters, and every reason
    an offer is not sold. Raises ProviderError (credentials, unreachable...) and
    registry.ProviderUnavailable (SDK extra missing)."""
    import numpy as np

    from pricing.query import OfferIndex
    from pricing.table import concat
    from providers.capabilities import Restrictions
    from providers.registry import load_provider

    table = view.index.offers
    parts, reasons = [table.take(np.flatnonzero(~np.isin(table.text("cloud"), list(clouds))))], []
    for cloud in clouds:
        provider = load_provider(cloud, catalog=table)
        parts.append(provider.offers())
        if isinstance(provider, Restrictions):
            reasons.extend(provider.unavailable())
    index = OfferIndex(concat(parts), extra_countries=view.index.extra_countries)
    return view._replace(index=index), reasons
