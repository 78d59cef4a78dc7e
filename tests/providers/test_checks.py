"""`check_clouds`: parallel, bounded, and never crashing on a misbehaving check."""

from __future__ import annotations

import threading
import time

import pytest

from providers import checks
from providers.cloud import CheckResult


@pytest.fixture
def released():
    """An event the hanging check waits on; set at teardown so its thread ends."""
    event = threading.Event()
    yield event
    event.set()


def test_checks_run_in_parallel_and_a_hung_one_is_given_up(monkeypatch, released):
    def hangs(timeout: float) -> CheckResult:
        released.wait(30)
        return CheckResult("aws", True, "ok")

    def fails(timeout: float) -> CheckResult:
        raise RuntimeError("boom with token=abcdef123456")

    def works(timeout: float) -> CheckResult:
        return CheckResult("azure", True, "ok", "subscription 1234")

    found = {"aws": hangs, "gcp": fails, "azure": works}
    monkeypatch.setattr(checks, "check_function", found.__getitem__)
    start = time.monotonic()
    results = checks.check_clouds(("aws", "gcp", "azure"), timeout=0.3)
    assert time.monotonic() - start < 5
    by_cloud = {r.cloud: r for r in results}
    assert [r.cloud for r in results] == ["aws", "gcp", "azure"]
    assert not by_cloud["aws"].usable and "no answer within 0.3 s" in by_cloud["aws"].reason
    assert not by_cloud["gcp"].usable and "RuntimeError" in by_cloud["gcp"].reason
    assert "abcdef123456" not in by_cloud["gcp"].reason
    assert by_cloud["azure"].usable and by_cloud["azure"].detail == "subscription 1234"


def test_a_missing_adapter_says_which_extra_to_install():
    result = checks.check_function("no-such-cloud")
    assert isinstance(result, CheckResult) and not result.usable
    assert "pip install 'broker[no-such-cloud]'" in result.reason
