"""Trace readers on tiny inline samples, and on ../shared when it is there."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from broker.sim.model import TracePlace
from broker.sim.traces.jobs import read_jobs
from broker.sim.traces.spotjson import read_availability, read_spot
from tests.conftest import shared_dir


def test_cant_be_late_json_counts_and_prices(tmp_path):
    path = tmp_path / "us-east-1a_v100_1.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 180}, "data": [1, 0, 1],
                                "prices": [0.9, 0.9, 1.1]}))  # fmt: skip
    place, availability = read_availability(path)
    assert place == TracePlace("aws", "us-east-1a", "V100")
    assert availability.step_hours == pytest.approx(0.05)
    assert availability.counts == (1, 0, 1) and availability.prices == (0.9, 0.9, 1.1)
    assert availability.changes() == pytest.approx([0.05, 0.1])


def test_skynomad_preempted_convention_is_inverted(tmp_path):
    path = tmp_path / "us-central1-a_h100_16.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0, 0]}))
    place, availability = read_availability(path, preempted=True)
    assert place == TracePlace("gcp", "us-central1-a", "H100")
    assert availability.counts == (0, 1, 1)


def test_philly_job_list(tmp_path):
    path = tmp_path / "philly.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("timestamp,duration,num_gpus,gpu_time,cluster\n"
                     "2017-10-09 07:00:00,7200.0,2,14400.0,vc1\n"
                     "2017-10-09 06:00:00,3600.0,1,3600.0,vc2\n")  # fmt: skip
    jobs = read_jobs(path, gpu="V100").jobs
    assert [(j.submit_hours, j.gpus, j.hours, j.team) for j in jobs] == [
        (0.0, 1, 1.0, "vc2"),
        (1.0, 2, 2.0, "vc1"),
    ]


def test_shared_traces_read():
    traces = shared_dir() / "traces"
    if not (traces / "cant-be-late-spot").is_dir():
        pytest.skip(f"../shared traces not found at {traces} (set BROKER_SHARED_DIR)")
    spot = read_spot([traces / "cant-be-late-spot/availability/1-node/aws-02-15-2023"])
    assert len(spot.places) == 9
    assert all(len(a.counts) == 20158 for a in spot.places.values())
    jobs = read_jobs(traces / "philly/philly_jobs.csv.gz")
    assert len(jobs.jobs) == 82247


@pytest.mark.parametrize(
    "name, place",
    [
        ("us-east-1a_v100_1.json", ("aws", "us-east-1a", "V100")),
        ("asia-northeast1-a_a100_40gb_8.json", ("gcp", "asia-northeast1-a", "A100")),
        ("us-central1-a_c3-88.json", ("gcp", "us-central1-a", "C3-88")),  # no count
    ],
)
def test_trace_file_names_give_the_place(name, place):
    from broker.sim.traces.spotjson import place_of

    found = place_of(Path(name))
    assert (found.cloud, found.location, found.kind) == place


def test_a_file_name_without_zone_and_kind_is_refused():
    from broker.sim.traces.spotjson import place_of

    with pytest.raises(ValueError, match="expected <zone>_<gpu>"):
        place_of(Path("trace.json"))
