"""The metrics' pure parts: histogram buckets (Prometheus `le`: at or below a bound) and
the error class a failed launch's recorded reason names."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.controller.isolation import error_reason
from broker.launch_errors import error_class_of, error_classes, launch_failure_reason
from broker.metrics.figures import WAIT_BUCKETS, histogram
from providers import errors

seconds = st.floats(min_value=0, max_value=200_000, allow_nan=False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(seconds, st.sampled_from(WAIT_BUCKETS)), max_size=60))
def test_each_bucket_counts_the_values_at_or_below_its_bound(values):
    hist = histogram(values, WAIT_BUCKETS)
    rows = hist.cumulative()
    assert [le for le, _ in rows] == [repr(b) for b in WAIT_BUCKETS] + ["+Inf"]
    for (_, count), bound in zip(rows, WAIT_BUCKETS, strict=False):
        assert count == sum(1 for v in values if v <= bound)
    assert rows[-1][1] == hist.count == len(values)
    assert hist.total == sum(values)


def test_a_refused_launch_reads_back_as_its_error_class():
    classes = error_classes()
    assert {"ProviderError", "InsufficientCapacity", "QuotaExceeded", "RateLimited",
            "CredentialsError", "NotFound", "InvalidRequest"} <= classes  # fmt: skip
    for cls in (errors.InsufficientCapacity, errors.QuotaExceeded, errors.ProviderError):
        reason = launch_failure_reason(cls("aws", "InsufficientCapacity: said by the cloud"))
        assert error_class_of(reason, classes) == cls.__name__
    broken = error_reason("launching", RuntimeError("boom"))
    assert error_class_of(broken, classes) == "BrokerError"
    for other in ("cannot launch: no command", "instance vanished", "SomeCloudCode: x", ""):
        assert error_class_of(other, classes) == "other"


def test_a_scrape_reads_one_committed_state_and_never_holds_a_writer(tmp_path):
    from broker.clock import SystemClock
    from broker.manifest.load import load_manifests
    from broker.state import StateStore
    from broker.submit import submit_manifests

    demo = Path(__file__).resolve().parents[2] / "examples" / "demo"
    path = tmp_path / "state.db"
    with StateStore.open(path, SystemClock(), busy_timeout=0.5) as writer:
        submit_manifests(writer, load_manifests([demo / "eval-eu.yaml"]).manifests)
        with StateStore.open(path, SystemClock(), read_only=True) as reader:
            with reader.snapshot():
                before = reader.job_counts()
                # A commit in the middle of a scrape: done at once (no lock waited for,
                # the busy timeout is short), and not seen by the rest of that scrape.
                submit_manifests(writer, load_manifests([demo / "onprem.yaml"]).manifests)
                assert reader.job_counts() == before == {("nlp", "default", "queued"): 1}
            assert sum(reader.job_counts().values()) == 2  # the next scrape sees it
