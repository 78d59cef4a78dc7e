"""`pricing.sources.refresh`: merge with the previous catalog, status, atomic writes."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pricing.catalog import read_offer_table, spot_history_path, status_path
from pricing.sources import interruption
from pricing.sources.fetch import Http
from pricing.sources.refresh import refresh
from tests.fakes import aws as aws_fakes
from tests.fakes import prices as fakes
from tests.fakes.offers import write_catalog

moto_server, aws_clients, aws_env = aws_fakes.moto_server, aws_fakes.aws_clients, aws_fakes.aws_env
price_fake = fakes.price_fake
DEC1 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
DEC9 = datetime(2026, 12, 9, 9, 30, tzinfo=UTC)


def run(catalog: Path, now: datetime = DEC1, **options):
    return refresh(catalog, http=Http(sleep=lambda s: None), now=now, **options)


def rows(catalog: Path) -> list[dict]:
    """The catalog's rows, NaN (not known) as None so that rows compare equal."""
    return [
        {k: None if v != v else v for k, v in row.items()}
        for row in read_offer_table(catalog).records()
    ]


def find(catalog: Path, **match) -> list[dict]:
    return [r for r in rows(catalog) if all(r[k] == v for k, v in match.items())]


def test_a_refresh_replaces_what_it_priced_and_keeps_the_rest(price_fake, tmp_path):
    catalog = write_catalog(tmp_path / "offers.csv")
    result = run(catalog)
    states = {o.name: o.state for o in result.outcomes}
    assert states == {
        "aws-price-list": "ok",
        "aws-spot-history": "skipped",  # no AWS credentials
        "azure-retail-prices": "ok",
        "gcp-billing-catalog": "ok",
        "aws-spot-advisor": "ok",
    }
    assert result.written and result.base == str(catalog)
    # GCP priced a2-highgpu-8g and n1-standard-4 + T4: the old rows (2026-11-20) are gone
    gcp = find(catalog, cloud="gcp", instance_type="a2-highgpu-8g", region="us-central1")
    assert [(r["price_on_demand"], r["as_of"], r["source"]) for r in gcp] == [
        (29.38708, "2026-12-01", "gcp-billing-catalog")
    ]
    # AWS on-demand replaced; spot was not read, so the old spot price stays, old as-of
    p4d = find(catalog, cloud="aws", region="us-east-1", instance_type="p4d.24xlarge")
    fresh = [r for r in p4d if r["as_of"] == "2026-12-01"]
    kept = [r for r in p4d if r["as_of"] == "2026-11-20"]
    assert [(r["price_on_demand"], r["price_spot"]) for r in fresh] == [(21.9576, None)]
    assert [(r["price_on_demand"], r["price_spot"]) for r in kept] == [(None, 9.5)]
    # rows no source priced stay whole: another AWS region, a type Azure did not list
    assert find(catalog, region="eu-central-1")[0]["as_of"] == "2026-11-20"
    assert find(catalog, instance_type="Standard_ND96asr_v4")[0]["price_on_demand"] == 27.2
    assert any("eu-central-1: no price file" in n for n in result.outcomes[0].notes)


def test_spot_rows_get_the_advisors_rate_and_say_so(price_fake, tmp_path):
    catalog = write_catalog(tmp_path / "offers.csv")
    run(catalog)
    (kept,) = [r for r in find(catalog, instance_type="p4d.24xlarge", region="us-east-1")
               if r["price_spot"] is not None]  # fmt: skip
    assert kept["spot_interruption_rate"] == pytest.approx(interruption.band_rate(">20%"))
    assert kept["source"] == "test+rate:spot-advisor"
    fresh_on_demand = find(catalog, instance_type="g5.xlarge", region="us-east-1")[0]
    assert fresh_on_demand["spot_interruption_rate"] is None
    assert fresh_on_demand["source"] == "aws-price-list"  # no spot price: no rate


def test_when_the_advisor_fails_its_last_rates_are_kept(price_fake, tmp_path):
    catalog = write_catalog(tmp_path / "offers.csv")
    run(catalog, clouds=("aws",))
    price_fake.malformed.add("advisor")
    result = run(catalog, now=DEC9, clouds=("aws",))
    assert [o.name for o in result.failed] == ["aws-spot-advisor"]
    (kept,) = [r for r in find(catalog, instance_type="p4d.24xlarge", region="us-east-1")
               if r["price_spot"] is not None]  # fmt: skip
    assert kept["spot_interruption_rate"] == pytest.approx(interruption.band_rate(">20%"))
    assert kept["source"] == "test+rate:spot-advisor"


def test_a_failing_source_keeps_its_previous_rows_with_their_older_as_of(price_fake, tmp_path):
    catalog = tmp_path / "offers.csv"
    run(catalog, clouds=("gcp", "azure"))
    before = find(catalog, cloud="gcp")
    assert len([r for r in before if r["as_of"] == "2026-12-01"]) == 72  # read live
    price_fake.malformed.add("gcp:1")
    result = run(catalog, now=DEC9, clouds=("gcp", "azure"))
    (failed,) = result.failed
    assert failed.name == "gcp-billing-catalog" and "malformed page" in failed.reason
    after = find(catalog, cloud="gcp")
    assert after == before  # every GCP row kept as it was, as of Dec 1
    assert {r["as_of"] for r in find(catalog, cloud="azure", source="azure-retail-prices")} == {
        "2026-12-09"
    }
    status = json.loads(status_path(catalog).read_text())["sources"]
    assert status["gcp-billing-catalog"]["state"] == "failed"
    assert status["gcp-billing-catalog"]["last_success"] == DEC1.isoformat()
    assert status["gcp-billing-catalog"]["last_attempt"] == DEC9.isoformat()
    assert status["azure-retail-prices"]["last_success"] == DEC9.isoformat()


