"""Which GPUs of which nodes a job gets: topology- and slice-aware, as pure functions.

The broker allocates the GPUs of its SSH and local pools itself (Slurm allocates its
own; for Slurm pools the broker only asks for one leaf switch). The rules, in order:

1. **NVLink domains.** A node's GPUs are split into domains of `domain` consecutive
   indices (`nvlink_domain` of the pool; 0 = one domain per node). A job of k GPUs on
   one node gets them inside one domain when one has k free; a job larger than a
   domain gets whole domains, as few as possible. With `nvlink=True` (the manifest's
   `interconnect: nvlink`) a placement that straddles domains is refused.
2. **Best fit.** Among the placements that respect the domains, the one leaving the
   fewest free GPUs in its domain, then on its node, wins: small jobs fill partly used
   domains and nodes, so whole domains and whole nodes stay free for large jobs (the
   buddy-cell idea of HiveD without its virtual clusters). Inside a domain whose size
   is a power of two the GPUs come from an aligned block (buddy cell) where possible.
3. **Leaf switches.** A multi-node job on an InfiniBand pool goes to nodes under one
   leaf switch when enough of them fit (`same_switch="prefer"`), or only there
   (`"require"`); among switches that fit, the one with the fewest fitting nodes (best
   fit again, keeping big switch groups whole).
4. **MIG slices.** A slice job gets `count` slices of one profile on one node: the node
   with the fewest free slices of that profile that still has enough.

Everything here takes and returns values; ties break on node name and GPU index, so
the same state always gives the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

SwitchPolicy = Literal["ignore", "prefer", "require"]


@dataclass(frozen=True)
class NodeState:
    """One node as the allocator sees it. `free`: indices of whole GPUs free now;
    `domain`: GPUs per NVLink domain (0 = the node is one domain); `free_slices`: MIG
    profile -> slots free now, each slot named "<gpu>.<k>"."""

    name: str
    gpus: int
    free: frozenset[int]
    domain: int = 0
    switch: str = ""
    free_slices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def domains(self) -> list[tuple[int, ...]]:
        """The node's NVLink domains as tuples of GPU indices."""
        size = self.domain if 0 < self.domain <= self.gpus else self.gpus
        return [tuple(range(start, start + size)) for start in range(0, self.gpus, size)]


@dataclass(frozen=True)
class Grant:
    """What one node gives a job: whole GPUs by index, or MIG slots of one profile."""

    node: str
    gpus: tuple[int, ...] = ()
    profile: str = ""
    slices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Allocation:
    """A job's grants, one per node, and how well they respect the topology."""

    grants: tuple[Grant, ...]
    straddles: bool = False  # some node's GPUs span more NVLink domains than needed
    switches: tuple[str, ...] = ()  # the leaf switches the nodes hang from ("" = unknown)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(grant.node for grant in self.grants)


def allocate(
    nodes: Sequence[NodeState],
    gpus_per_node: int,
    node_count: int = 1,
    *,
    nvlink: bool = False,
    same_switch: SwitchPolicy = "ignore",
) -> Allocation | None:
    """Whole GPUs for a job of `node_count` nodes x `gpus_per_node` GPUs, or None when
    it does not fit now (see the module docstring for the rules)."""
    if gpus_per_node < 1 or node_count < 1:
        raise ValueError("a job asks for at least one node and one GPU per node")
    fits: dict[str, tuple[tuple, tuple[int, ...], bool]] = {}
    for node in nodes:
        best = _best_on_node(node, gpus_per_node, nvlink)
        if best is not None:
            fits[node.name] = best
    if len(fits) < node_count:
        return None
    by_name = {node.name: node for node in nodes}
    chosen = _choose_nodes(
        [by_name[name] for name in fits], fits, node_count, same_switch, multi=node_count > 1
    )
    if chosen is None:
        return None
    grants = tuple(Grant(name, fits[name][1]) for name in chosen)
    return Allocation(
        grants,
        straddles=any(fits[name][2] for name in chosen),
        switches=tuple(sorted({by_name[name].switch for name in chosen})),
    )


def allocate_slices(nodes: Sequence[NodeState], profile: str, count: int) -> Allocation | None:
    """`count` MIG slots of `profile` on one node (best fit), or None when no node has
    that many free."""
    if count < 1:
        raise ValueError("a slice job asks for at least one slice")
    candidates = [
        (len(node.free_slices.get(profile, ())), node.name, node)
        for node in nodes
        if len(node.free_slices.get(profile, ())) >= count
    ]
    if not candidates:
        return None
    _, _, node = min(candidates, key=lambda c: (c[0], c[1]))
    slots = tuple(sorted(node.free_slices[profile], key=_slot_key)[:count])
    return Allocation((Grant(node.name, profile=profile, slices=slots),), switches=(node.switch,))


