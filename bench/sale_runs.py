"""How long a zone that sells spot again keeps selling, given how long it has sold so far.

The question behind issue 19's flaps (a zone back for a few ticks takes the new instance
within 0.1-0.5 h): does "on sale since" tell a flap from a zone that is back? For the
SkyNomad suite's traces (the V100 zones of its V100 scenario, 195 s ticks; the H100 GCP
zones of the others, 600 s ticks) this prints, as JSON, per family: every return (a run
of ticks on sale after one without; a trace's first run is left out, its start is not
known), the share lasting 1, 2 or 3 ticks, and for times on sale so far s: how many
returns were still on sale at s, the share of them still on sale 0.5 h later, and their
mean hours left; and the mean return after outages of each length.

    BROKER_SHARED_DIR=/work/shared python bench/sale_runs.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SO_FAR_HOURS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0)
OUTAGE_HOURS = ((0.0, 0.2), (0.2, 0.4), (0.4, 1.0), (1.0, 3.0), (3.0, float("inf")))


def runs(counts: tuple[int, ...], step: float) -> list[tuple[bool, float]]:
    """(on sale, hours) for each run of equal ticks, in order."""
    out: list[tuple[bool, float]] = []
    for count in counts:
        on = count > 0
        if out and out[-1][0] == on:
            out[-1] = (on, out[-1][1] + step)
        else:
            out.append((on, step))
    return out


def family(trace) -> dict:
    """The figures of the module docstring for the places of `trace`."""
    returns: list[tuple[float, float]] = []  # (outage before, return)
    step = 0.0
    for availability in trace.places.values():
        step = availability.step_hours
        seq = runs(availability.counts, step)
        returns += [(off[1], on[1]) for off, on in zip(seq, seq[1:], strict=False) if on[0]]
    ons = [on for _, on in returns]
    eps = 1e-9

    def share(values: list[float], test) -> float:
        return round(sum(map(test, values)) / len(values), 3) if values else 0.0

    so_far = []
    for s in SO_FAR_HOURS:
        alive = [on for on in ons if on > s + eps]
        left = round(sum(on - s for on in alive) / len(alive), 2) if alive else None
        so_far.append({
            "on_sale_so_far_hours": s,
            "returns": len(alive),
            "still_on_sale_0.5_h_later": share(alive, lambda on, s=s: on > s + 0.5 + eps),
            "mean_hours_left": left,
        })  # fmt: skip
    outages = []
    for low, high in OUTAGE_HOURS:
        after = [on for off, on in returns if low <= off < high]
        upper = None if high == float("inf") else high  # JSON has no infinity
        outages.append({"outage_hours": [low, upper], "returns": len(after),
                        "mean_return_hours": round(sum(after) / len(after), 2) if after else None,
                        "lasting_under_0.5_h": share(after, lambda on: on < 0.5)})  # fmt: skip
    return {
        "zones": len(trace.places),
        "tick_hours": round(step, 4),
        "returns": len(ons),
        "lasting_ticks": {n: share(ons, lambda on, n=n: on < (n + 0.5) * step) for n in (1, 2, 3)},
        "by_time_on_sale": so_far,
        "by_outage_before": outages,
    }


def main() -> None:
    from broker.sim.traces.skynomad_suite import suite, suite_trace

    traces = Path(os.environ.get("BROKER_SHARED_DIR") or Path(__file__).parents[2] / "shared")
    traces = traces / "traces"
    scenarios, _ = suite(traces / "skynomad-spot/results", traces)
    groups: dict[str, set[str]] = {}
    for scenario in scenarios:
        gpu = "H100" if scenario.zones[0].endswith("_h100_16") else "V100"
        groups.setdefault(gpu, set()).update(scenario.zones)
    print(json.dumps({gpu: family(suite_trace(traces, tuple(sorted(zones))))
                      for gpu, zones in sorted(groups.items())}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
