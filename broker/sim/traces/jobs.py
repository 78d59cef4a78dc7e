"""Job lists: Philly (Sia's processed list), Gavel's Philly-derived per-VC traces with its
throughput table, and our own CSV. `read_jobs` also dispatches to the Alibaba PAI and
Helios readers in clusters.py.

- Philly `philly_jobs.csv(.gz)`: timestamp, duration (s), num_gpus, gpu_time, cluster.
  Submit hours count from the first timestamp; the GPU type is not in the trace (Philly
  ran K80/P100/M40-era GPUs); `gpu` maps every job onto one catalog GPU, at its duration.
- Gavel `philly_vc_traces.csv.gz`: job_type, total_steps, arrival_time_s, scale_factor;
  duration on GPU g = total_steps / steps_per_sec(g, job_type, scale_factor) from
  `simulation_throughputs_isolated.csv` (worker types k80, p100, v100).
- Ours: name, team, submit_hours, gpu, gpus, hours, deadline_hours (optional columns:
  checkpoint_minutes, checkpoint_gb).
Deadlines: Philly and Gavel have none; `deadline_factor` gives every job one of
factor x its duration (None: no deadlines).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from broker.sim.model import JobList, SimJob
from pricing.userio.reading import csv_rows, read_text_maybe_gzip


def _rows(path: Path) -> list[dict[str, str]]:
    return csv_rows(path, "trace")[1]


def read_philly(
    path: Path, *, gpu: str = "V100", limit: int | None = None, deadline_factor: float | None = None
) -> JobList:
    rows = _rows(Path(path))
    stamps = [datetime.fromisoformat(r["timestamp"]) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: (stamps[i], i))
    if limit is not None:
        order = order[:limit]
    start = stamps[order[0]] if order else None
    jobs = []
    for i in order:
        hours = max(float(rows[i]["duration"]), 1.0) / 3600
        jobs.append(
            SimJob(
                name=f"philly-{i}",
                team=rows[i]["cluster"] or "philly",
                submit_hours=(stamps[i] - start).total_seconds() / 3600,
                gpu=gpu,
                gpus=max(1, int(float(rows[i]["num_gpus"]))),
                hours=hours,
                deadline_hours=hours * deadline_factor if deadline_factor else None,
            )
        )
    return JobList(jobs, str(path), ("Philly has no GPU type: every job mapped onto " + gpu,))


def read_gavel(
    trace: Path,
    throughputs: Path,
    *,
    seed: int = 0,
    worker: str = "v100",
    gpu: str = "V100",
    limit: int | None = None,
    deadline_factor: float | None = None,
) -> JobList:
    speed = {
        (r["job_type"], int(float(r["scale_factor"]))): float(r["steps_per_sec"])
        for r in _rows(Path(throughputs))
        if r["worker_type"] == worker
    }
    rows = [r for r in _rows(Path(trace)) if int(r["seed"]) == seed]
    rows.sort(key=lambda r: (float(r["arrival_time_s"]), r["vc"], r["job_type"]))
    jobs, skipped = [], 0
    for i, r in enumerate(rows[:limit] if limit else rows):
        scale = int(float(r["scale_factor"]))
        rate = speed.get((r["job_type"], scale))
        if not rate:
            skipped += 1
            continue
        hours = float(r["total_steps"]) / rate / 3600
        jobs.append(
            SimJob(
                name=f"gavel-{i}",
                team=r["vc"],
                submit_hours=float(r["arrival_time_s"]) / 3600,
                gpu=gpu,
                gpus=scale,
                hours=max(hours, 1 / 60),
                deadline_hours=hours * deadline_factor if deadline_factor else None,
            )
        )
    return JobList(jobs, str(trace), (f"{skipped} jobs without a {worker} throughput skipped",))


def read_jobs_csv(path: Path) -> JobList:
    jobs = []
    for r in _rows(Path(path)):
        deadline = r.get("deadline_hours") or ""
        jobs.append(
            SimJob(
                name=r["name"],
                team=r.get("team") or "default",
                submit_hours=float(r["submit_hours"]),
                gpu=r["gpu"],
                gpus=int(r.get("gpus") or 1),
                hours=float(r["hours"]),
                deadline_hours=float(deadline) if deadline else None,
                checkpoint_minutes=float(r.get("checkpoint_minutes") or 30),
                checkpoint_gb=float(r.get("checkpoint_gb") or 0),
            )
        )
    return JobList(jobs, str(path))


def read_jobs(path: Path, **options) -> JobList:
    """Detect the format from the header; `options` go to the Philly and Alibaba readers
    (gpu, limit, deadline_factor). Every error names the file (a ValueError)."""
    try:
        return _read_jobs(Path(path), **options)
    except KeyError as exc:
        raise ValueError(f"{path}: no column {exc} in a row") from None
    except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(str(path)) else f"{path}: {text}") from None


def _read_jobs(path: Path, **options) -> JobList:
    from broker.sim.traces import clusters

    header = read_text_maybe_gzip(path, "trace").partition("\n")[0]
    fields = set(header.strip().split(","))
    if header.startswith("timestamp,duration"):
        return read_philly(Path(path), **options)
    if "submit_hours" in header:
        return read_jobs_csv(Path(path))
    if {"num_gpu", "gpu_milli"} <= fields:
        return clusters.read_pai_pods(Path(path), **options)
    if set(clusters.SIA_COLUMNS) <= fields:
        return clusters.read_sia_workload(Path(path))
    if header.startswith("date,") and "total" in fields:
        raise ValueError(
            f"{path}: a per-VC GPU quota table (Helios Venus), not a job list; "
            "read it with broker.sim.traces.clusters.venus_vc_gpus for pool sizes"
        )
    raise ValueError(f"{path}: not a Philly, Alibaba pod or Sia job list nor a simulator jobs CSV")
