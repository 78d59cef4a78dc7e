"""A LaunchRequest as EC2's RunInstances parameters, and what EC2 could never launch.

Plain functions (no client): the provider checks a request with `choose_image`, then
sends `run_parameters`. The ClientToken makes RunInstances idempotent per attempt.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from providers.aws.instances import NAME, REGION_SHAPE
from providers.base import TAG_REQUEST, LaunchRequest, instance_tags, startup_script
from providers.cloud import refuse_unsupported
from providers.errors import InvalidRequest

USER_DATA_LIMIT = 16 * 1024  # bytes, before base64
# RunInstances parameters the adapter sets itself (launch_options may not override them).
OWN_PARAMETERS = frozenset(
    {
        "ImageId",
        "InstanceType",
        "MinCount",
        "MaxCount",
        "ClientToken",
        "UserData",
        "TagSpecifications",
        "Placement",
        "InstanceMarketOptions",
        "InstanceInitiatedShutdownBehavior",
    }
)


def client_token(broker_id: str, attempt_id: str) -> str:
    """RunInstances' idempotency token (at most 64 ASCII characters; scoped per account
    and region, so the broker id keeps two brokers sharing an account apart)."""
    token = f"{broker_id}:{attempt_id}"
    if len(token) <= 64 and token.isascii():
        return token
    return "broker-" + hashlib.sha256(token.encode()).hexdigest()[:57]


def choose_image(request: LaunchRequest, image_id: str | None) -> str:
    """The AMI to launch `request` with (its own "ami-…", else `image_id`);
    InvalidRequest when EC2 could never do what is asked."""
    refuse_unsupported(NAME, request, gangs=True)
    if not re.fullmatch(REGION_SHAPE, request.region):
        raise InvalidRequest(NAME, f"{request.region!r} is not an AWS region")
    if request.max_price_per_hour is not None and not request.max_price_per_hour > 0:
        raise InvalidRequest(NAME, "max_price_per_hour must be positive")
    user_data(request, 0 if request.nodes > 1 else None)
    if request.image.startswith("ami-"):
        return request.image
    if image_id:
        return image_id
    raise InvalidRequest(
        NAME,
        "no AMI to launch: pass image_id= or set BROKER_AWS_IMAGE_ID, "
        "or give the job an image 'ami-…'",
    )


def user_data(request: LaunchRequest, rank: int | None = None) -> str:
    """The start-up script (of gang member `rank`) as user data; InvalidRequest when it
    is over EC2's limit."""
    script = startup_script(request, rank=rank)
    size = len(script.encode())
    if size > USER_DATA_LIMIT:
        raise InvalidRequest(
            NAME, f"the start-up script is {size} bytes; EC2 user data takes {USER_DATA_LIMIT}"
        )
    return script


def run_parameters(
    request: LaunchRequest, image: str, digest: str, launch_options: Mapping[str, Any]
) -> dict[str, Any]:
    """RunInstances' parameters: `launch_options` (the operator's IamInstanceProfile,
    SubnetId, ...), then the adapter's own (OWN_PARAMETERS): one instance, tagged with
    `instance_tags(request)` and `digest`, terminated when it shuts down; spot as a
    one-time request, capped at `max_price_per_hour` when set."""
    tags = [{"Key": k, "Value": v[:256]} for k, v in instance_tags(request)]
    tags.append({"Key": TAG_REQUEST, "Value": digest})
    params: dict[str, Any] = {
        **launch_options,
        "ImageId": image,
        "InstanceType": request.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": client_token(request.broker_id, request.attempt_id),
        "UserData": user_data(request),  # botocore base64-encodes it
        "InstanceInitiatedShutdownBehavior": "terminate",
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    if request.zone:
        params["Placement"] = {"AvailabilityZone": request.zone}
    if request.market == "spot":
        options: dict[str, str] = {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        }
        if request.max_price_per_hour is not None:
            options["MaxPrice"] = f"{request.max_price_per_hour:.6f}".rstrip("0").rstrip(".")
        params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
    return params
