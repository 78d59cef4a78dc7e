"""All or nothing once a gang runs, on the real engines: a rank that fails ends the
others at once (the node executor over a real sshd; Slurm's srun --kill-on-bad-exit on
the real cluster), and the gang fails with the failing rank's exit code."""

from __future__ import annotations

import time
import uuid

from tests.onprem.harness import request, slurm_pool, ssh_pool
from tests.waiting import wait_until

# Rank 1 fails after a moment; every other rank would run a minute.
COMMAND = 'if [ "$BROKER_NODE_RANK" = 1 ]; then sleep 1; exit 3; fi; exec sleep 60'


def _id() -> str:
    return uuid.uuid4().hex[:10]


def _fails_fast(provider, instance, within: float = 45.0):
    started = time.monotonic()
    assert wait_until(lambda: not provider.describe(instance.id).active, within), instance.id
    done = provider.describe(instance.id)
    assert time.monotonic() - started < within  # not the minute rank 0 asked for
    return done


def test_a_failing_rank_ends_an_ssh_gang(make, ssh_nodes):
    pool = ssh_pool(ssh_nodes, f"rack-{_id()}", base_dir=f".broker/{_id()}")
    provider = make(pool)
    instance = provider.launch(request(pool, _id(), nodes=2, command=COMMAND))
    done = _fails_fast(provider, instance)
    assert (done.state, done.exit_code) == ("failed", 3)
    assert [m.state for m in done.members] == ["failed", "failed"]
    executor = provider.executor(pool.name)
    attempt = instance.id.rsplit(":", 1)[1]
    assert not [s for s in executor.list_attempts() if s.attempt_id == attempt and s.active]


def test_a_failing_rank_ends_a_slurm_gang(make, slurm_cluster):
    pool = slurm_pool(slurm_cluster, f"gang-{_id()}")
    provider = make(pool)
    instance = provider.launch(request(pool, _id(), nodes=2, command=COMMAND))
    done = _fails_fast(provider, instance)
    assert done.state == "failed" and done.exit_code not in (0, None)
