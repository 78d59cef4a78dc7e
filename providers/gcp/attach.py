"""What a GCE launch request must say before it is sent: the checks GCE would fail it
on, and the GPU to attach to an N1 machine type (A2/A3/G2 types carry their own).

Plain functions of the request and the catalog (no client, no SDK import).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pricing.gpus import find_gpu
from providers.base import LaunchRequest
from providers.cloud import refuse_unsupported
from providers.errors import InvalidRequest
from providers.gcp import capacity
from providers.gcp.capacity import region_of
from providers.gcp.vm import GCE_NAME, NAME

if TYPE_CHECKING:
    from pricing.table import OfferTable


def validate(request: LaunchRequest) -> None:
    """InvalidRequest for a request GCE could never serve: another cloud's, a name that
    is no machine type, a zone outside the request's region (gangs: gang.py)."""
    refuse_unsupported(NAME, request, gangs=True)
    if not GCE_NAME.fullmatch(request.instance_type):
        raise InvalidRequest(NAME, f"{request.instance_type!r} is not a GCE machine type")
    if request.zone and (
        not GCE_NAME.fullmatch(request.zone) or region_of(request.zone) != request.region
    ):
        raise InvalidRequest(NAME, f"zone {request.zone!r} is not in {request.region}")


def gpu_to_attach(request: LaunchRequest, catalog: OfferTable | None) -> tuple[str, int] | None:
    """(GCE accelerator type, count) to attach: N1 types only, from the request's
    catalog row (or the request itself, where it names one)."""
    if capacity.family(request.instance_type) not in capacity.ATTACHABLE_FAMILIES:
        return None
    name, count = request.accelerator, request.accelerator_count
    if not name:
        options = catalog_gpus(request, catalog)
        if len(options) > 1:
            sold = ", ".join(f"{n} x{c:g}" for n, c in sorted(options))
            raise InvalidRequest(
                NAME,
                f"{request.instance_type} in {request.region} is sold with {sold}: "
                "the request must say which GPU to attach",
            )
        if not options:
            return None
        ((name, count),) = options
    model = find_gpu(name)
    try:
        gpu = capacity.attached_gpu(request.instance_type, model.name if model else name)
    except KeyError:
        raise InvalidRequest(NAME, f"GCE has no accelerator type for {name}") from None
    return (gpu, max(1, int(count))) if gpu else None


def catalog_gpus(request: LaunchRequest, table: OfferTable | None) -> set[tuple[str, float]]:
    """The (GPU, count) pairs the catalog sells the request's machine type with, in its
    region (and zone, or region-wide rows)."""
    if table is None:
        return set()
    rows = (
        (table.text("cloud") == NAME)
        & (table.text("region") == request.region)
        & (table.text("instance_type") == request.instance_type)
        & (table.text("accelerator") != "")
    )
    if request.zone:
        rows &= (table.text("zone") == request.zone) | (table.text("zone") == "")
    names, counts = table.text("accelerator")[rows], table.numbers["accelerator_count"][rows]
    return set(zip(names.tolist(), counts.tolist(), strict=True))
