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
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.cli.runner import run_cli
from tests.conftest import _free_ports, _service
from tests.services import need_programs
from tests.waiting import wait_until

pytestmark = pytest.mark.prometheus
REPO = Path(__file__).resolve().parents[2]


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


def answer(base: str, promql: str) -> dict:
    """Prometheus' answer to an instant query ({"status": "error", ...} for bad PromQL)."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 400: the query does not parse
        return json.loads(exc.read())
    except OSError:
        return {"status": "unreachable"}


def query(base: str, promql: str) -> list[dict]:
    found = answer(base, promql)
    return found["data"]["result"] if found.get("status") == "success" else []


def dashboard_queries() -> list[str]:
    """The PromQL of docs/examples/grafana-dashboard.json, its variables filled in."""
    board = json.loads((REPO / "docs" / "examples" / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    return [e.replace("$role", ".*").replace("$__rate_interval", "1m") for e in exprs]


def value_is(base: str, promql: str, wanted: float) -> bool:
    found = query(base, promql)
    return len(found) == 1 and float(found[0]["value"][1]) == wanted


def test_prometheus_scrapes_a_running_controller(capsys, tmp_path, services_dir):
    need_programs("prometheus", install="apt-get install --no-install-recommends prometheus")
    state, release = tmp_path / "state.db", tmp_path / "release"
    manifest = tmp_path / "held.yaml"
    manifest.write_text(job(release))
    assert run_cli(capsys, "submit", str(manifest), "--state", str(state)).code == 0
    metrics_port = _free_ports(2)
    prom_port = metrics_port + 1
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
        # The example dashboard's queries are PromQL this Prometheus accepts.
        bad = {e: a for e in dashboard_queries() if (a := answer(base, e))["status"] != "success"}
        assert not bad, bad
        assert query(base, 'sum by (team) (broker_jobs{state=~"running"})')[0]["metric"] == {
            "team": "platform"
        }
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
