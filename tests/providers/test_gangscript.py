"""A gang member's start-up script, run by /bin/sh against a loopback instance metadata
service of each cloud: it waits until the adapter has written the peers, then exports
exactly what providers.gang.rank_environment gives its rank."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from providers.base import LaunchRequest, startup_script
from providers.gang import rank_environment
from providers.gangscript import PEER_READS, TAG_PEERS, gang_lines
from tests.waiting import wait_until

PEERS = ("10.0.0.5", "10.0.0.9", "10.0.1.2")
pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="the script uses curl")


class Metadata:
    """Answers each cloud's metadata paths for the peers; 404 until `peers` is set."""

    def __init__(self) -> None:
        self.peers = ""
        self.reads = 0
        self.headers: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802 (AWS IMDSv2 token)
                self._reply(200, "token-1" if self.path == "/latest/api/token" else "")

            def do_GET(self) -> None:  # noqa: N802
                fake.reads += 1
                fake.headers.append(dict(self.headers))
                path = urlsplit(self.path)
                if not fake.peers:
                    return self._reply(404, "")
                if path.path == f"/latest/meta-data/tags/instance/{TAG_PEERS}":
                    ok = self.headers.get("X-aws-ec2-metadata-token") == "token-1"
                    return self._reply(200 if ok else 401, fake.peers if ok else "")
                if path.path == f"/computeMetadata/v1/instance/attributes/{TAG_PEERS}":
                    ok = self.headers.get("Metadata-Flavor") == "Google"
                    return self._reply(200 if ok else 403, fake.peers if ok else "")
                if path.path == "/metadata/instance/compute/tags" and "format=text" in path.query:
                    tags = f"broker-job:j-1;{TAG_PEERS}:{fake.peers};team:x"
                    return self._reply(200 if self.headers.get("Metadata") == "true" else 400, tags)
                return self._reply(404, "")

            def _reply(self, status: int, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def metadata() -> Iterator[Metadata]:
    service = Metadata()
    yield service
    service.close()


def member_request(cloud: str, nodes: int = 3) -> LaunchRequest:
    return LaunchRequest(
        attempt_id="a-gang",
        job_id="j-1",
        cloud=cloud,
        region="r",
        instance_type="t",
        command='env > "$OUT"',
        nodes=nodes,
        accelerator_count=8,
    )


def exported(path: Path) -> dict[str, str]:
    """The variables `env` wrote, multi-line values (BROKER_NODE_IPS) kept whole."""
    values: dict[str, str] = {}
    name = ""
    for line in path.read_text().splitlines():
        head, sep, rest = line.partition("=")
        if sep and head.replace("_", "").isalnum() and head.isupper():
            name, values[head] = head, rest
        elif name:
            values[name] += "\n" + line
    return values


@pytest.mark.parametrize("cloud", sorted(PEER_READS))
def test_the_member_waits_for_its_peers_then_exports_its_rank(cloud, metadata, tmp_path):
    script = tmp_path / "start.sh"
    script.write_text(startup_script(member_request(cloud), rank=1))
    out = tmp_path / "env.txt"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "BROKER_METADATA_URL": metadata.url}
    env["BROKER_PEERS_POLL"] = "0.05"
    job = subprocess.Popen(["/bin/sh", str(script)], env=env)
    try:
        assert wait_until(lambda: metadata.reads >= 2, timeout=20)  # polled, found nothing yet
        assert job.poll() is None and not out.exists()
        metadata.peers = " ".join(PEERS)
        assert job.wait(timeout=20) == 0
    finally:
        job.kill()
    seen = exported(out)
    wanted = rank_environment(1, PEERS, 8)
    assert {name: seen.get(name) for name in wanted} == wanted


def test_a_peer_list_of_another_size_fails_the_job(metadata, tmp_path):
    metadata.peers = "10.0.0.5 10.0.0.9"  # two, for a gang of three
    script = tmp_path / "start.sh"
    script.write_text(startup_script(member_request("gcp"), rank=0))
    env = {
        "PATH": "/usr/bin:/bin",
        "OUT": str(tmp_path / "env"),
        "BROKER_METADATA_URL": metadata.url,
    }
    done = subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, timeout=20)
    assert done.returncode == 1 and b"expected 3 peers, found 2" in done.stderr
    assert not (tmp_path / "env").exists()


def test_the_wait_for_peers_is_bounded(metadata, tmp_path):
    script = tmp_path / "start.sh"
    script.write_text(startup_script(member_request("azure"), rank=2))
    env = {
        "PATH": "/usr/bin:/bin",
        "OUT": str(tmp_path / "env"),
        "BROKER_METADATA_URL": metadata.url,
    }
    env |= {"BROKER_PEERS_POLL": "0.05", "BROKER_PEERS_TIMEOUT": "0"}
    done = subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, timeout=20)
    assert done.returncode == 1 and b"never appeared" in done.stderr


def test_single_nodes_and_unknown_clouds_get_no_gang_lines():
    assert "broker_peers" not in startup_script(member_request("aws", nodes=1), rank=0)
    assert "broker_peers" not in startup_script(member_request("aws"))  # no rank: not a member
    with pytest.raises(ValueError, match="no instance metadata"):
        gang_lines("onprem", 0, 2, 1)
