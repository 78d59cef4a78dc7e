"""Replaying a job trace through the runtime estimator (`broker.learned_runtime.learn`):
each submission, in time order, is predicted from the runs of its team that had ended by
then, as the broker would predict a manifest with `estimate_hours: auto`.

- Philly (`philly_jobs.csv.gz`, Sia's list): the team is the virtual cluster; the trace
  has no job or user name, so every prediction comes from similar jobs (the same
  cluster and GPU count) or the default.
- Gavel (`philly_vc_traces.csv.gz` with its throughput table): the team is the virtual
  cluster, the job name its job type (model and batch size), so a prediction comes
  from the same job type in the cluster, else from the same GPU count, else the default.

A run counts as ended at submission + duration (the traces do not say when each job
started). Neither trace carries a user's own estimate. `errors` gives the median and
90th percentile of the relative error |predicted - actual| / actual and the share of
predictions within a factor of 2, against always predicting 1 h (what a manifest
without an estimate got before).
"""

from __future__ import annotations

import csv
import heapq
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.learned_runtime import K, PastRun, learn
from broker.spec import DEFAULT_HOURS, NO_HISTORY, GpuAsk, JobSpec, Requirements, RuntimeEstimate

GPU = "V100"  # the traces' jobs are all read onto one GPU model


@dataclass(frozen=True, slots=True)
class Submission:
    """One job of a trace: who, what (name "" when the trace has none), how many GPUs,
    when (hours from the trace's start) and how long it ran (hours)."""

    team: str
    name: str
    gpus: int
    submit_hours: float
    hours: float


@dataclass(frozen=True, slots=True)
class Prediction:
    """One submission's actual hours, the estimator's prediction and where it came from
    ("same name", "similar" or "default")."""

    actual: float
    predicted: float
    basis: str


def philly(path: Path, limit: int | None = None) -> list[Submission]:
    from broker.sim.traces.jobs import read_philly

    jobs = read_philly(path, gpu=GPU, limit=limit).jobs
    return [Submission(j.team, "", j.gpus, j.submit_hours, j.hours) for j in jobs]


def gavel(
    trace: Path, throughputs: Path, seed: int = 0, limit: int | None = None
) -> list[Submission]:
    """The trace's jobs of one seed with their duration on a V100 (jobs of a type and
    GPU count without a V100 throughput are left out, as `read_gavel` does)."""
    speed = {
        (r["job_type"], int(float(r["scale_factor"]))): float(r["steps_per_sec"])
        for r in _rows(throughputs)
        if r["worker_type"] == "v100"
    }
    rows = [r for r in _rows(trace) if int(r["seed"]) == seed]
    rows.sort(key=lambda r: (float(r["arrival_time_s"]), r["vc"], r["job_type"]))
    out = []
    for r in rows:
        scale = int(float(r["scale_factor"]))
        rate = speed.get((r["job_type"], scale))
        if rate:
            hours = max(float(r["total_steps"]) / rate / 3600, 1 / 60)
            out.append(
                Submission(r["vc"], r["job_type"], scale, float(r["arrival_time_s"]) / 3600, hours)
            )
    return out[:limit] if limit else out


def _rows(path: Path) -> list[dict[str, str]]:
    from pricing.userio.reading import read_text_maybe_gzip

    with io.StringIO(read_text_maybe_gzip(path, "trace"), newline="") as handle:
        return list(csv.DictReader(handle))


def replay(submissions: Iterable[Submission], k: int = K) -> list[Prediction]:
    """Each submission predicted, in time order, from the runs of its team ended by then."""
    order = sorted(submissions, key=lambda s: s.submit_hours)
    running: list[tuple[float, int, Submission]] = []  # (end, order, job): not ended yet
    by_name: dict[tuple[str, str], list[PastRun]] = {}  # oldest first
    by_gpus: dict[tuple[str, int], list[PastRun]] = {}
    out = []
    for seq, job in enumerate(order):
        while running and running[0][0] <= job.submit_hours:
            _, _, done = heapq.heappop(running)
            run = PastRun(f"{done.team}/{done.name}", done.hours, GPU, float(done.gpus))
            if done.name:
                by_name.setdefault((done.team, done.name), []).append(run)
            by_gpus.setdefault((done.team, done.gpus), []).append(run)
        same = by_name.get((job.team, job.name), []) if job.name else []
        like = by_gpus.get((job.team, job.gpus), [])
        estimate = learn(_spec(job), same[::-1][:k], like[::-1][:k], k)
        basis = "same name" if same else "similar" if like else "default"
        out.append(Prediction(job.hours, estimate.estimate_hours, basis))
        heapq.heappush(running, (job.submit_hours + job.hours, seq, job))
    return out


def _spec(job: Submission) -> JobSpec:
    """The spec of an `auto` manifest for the job, as the estimator reads it."""
    return JobSpec(
        name=job.name,
        team=job.team,
        requirements=Requirements(accelerators=(GpuAsk(GPU, job.gpus),)),
        runtime=RuntimeEstimate(auto=True, source=NO_HISTORY),
    )


def errors(predictions: Sequence[Prediction]) -> dict[str, object]:
    """Median and p90 relative error of the estimator and of always 1 h, over every
    prediction and per basis, with how many predictions each figure is over."""
    import numpy as np

    def figures(chosen: Sequence[Prediction]) -> dict[str, object]:
        actual = np.array([p.actual for p in chosen])
        predicted = np.array([p.predicted for p in chosen])
        fixed = np.full(len(chosen), DEFAULT_HOURS)
        return {
            "jobs": len(chosen),
            "estimator": _figures(predicted, actual),
            "always_1h": _figures(fixed, actual),
        }

    result: dict[str, object] = {"all": figures(predictions)}
    for basis in ("same name", "similar", "default"):
        chosen = [p for p in predictions if p.basis == basis]
        if chosen:
            result[basis] = figures(chosen)
    return result


def _figures(predicted, actual) -> dict[str, float]:
    """Median and p90 relative error, and the share of predictions within a factor of 2
    of the actual (relative error punishes over-predicting a short job without bound
    and under-predicting by at most 1; the factor is the same both ways)."""
    import numpy as np

    median, p90 = np.quantile(np.abs(predicted - actual) / actual, [0.5, 0.9])
    within = np.maximum(predicted / actual, actual / predicted) <= 2
    return {
        "median": round(float(median), 4),
        "p90": round(float(p90), 4),
        "within_2x": round(float(within.mean()), 4),
    }
