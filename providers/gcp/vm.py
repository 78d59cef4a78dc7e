"""Pure helpers on GCE VMs: names, ids, labels, states and the insert body.

Kept apart from the provider so they stay plain functions of their inputs (no client,
no SDK import): the provider composes them, and tests can read them directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from providers.base import (
    TAG_REQUEST,
    InstanceState,
    LaunchRequest,
    instance_tags,
    startup_script,
)
from providers.cloudgang import TAG_NODES
from providers.errors import NotFound
from providers.gang import TAG_RANK
from providers.gcp import capacity

NAME = "gcp"
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
NAME_PREFIX = "broker-"
TAGS_METADATA = "broker-tags"
STATES: Mapping[str, InstanceState] = {
    "PROVISIONING": "pending",
    "STAGING": "pending",
    "RUNNING": "running",
    "REPAIRING": "running",
    "STOPPING": "terminated",
    "SUSPENDING": "terminated",
    "SUSPENDED": "terminated",
    "TERMINATED": "terminated",
}
GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_IMAGE = re.compile(
    r"(https://[\w.-]+/compute/v1/)?projects/[\w.:-]+/global/images/(family/)?[a-z][-a-z0-9]*"
)


def instance_name(attempt_id: str) -> str:
    """The VM name of an attempt: "broker-" + the id made a GCE name (lowercase letters,
    digits, '-'; at most 63, not ending in '-'), with a hash of the id when that changed
    or cut it, so that two attempts never share a name."""
    clean = re.sub(r"[^a-z0-9-]", "-", attempt_id.lower())
    name = NAME_PREFIX + clean
    if clean != attempt_id or len(name) > 63 or name.endswith("-"):
        digest = hashlib.sha256(attempt_id.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-')}-{digest}"
    return name


def label_value(value: str) -> str:
    """`value` as a GCE label value: lowercase letters, digits, '-', '_', at most 63."""
    return re.sub(r"[^a-z0-9_-]", "_", value.lower())[:63]


def request_id(project: str, zone: str, attempt_id: str) -> str:
    """The insert's requestId: the same for every retry of one attempt in one zone."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"broker:gcp:{project}:{zone}:{attempt_id}"))


def instance_state(status: str, spot: bool, preempted: bool) -> InstanceState:
    """A GCE status as the broker's state; an ended spot VM GCE preempted is interrupted.
    An unknown status counts as pending (still worth watching)."""
    state = STATES.get(status, "pending")
    return "interrupted" if state == "terminated" and spot and preempted else state


def parse_id(instance_id: str) -> tuple[str, str]:
    """(zone, name) of an id "<zone>/<name>"; NotFound when it is not of that shape."""
    zone, _, name = instance_id.partition("/")
    if not (GCE_NAME.fullmatch(zone) and GCE_NAME.fullmatch(name)):
        raise NotFound(NAME, f"no instance {instance_id!r} (ids look like <zone>/<name>)")
    return zone, name


def insert_body(
    request: LaunchRequest,
    zone: str,
    name: str,
    digest: str,
    gpu: tuple[str, int] | None,
    *,
    image: str,
    spot_action: str,
    network: str,
    disk_gb: int,
    rank: int | None = None,
    resource_policy: str = "",
    gpu_nics: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The Instance resource (compute_v1 field names) for `request` in `zone`; `image` is
    the default, used unless the request names a GCE image. A gang member (`rank`) is
    tagged with its rank and the gang's size, runs its rank's start-up script, names the
    gang's `resource_policy` and gets `gpu_nics` after its own (all gVNIC then)."""
    tags = (*instance_tags(request), (TAG_REQUEST, digest))
    if rank is not None:
        tags += ((TAG_RANK, str(rank)), (TAG_NODES, str(request.nodes)))
    carries_gpu = gpu is not None or capacity.family(request.instance_type) in (
        capacity.GPU_FAMILIES
    )
    scheduling: dict[str, Any] = {}
    if request.market == "spot":
        scheduling = {
            "provisioning_model": "SPOT",
            "instance_termination_action": spot_action,
            "automatic_restart": False,
        }
    if carries_gpu or request.market == "spot":
        scheduling["on_host_maintenance"] = "TERMINATE"
    image = request.image if _IMAGE.fullmatch(request.image) else image
    body: dict[str, Any] = {
        "name": name,
        "machine_type": f"zones/{zone}/machineTypes/{request.instance_type}",
        "labels": {key: label_value(value) for key, value in tags},
        "metadata": {
            "items": [
                {"key": "startup-script", "value": startup_script(request, rank=rank)},
                {"key": TAGS_METADATA, "value": json.dumps(tags)},
                {"key": "install-nvidia-driver", "value": "True"},
            ]
        },
        "disks": [
            {
                "boot": True,
                "auto_delete": True,
                "initialize_params": {"source_image": image, "disk_size_gb": disk_gb},
            }
        ],
        "network_interfaces": [
            {
                "network": network,
                "access_configs": [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}],
            }
        ],
        "service_accounts": [{"email": "default", "scopes": list(SCOPES)}],
        "scheduling": scheduling,
    }
    if resource_policy:
        body["resource_policies"] = [resource_policy]
    if gpu_nics:
        body["network_interfaces"][0]["nic_type"] = "GVNIC"
        body["network_interfaces"] += [dict(nic) for nic in gpu_nics]
    if gpu is not None:
        body["guest_accelerators"] = [
            {
                "accelerator_type": f"zones/{zone}/acceleratorTypes/{gpu[0]}",
                "accelerator_count": gpu[1],
            }
        ]
    return body


# --- reading a VM (a compute_v1.Instance) -----------------------------------------------


def zone_of(vm: Any) -> str:
    return vm.zone.rsplit("/", 1)[-1]


def is_spot(vm: Any) -> bool:
    return vm.scheduling.provisioning_model == "SPOT"


def tag_of(vm: Any, key: str) -> str | None:
    return dict(tags_of(vm)).get(key)


def tags_of(vm: Any) -> tuple[tuple[str, str], ...]:
    """The exact tags from the `broker-tags` metadata item, else the labels."""
    for item in vm.metadata.items:
        if item.key == TAGS_METADATA:
            with contextlib.suppress(ValueError, TypeError):
                return tuple((str(k), str(v)) for k, v in json.loads(item.value))
    return tuple(sorted((k, v) for k, v in vm.labels.items() if k.startswith("broker-")))


def parse_time(text: str) -> datetime | None:
    """A GCE timestamp (RFC 3339) as an aware datetime; None when absent or odd."""
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
