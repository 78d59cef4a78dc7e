"""Reading the broker's EC2 instances: by id, by attempt, per region, and the spot
requests that say whether AWS reclaimed one.

Every call goes through the provider's `Caller` (mapped errors, throttling backoff);
the answers become Instances and notices in `providers.aws.instances`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from providers.aws.capacity import FILTER_CHUNK, Caller
from providers.aws.instances import (
    ENDING,
    NAME,
    SPOT_MARKED,
    SpotStatuses,
    instance_of,
    parse_id,
    spot_notice,
    tags_of,
)
from providers.base import TAG_ATTEMPT, TAG_BROKER, TAG_REQUEST, Instance, InterruptionNotice
from providers.cloud import refuse_other_request
from providers.cloudgang import gang_id, is_member
from providers.errors import CredentialsError, NotFound

SPOT_NOTICE_SECONDS = 120.0  # EC2's warning before it reclaims a spot instance


def describe(caller: Caller, region: str, **params: Any) -> list[dict]:
    """The DescribeInstances items matching `params` (every page)."""
    reservations = caller.pages("ec2", region, "describe_instances", "Reservations", **params)
    return [raw for reservation in reservations for raw in reservation.get("Instances", ())]


def read(caller: Caller, instance_id: str) -> tuple[str, dict]:
    """(region, DescribeInstances item) of a broker instance id; NotFound when unknown."""
    region, iid = parse_id(instance_id)
    raws = describe(caller, region, InstanceIds=[iid])
    if not raws:
        raise NotFound(NAME, f"no instance {instance_id}")
    return region, raws[0]


def find_attempt(
    caller: Caller, region: str, broker_id: str, attempt_id: str, digest: str
) -> Instance | None:
    """The instance already launched for this attempt (any state, a live one first), or
    None; InvalidRequest when it was launched for another request than `digest`."""
    raws = describe(
        caller,
        region,
        Filters=[
            {"Name": f"tag:{TAG_BROKER}", "Values": [broker_id]},
            {"Name": f"tag:{TAG_ATTEMPT}", "Values": [attempt_id]},
        ],
    )
    if not raws:
        return None
    raws.sort(key=lambda raw: raw["State"]["Name"] in ENDING)  # a live one first
    raw = raws[0]
    refuse_other_request(NAME, attempt_id, tags_of(raw).get(TAG_REQUEST), digest)
    return instances(caller, region, [raw])[0]


def broker_items(caller: Caller, region: str, broker_id: str) -> list[dict]:
    """DescribeInstances items of every instance of this broker in `region` (none in a
    region this account never enabled)."""
    try:
        return describe(
            caller, region, Filters=[{"Name": f"tag:{TAG_BROKER}", "Values": [broker_id]}]
        )
    except CredentialsError as exc:
        if exc.code == "OptInRequired":
            return []
        raise


def spot_statuses(
    caller: Caller, region: str, raws: Iterable[dict], ended_only: bool = True
) -> dict[str, tuple[str, datetime | None]]:
    """Spot request id -> (status code, updated at) for the spot instances in `raws`
    that have a request (all of them, or only the ended ones)."""
    ids = sorted(
        {
            raw["SpotInstanceRequestId"]
            for raw in raws
            if raw.get("SpotInstanceRequestId")
            and (not ended_only or raw["State"]["Name"] in ENDING)
        }
    )
    if not ids:
        return {}
    requests = [  # a filter, not ids: AWS forgets closed requests within hours
        item
        for start in range(0, len(ids), FILTER_CHUNK)
        for item in caller.pages(
            "ec2",
            region,
            "describe_spot_instance_requests",
            "SpotInstanceRequests",
            Filters=[
                {
                    "Name": "spot-instance-request-id",
                    "Values": ids[start : start + FILTER_CHUNK],
                }
            ],
        )
    ]
    return {
        item["SpotInstanceRequestId"]: (
            str((item.get("Status") or {}).get("Code", "")),
            (item.get("Status") or {}).get("UpdateTime"),
        )
        for item in requests
    }


def instances(
    caller: Caller, region: str, raws: Sequence[dict], statuses: SpotStatuses | None = None
) -> list[Instance]:
    """The Instances of DescribeInstances items of `region` (their spot requests read
    when `statuses` is not given)."""
    if statuses is None:
        statuses = spot_statuses(caller, region, raws)
    return [instance_of(region, raw, statuses) for raw in raws]


def region_notices(
    caller: Caller, region: str, broker_id: str, now: Callable[[], datetime]
) -> list[InterruptionNotice]:
    """A notice for each of the broker's spot instances in `region` that AWS reclaimed,
    or marked for reclaim while it still runs (the two-minute warning, with its deadline);
    a gang member's notice names its gang."""
    notices = []
    raws = [
        raw
        for raw in broker_items(caller, region, broker_id)
        if raw.get("InstanceLifecycle") == "spot"
    ]
    statuses = spot_statuses(caller, region, raws, ended_only=False)
    for raw, instance in zip(raws, instances(caller, region, raws, statuses), strict=True):
        if is_member(instance):  # a gang's node: the notice is the whole gang's
            instance = replace(instance, id=gang_id(region, instance.attempt_id or ""))
        status = statuses.get(raw.get("SpotInstanceRequestId", ""), ("", None))
        if instance.state == "interrupted":
            reason = (raw.get("StateReason") or {}).get("Message") or status[0]
            noticed = instance.ended_at or now()
            notices.append(spot_notice(instance, noticed, instance.ended_at, reason))
        elif instance.active and status[0] in SPOT_MARKED:
            noticed = status[1] or now()
            deadline = noticed + timedelta(seconds=SPOT_NOTICE_SECONDS)
            notices.append(spot_notice(instance, noticed, deadline, status[0]))
    return notices
