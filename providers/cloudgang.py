"""What the three cloud adapters share for gangs (docs/distributed.md, "Gangs on the clouds").

A gang is one attempt on N VMs in one gang domain (an AWS cluster placement group, a
GCE compact resource policy, an Azure proximity placement group). Each adapter knows
how to make and read its own VMs and domain, behind the small `GangNodes` interface;
this module holds the rules that are the same everywhere:

- the gang's id, "<place>/gang/<attempt id>" (place: the AWS region, the GCE zone, the
  Azure resource group), which no single-VM id ever has the shape of;
- the checks of a gang request (how many nodes, which fabric);
- the launch, all or nothing and idempotent per (attempt, rank): domain first, then each
  rank not already there (found by its tags), and on any failure every started node
  ended and the domain deleted before the classified error is raised;
- the peers: once every member has a private IP, the head-first list is written where
  every node's start-up script reads it (TAG_PEERS, providers.gangscript);
- the gang as one `Instance`: members by rank, the state from `providers.gang.gang_state`;
  a failed or interrupted gang has its other members ended (the whole gang stops).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from providers.base import ENDED_STATES, Instance, LaunchRequest
from providers.errors import InvalidRequest, NotFound, ProviderError
from providers.gang import TAG_RANK, GangMember, gang_state
from providers.gangscript import TAG_PEERS

if TYPE_CHECKING:
    from pricing.table import OfferTable

TAG_NODES = "broker-nodes"  # how many nodes the gang has (a partial gang shows as pending)
GANG_SEGMENT = "gang"
# Tag values are at most 256 characters on AWS and Azure: 16 IPv4 addresses and their
# separators always fit one. GCE takes the same bound, so a plan means the same everywhere.
MAX_CLOUD_GANG_NODES = 16
FABRICS = ("efa", "infiniband", "nvlink")  # LaunchRequest.interconnect ("" = automatic)


def gang_id(place: str, attempt_id: str) -> str:
    """The id of an attempt's gang: "<place>/gang/<attempt id>"."""
    return f"{place}/{GANG_SEGMENT}/{attempt_id}"


def parse_gang_id(instance_id: str) -> tuple[str, str] | None:
    """(place, attempt id) of a gang id, or None for any other id."""
    place, _, rest = instance_id.partition(f"/{GANG_SEGMENT}/")
    if not place or not rest or "/" in place or "/" in rest:
        return None
    return place, rest


def domain_name(attempt_id: str, limit: int = 63) -> str:
    """The gang domain's name for an attempt: "broker-gang-" + the id in lowercase
    letters, digits and '-', with a short hash when the id had to change to fit, so
    that two attempts never share a domain (valid on all three clouds)."""
    clean = re.sub(r"[^a-z0-9-]", "-", attempt_id.lower())
    name = f"broker-gang-{clean}"
    if clean != attempt_id or len(name) > limit or name.endswith("-"):
        digest = hashlib.sha256(attempt_id.encode()).hexdigest()[:8]
        name = f"{name[: limit - 9].rstrip('-')}-{digest}"
    return name


def gang_fabric(cloud: str, request: LaunchRequest, has: str) -> str:
    """The fabric to build for `request` on an instance type whose own fabric is `has`
    ("" none): the asked one, or for `nodes > 1` and no ask the type's own. InvalidRequest
    for an unknown fabric, a cross-node fabric the type lacks, or too many nodes.
    "nvlink" joins the GPUs of one node: it asks nothing between nodes."""
    asked = request.interconnect
    if asked and asked not in FABRICS:
        raise InvalidRequest(cloud, f"interconnect {asked!r}: expected one of {FABRICS}")
    if request.nodes > MAX_CLOUD_GANG_NODES:
        most = MAX_CLOUD_GANG_NODES
        raise InvalidRequest(
            cloud, f"a gang on {cloud} has at most {most} nodes, not {request.nodes}"
        )
    if asked in ("", "nvlink"):
        return has if request.nodes > 1 else ""
    if asked != has:
        raise InvalidRequest(cloud, f"{request.instance_type} has no {asked} interconnect")
    return has


def peers_value(addresses: Sequence[str]) -> str:
    """The TAG_PEERS value of a gang on `addresses` (head first)."""
    return " ".join(addresses)


@dataclass(frozen=True)
class Node:
    """One member VM as its adapter read it: the VM as a single Instance (tagged with its
    rank), its private IP ("" until known) and the TAG_PEERS value it carries."""

    instance: Instance
    address: str = ""
    peers: str = ""

    @property
    def rank(self) -> int:
        return int(self.instance.tag(TAG_RANK) or 0)


