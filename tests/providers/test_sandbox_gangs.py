"""Sandbox gangs: N local processes, one per rank, with the rank environment, ended as
a unit (a failed rank stops the others, a reclaim of one rank stops them all)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.clock import SystemClock
from pricing.catalog import read_offer_table
from providers.base import LaunchRequest
from providers.sandbox import SandboxProvider
from providers.sandbox.gang_record import load_gang
from tests.fakes.offers import write_catalog
from tests.waiting import wait_until

PLACE = ("aws", "us-east-1")


@pytest.fixture
def sandbox(tmp_path):
    offers = read_offer_table(write_catalog(tmp_path / "offers.csv"))
    provider = SandboxProvider(
        offers, tmp_path / "sandbox", SystemClock(), terminate_grace=2.0, notice_seconds=5.0
    )
    yield provider
    for instance in provider.list_instances():
        provider.terminate(instance.id)


def gang_request(attempt: str, command: str, nodes: int = 2, **changes) -> LaunchRequest:
    fields = dict(
        attempt_id=attempt,
        job_id=f"j-{attempt}",
        cloud=PLACE[0],
        region=PLACE[1],
        instance_type="g4dn.xlarge",
        market="spot",
        nodes=nodes,
        accelerator_count=1.0,
        command=command,
    )
    return LaunchRequest(**(fields | changes))


def checkpoints(sandbox: SandboxProvider, request: LaunchRequest) -> Path:
    return Path(sandbox.checkpoint_store(request.job_id, request.cloud, request.region))


def test_every_rank_gets_its_environment(sandbox):
    names = "BROKER_NODE_RANK BROKER_NUM_NODES MASTER_ADDR MASTER_PORT NODE_RANK WORLD_SIZE"
    dump = " ".join(f'"{n}=${n}"' for n in names.split())
    command = (
        f'printf "%s\\n" {dump} > "$BROKER_CHECKPOINT_DIR/env-$BROKER_NODE_RANK" && '
        'printf "%s" "$BROKER_NODE_IPS" > "$BROKER_CHECKPOINT_DIR/ips-$BROKER_NODE_RANK"'
    )
    request = gang_request("g-env", command, nodes=3)
    instance = sandbox.wait(sandbox.launch(request).id, 30.0)
    assert instance.state == "succeeded" and instance.exit_code == 0
    assert [m.state for m in instance.members] == ["succeeded"] * 3
    port = load_gang(sandbox._dir, "g-env").port
    folder = checkpoints(sandbox, request)
    for rank in range(3):
        seen = dict(
            line.split("=", 1) for line in (folder / f"env-{rank}").read_text().splitlines()
        )
        assert seen == {
            "BROKER_NODE_RANK": str(rank),
            "BROKER_NUM_NODES": "3",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "NODE_RANK": str(rank),
            "WORLD_SIZE": "3",
        }
        assert (folder / f"ips-{rank}").read_text() == "127.0.0.1\n127.0.0.1\n127.0.0.1"


def test_a_failing_rank_stops_the_others_and_fails_the_gang(sandbox):
    command = 'if [ "$BROKER_NODE_RANK" = 1 ]; then sleep 0.5; exit 3; fi; exec sleep 60'
    before = sandbox.free_nodes()[PLACE]
    instance = sandbox.launch(gang_request("g-fail", command))
    assert sandbox.free_nodes()[PLACE] == before - 2  # billed and held per node
    assert wait_until(lambda: not sandbox.describe(instance.id).active, 30.0)
    ended = sandbox.describe(instance.id)
    assert (ended.state, ended.exit_code) == ("failed", 3)
    assert [m.state for m in ended.members] == ["terminated", "failed"]
    assert sandbox.free_nodes()[PLACE] == before
    hours = sandbox.billed_hours(ended)
    assert hours > 0 and sandbox.billed_hours(sandbox.describe(instance.id)) == hours


def test_a_reclaim_of_one_rank_sends_every_rank_term(sandbox):
    command = (
        "trap 'touch \"$BROKER_CHECKPOINT_DIR/term-$BROKER_NODE_RANK\"; exit 0' TERM; "
        'touch "$BROKER_CHECKPOINT_DIR/up-$BROKER_NODE_RANK"; '
        "while :; do sleep 0.05; done"
    )
    request = gang_request("g-reclaim", command)
    instance = sandbox.launch(request)
    folder = checkpoints(sandbox, request)
    assert wait_until(lambda: all((folder / f"up-{r}").exists() for r in (0, 1)), 30.0)
    sandbox.interruptions()
    rank_one = instance.members[1].node_id
    notice = sandbox.interrupt(rank_one)
    assert notice is not None and notice.instance_id == instance.id
    assert wait_until(lambda: not sandbox.describe(instance.id).active, 30.0)
    ended = sandbox.describe(instance.id)
    assert ended.state == "interrupted"
    assert [m.state for m in ended.members] == ["interrupted", "interrupted"]
    assert (folder / "term-0").exists() and (folder / "term-1").exists()
    assert [n.instance_id for n in sandbox.interruptions()] == [instance.id]
    assert sandbox.interrupt(instance.id) is None


def test_a_launch_killed_half_way_is_completed_by_the_next(sandbox, monkeypatch, tmp_path):
    """The launcher dies after rank 0 started: the next launch of the attempt starts
    rank 1 only, on the gang's port, and rank 0 keeps running."""
    request = gang_request("g-half", "exec sleep 60")
    started = SandboxProvider._start

    def dies_at_rank_one(self, *args, key: str = "", **kwargs):
        if key.endswith("rank-1"):
            raise SystemExit("the launcher was killed")
        return started(self, *args, key=key, **kwargs)

    monkeypatch.setattr(SandboxProvider, "_start", dies_at_rank_one)
    with pytest.raises(SystemExit):
        sandbox.launch(request)
    monkeypatch.setattr(SandboxProvider, "_start", started)
    half = sandbox.describe("sbx-g-half")
    assert [m.state for m in half.members] == ["running", "pending"] and half.active
    head = sandbox._dir.load("g-half/rank-0")
    restarted = SandboxProvider(sandbox._offers, sandbox.workdir, SystemClock())
    whole = restarted.launch(request)
    assert [m.state for m in whole.members] == ["running", "running"]
    assert restarted._dir.load("g-half/rank-0").pid == head.pid
    assert len(restarted.list_instances()) == 1
    restarted.terminate(whole.id)
    assert not sandbox.describe(whole.id).active


