"""Can't Be Late / SpotHedge / SkyNomad availability JSON: {"metadata": {"gap_seconds": N},
"data": [count per tick], "prices": [USD/h per tick]?}.

Reading: a value is the number of spot instances available at that tick (the traces'
README; 1-node files are 0/1, 16-node files 0..16). Can't Be Late's own simulator reads
a single-node 1 as "preempted"; we follow the published README because the multi-node
files (0..16) only make sense as counts, and SkyNomad's converted H100 files, which do
use the preempted convention, say so (read them with `preempted=True`).
File names `<zone>_<kind>_<count>.json` give the zone and the GPU ("v100" -> V100).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from broker.sim.model import Availability, SpotTrace, TracePlace

GPU_NAMES = {"v100": "V100", "k80": "K80", "h100": "H100", "a100": "A100", "a100_40gb": "A100"}
# <zone>_<gpu or instance>[_<count>]: the count is absent from GCP CPU files (us-central1-a_c3-88)
_NAME = re.compile(r"^(?P<zone>[a-z0-9-]+?)_(?P<kind>[a-z0-9_-]+?)(?:_(?P<count>\d+))?$")


def cloud_of(zone: str, path: Path | None = None) -> str:
    """ "gcp" for GCP-shaped zones (us-central1-a) or paths naming gcp; else "aws"."""
    if path is not None and any(part.lower().startswith("gcp") for part in path.parts):
        return "gcp"
    return "gcp" if re.match(r"^[a-z]+-[a-z]+\d+-[a-z]$", zone) else "aws"


def place_of(path: Path, cloud: str | None = None) -> TracePlace:
    match = _NAME.match(path.name.removesuffix(".gz").removesuffix(".json"))
    if match is None:
        raise ValueError(f"{path.name}: expected <zone>_<gpu>[_<count>].json")
    zone, kind = match["zone"], match["kind"]
    gpu = GPU_NAMES.get(kind, kind.upper())
    return TracePlace(cloud or cloud_of(zone, path), zone, gpu)


def read_availability(
    path: Path,
    *,
    preempted: bool = False,
    cloud: str | None = None,
    gap_seconds: float | None = None,
) -> tuple[TracePlace, Availability]:
    """One file. `preempted`: values are 1 = unavailable (SkyNomad's converted traces)."""
    data = _load(path)
    gap = float(gap_seconds or data["metadata"]["gap_seconds"])
    raw = [int(v) for v in data["data"]]
    counts = tuple(1 - min(v, 1) for v in raw) if preempted else tuple(raw)
    prices = data.get("prices")
    if prices is not None and len(prices) != len(counts):
        prices = None
    return place_of(path, cloud), Availability(
        gap / 3600.0, counts, tuple(float(p) for p in prices) if prices else None
    )


def read_spot(paths: Iterable[Path], *, preempted: bool = False) -> SpotTrace:
    """Every JSON file of `paths` (files or folders, recursively, sorted); a file that is
    not availability data is a ValueError naming it."""
    places = {}
    files = []
    for path in map(Path, paths):
        found = sorted(path.rglob("*.json")) if path.is_dir() else [path]
        if not found:
            raise ValueError(f"{path}: no availability files (*.json) in this folder")
        files += found
    for file in files:
        try:
            place, availability = read_availability(file, preempted=preempted)
        except KeyError as exc:
            raise ValueError(f"{file}: no {exc} in the availability data") from None
        except (ValueError, TypeError, OverflowError) as exc:
            text = str(exc)
            raise ValueError(text if text.startswith(str(file)) else f"{file}: {text}") from None
        places[place] = availability
    return SpotTrace(places, ", ".join(str(p) for p in paths))


def _load(path: Path) -> dict:
    from pricing.userio.reading import load_json

    data = load_json(path, "trace")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object with metadata and data")
    return data
