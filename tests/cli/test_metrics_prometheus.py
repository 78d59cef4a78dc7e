"""A real Prometheus (Debian's package, .ci/services/prom-up.sh, stopped by PID) scrapes a
running `broker run --metrics-port` controller every second; its HTTP API answers
with the broker's figures: the job running, and the controller's passes counted.

CI runs it (`.ci/run` installs prometheus and sets TEST_SERVICES=required: a missing
prometheus fails it there); elsewhere it skips without the program."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.cli.runner import run_cli
from tests.conftest import _free_ports, _service
from tests.services import need_programs
from tests.waiting import wait_until

pytestmark = pytest.mark.prometheus


def job(release: Path) -> str:
    """A job that runs until the test lets it end (the file appears)."""
    return f"""\
apiVersion: broker/v1
name: held
team: platform
queue: gpu
resources:
  accelerators: T4:1
placement:
  clouds: [aws]
run:
  command: "until [ -e {release} ]; do sleep 0.1; done"
runtime:
  estimate_hours: 1
"""


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.loads(response.read())
    except OSError:
        return []
    return answer["data"]["result"] if answer.get("status") == "success" else []


def value_is(base: str, promql: str, wanted: float) -> bool:
    found = query(base, promql)
    return len(found) == 1 and float(found[0]["value"][1]) == wanted


def test_prometheus_scrapes_a_running_controller(capsys, tmp_path, services_dir):
    need_programs("prometheus", install="apt-get install --no-install-recommends prometheus")
    state, release = tmp_path / "state.db", tmp_path / "release"
    manifest = tmp_path / "held.yaml"
    manifest.write_text(job(release))
    assert run_cli(capsys, "submit", str(manifest), "--state", str(state)).code == 0
    metrics_port, prom_port = _free_ports(1), _free_ports(1)
    controller = subprocess.Popen(
        [sys.executable, "-m", "broker", "run", "--poll", "0.2", "--state", str(state),
         "--metrics-port", str(metrics_port)],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    env = {
        **os.environ,
        "SVC_DIR": str(services_dir),
        "PROM_PORT": str(prom_port),
        "PROM_TARGETS": f"127.0.0.1:{metrics_port}",
    }
    base = f"http://127.0.0.1:{prom_port}"
    try:
        _service("prom-up.sh", env)
        # Targets reach Prometheus' scrape manager some 5 s after it starts.
        assert wait_until(lambda: value_is(base, 'up{job="broker"}', 1), timeout=60)
        running = 'broker_jobs{team="platform",queue="gpu",state="running"}'
        assert wait_until(lambda: value_is(base, running, 1), timeout=60)
        assert wait_until(lambda: value_is(base, 'broker_running_jobs{cloud="aws"}', 1), 30)
        passes = query(base, "broker_controller_pass_duration_seconds_count")
        assert passes and float(passes[0]["value"][1]) >= 1
        release.touch()  # the job ends; the controller drains the queue and exits 0
        _, err = controller.communicate(timeout=60)
        assert controller.returncode == 0, err
        assert "serving metrics on http://127.0.0.1:" in err
    finally:
        release.touch()
        if controller.poll() is None:
            controller.send_signal(signal.SIGINT)
            controller.communicate(timeout=30)
        _service("prom-down.sh", env)
