"""EC2's answers as broker values: instance ids, states, tags, spot notices.

Plain functions of what DescribeInstances and DescribeSpotInstanceRequests return (no
client, no SDK import), so the rules that turn an EC2 instance into an `Instance` sit
in one place and can be read, and tested, without a cloud.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from providers.base import ENDED_STATES, Instance, InstanceState, InterruptionNotice
from providers.errors import NotFound

NAME = "aws"
REGION_SHAPE = r"[a-z]{2}(?:-[a-z]+)+-\d+"
ID_SHAPE = re.compile(rf"(?P<region>{REGION_SHAPE})/(?P<iid>i-[0-9a-f]{{8,17}})")
INTERRUPTION_REASONS = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
SPOT_MARKED = frozenset({"marked-for-termination", "marked-for-stop", "marked-for-hibernation"})
ENDING = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
_ENDED_AT = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")

# Spot request id -> (status code, when the status last changed).
SpotStatuses = Mapping[str, tuple[str, datetime | None]]


def parse_id(instance_id: str) -> tuple[str, str]:
    """(region, EC2 instance id) of a broker id "<region>/i-…"; NotFound otherwise."""
    shape = ID_SHAPE.fullmatch(instance_id)
    if shape is None:
        raise NotFound(NAME, f"no instance {instance_id!r} (ids are '<region>/i-…')")
    return shape["region"], shape["iid"]


def spot_interrupted(status_code: str) -> bool:
    """Did AWS (not the user) end the instance of a spot request with this status?"""
    ended = status_code.startswith(("instance-terminated-", "instance-stopped-"))
    return ended and not status_code.endswith("-by-user")


def tags_of(raw: Mapping[str, Any]) -> dict[str, str]:
    """The tags of a DescribeInstances item, as a dict."""
    return {tag["Key"]: tag["Value"] for tag in raw.get("Tags") or ()}


def state_of(raw: Mapping[str, Any], spot_status: str) -> InstanceState:
    """pending and running as such; any other EC2 state is terminated, or interrupted
    when AWS reclaimed a spot instance (its state reason, or its spot request's status)."""
    name = raw["State"]["Name"]
    if name in ("pending", "running"):
        return name
    reason = (raw.get("StateReason") or {}).get("Code", "")
    if raw.get("InstanceLifecycle") == "spot" and (
        reason in INTERRUPTION_REASONS or spot_interrupted(spot_status)
    ):
        return "interrupted"
    return "terminated"


def instance_of(region: str, raw: Mapping[str, Any], statuses: SpotStatuses) -> Instance:
    """The Instance for one DescribeInstances item of `region` (EC2 cannot know the
    job's exit code: None); `statuses` holds its spot request's status, if any."""
    spot = raw.get("InstanceLifecycle") == "spot"
    status = statuses.get(raw.get("SpotInstanceRequestId", ""), ("", None))[0]
    state = state_of(raw, status)
    ended_at = None
    if state in ENDED_STATES:
        found = _ENDED_AT.search(raw.get("StateTransitionReason") or "")
        if found:
            ended_at = datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC)
    return Instance(
        id=f"{region}/{raw['InstanceId']}",
        provider=NAME,
        cloud=NAME,
        region=region,
        zone=(raw.get("Placement") or {}).get("AvailabilityZone", ""),
        instance_type=raw.get("InstanceType", ""),
        market="spot" if spot else "on-demand",
        state=state,
        exit_code=None,
        tags=tuple(sorted(tags_of(raw).items())),
        launched_at=raw.get("LaunchTime"),
        ended_at=ended_at,
    )


def spot_notice(
    instance: Instance, noticed: datetime, deadline: datetime | None, detail: str
) -> InterruptionNotice:
    """The spot-reclaim notice of `instance`."""
    return InterruptionNotice(
        instance_id=instance.id,
        provider=NAME,
        kind="spot-reclaim",
        noticed_at=noticed,
        deadline=deadline,
        detail=detail,
    )
