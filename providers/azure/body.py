"""A LaunchRequest as the VM body ARM takes, with its name, image and log-in key.

Plain functions (no client, no SDK import): the body uses ARM's wire names, so it reads
like the REST reference. The NIC is declared inline (deleted with the VM), so no
azure-mgmt-network is needed; there is no public IP (the job needs only outbound access).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from providers.base import TAG_REQUEST, LaunchRequest, instance_tags, startup_script
from providers.cloudgang import TAG_NODES
from providers.gang import TAG_RANK

DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
ADMIN_USER = "broker"
NETWORK_API_VERSION = "2020-11-01"


def vm_name(attempt_id: str) -> str:
    """The VM name of an attempt: "broker-" + the id in lowercase, with a short hash when
    the id had to change to fit (characters, length), so two ids never share a name."""
    base = re.sub(r"[^a-z0-9-]", "-", attempt_id.lower())
    if base != attempt_id or len(base) > 48 or base.endswith("-"):
        digest = hashlib.sha256(attempt_id.encode()).hexdigest()[:8]
        base = f"{base[:48].rstrip('-')}-{digest}"
    return f"broker-{base}"


def image_reference(image: str) -> dict[str, str]:
    """The imageReference of "publisher:offer:sku:version" or of an image resource id."""
    if image.startswith("/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"image {image!r}: expected publisher:offer:sku:version or an id")
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


def throwaway_public_key() -> str:
    """A fresh SSH public key whose private half is dropped: nobody logs in to the VM,
    the job runs unattended (Azure's Linux VMs need a key or a password)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    public = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    raw = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return raw.decode() + " broker-throwaway"


def vm_body(
    request: LaunchRequest,
    name: str,
    digest: str,
    *,
    image: Mapping[str, str],
    subnet_id: str,
    public_key: str,
    eviction_policy: str,
    rank: int | None = None,
    placement: Mapping[str, Mapping[str, str]] | None = None,
    accelerated_networking: bool = False,
) -> dict[str, Any]:
    """The VM `name` for `request`: tagged with `instance_tags(request)` and `digest`,
    the start-up script as custom data (cloud-init runs a script that starts with #!);
    spot at the request's price cap, or -1 (up to the on-demand price). A gang member
    (`rank`) is tagged with its rank and the gang's size, runs its rank's script and
    references its gang's `placement` (proximity placement group, availability set: no
    zone then); `accelerated_networking` for InfiniBand sizes."""
    script = startup_script(request, rank=rank).encode()
    key_path = f"/home/{ADMIN_USER}/.ssh/authorized_keys"
    nic = {
        "name": f"{name}-nic",
        "properties": {
            "primary": True,
            "deleteOption": "Delete",
            **({"enableAcceleratedNetworking": True} if accelerated_networking else {}),
            "ipConfigurations": [
                {
                    "name": "ipconfig",
                    "properties": {"primary": True, "subnet": {"id": subnet_id}},
                }
            ],
        },
    }
    properties: dict[str, Any] = {
        "hardwareProfile": {"vmSize": request.instance_type},
        "storageProfile": {
            "imageReference": dict(image),
            "osDisk": {
                "createOption": "FromImage",
                "deleteOption": "Delete",
                "managedDisk": {"storageAccountType": "StandardSSD_LRS"},
            },
        },
        "osProfile": {
            "computerName": name,
            "adminUsername": ADMIN_USER,
            "customData": base64.b64encode(script).decode(),
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {"publicKeys": [{"path": key_path, "keyData": public_key}]},
            },
        },
        "networkProfile": {
            "networkApiVersion": NETWORK_API_VERSION,
            "networkInterfaceConfigurations": [nic],
        },
        "priority": "Regular",
    }
    if request.market == "spot":
        cap = request.max_price_per_hour
        properties["priority"] = "Spot"
        properties["evictionPolicy"] = eviction_policy
        properties["billingProfile"] = {"maxPrice": cap if cap is not None else -1}
    for field, reference in (placement or {}).items():
        properties[field] = dict(reference)
    tags = dict(instance_tags(request))
    tags[TAG_REQUEST] = digest
    if rank is not None:
        tags |= {TAG_RANK: str(rank), TAG_NODES: str(request.nodes)}
    body: dict[str, Any] = {"location": request.region, "tags": tags, "properties": properties}
    if request.zone and "availabilitySet" not in properties:
        body["zones"] = [request.zone]
    return body
