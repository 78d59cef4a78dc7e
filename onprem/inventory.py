"""The on-prem pool inventory: a user's YAML file of GPU pools, read into frozen dataclasses.

Usually `~/.config/broker/pools.yaml`; the CLI resolves the path (`--pools PATH`,
pricing.userio.settings) and passes it here.
Full reference and example: docs/pools.md and examples/pools.yaml.

    pools:
      - name: lab-a100                 # unique; letters, digits, '.', '_', '-'
        location: {region: onprem-us-east, country: US}
        gpu: A100-80GB                 # canonical name or alias (pricing.gpus)
        gpus_per_node: 8
        vcpus_per_node: 128
        memory_gib_per_node: 1024
        nvlink_domain: 8               # GPUs per NVLink domain; 0 = none (default)
        fabric: infiniband             # infiniband | roce | ethernet (default)
        cost_per_gpu_hour: 1.10        # amortised USD, > 0
        nodes: [gpu-a01, gpu-a02]      # node host names ...
        # count: 4                     # ... or a count: nodes <name>-0 .. <name>-3
        # nodes: [{name: gpu-a01, switch: leaf1, address: 10.0.0.7, port: 22, mig: {...}}]
        mig: {3g.40gb: 2}              # MIG slices per GPU on every node (pricing.gpus)
        executor: {kind: slurm, partition: a100, gres: a100}   # local (default) | ssh | slurm

Rules beyond the types: exactly one of `nodes` and `count`; node names unique
across the file; pool names unique; one country per region; an NVLink domain
divides the node (2, 4, 8 on an 8-GPU node) or spans whole nodes (72 over
4-GPU nodes); a MIG layout is one GPU's worth of profiles the GPU has (a node's
own `mig` replaces the pool's, `{}` leaves it whole); the executor's keys are
those of its kind (`onprem.executors.options`). Several `---` documents are
read as one list of pools.

Every mistake raises `pricing.userio.errors.UserInputError` naming file, line,
column and field, with a "did you mean" for misspelt keys, GPU names and
values; all mistakes found in one pass are reported together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from onprem.executors.options import ExecutorOptions, LocalOptions
from pricing.userio.errors import UserInputError
from pricing.userio.yaml_reader import YamlDocument, load_yaml_documents

FABRICS: tuple[str, ...] = ("infiniband", "roce", "ethernet")
EXECUTOR_KINDS: tuple[str, ...] = ("local", "ssh", "slurm")
MigLayout = tuple[tuple[str, int], ...]  # (profile, slices on each GPU), in file order


@dataclass(frozen=True, slots=True)
class PoolNode:
    """One machine of a pool. `switch`: its leaf switch ("" = not said); `address` and
    `port`: where SSH reaches it ("" and 0: its name and the executor's port); `mig`:
    the MIG layout of each of its GPUs (() = whole GPUs)."""

    name: str
    pool: str
    gpus: int
    switch: str = ""
    address: str = ""
    port: int = 0
    mig: MigLayout = ()

    @property
    def slices(self) -> dict[str, int]:
        """MIG profile -> slices on this node (every GPU has the node's layout)."""
        return {profile: count * self.gpus for profile, count in self.mig}


@dataclass(frozen=True, slots=True)
class Executor:
    """How work reaches a pool's nodes: the kind and its validated options."""

    kind: str  # local | ssh | slurm
    options: ExecutorOptions = field(default_factory=LocalOptions)


@dataclass(frozen=True, slots=True)
class Pool:
    """A set of identical GPU nodes in one place, with one amortised price."""

    name: str
    region: str
    country: str  # ISO 3166-1 alpha-2, upper case
    gpu: str  # canonical name (pricing.gpus)
    gpus_per_node: int
    vcpus_per_node: int
    memory_gib_per_node: float
    nvlink_domain: int  # GPUs per NVLink domain; 0 = none
    fabric: str  # infiniband | roce | ethernet
    cost_per_gpu_hour: float  # USD
    nodes: tuple[PoolNode, ...]
    executor: Executor = Executor("local")
    source: str = "onprem"  # "onprem:<path>" when read from a file
    as_of: str = ""  # ISO date the prices were written (file mtime); "" = unknown

    @property
    def total_gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)

    @property
    def whole_gpus(self) -> int:
        """GPUs not partitioned with MIG (the ones the whole-node row sells)."""
        return sum(node.gpus for node in self.nodes if not node.mig)

    @property
    def price_per_node_hour(self) -> float:
        return self.cost_per_gpu_hour * self.gpus_per_node


def load_pools(path: Path | str, *, missing_ok: bool = False) -> list[Pool]:
    """Read and validate a pools file; raise UserInputError naming file, line, column, field.

    With `missing_ok`, a file that does not exist gives no pools (for the default path).
    """
    path = Path(path).expanduser()
    if missing_ok and not path.exists():
        return []
    documents = load_yaml_documents(path)
    source = f"onprem:{path.resolve()}"
    as_of = date.fromtimestamp(path.stat().st_mtime).isoformat()
    errors: list[UserInputError] = []
    parsed: list[tuple[YamlDocument, int, Any]] = []  # (document, index in it, model)
    executors: list[Executor] = []
    for doc in documents:
        if doc.data is None:
            continue
        models = _validate(doc, errors)
        parsed.extend((doc, i, model) for i, (model, _) in enumerate(models))
        executors.extend(executor for _, executor in models)
    _cross_check(parsed, errors)
    if errors:
        raise UserInputError.collect(sorted(errors, key=lambda e: (e.line, e.column)))
    return [
        _to_pool(model, executor, source, as_of)
        for (_, _, model), executor in zip(parsed, executors, strict=True)
    ]


def pool_countries(pools: list[Pool]) -> dict[str, str]:
    """Region -> country of the pools, for data-residency filters; ValueError on a conflict."""
    countries: dict[str, str] = {}
    for pool in pools:
        known = countries.setdefault(pool.region, pool.country)
        if known != pool.country:
            raise ValueError(f"region {pool.region!r} is in both {known} and {pool.country}")
    return countries


def _validate(doc: YamlDocument, errors: list[UserInputError]) -> list[tuple[Any, Executor]]:
    """(model, executor) of each pool of `doc`; nothing when anything in it is wrong."""
    from pydantic import ValidationError

    from onprem.pools_schema import executor_options, mig_errors, models
    from pricing.userio.validation import validation_errors

    try:
        pools = list(models().model_validate(doc.data).pools)
    except ValidationError as exc:
        errors.extend(validation_errors(doc, exc, models()))
        return []
    found: list[UserInputError] = []
    out = []
    for i, model in enumerate(pools):
        at = ("pools", i)
        kind = model.executor.kind
        extra = model.executor.model_extra or {}
        options = executor_options(doc, (*at, "executor"), kind, extra, found)
        if model.mig:
            found.extend(mig_errors(doc, (*at, "mig"), model.gpu, model.mig))
        for j, node in enumerate(model.nodes or ()):
            if node.mig:
                found.extend(mig_errors(doc, (*at, "nodes", j, "mig"), model.gpu, node.mig))
        if options is not None:
            out.append((model, Executor(kind, options)))
    errors.extend(found)
    return [] if found else out


def _cross_check(parsed: list[tuple[YamlDocument, int, Any]], errors: list[UserInputError]) -> None:
    """Checks across pools and documents: unique names, unique nodes, one country per region."""
    pool_lines: dict[str, int] = {}
    node_owner: dict[str, str] = {}
    region_country: dict[str, tuple[str, int]] = {}
    for doc, i, model in parsed:
        at = ("pools", i)
        if model.name in pool_lines:
            first = pool_lines[model.name]
            errors.append(
                doc.error(
                    (*at, "name"), f"duplicate pool name {model.name!r} (first at line {first})"
                )
            )
        else:
            pool_lines[model.name] = doc.locate((*at, "name"))[0]
        names = [node.name for node in model.nodes or ()]
        for j, node in enumerate(names):
            owner = node_owner.setdefault(node, model.name)
            if owner != model.name or node in names[:j]:
                where = "earlier in this pool" if owner == model.name else f"in pool {owner!r}"
                errors.append(
                    doc.error(
                        _node_name_at(doc, (*at, "nodes", j)),
                        f"node {node!r} is already listed {where}",
                    )
                )
        region = model.location.region
        country, line = region_country.setdefault(
            region, (model.location.country, doc.locate((*at, "location", "country"))[0])
        )
        if country != model.location.country:
            errors.append(
                doc.error(
                    (*at, "location", "country"),
                    f"region {region!r} is in {country} (line {line}): one region, one country",
                )
            )


def _node_name_at(doc: YamlDocument, at: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Where a node's name is written: the entry itself for a bare host name."""
    entry: Any = doc.data
    for part in at:
        entry = entry[part]
    return at if isinstance(entry, str) else (*at, "name")


def _to_pool(model: Any, executor: Executor, source: str, as_of: str) -> Pool:
    layout: MigLayout = tuple((model.mig or {}).items())
    if model.nodes is None:
        nodes = tuple(
            PoolNode(f"{model.name}-{k}", model.name, model.gpus_per_node, mig=layout)
            for k in range(model.count)
        )
    else:
        nodes = tuple(
            PoolNode(
                node.name,
                model.name,
                model.gpus_per_node,
                switch=node.switch,
                address=node.address,
                port=node.port,
                mig=layout if node.mig is None else tuple(node.mig.items()),
            )
            for node in model.nodes
        )
    return Pool(
        name=model.name,
        region=model.location.region,
        country=model.location.country,
        gpu=model.gpu,
        gpus_per_node=model.gpus_per_node,
        vcpus_per_node=model.vcpus_per_node,
        memory_gib_per_node=float(model.memory_gib_per_node),
        nvlink_domain=model.nvlink_domain,
        fabric=model.fabric,
        cost_per_gpu_hour=float(model.cost_per_gpu_hour),
        nodes=nodes,
        executor=executor,
        source=source,
        as_of=as_of,
    )
