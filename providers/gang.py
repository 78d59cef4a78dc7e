"""A gang: one attempt on N nodes, launched and ended as a unit (docs/distributed.md).

The controller keeps one attempt to one `Instance`; for N > 1 nodes that Instance
stands for the whole gang and lists its `members`, one per node. Every provider that
runs gangs reports them the same way, so this module holds the two rules they share:
how the members' states make the gang's state, and the environment each rank sees.
"""

from __future__ import annotations

from dataclasses import dataclass

TAG_RANK = "broker-rank"  # on every member node of a gang: its rank, "0" for the head
DEFAULT_MASTER_PORT = 29500  # torchrun's default rendezvous port


@dataclass(frozen=True)
class GangMember:
    """One node of a gang as its provider last saw it: `node_id` is the provider's own
    id for the node (a cloud instance id, a Slurm step, a host), `address` its private
    IP ("" until known), `state` an InstanceState."""

    rank: int
    node_id: str
    zone: str = ""
    address: str = ""
    state: str = "pending"
    exit_code: int | None = None


ENDED = frozenset({"succeeded", "failed", "terminated", "interrupted"})


def gang_state(members: tuple[GangMember, ...]) -> tuple[str, int | None]:
    """The gang's state and exit code from its members', in the order that decides:

    - any member interrupted (a spot reclaim): "interrupted", the whole gang stops and
      is planned again as a unit;
    - any member failed: "failed", with that member's exit code;
    - rank 0 succeeded and no member is still going: "succeeded", rank 0's exit code;
    - any member terminated: "terminated";
    - every member running or done: "running"; otherwise "pending".
    """
    if not members:
        raise ValueError("a gang has at least one member")
    states = {m.state for m in members}
    head = min(members, key=lambda m: m.rank)
    if "interrupted" in states:
        return "interrupted", None
    failed = [m for m in members if m.state == "failed"]
    if failed:
        return "failed", failed[0].exit_code
    if head.state == "succeeded" and states <= ENDED:
        return "succeeded", head.exit_code
    if "terminated" in states:
        return "terminated", None
    if states <= {"running", "succeeded"}:  # some ranks done, the rest still at work
        return "running", None
    return "pending", None


def rank_environment(
    rank: int,
    addresses: tuple[str, ...],
    gpus_per_node: int,
    port: int = DEFAULT_MASTER_PORT,
) -> dict[str, str]:
    """What rank `rank` of a gang on `addresses` (head first) sees, so `torchrun --nnodes
    $BROKER_NUM_NODES --node_rank $BROKER_NODE_RANK --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT` works unchanged. WORLD_SIZE counts nodes x GPUs (one
    process per GPU, torch's meaning); NNODES/NODE_RANK are per node."""
    if not addresses:
        raise ValueError("a gang has at least one node address")
    if not 0 <= rank < len(addresses):
        raise ValueError(f"rank {rank} is outside a gang of {len(addresses)} nodes")
    nodes = len(addresses)
    return {
        "BROKER_NODE_RANK": str(rank),
        "BROKER_NUM_NODES": str(nodes),
        "BROKER_NODE_IPS": "\n".join(addresses),
        "BROKER_GPUS_PER_NODE": str(gpus_per_node),
        "MASTER_ADDR": addresses[0],
        "MASTER_PORT": str(port),
        "NNODES": str(nodes),
        "NODE_RANK": str(rank),
        "WORLD_SIZE": str(nodes * max(1, gpus_per_node)),
    }
