"""The local sandbox for controller tests: a state file, its provider and a controller
in a test's folder, with every job process stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.clock import SystemClock
from broker.manifest.load import load_manifests
from broker.offers import load_offers
from broker.runtime import BrokerSession, open_runtime
from broker.submit import submit_manifests

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def sandbox(
    folder: Path, pools: bool = False, state: Path | str | None = None
) -> Iterator[BrokerSession]:
    """A runtime on `folder/state.db`, or on `state` (a file or a database URL: see
    tests/state_backends.py), the demo's local pools too with `pools` (no Slurm or SSH
    needed), with the example trainer where jobs find it as `../train.py`."""
    from broker.state.location import parse_location

    demo_pools = REPO / "examples" / "demo" / "pools.yaml"
    view = load_offers(pools_path=demo_pools) if pools else load_offers()
    where = parse_location(state) if state is not None else folder / "state.db"
    runtime = open_runtime(where, view, clock=SystemClock())
    (runtime.workdir / "train.py").write_text((REPO / "examples" / "train.py").read_text())
    try:
        yield runtime
    finally:
        for instance in runtime.provider.list_instances():
            runtime.provider.terminate(instance.id)
        runtime.close()


def submit_text(rt: BrokerSession, name: str, text: str) -> str:
    """Submit one manifest given as text; its job id."""
    path = rt.workdir.parent / f"{name}.yaml"
    path.write_text(text)
    (result,) = submit_manifests(rt.store, load_manifests([path]).manifests)
    return result.job_id