def test_a_gang_of_images_is_refused(sandbox):
    from providers.errors import InvalidRequest

    # A runtime is named, so the refusal is the gang's, not a missing runtime's.
    with_runtime = SandboxProvider(
        sandbox._offers, sandbox.workdir, SystemClock(), containers=("podman",)
    )
    with pytest.raises(InvalidRequest, match="gangs of commands"):
        with_runtime.launch(gang_request("g-image", "", image="docker.io/library/alpine:3"))
    assert with_runtime.list_instances() == []


def test_a_half_launched_gang_that_is_terminated_ends_and_frees_its_nodes(sandbox, monkeypatch):
    request = gang_request("g-halfgone", "exec sleep 60", nodes=3)
    started = SandboxProvider._start

    def dies_at_rank_two(self, *args, key: str = "", **kwargs):
        if key.endswith("rank-2"):
            raise SystemExit("the launcher was killed")
        return started(self, *args, key=key, **kwargs)

    before = sandbox.free_nodes()[PLACE]
    monkeypatch.setattr(SandboxProvider, "_start", dies_at_rank_two)
    with pytest.raises(SystemExit):
        sandbox.launch(request)
    monkeypatch.setattr(SandboxProvider, "_start", started)
    assert sandbox.free_nodes()[PLACE] == before - 3  # held for the whole gang
    assert sandbox.terminate("sbx-g-halfgone") is True
    ended = sandbox.describe("sbx-g-halfgone")
    assert ended.state == "terminated" and ended.ended_at is not None
    assert [m.state for m in ended.members] == ["terminated", "terminated", "pending"]
    assert sandbox.free_nodes()[PLACE] == before
    again = sandbox.launch(request)  # the same attempt again: nothing starts any more
    assert again.state == "terminated"
    assert sandbox._dir.load("g-halfgone/rank-2") is None
