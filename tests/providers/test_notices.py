"""The start-up script's reclaim-notice watcher, run for real: /bin/sh, examples/train.py,
and a loopback server playing each cloud's instance metadata."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from providers.base import NOTICE_CHECKS, LaunchRequest, startup_script
from tests.waiting import wait_until

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"


class Metadata:
    """Answers like each cloud's metadata service; `reclaim` flips the notice on."""

    def __init__(self) -> None:
        self.reclaim = threading.Event()
        self.headers_seen: list[dict[str, str]] = []

    def answer(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        self.headers_seen.append(headers)
        notice = self.reclaim.is_set()
        if method == "PUT" and path == "/latest/api/token":  # AWS IMDSv2
            return 200, "token-123"
        if path == "/latest/meta-data/spot/instance-action":
            ok = headers.get("x-aws-ec2-metadata-token") == "token-123"
            body = json.dumps({"action": "terminate", "time": "2026-11-29T20:00:00Z"})
            return (200, body) if ok and notice else (404, "")
        if path == "/computeMetadata/v1/instance/preempted":
            ok = headers.get("metadata-flavor") == "Google"
            return (200, "TRUE" if notice else "FALSE") if ok else (403, "")
        if path.startswith("/metadata/scheduledevents"):
            if headers.get("metadata") != "true":
                return 400, ""
            events = [{"EventId": "e-1", "EventType": "Preempt", "Resources": ["vm"]}]
            return 200, json.dumps({"DocumentIncarnation": 1, "Events": events if notice else []})
        return 404, ""


@pytest.fixture
def metadata() -> Iterator[tuple[Metadata, str]]:
    fake = Metadata()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, body = fake.answer(self.command, self.path, headers)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = _reply  # noqa: N815 (http.server's names)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("cloud", sorted(NOTICE_CHECKS))
def test_a_reclaim_notice_reaches_the_job_as_sigterm(cloud, metadata, tmp_path):
    fake, url = metadata
    checkpoints = tmp_path / "ckpt"
    command = shlex.join(
        [
            sys.executable,
            str(TRAIN),
            "--steps",
            "100000",
            "--step-seconds",
            "0.001",
            "--checkpoint-every",
            "50",
        ]
    )
    request = LaunchRequest(
        attempt_id="a-1",
        job_id="j-1",
        cloud=cloud,
        region="r",
        instance_type="t",
        market="spot",
        command=command,
        checkpoint_dir=str(checkpoints),
    )
    script = tmp_path / "start.sh"
    script.write_text(startup_script(request))
    env = {"PATH": os.environ["PATH"], "BROKER_METADATA_URL": url, "BROKER_NOTICE_POLL": "0.05"}
    log = tmp_path / "log.txt"
    with log.open("w") as out:
        proc = subprocess.Popen(["/bin/sh", str(script)], env=env, stdout=out, stderr=out)
    try:
        assert wait_until((checkpoints / "checkpoint.json").exists)
        assert proc.poll() is None  # polling found no notice yet: the job runs on
        fake.reclaim.set()
        assert proc.wait(timeout=30) == 143  # the job's own status: killed by SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run(["pkill", "-f", command], check=False)  # the job's own session
    text = log.read_text()
    assert f"broker: {cloud} is reclaiming this instance" in text
    saved = json.loads((checkpoints / "checkpoint.json").read_text())
    assert f"interrupted by SIGTERM at step {saved['step']}: checkpoint saved" in text
    assert not saved["done"]


def test_on_demand_and_sandbox_scripts_do_not_poll_metadata():
    request = LaunchRequest(
        attempt_id="a-1",
        job_id="j-1",
        cloud="aws",
        region="r",
        instance_type="t",
        command="true",
    )
    assert "broker_notice" not in startup_script(request)  # on-demand
    spot = LaunchRequest(**{**vars(request), "market": "spot"})
    assert "broker_notice" in startup_script(spot)
    assert "broker_notice" not in startup_script(spot, watch_notices=False)
    onprem = LaunchRequest(**{**vars(spot), "cloud": "onprem"})
    assert "broker_notice" not in startup_script(onprem)
