"""The offers in force: catalog + on-prem pools + negotiated overlays, as one index.

Every command that looks at prices (offers, plan, estimate) goes through
`load_offers`, so they all see the same table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from pricing.catalog import Catalog, load_catalog

if TYPE_CHECKING:
    from pricing.query import OfferIndex


class OffersInForce(NamedTuple):
    """The catalog that was read, what was layered on it, and the query index."""

    catalog: Catalog
    index: OfferIndex
    pools_path: Path | None
    overlays_path: Path | None


def load_offers(
    catalog_path: Path | None = None,
    pools_path: Path | None = None,
    overlays_path: Path | None = None,
    *,
    live_pools: Path | None = None,
) -> OffersInForce:
    """Read the catalog, add on-prem pools, apply overlays, and index the result.

    With `live_pools` (a work directory for the pools' executors), the pools' capacity
    is what their engines say is free now (`onprem.usage`: sinfo for Slurm pools, the
    broker's own attempts for SSH and local ones) instead of every GPU free.

    Raises pricing.schema.SchemaError for an unreadable catalog and
    pricing.userio.errors.UserInputError for a broken pools or overlays file.
    """
    from pricing.query import OfferIndex
    from pricing.table import concat

    catalog = load_catalog(catalog_path)
    offers = catalog.offers
    countries: dict[tuple[str, str], str] = {}
    if pools_path is not None:
        from onprem.inventory import load_pools
        from onprem.offers import pool_countries, pools_to_offers

        pools = load_pools(pools_path)
        if live_pools is not None:
            from onprem.usage import live_pool_offers

            offers = concat([offers, live_pool_offers(pools, live_pools)])
        else:
            offers = concat([offers, pools_to_offers(pools)])
        countries = {("onprem", region): c for region, c in pool_countries(pools).items()}
    if overlays_path is not None:
        from pricing.overlays import apply_overlays, load_overlays

        offers = apply_overlays(offers, load_overlays(overlays_path))
    return OffersInForce(
        catalog=catalog,
        index=OfferIndex(offers, extra_countries=countries),
        pools_path=pools_path,
        overlays_path=overlays_path,
    )