class GangNodes(Protocol):
    """One attempt's gang as one cloud makes it (each adapter has one)."""

    def members(self) -> list[Node]:
        """The member VMs already there for this attempt, found by their tags (any state)."""
        ...

    def open_domain(self) -> None:
        """Create the gang domain; an existing one of this attempt is kept."""
        ...

    def launch(self, rank: int) -> Node:
        """Start the member of `rank` in the domain (idempotent per attempt and rank)."""
        ...

    def end(self, node: Node) -> bool:
        """End one member; True when it was live."""
        ...

    def close_domain(self) -> None:
        """Delete the gang domain; one already gone is fine."""
        ...

    def publish(self, nodes: Sequence[Node], value: str) -> None:
        """Write TAG_PEERS = `value` on each of `nodes`."""
        ...


def by_rank(nodes: Iterable[Node]) -> list[Node]:
    """One node per rank (a live one first when a rank has two), ordered by rank."""
    chosen: dict[int, Node] = {}
    for node in nodes:
        kept = chosen.get(node.rank)
        if kept is None or (not kept.instance.active and node.instance.active):
            chosen[node.rank] = node
    return [chosen[rank] for rank in sorted(chosen)]


def launch_gang(gang: GangNodes, nodes: int) -> list[Node]:
    """All `nodes` members of the gang, by rank: those already there kept, the missing
    ones started in its domain. A gang found with an ended member is returned as it is
    (the attempt is over). If any start fails, every member is ended and the domain
    deleted, then the error is raised: no node of a failed gang keeps billing."""
    found = {node.rank: node for node in by_rank(gang.members())}
    if any(node.instance.state in ENDED_STATES for node in found.values()):
        return [found[rank] for rank in sorted(found)]
    try:
        gang.open_domain()
        for rank in range(nodes):
            if rank not in found:
                found[rank] = gang.launch(rank)
    except ProviderError:
        abandon(gang, list(found.values()) + gang_members_or_none(gang))
        raise
    return [found[rank] for rank in range(nodes)]


def gang_members_or_none(gang: GangNodes) -> list[Node]:
    """The members the cloud lists now (a start that failed late may have left one)."""
    try:
        return gang.members()
    except ProviderError:
        return []


def abandon(gang: GangNodes, nodes: Iterable[Node]) -> None:
    """End every live node and delete the domain, best effort (the caller raises)."""
    seen: set[str] = set()
    for node in nodes:
        if node.instance.id in seen or not node.instance.active:
            continue
        seen.add(node.instance.id)
        with contextlib.suppress(ProviderError):
            gang.end(node)
    with contextlib.suppress(ProviderError):
        gang.close_domain()


def publish_peers(gang: GangNodes, nodes: Sequence[Node], size: int) -> list[Node]:
    """Once all `size` members are there with an IP, write the head-first list on every
    member that does not carry it yet; the nodes as they are after. A write that fails
    is tried again at the next read (the members wait), never raised: the gang runs."""
    if len(nodes) != size or not all(node.address for node in nodes):
        return list(nodes)
    value = peers_value([node.address for node in nodes])
    stale = [node for node in nodes if node.peers != value and node.instance.active]
    if stale:
        try:
            gang.publish(stale, value)
        except ProviderError:
            return list(nodes)
    return [replace(node, peers=value) for node in nodes]


def gang_size(nodes: Sequence[Node]) -> int:
    """How many nodes the gang of `nodes` has (their TAG_NODES; 0 without nodes)."""
    if not nodes:
        return 0
    head = min(nodes, key=lambda n: n.rank).instance
    return int(head.tag(TAG_NODES) or len(nodes))


def refresh(gang: GangNodes, nodes: Sequence[Node]) -> list[Node]:
    """What describe does to a gang it read: write the peers once all are known, then
    settle it (below)."""
    return settle(gang, publish_peers(gang, nodes, gang_size(nodes)))


def with_vanished(nodes: list[Node], recall: Callable[[int], Instance | None]) -> list[Node]:
    """`nodes` and, for each missing rank, the member as the adapter remembers it
    (`recall(rank)`: None when it never existed), so that a member its cloud forgot (a
    spot VM deleted by its reclaim) still counts: its gang reads interrupted, not pending."""
    if not nodes:
        return nodes
    head = min(nodes, key=lambda n: n.rank).instance
    have = {n.rank for n in nodes}
    for rank in sorted(set(range(gang_size(nodes))) - have):
        gone = recall(rank)
        if gone is None:
            continue
        tags = {**dict(head.tags), TAG_RANK: str(rank)}
        tags.pop(TAG_PEERS, None)
        nodes.append(Node(replace(gone, tags=tuple(sorted(tags.items())))))
    return nodes


