"""`broker offers`: what GPUs can I get, where, and at what price?"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, fail
from broker.cli.formats import flag
from broker.cli.options import (
    CatalogOption,
    OutputOption,
    OverlaysOption,
    PoolsOption,
    WideOption,
    catalog_banner,
    offers_in_force,
    split_list,
)
from broker.cli.render import Column, Output, number, render, usd

# `keep`: what a narrow terminal keeps longest (0: left out first); --wide shows all.
OFFER_COLUMNS = (
    Column("cloud", "cloud", keep=3),
    Column("region", "region", keep=2),
    Column("country", "country"),
    Column("zone", "zone", keep=0),
    Column("instance_type", "instance type", keep=2),
    Column("accelerator", "GPU", keep=3),
    Column("accelerator_count", "#", number, keep=3),
    Column("accelerator_memory_gib", "GiB/GPU", number, keep=0),
    Column("vcpus", "vCPU", number, keep=0),
    Column("memory_gib", "mem GiB", number, keep=0),
    Column("interconnect", "interconnect", keep=0),
    Column("price_on_demand", "on-demand $/h", usd),
    Column("price_spot", "spot $/h", usd),
    Column("market", "market", keep=2),
    Column("price", "price $/h", usd, keep=3),
    Column("price_per_gpu", "$/GPU-h", usd, keep=2),
    Column("capacity", "capacity", number, keep=0),
    Column("spot_interruption_rate", "reclaims/h", number, keep=0),
    Column("as_of", "as of", keep=0),
    Column("stale", "stale", flag),
    Column("source", "source"),
)
TABLE_HIDDEN = {
    "source",
    "stale",
    "country",
    "spot_interruption_rate",
}  # shown in json/csv; the table flags staleness on as_of


def offers(
    gpu: str = typer.Option(None, "--gpu", help="GPU and minimum count, e.g. A100:8 or H100."),
    exact: bool = typer.Option(False, "--exact", help="Match the GPU count exactly."),
    cloud: list[str] = typer.Option(
        None, "--cloud", help="aws, gcp, azure, onprem (repeat or comma)."
    ),
    region: list[str] = typer.Option(None, "--region", help="Region or glob, e.g. 'us-*'."),
    country: list[str] = typer.Option(None, "--country", help="ISO country code, e.g. DE."),
    spot: bool = typer.Option(
        None,
        "--spot/--on-demand",
        help="Only spot, or only on-demand [default: both].",
        show_default=False,
    ),
    max_price: float = typer.Option(None, "--max-price", help="Max USD/hour per instance."),
    min_gpu_memory: float = typer.Option(None, "--min-gpu-memory", help="Min GiB per GPU."),
    sort: str = typer.Option("price", "--sort", help="price | price-per-gpu."),
    limit: int = typer.Option(30, "--limit", help="Rows to show (0 = all)."),
    summary: bool = typer.Option(
        False, "--summary", help="One row per GPU model: cheapest $/GPU-hour per cloud and market."
    ),
    live: bool = typer.Option(
        False,
        "--live",
        help="Ask the enabled clouds (BROKER_CLOUDS, else --cloud) what this account can "
        "launch: zones, restrictions, quotas; and the pools' engines what is free now "
        "(sinfo for Slurm pools, the broker's own jobs for SSH and local ones).",
    ),
    output: Output = OutputOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    wide: bool = WideOption,
) -> None:
    """List GPU offers across clouds and on-prem pools, cheapest first."""
    from broker.cli.inputs import number_flag
    from pricing.gpus import UnknownGpu, parse_gpu_request
    from pricing.offer_query import OfferQuery
    from pricing.query import QueryError
    from pricing.userio.bounds import MAX_MEMORY_GIB, MAX_PRICE_PER_HOUR
    from pricing.userio.settings import resolve_positive_int

    number_flag(limit, "--limit", 0, 1_000_000_000)
    if max_price is not None:
        number_flag(max_price, "--max-price", 0, MAX_PRICE_PER_HOUR)
    if min_gpu_memory is not None:
        number_flag(min_gpu_memory, "--min-gpu-memory", 0, MAX_MEMORY_GIB)
    if sort not in ("price", "price-per-gpu"):
        fail(f"--sort must be price or price-per-gpu, not {sort!r}", BAD_INPUT)
    view = offers_in_force(catalog, pools, overlays, live_pools=_pools_workdir() if live else None)
    unavailable = None
    if live:
        clouds = _live_clouds(split_list(cloud))
        if not clouds and view.pools_path is None:
            fail(
                "--live needs clouds or pools: set BROKER_CLOUDS=aws,gcp, pass --cloud aws "
                "or give --pools",
                BAD_INPUT,
            )
        view, unavailable = _go_live(view, clouds) if clouds else (view, [])
    today = date.today()
    freshness = resolve_positive_int("freshness_days")
    banner = catalog_banner(view, today, freshness)
    if summary:
        return _summary(view, output, banner, wide)
    gpu_name, count = None, None
    if gpu:
        try:
            gpu_name, count = parse_gpu_request(gpu, known=view.index.gpus())
        except UnknownGpu as exc:
            fail(str(exc), BAD_INPUT)
        count = count if ":" in gpu else None
    market = "any" if spot is None else ("spot" if spot else "on-demand")
    query = OfferQuery(
        gpu=gpu_name,
        gpu_count=count,
        exact=exact,
        clouds=split_list(cloud),
        regions=split_list(region),
        countries=split_list(country),
        market=market,
        max_price=max_price,
        min_gpu_memory=min_gpu_memory,
        sort=sort,  # type: ignore[arg-type]
        limit=limit or None,
    )
    try:
        selection = view.index.query(query)
    except QueryError as exc:
        fail(str(exc), BAD_INPUT)
    rows = selection.records()
    for row in rows:
        row["stale"] = _age(row["as_of"], today) > freshness
        if row["stale"] and output in (Output.table, Output.markdown):
            row["as_of"] = f"{row['as_of']} (stale)"
    columns = OFFER_COLUMNS
    if output in (Output.table, Output.markdown):
        # Humans get a narrower table: no provenance columns, no column that is all blank.
        blank = {
            key
            for key in ("zone", "capacity", "interconnect")
            if all(_blank(row[key]) for row in rows)
        }
        columns = tuple(c for c in OFFER_COLUMNS if c.key not in TABLE_HIDDEN | blank)
    notes = [] if rows else ["Relax a filter (see `broker offers --help`)."]
    if unavailable:
        notes += _unavailable_notes(unavailable)
    render(
        rows,
        columns,
        output,
        title=banner,
        notes=notes,
        json_key="offers",
        wide=wide,
        empty="no offer matches",
        meta={
            "catalog": str(view.catalog.path),
            "origin": view.catalog.origin,
            "as_of": view.catalog.as_of_range()[0],
            "freshness_days": freshness,
            **({"unavailable": [vars(u) for u in unavailable]} if live else {}),
        },
    )


def _live_clouds(asked: tuple[str, ...]) -> tuple[str, ...]:
    """The clouds `--live` asks: the enabled ones, else those of --cloud."""
    from broker.cli.session import enabled_clouds
    from providers.checks import CLOUDS

    return enabled_clouds() or tuple(c for c in asked if c in CLOUDS)


def _pools_workdir() -> Path:
    """Where the pools' executors keep the broker's attempts: the runtime's folder for
    the state file in force (`broker run` launches them from there)."""
    from broker.cli.statefile import state_path
    from broker.runtime import sandbox_workdir

    return sandbox_workdir(state_path(None)) / "onprem"


def _go_live(view, clouds: tuple[str, ...]):
    """(the view as the account can buy it, the reasons), for `clouds`."""
    from broker.cli.exits import PROVIDER
    from broker.live import live_offers
    from providers.errors import ProviderError
    from providers.registry import ProviderUnavailable

    try:
        return live_offers(view, clouds)
    except (ProviderError, ProviderUnavailable) as exc:
        fail(f"--live: {exc}", PROVIDER)


def _unavailable_notes(unavailable, shown: int = 5) -> list[str]:
    """A few reasons, then how many more: the whole list is in the JSON output."""
    lines = [
        f"not launchable: {u.cloud} {u.zone or u.region} {u.instance_type}"
        f"{' ' + u.market if u.market else ''}: {u.reason}"
        for u in unavailable[:shown]
    ]
    if len(unavailable) > shown:
        lines.append(f"... and {len(unavailable) - shown} more (-o json lists them all)")
    return lines


def _blank(value) -> bool:
    return value == "" or value is None or value != value  # NaN is not equal to itself


def _age(as_of: str, today: date) -> int:
    try:
        return (today - date.fromisoformat(str(as_of)[:10])).days
    except ValueError:
        return 10**6  # an undated price is as stale as it gets


def _summary(view, output: Output, banner: str, wide: bool) -> None:
    from pricing.summary import cheapest_by_gpu

    table = cheapest_by_gpu(view.index.offers.to_frame())
    columns = [
        Column("accelerator", "GPU"),
        Column("accelerator_memory_gib", "GiB", number, numeric=True),
    ]
    for name in table.columns[1:]:
        if name != "accelerator_memory_gib":
            cloud, _, market = name.partition("_")
            columns.append(Column(name, f"{cloud} {market.replace('_', '-')}", usd, numeric=True))
    render(
        table.to_dict("records"),
        columns,
        output,
        title=f"{banner}; USD per GPU-hour",
        json_key="gpus",
        meta={"catalog": str(view.catalog.path), "unit": "USD per GPU-hour"},
        wide=wide,
    )
