"""What `broker.sim.refusal` leans on, and its answer against the passes it skips.

The refusal shortcut skips a queued job's passes while the planner, asked with every
place at the lowest rate it has in an interval and the most hours left, still has no
placement. That is only exact if the planner never places with a higher interruption
rate or fewer hours what it refuses with a lower rate and more hours; this file pins
that on the real planner, and that the learned rates between two moments lie between
their values at the two.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.learned_rates import DECAY_HOURS, Evidence, SpotRun, evidence, posterior_rate
from broker.manifest.load import parse_manifest_text
from broker.planner.plan import plan_many
from broker.sim.engine import ORIGIN
from broker.sim.manifests import manifest_text
from broker.sim.model import SimJob
from broker.sim.synthetic import ZONES, synthetic_offers
from pricing.query import OfferIndex


def _index(rate: float) -> OfferIndex:
    zone = (*ZONES[0][:7], rate)
    return OfferIndex(synthetic_offers((zone,)))


def _spec(hours: float, deadline: float, spot: str, checkpoint: float | None):
    job = SimJob("refused", "nlp", 0.0, "V100", 1, hours, deadline, checkpoint_minutes=checkpoint)
    (manifest,) = parse_manifest_text(manifest_text(job, spot))
    return manifest.spec


def _places(spec, rate: float) -> bool:
    (decision,) = plan_many([spec], _index(rate), ORIGIN)
    return bool(decision.placements)


@settings(max_examples=60, deadline=None)
@given(
    hours=st.floats(0.5, 60.0),
    slack=st.floats(1.0, 2.0),
    more=st.floats(0.0, 1.0),
    low=st.floats(0.0, 3.0),
    factor=st.floats(1.0, 10.0),
    spot=st.sampled_from(["only", "prefer"]),
    checkpoint=st.sampled_from([None, 5.0, 30.0]),
)
def test_the_planner_places_with_a_lower_rate_and_more_hours_what_it_places_otherwise(
    hours, slack, more, low, factor, spot, checkpoint
):
    tight = _spec(hours, hours * slack, spot, checkpoint)
    loose = _spec(hours, hours * slack * (1 + more), spot, checkpoint)
    high = low * factor
    if _places(tight, high):
        assert _places(loose, low)


def test_a_job_the_rate_refuses_is_placed_once_the_rate_is_low():
    """The property above is not vacuous: the rate alone turns the answer."""
    spec = _spec(48.0, 52.0, "only", 10.0)
    assert _places(spec, 0.01)
    assert not _places(spec, 2.0)


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(
        st.tuples(st.floats(0.0, 90.0), st.floats(0.01, 30.0), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    prior=st.floats(0.0, 1.0),
    gap=st.floats(0.1, 48.0),
    inside=st.floats(0.0, 1.0),
)
def test_a_learned_rate_between_two_moments_lies_between_its_values_there(runs, prior, gap, inside):
    """No run alive and none leaving the window: the posterior is monotone in time."""
    key = ("aws", "us-east-1", "p3.2xlarge")

    def rate(later: float) -> float:
        moved = [SpotRun(key, ended + later, hours, hit) for ended, hours, hit in runs]
        seen = evidence(moved).get(key, Evidence())
        return posterior_rate(prior, seen)

    if any(ended + gap > 4 * DECAY_HOURS for ended, _, _ in runs):
        return  # a run leaves the window in between: the shortcut claims nothing then
    first, last, between = rate(0.0), rate(gap), rate(gap * inside)
    low, high = min(first, last), max(first, last)
    assert low - 1e-12 * max(1.0, high) <= between <= high + 1e-12 * max(1.0, high)
    assert math.isfinite(between)


@settings(max_examples=200, deadline=None)
@given(boundary=st.integers(0, 5000), out=st.none() | st.integers(1, 6000))
def test_the_last_refused_pass_is_where_a_monotone_refusal_ends(boundary, out):
    """However it searches (the pass before the next cool-down's end first, or doubling
    without one), the proof ends at the last pass the refusal holds, below `out`, in a
    few questions."""
    from broker.sim.refusal import last_refused

    asked = []

    def refused(k: int) -> bool:
        asked.append(k)
        return k <= boundary and (out is None or k < out)

    expected = boundary if out is None else min(boundary, out - 1)
    assert last_refused(refused, math.inf if out is None else out) == expected
    assert len(asked) <= 2 * math.ceil(math.log2(6001)) + 2