def sold(catalog: OfferTable | None, cloud: str, region: str, instance_type: str) -> bool:
    """Whether the catalog sells `instance_type` on `cloud` in `region` (True without one)."""
    if catalog is None:
        return True
    from providers.cloud import catalog_rows

    rows = catalog_rows(catalog, cloud, [region])
    return instance_type in set(rows.text("instance_type").tolist())


def settle(gang: GangNodes, nodes: Sequence[Node]) -> list[Node]:
    """End the live members of a gang that failed or was interrupted (the whole gang
    stops and is planned again as a unit), and delete the domain of a gang whose
    members have all ended. The nodes after: those ended here read as terminated."""
    if not nodes:
        return []
    state, _ = gang_state(members_of(nodes))
    after = list(nodes)
    if state in ("failed", "interrupted"):
        for index, node in enumerate(nodes):
            if node.instance.active:
                with contextlib.suppress(ProviderError):
                    gang.end(node)
                    after[index] = replace(
                        node, instance=replace(node.instance, state="terminated")
                    )
    if all(not node.instance.active for node in after):
        with contextlib.suppress(ProviderError):  # still in use: the next read retries
            gang.close_domain()
    return after


def end_gang(gang: GangNodes, nodes: Sequence[Node]) -> bool:
    """`terminate` of a gang read as `nodes`: end every live member and delete the
    domain; True when a member was live."""
    live = False
    for node in nodes:
        if node.instance.active:
            live = gang.end(node) or live
    with contextlib.suppress(ProviderError):  # a cloud may hold it until the VMs are gone
        gang.close_domain()
    return live


def members_of(nodes: Sequence[Node]) -> tuple[GangMember, ...]:
    """The GangMembers of the nodes, by rank."""
    return tuple(
        GangMember(
            rank=node.rank,
            node_id=node.instance.id,
            zone=node.instance.zone,
            address=node.address,
            state=node.instance.state,
            exit_code=node.instance.exit_code,
        )
        for node in sorted(nodes, key=lambda n: n.rank)
    )


def gang_instance(instance_id: str, nodes: Sequence[Node]) -> Instance:
    """The gang as one Instance: the head's fields, the members by rank, the state from
    gang_state (pending while ranks are missing from a gang that has not ended), launched
    at the first member's launch, ended at the last member's end."""
    if not nodes:
        raise ValueError("a gang has at least one member")
    ordered = sorted(nodes, key=lambda n: n.rank)
    head = ordered[0].instance
    members = members_of(ordered)
    size = int(head.tag(TAG_NODES) or len(ordered))
    state, exit_code = gang_state(members)
    if len(ordered) < size and state not in ENDED_STATES:
        state, exit_code = "pending", None
    launched = [n.instance.launched_at for n in ordered if n.instance.launched_at]
    ends = [n.instance.ended_at for n in ordered if n.instance.ended_at]
    tags = tuple((k, v) for k, v in head.tags if k not in (TAG_RANK, TAG_PEERS))
    return replace(
        head,
        id=instance_id,
        state=state,
        exit_code=exit_code,
        tags=tags,
        launched_at=min(launched) if launched else None,
        ended_at=max(ends) if ends and state in ENDED_STATES else None,
        nodes=size,
        members=members,
    )


def group_by_attempt(nodes: Iterable[Node]) -> dict[str, list[Node]]:
    """Member nodes grouped by their attempt tag (what list_instances reports as gangs)."""
    groups: dict[str, list[Node]] = {}
    for node in nodes:
        groups.setdefault(node.instance.attempt_id or "", []).append(node)
    return groups


def is_member(instance: Instance) -> bool:
    """Whether a VM is a gang member (it carries a rank)."""
    return instance.tag(TAG_RANK) is not None


class Remembered:
    """Gangs this adapter object has seen, for clouds that forget deleted VMs (GCE, Azure):
    a gang whose members are all gone reads as it was last seen, ended."""

    def __init__(self) -> None:
        self._gangs: dict[str, Instance] = {}
        self._lock = threading.Lock()

    def seen(self, instance: Instance) -> Instance:
        with self._lock:
            self._gangs[instance.id] = instance
        return instance

    def gone(self, instance_id: str, cloud: str) -> Instance:
        """The last sight of a gang whose members are gone, as terminated when it was
        still live; NotFound when this object never saw it."""
        with self._lock:
            last = self._gangs.get(instance_id)
        if last is None:
            raise NotFound(cloud, f"no gang {instance_id}")
        if not last.active:
            return last
        members = tuple(
            replace(m, state="terminated") if m.state in ("pending", "running") else m
            for m in last.members
        )
        return self.seen(replace(last, state="terminated", members=members))
