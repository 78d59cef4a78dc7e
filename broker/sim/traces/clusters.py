"""Job lists from GPU-cluster traces: Alibaba PAI gpu-v2023 pod lists and what of Helios
is usable (docs/simulate.md, "Trace formats").

- Alibaba `openb_pod_list_*.csv(.gz)` (FGD, ATC'23): name, cpu_milli, memory_mib, num_gpu,
  gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time (s).
  A pod asking for a GPU (num_gpu > 0 or gpu_milli > 0) becomes a job: submitted at its
  creation, running from `scheduled_time` to `deletion_time` (the queue wait in the trace
  is not work). Never-scheduled (Pending) pods, pods without a deletion time and CPU-only
  pods are skipped and counted in the notes. Clouds sell whole GPUs, so a GPU-sharing pod
  (num_gpu 1, gpu_milli < 1000) gets one whole GPU. The `multigpuNN` re-samples carry no
  times at all: reading one raises ValueError.
- Helios: the job logs are absent; the Sia Saturn workloads have arrival times and GPU
  counts but no duration (Sia derives it from its own per-application profiles, which
  are not in ../shared), so reading one raises ValueError. The Venus per-VC GPU quota
  serves as on-prem pool sizes (`venus_vc_gpus`).
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from datetime import date
from pathlib import Path

from broker.sim.model import JobList, SimJob
from pricing.userio.reading import csv_rows, read_text_maybe_gzip

# Alibaba's GPU model names -> catalog names (pricing.gpus). G1-G3 are undisclosed.
PAI_GPUS: dict[str, str] = {
    "V100M16": "V100",
    "V100M32": "V100-32GB",
    "T4": "T4",
    "P100": "P100",
    "A10": "A10",
}
PAI_TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time")
SIA_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def _table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and rows (the header alone tells a pod list without times, even empty)."""
    return csv_rows(path, "trace")


def pai_gpu(spec: str, default: str) -> str | None:
    """The catalog GPU for a `gpu_spec` ("" = any model: `default`). Of several allowed
    models, `default` when it is one of them (so constrained and free pods agree), else
    the first disclosed one; None when only undisclosed or unknown models are allowed."""
    names = [n.strip() for n in spec.split("|") if n.strip()]
    if not names:
        return default
    known = [PAI_GPUS[n] for n in names if n in PAI_GPUS]
    if default in known:
        return default
    return known[0] if known else None


def read_pai_pods(
    path: Path, *, gpu: str = "V100", limit: int | None = None, deadline_factor: float | None = None
) -> JobList:
    """GPU pods of an Alibaba gpu-v2023 pod list as jobs, in creation order; submit hours
    from the first kept pod's creation. `limit`: the first N jobs."""
    columns, rows = _table(Path(path))
    missing = [c for c in PAI_TIME_COLUMNS if c not in columns]
    if missing:
        raise ValueError(
            f"{path}: this pod list has no {', '.join(missing)} column (the multigpuNN "
            "re-samples carry resources only), so it has no submit times or durations; "
            "use openb_pod_list_default or another list with times"
        )
    skipped: Counter[str] = Counter()
    kept = []
    for index, r in enumerate(rows):
        num_gpu = float(r["num_gpu"] or 0)
        milli = float(r["gpu_milli"] or 0)
        if num_gpu <= 0 and milli <= 0:
            skipped["CPU-only pods"] += 1
        elif not r["scheduled_time"]:
            skipped["never-scheduled (Pending) pods"] += 1
        elif not r["deletion_time"]:
            skipped["pods without a deletion time"] += 1
        else:
            kept.append((float(r["creation_time"]), index, r, num_gpu, milli))
    kept.sort(key=lambda item: item[:2])
    kept = kept[:limit] if limit is not None else kept
    start = kept[0][0] if kept else 0.0
    last_end = max((float(r["deletion_time"]) for r in rows if r["deletion_time"]), default=0)
    counts: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    jobs = []
    for created, _, r, num_gpu, milli in kept:
        spec = (r.get("gpu_spec") or "").strip()
        chosen = pai_gpu(spec, gpu)
        counts["no gpu_spec" if not spec else "known" if chosen else "undisclosed"] += 1
        if num_gpu <= 1 and milli < 1000:
            counts["shared"] += 1
        phases[r.get("pod_phase") or "?"] += 1
        end = float(r["deletion_time"])
        counts["cut"] += end == last_end
        hours = max(end - float(r["scheduled_time"]), 1.0) / 3600
        jobs.append(
            SimJob(
                name=r["name"],
                team=r.get("qos") or "pai",
                submit_hours=(created - start) / 3600,
                gpu=chosen or gpu,
                gpus=max(1, math.ceil(num_gpu)),
                hours=hours,
                deadline_hours=hours * deadline_factor if deadline_factor else None,
            )
        )
    notes = tuple(f"{n} {why} skipped" for why, n in sorted(skipped.items()))
    notes += (
        f"{counts['no gpu_spec']} pods without gpu_spec mapped onto {gpu}",
        f"{counts['undisclosed']} pods allowing only undisclosed/unknown GPU models "
        f"(G1-G3) mapped onto {gpu}",
        f"{counts['shared']} GPU-sharing pods (gpu_milli < 1000) given one whole GPU",
        f"{counts['cut']} pods end at the list's last deletion time (may be cut short)",
        "kept by phase: " + ", ".join(f"{p} {n}" for p, n in sorted(phases.items())),
    )
    return JobList(jobs, str(path), notes)


def read_sia_workload(path: Path) -> JobList:
    """Sia's Helios-sampled workloads (name, time, application, num_replicas, batch_size)
    cannot become a job list: they carry no duration or amount of work. Sia's simulator
    derives run time from per-application profiles (iterations to the target epoch x
    step time per placement) that are not in ../shared, and inventing one would not be
    the trace. Always raises ValueError (after checking the file is one)."""
    with io.StringIO(read_text_maybe_gzip(path, "trace"), newline="") as handle:
        header = next(csv.reader(handle), [])
    if tuple(header[: len(SIA_COLUMNS)]) != SIA_COLUMNS:
        raise ValueError(f"{path}: not a Sia workload CSV (expected {','.join(SIA_COLUMNS)})")
    raise ValueError(
        f"{path}: a Sia/Helios Saturn workload has arrival times and GPU counts but no "
        "duration (Sia derives run time from per-application throughput profiles that are "
        "not in ../shared); it cannot be simulated as a job list"
    )


def venus_vc_gpus(path: Path, day: date | str) -> dict[str, int]:
    """Helios Venus per-VC GPU quota on `day` (venus_cluster_gpu_number.csv) as
    {vc: gpus}, for on-prem pool sizes; VCs with no GPUs that day are left out."""
    wanted = day if isinstance(day, str) else day.isoformat()
    with io.StringIO(read_text_maybe_gzip(path, "trace"), newline="") as handle:
        rows = list(csv.DictReader(handle))
    for r in rows:
        if r["date"] == wanted:
            quota = {vc: int(v) for vc, v in r.items() if vc not in ("date", "total")}
            return {vc: gpus for vc, gpus in quota.items() if gpus > 0}
    span = f"{rows[0]['date']}..{rows[-1]['date']}" if rows else "no rows"
    raise ValueError(f"{path}: no quota for {wanted} (the file covers {span})")
