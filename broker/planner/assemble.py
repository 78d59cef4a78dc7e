"""Step 3 of planning: the chosen candidates' figures, as Placements and Decisions.

A batch of 10,000 jobs yields some 50,000 placements, so they are built column by
column (see `_build`): every figure is one list, from the arrays of the planner.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from dataclasses import fields
from itertools import repeat
from typing import TYPE_CHECKING, Any

from broker.planner.cost import RESTART_HOURS
from broker.planner.decision import CostEstimate, Decision, Placement, Rejection
from broker.planner.host import default_note
from broker.spec import MANIFEST, JobSpec, Requirements

if TYPE_CHECKING:
    import numpy as np

    from pricing.table import OfferTable

TEXT_COLUMNS = ("cloud", "region", "zone", "instance_type", "accelerator", "source", "as_of")


def decisions(
    jobs: Sequence[JobSpec],
    rejected: Sequence[list[Rejection]],
    considered: int,
    table: OfferTable,
    chosen: dict[str, np.ndarray],
) -> list[Decision]:
    """One Decision per job. `chosen` holds one array per figure (see `plan._plan_chunk`),
    one entry per placement, sorted by job and then rank."""
    import numpy as np

    job = chosen["job"]
    bounds = np.searchsorted(job, np.arange(len(jobs) + 1))
    rows = chosen["row"]
    text = {n: table.categories[n][table.codes[n][rows]].tolist() for n in TEXT_COLUMNS}
    figures = {name: values.tolist() for name, values in chosen.items()}
    job_of, spot = figures["job"], figures["spot"]
    nodes_of = [j.requirements.nodes for j in jobs]
    rate_source = _rate_sources(spot, figures["from_catalog"], text["cloud"])
    costs = _build(
        CostEstimate,
        compute=figures["compute"],
        interruption_overhead=(chosen["price"] * chosen["overhead_hours"]).tolist(),
        egress=figures["egress"],
        total=figures["total"],
        run_hours=figures["run_hours"],
        staging_hours=figures["staging_hours"],
        overhead_hours=figures["overhead_hours"],
        expected_interruptions=figures["interruptions"],
        interruption_rate=figures["rate"],
        interruption_rate_source=rate_source,
        assumptions=_assumptions(jobs, job_of, spot, figures["rate"], rate_source),
    )
    placements = _build(
        Placement,
        rank=(np.arange(len(job)) - bounds[job] + 1).tolist(),
        cloud=text["cloud"],
        region=text["region"],
        zone=text["zone"],
        instance_type=text["instance_type"],
        accelerator=text["accelerator"],
        accelerator_count=table.numbers["accelerator_count"][rows].tolist(),
        nodes=[nodes_of[i] for i in job_of],
        market=["spot" if s else "on-demand" for s in spot],
        price_per_hour=figures["price"],
        expected_hours=figures["hours"],
        expected_cost=figures["total"],
        cost=costs,
        price_source=text["source"],
        price_as_of=text["as_of"],
    )
    bounds = bounds.tolist()
    return _build(
        Decision,
        job=[j.name for j in jobs],
        placements=[tuple(placements[b:e]) for b, e in zip(bounds, bounds[1:], strict=False)],
        rejected=[tuple(r) for r in rejected],
        candidates=[considered] * len(jobs),
        hints=[()] * len(jobs),
    )


def _build(cls: type, **columns: list[Any]) -> list[Any]:
    """Instances of the frozen, slotted dataclass `cls`, one per entry of `columns` (one
    list per field, by name), equal in every way to `cls(**row)` for each row.

    Why not call `cls`: a frozen dataclass's __init__ sets each field through
    object.__setattr__ (its own __setattr__ refuses), some 0.2 us a field, and building
    the placements of a batch that way took a quarter of its time. Here each field is
    set for all instances in one C-level pass through the slot's descriptor, which is
    what that __init__ does, one object at a time. For these classes __init__ does
    nothing else (no __post_init__), so `columns` must name every field.
    """
    names = _field_names(cls)
    if columns.keys() != set(names) or hasattr(cls, "__post_init__"):
        raise TypeError(f"cannot build {cls.__name__} from columns {sorted(columns)}")
    made = list(map(object.__new__, repeat(cls, len(columns[names[0]]))))
    for name in names:
        deque(map(cls.__dict__[name].__set__, made, columns[name]), maxlen=0)
    return made


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _rate_sources(spot: list[bool], from_catalog: list[bool], cloud: list[str]) -> list[str]:
    """Where each placement's interruption rate comes from ("" on demand)."""
    defaults: dict[str, str] = {}
    out = []
    for is_spot, known, name in zip(spot, from_catalog, cloud, strict=True):
        if not is_spot:
            out.append("")
        elif known:
            out.append("catalog")
        else:
            out.append(defaults.get(name) or defaults.setdefault(name, f"default:{name}"))
    return out


def _assumptions(
    jobs: Sequence[JobSpec],
    job_of: list[int],
    spot: list[bool],
    rate: list[float],
    rate_source: list[str],
) -> list[tuple[str, ...]]:
    """The assumptions of each placement: its job's notes, and on spot its rate's. Equal
    lists are one tuple (a job's placements share most of theirs)."""
    made: dict[tuple, tuple[str, ...]] = {}  # (job, rate, source), (job,) -> the notes
    of_job: dict[int, tuple[tuple[str, ...], ...]] = {}
    spot_notes: dict[tuple[float, str], str] = {}
    host_notes: dict[Requirements, str | None] = {}  # jobs from one template share theirs
    out = []
    for i, is_spot, r, source in zip(job_of, spot, rate, rate_source, strict=True):
        key = (i, r, source) if is_spot else (i,)
        notes = made.get(key)
        if notes is None:
            if i not in of_job:
                of_job[i] = _job_notes(jobs[i], host_notes)
            head, spot_extra, tail = of_job[i]
            if is_spot:
                note = spot_notes.get((r, source))
                if note is None:
                    note = spot_notes[(r, source)] = _spot_note(r, source)
                notes = (*head, note, *spot_extra, *tail)
            else:
                notes = (*head, *tail)
            made[key] = notes
        out.append(notes)
    return out


def _job_notes(
    job: JobSpec, host_notes: dict[Requirements, str | None]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The assumptions of a job's plan: (notes of every placement, extra notes of a spot
    placement but its rate, notes that close the list); `host_notes` memoises the host
    default's note by requirements."""
    gpu = job.requirements.accelerators[0].gpu if job.requirements.accelerators else "CPU"
    runtime = job.runtime
    source = f" ({runtime.source})" if runtime.source != MANIFEST else ""
    head = (
        f"runtime estimate {runtime.estimate_hours:g} h on {gpu}{source}, scaled by relative "
        "GPU throughput",
    )
    spot = (
        ()
        if job.checkpoint is not None
        else ("no checkpoint: an interruption loses half the run on average",)
    )
    tail = []
    req = job.requirements
    host = host_notes[req] if req in host_notes else host_notes.setdefault(req, default_note(req))
    if host is not None:
        tail.append(host)
    if any(item.location is None for item in job.data):
        tail.append("inputs without a location are not priced for egress")
    if job.checkpoint is not None and job.checkpoint.location is None and job.checkpoint.size_gb:
        tail.append("checkpoint location unknown: its transfers are not priced")
    return head, spot, tuple(tail)


def _spot_note(rate: float, source: str) -> str:
    return (
        f"spot: {rate:g} interruptions/hour ({source}), each costing "
        f"{RESTART_HOURS:g} h restart + lost work + checkpoint restore"
    )