def node_states(
    nodes: Iterable[tuple[str, int, str, tuple[tuple[str, int], ...]]],
    domain: int,
    used: Mapping[str, Iterable[int | str]],
) -> list[NodeState]:
    """NodeStates from (name, gpus, switch, MIG layout per GPU) and what is in use per
    node: GPU indices and MIG slot names ("<gpu>.<k>"). A node with a layout has only
    slices; its whole GPUs are not free."""
    states = []
    for name, gpus, switch, layout in nodes:
        taken = set(used.get(name, ()))
        if layout:
            slots = slot_names(gpus, layout)
            free_slices = {
                profile: tuple(s for s in names if s not in taken)
                for profile, names in slots.items()
            }
            states.append(NodeState(name, gpus, frozenset(), domain, switch, free_slices))
        else:
            free = frozenset(i for i in range(gpus) if i not in taken)
            states.append(NodeState(name, gpus, free, domain, switch))
    return states


def slot_names(gpus: int, layout: tuple[tuple[str, int], ...]) -> dict[str, tuple[str, ...]]:
    """Profile -> the names of its slots on a node of `gpus` GPUs sliced as `layout`:
    "<gpu index>.<k>", k counting every slice of that GPU in layout order."""
    slots: dict[str, list[str]] = {}
    for gpu in range(gpus):
        k = 0
        for profile, per_gpu in layout:
            for _ in range(per_gpu):
                slots.setdefault(profile, []).append(f"{gpu}.{k}")
                k += 1
    return {profile: tuple(names) for profile, names in slots.items()}


# --- inside one node --------------------------------------------------------------------


def _best_on_node(
    node: NodeState, k: int, nvlink: bool
) -> tuple[tuple, tuple[int, ...], bool] | None:
    """(score, GPUs, straddles) of the best placement of k GPUs on `node`, or None."""
    if len(node.free) < k:
        return None
    domains = node.domains()
    size = len(domains[0]) if domains else 0
    options: list[tuple[tuple, tuple[int, ...], bool]] = []
    if k <= size:
        for domain in domains:
            free = [i for i in domain if i in node.free]
            if len(free) >= k:
                gpus = _buddy_pick(domain, node.free, k)
                score = (0, len(free) - k, len(node.free) - k, gpus)
                options.append((score, gpus, False))
    else:  # whole domains, as few as possible: the emptiest-first would waste big ones
        whole = [d for d in domains if all(i in node.free for i in d)]
        needed = -(-k // size)
        if len(whole) >= needed:
            gpus = tuple(i for d in whole[:needed] for i in d)[:k]
            options.append(((0, needed * size - k, len(node.free) - k, gpus), gpus, False))
    if not options and not nvlink:  # straddle as few domains as possible: fullest first
        gpus: list[int] = []
        for domain in sorted(domains, key=lambda d: (-sum(i in node.free for i in d), d)):
            gpus.extend(i for i in domain if i in node.free)
            if len(gpus) >= k:
                break
        picked = tuple(sorted(gpus[:k]))
        options.append(((1, 0, len(node.free) - k, picked), picked, True))
    return min(options, key=lambda o: o[0]) if options else None


def _buddy_pick(domain: tuple[int, ...], free: frozenset[int], k: int) -> tuple[int, ...]:
    """k free GPUs of `domain`: from the aligned power-of-two block (buddy cell) that
    fits k and has the fewest free GPUs around it, else the lowest free indices."""
    size = len(domain)
    if size & (size - 1) == 0:
        block = 1
        while block < k:
            block *= 2
        best = None
        for start in range(0, size, block):
            cell = domain[start : start + block]
            if all(i in free for i in cell):
                parent = 2 * block
                around = domain[(start // parent) * parent : (start // parent) * parent + parent]
                score = (sum(i in free for i in around), start)
                if best is None or score < best[0]:
                    best = (score, cell)
        if best is not None:
            return tuple(best[1][:k])
    return tuple(i for i in domain if i in free)[:k]


# --- across nodes -------------------------------------------------------------------------


def _choose_nodes(
    candidates: list[NodeState],
    fits: Mapping[str, tuple[tuple, tuple[int, ...], bool]],
    count: int,
    same_switch: SwitchPolicy,
    *,
    multi: bool,
) -> list[str] | None:
    def rank(node: NodeState) -> tuple:
        return (fits[node.name][0], node.name)

    ordered = sorted(candidates, key=rank)
    if not multi or same_switch == "ignore":
        return [node.name for node in ordered[:count]]
    groups: dict[str, list[NodeState]] = {}
    for node in ordered:
        groups.setdefault(node.switch, []).append(node)
    known = {switch: members for switch, members in groups.items() if switch}
    enough = [(len(m), s) for s, m in known.items() if len(m) >= count]
    if enough:
        _, switch = min(enough)
        return [node.name for node in known[switch][:count]]
    if same_switch == "require":
        return None
    chosen: list[str] = []  # the fewest switches: the biggest groups first
    for switch in sorted(groups, key=lambda s: (-len(groups[s]), s)):
        chosen.extend(node.name for node in groups[switch])
        if len(chosen) >= count:
            break
    return chosen[:count]


def _slot_key(slot: str) -> tuple[int, int]:
    gpu, _, k = slot.partition(".")
    return int(gpu), int(k)
