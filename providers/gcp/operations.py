"""GCE operations: waiting for one, and reading the ones GCE recorded (preemptions, a
VM's history). Apart from the provider because they are the only place that knows the
operation API's shapes; every call goes through the provider's `call` (error mapping
and throttling backoff), and the SDK is imported only when one runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
Call = Callable[[Callable[[], T], str], T]  # fn, action -> fn() with errors mapped
PREEMPTED = "compute.instances.preempted"


def wait(
    client: Any,
    project: str,
    zone: str,
    operation: Any,
    call: Call,
    action: str,
    limit: float,
    scope: str = "zone",
) -> Any:
    """`operation` once DONE, or as it is after `limit` seconds (`client`: the zone
    operations, or with `scope` "region" the region operations and `zone` a region)."""
    from google.cloud import compute_v1

    deadline = time.monotonic() + limit
    while operation.status != compute_v1.Operation.Status.DONE:
        left = deadline - time.monotonic()
        if left <= 0:
            return operation
        # GCE's wait answers within about two minutes, DONE or not.
        operation = call(
            lambda name=operation.name, left=left: client.wait(
                project=project,
                operation=name,
                **{scope: zone},
                retry=None,
                timeout=min(left, 150.0),
            ),
            action,
        )
    return operation


def preemptions(client: Any, project: str, call: Call, timeout: float) -> dict[str, Any]:
    """id -> the compute.instances.preempted operation GCE recorded for it (`client`:
    global operations, read across every zone)."""
    from google.cloud import compute_v1

    request = compute_v1.AggregatedListGlobalOperationsRequest(
        project=project, filter=f'operationType = "{PREEMPTED}"'
    )

    def read() -> dict[str, Any]:
        pager = client.aggregated_list(request=request, retry=None, timeout=timeout)
        return {
            f"{op.zone.rsplit('/', 1)[-1]}/{op.target_link.rsplit('/', 1)[-1]}": op
            for _, listed in pager
            for op in listed.operations
            if op.zone
        }

    return call(read, "list preemptions")


def history(
    client: Any, project: str, zone: str, name: str, call: Call, timeout: float
) -> set[str]:
    """The kinds of the operations GCE recorded on one VM (insert, delete, preempted)."""
    from google.cloud import compute_v1

    request = compute_v1.ListZoneOperationsRequest(
        project=project,
        zone=zone,
        filter=f'targetLink eq ".*/zones/{zone}/instances/{name}"',
    )

    def read() -> set[str]:
        pager = client.list(request=request, retry=None, timeout=timeout)
        return {op.operation_type for op in pager}

    return call(read, f"list operations of {zone}/{name}")