def test_the_first_refresh_starts_from_the_bundled_snapshot(price_fake, tmp_path):
    catalog = tmp_path / "offers.csv"
    result = run(catalog, clouds=("azure",))
    assert result.base == "bundled snapshot"
    clouds = {r["cloud"] for r in rows(catalog)}
    assert clouds == {"aws", "gcp", "azure"}  # the other clouds' snapshot rows are kept
    h100 = find(catalog, cloud="azure", region="eastus", instance_type="Standard_ND96isr_H100_v5")
    assert [r["as_of"] for r in h100] == ["2026-12-01"]  # the snapshot's row was replaced


def test_nothing_is_written_when_no_source_succeeds(price_fake, tmp_path):
    catalog = write_catalog(tmp_path / "offers.csv")
    before = catalog.read_bytes()
    price_fake.malformed.update({"azure:0", "gcp:0"})
    result = run(catalog, clouds=("azure", "gcp"))
    assert not result.written and len(result.failed) == 2
    assert catalog.read_bytes() == before
    assert (
        json.loads(status_path(catalog).read_text())["sources"]["azure-retail-prices"][
            "last_success"
        ]
        is None
    )


def test_regions_limit_what_is_replaced(price_fake, tmp_path):
    catalog = write_catalog(tmp_path / "offers.csv")
    run(catalog, clouds=("gcp",), regions=("europe-*",))
    assert find(catalog, region="us-central1", instance_type="a2-highgpu-8g")[0]["as_of"] == (
        "2026-11-20"
    )
    assert {r["as_of"] for r in find(catalog, cloud="gcp", region="europe-west4")} == {"2026-12-01"}


def test_learned_rates_fill_spot_rows_without_an_advisor(price_fake, tmp_path):
    catalog = tmp_path / "offers.csv"
    seen = [interruption.Observation("gcp", "us-central1", "a2-highgpu-8g", 40.0, 2)]
    run(catalog, clouds=("gcp",), observations=seen)
    (row,) = find(catalog, cloud="gcp", region="us-central1", instance_type="a2-highgpu-8g")
    assert row["spot_interruption_rate"] == pytest.approx(0.05)
    assert row["source"] == "gcp-billing-catalog+rate:history"


def test_aws_with_credentials_writes_zone_spot_rows_and_the_history(
    price_fake, aws_env, monkeypatch, tmp_path
):
    monkeypatch.setenv("BROKER_AWS_QUOTAS_ENDPOINT", f"{price_fake.url}/")
    catalog = tmp_path / "offers.csv"
    with fakes.seeded_spot_history(_points()):
        result = run(catalog, clouds=("aws",), regions=("us-east-1",))
    assert {o.name: o.state for o in result.outcomes} == {
        "aws-price-list": "ok",
        "aws-spot-history": "ok",
        "aws-spot-advisor": "ok",
    }
    zone = find(catalog, zone="us-east-1a", instance_type="p4d.24xlarge")
    assert [(r["price_spot"], r["source"]) for r in zone] == [
        (10.0, "aws-spot-history+rate:spot-advisor")
    ]
    # the snapshot's us-east-1 p4d row had both prices: both were replaced
    assert not find(catalog, region="us-east-1", instance_type="p4d.24xlarge", as_of="2025-12-01")
    with spot_history_path(catalog).open() as handle:
        history = list(csv.DictReader(handle))
    assert {(h["zone"], h["latest"], h["changes"]) for h in history} == {
        ("us-east-1a", "10.000000", "1"),
        ("us-east-1a", "0.436100", "0"),
    }


def _points() -> dict:
    return {
        "us-east-1": [
            fakes.spot_point("p4d.24xlarge", "us-east-1a", "8.000000", "2026-11-10T00:00:00Z"),
            fakes.spot_point("p4d.24xlarge", "us-east-1a", "10.000000", "2026-11-20T00:00:00Z"),
            fakes.spot_point("g5.xlarge", "us-east-1a", "0.436100", "2026-11-30T00:00:00Z"),
        ]
    }


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pricing.catalog import read_offer_table, write_offers_csv
    from pricing.table import concat
    small = read_offer_table(Path(sys.argv[2]))
    big = concat([small] * 400)
    target = Path(sys.argv[1])
    print("ready", flush=True)
    while True:
        write_offers_csv(big, target)
        write_offers_csv(small, target)
    """
)


def test_a_writer_killed_with_sigkill_never_leaves_half_a_catalog(tmp_path):
    """Kill -9 a process that rewrites the catalog in a loop (a big and a small version,
    ~0.1 s each): whenever it dies, the file is one whole version or the other."""
    small = write_catalog(tmp_path / "small.csv")
    target = tmp_path / "offers.csv"
    target.write_bytes(small.read_bytes())
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    for kill_after in (0.05, 0.3):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target), str(small)],
            stdout=subprocess.PIPE,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert writer.stdout.readline() == b"ready\n"
        try:
            writer.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            pass
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=10)
        assert writer.returncode == -signal.SIGKILL
        count = len(read_offer_table(target))
        assert count in (8, 8 * 400)
