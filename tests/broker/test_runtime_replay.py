"""The runtime estimator replayed over job traces (broker.sim.traces.runtime_replay, the
figures of bench/runtimes.py): each job predicted only from runs ended before it was
submitted; on a slice of the Gavel and Philly traces in ../shared when present."""

from __future__ import annotations

import pytest

from broker.sim.traces.runtime_replay import Submission, errors, replay
from tests.conftest import shared_dir


def job(name: str, submit: float, hours: float, team: str = "vc1", gpus: int = 1) -> Submission:
    return Submission(team, name, gpus, submit, hours)


def test_a_prediction_reads_only_runs_ended_before_the_submission():
    jobs = [
        job("a", 0.0, 2.0),  # ends at 2
        job("a", 1.0, 4.0),  # submitted while the first still runs: no history yet
        job("a", 3.0, 9.0),  # the first has ended: its 2 h
        job("b", 3.5, 1.0),  # another name, same GPUs: similar (the first's 2 h)
        job("a", 6.0, 1.0),  # both of the first two ended: (2 + 4) / 2
        job("a", 7.0, 1.0, team="vc2"),  # another team: nothing
    ]
    got = [(p.predicted, p.basis) for p in replay(jobs)]
    assert got == [
        (1.0, "default"),
        (1.0, "default"),
        (2.0, "same name"),
        (2.0, "similar"),
        (3.0, "same name"),
        (1.0, "default"),
    ]


def test_errors_are_relative_to_the_actual_runtime():
    jobs = [job("a", 0.0, 2.0), job("a", 5.0, 2.0), job("a", 10.0, 4.0)]
    figures = errors(replay(jobs))
    # predictions 1 (default), 2, 2 against 2, 2, 4: errors 0.5, 0, 0.5; 1 h: 0.5, 0.5,
    # 0.75 (quantiles interpolate linearly: the p90 of three is 80% of the way to the top)
    assert figures["all"]["estimator"] == {"median": 0.5, "p90": 0.5, "within_2x": 1.0}
    # within a factor of 2: 1 h of 2 h is, 1 h of 4 h is not
    assert figures["all"]["always_1h"] == {"median": 0.5, "p90": 0.7, "within_2x": 0.6667}
    assert figures["same name"]["jobs"] == 2 and figures["default"]["jobs"] == 1


@pytest.mark.parametrize("trace", ["gavel", "philly"])
def test_on_a_slice_of_a_real_trace_the_estimator_beats_always_one_hour(trace):
    from broker.sim.traces import runtime_replay as rr

    traces = shared_dir() / "traces"
    if not (traces / trace).is_dir():
        pytest.skip(f"../shared traces not found at {traces} (set BROKER_SHARED_DIR)")
    if trace == "gavel":
        jobs = rr.gavel(
            traces / "gavel/philly_vc_traces.csv.gz",
            traces / "gavel/simulation_throughputs_isolated.csv",
            limit=3000,
        )
    else:
        jobs = rr.philly(traces / "philly/philly_jobs.csv.gz", limit=3000)
    predictions = replay(jobs)
    assert len(predictions) == len(jobs) == 3000
    learned = [p for p in predictions if p.basis != "default"]
    assert len(learned) > len(predictions) / 2  # most jobs had history in their team
    figures = errors(predictions)
    assert figures["all"]["estimator"]["median"] < figures["all"]["always_1h"]["median"]
    for p in predictions:  # a prediction is the mean of runs of the trace, or 1 h
        assert p.predicted > 0
