"""`pricing.sources.fetch`: bounded retries over real HTTP on 127.0.0.1."""

from __future__ import annotations

import socket
from decimal import Decimal

import pytest

from pricing.sources.fetch import Http, NotFound, SourceError
from tests.fakes.prices import GCP_KEY, PriceFake, serving, world


@pytest.fixture
def fake():
    with serving(world()) as running:
        yield running


def azure(fake: PriceFake, page: int = 0) -> str:
    return f"{fake.url}/azure/api/retail/prices?$skip={page * 100}"


def test_a_throttled_page_is_retried_after_the_servers_retry_after(fake):
    fake.throttle["azure:0"] = 2
    pauses: list[float] = []
    http = Http(sleep=pauses.append)
    page = http.get_json(azure(fake))
    assert fake.calls == ["azure:0"] * 3
    assert pauses == [1.0, 1.0]  # the fake sends Retry-After: 1
    assert page["Items"][0]["retailPrice"] == Decimal("98.32")  # exact, not a float


def test_backoff_grows_is_never_zero_and_is_capped():
    http = Http(sleep=lambda s: None, base_delay=0.5, max_delay=3.0)
    for attempt in range(6):
        http.pause(attempt)
    for attempt, delay in enumerate(http.pauses):
        ceiling = min(3.0, 0.5 * 2**attempt)
        assert ceiling / 2 <= delay <= ceiling


def test_throttling_gives_up_after_the_last_try(fake):
    fake.throttle["azure:0"] = 99
    http = Http(sleep=lambda s: None, attempts=3)
    with pytest.raises(SourceError, match=r"throttled \(HTTP 429\); gave up after 3 tries"):
        http.get_json(azure(fake))
    assert fake.calls == ["azure:0"] * 3


def test_a_malformed_page_is_reported_not_swallowed(fake):
    fake.malformed.add("azure:1")
    http = Http(sleep=lambda s: None)
    with pytest.raises(SourceError, match="malformed page, not JSON") as failure:
        http.get_json(azure(fake, 1))
    assert "/azure/api/retail/prices" in str(failure.value)
    assert fake.calls == ["azure:1"]  # not retried: a broken page stays broken


def test_refusals_are_not_retried_and_say_why(fake):
    http = Http(sleep=lambda s: pytest.fail("a 403 must not be retried"))
    with pytest.raises(SourceError, match="HTTP 403.*permission denied.*API key not valid"):
        http.get_json(f"{fake.url}/gcp/v1/services/6F81-5844-456A/skus?currencyCode=USD")
    with pytest.raises(NotFound, match="HTTP 404"):
        http.get(f"{fake.url}/aws/offers/v1.0/aws/AmazonEC2/current/xx-nowhere-1/index.csv")


def test_a_key_in_a_header_never_reaches_the_message(fake):
    http = Http(sleep=lambda s: None)
    with pytest.raises(SourceError) as failure:
        http.get_json(f"{fake.url}/gcp/v1/services/6F81-5844-456A/skus", {"X-Goog-Api-Key": "x"})
    assert GCP_KEY not in str(failure.value) and "x-goog" not in str(failure.value).lower()


def test_an_endpoint_that_does_not_answer_fails_after_bounded_tries():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pauses: list[float] = []
    http = Http(sleep=pauses.append, attempts=2, timeout=2)
    with pytest.raises(SourceError, match="unreachable.*gave up after 2 tries"):
        http.get(f"http://127.0.0.1:{port}/prices")
    assert len(pauses) == 1


def test_lines_stream_a_bulk_file(fake):
    lines = list(
        Http().lines(f"{fake.url}/aws/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv")
    )
    assert lines[0] == '"FormatVersion","v1.0"\n'
    assert lines[5].startswith('"SKU","OfferTermCode"')
