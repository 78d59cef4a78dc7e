"""`broker metrics serve` and `broker run --metrics-port` through the real entry point:
bad ports are one line and exit 2 (nothing started), and the standalone server serves,
from the state alone, the figures of what a controller ran."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import pytest

from broker.clock import SystemClock
from broker.state import StateStore
from broker.state.model import total
from tests.cli.runner import run_cli
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo"


@contextmanager
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 some other program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_line_error(result, *words: str) -> None:
    assert result.code == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("broker: error: "), result.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("port", ["0", "65536", "-1"])
def test_a_port_out_of_range_is_one_line_and_exit_2(capsys, tmp_path, port):
    state = str(tmp_path / "state.db")
    one_line_error(run_cli(capsys, "metrics", "serve", "--port", port, "--state", state), port)
    run_cli(capsys, "submit", str(DEMO / "eval-eu.yaml"), "--state", state)
    ran = run_cli(capsys, "run", "--once", "--metrics-port", port, "--state", state)
    one_line_error(ran, port)
    with StateStore.open(state, SystemClock()) as store:
        assert store.attempts() == []  # nothing was launched


def test_a_port_in_use_is_one_line_and_exit_2_and_nothing_runs(capsys, tmp_path):
    state = str(tmp_path / "state.db")
    run_cli(capsys, "submit", str(DEMO / "eval-eu.yaml"), "--state", state)
    with busy_port() as port:
        served = run_cli(capsys, "metrics", "serve", "--port", str(port), "--state", state)
        one_line_error(served, str(port), "in use")
        ran = run_cli(capsys, "run", "--once", "--metrics-port", str(port), "--state", state)
        one_line_error(ran, str(port), "in use")
    with StateStore.open(state, SystemClock()) as store:
        assert store.attempts() == []


def test_broker_metrics_port_from_the_environment(capsys, tmp_path, monkeypatch):
    """BROKER_METRICS_PORT is `broker run --metrics-port`: a port in use named by it is the
    same one line and exit 2, nothing launched; the flag wins over it."""
    state = str(tmp_path / "state.db")
    run_cli(capsys, "submit", str(DEMO / "eval-eu.yaml"), "--state", state)
    with busy_port() as port:
        monkeypatch.setenv("BROKER_METRICS_PORT", str(port))
        one_line_error(run_cli(capsys, "run", "--once", "--state", state), str(port), "in use")
        with StateStore.open(state, SystemClock()) as store:
            assert store.attempts() == []
        monkeypatch.setenv("BROKER_METRICS_PORT", "not-a-port")
        bad = run_cli(capsys, "run", "--once", "--state", state)
        assert bad.code == 2 and "Traceback" not in bad.stderr
        free = free_port()
        ran = run_cli(capsys, "run", "--once", "--metrics-port", str(free), "--state", state)
        assert ran.code == 0, ran.stderr
        assert f"serving metrics on http://127.0.0.1:{free}/metrics" in ran.stderr


def test_a_state_file_that_is_not_one_is_one_line_and_exit_2(capsys, tmp_path):
    junk = tmp_path / "state.db"
    junk.write_text("not a database\n" * 20)
    for state in (junk, tmp_path):  # a text file, a directory
        served = run_cli(capsys, "metrics", "serve", "--port", "1", "--state", str(state))
        one_line_error(served, str(state))
    assert junk.read_text() == "not a database\n" * 20


def test_the_standalone_server_serves_what_the_controller_ran(capsys, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    state = str(tmp_path / "state.db")
    run_cli(capsys, "submit", str(DEMO / "eval-eu.yaml"), "--state", state)
    assert run_cli(capsys, "run", "--poll", "0.05", "--state", state).code == 0
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "broker", "metrics", "serve", "--port", str(port), "--state", state],
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert wait_until(lambda: _answers(url), timeout=30), server.stderr
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 130 and "Traceback" not in err, err
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    jobs = {k: v for (name, k), v in values.items() if name == "broker_jobs"}
    assert jobs == {(("queue", "default"), ("state", "succeeded"), ("team", "nlp")): 1.0}
    with StateStore.open(state, SystemClock()) as store:
        ledger = store.ledger()
        (attempt,) = store.attempts()
    spent = total(e.amount_usd for e in ledger)
    served_spend = [v for (name, _), v in values.items() if name == "broker_spend_usd_total"]
    assert spent > Decimal(0) and sum(served_spend) == pytest.approx(float(spent))
    assert values[("broker_launches_total", (("cloud", attempt.placed_on.cloud),
                                             ("market", attempt.market)))] == 1  # fmt: skip
    assert not [name for name, _ in values if name.startswith("broker_controller_")]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
