"""Fair share between teams: decayed recent GPU usage, and Slurm's fair-share factor.

Recent use counts more than old use, so a team that burst last month is not held
back for ever, while a team that burst this morning yields to the others. The
half-life comes from the policy (`fair_share.half_life_hours`, a week by default).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime

UsageRecord = tuple[str, float, datetime, datetime | None]  # team, GPUs, start, end (None: now)
_LN2 = math.log(2.0)


def decayed_usage(
    records: Iterable[UsageRecord], now: datetime, half_life_hours: float
) -> dict[str, float]:
    """Team -> GPU-hours, each hour weighted 2^(-age / half_life) (age in hours before `now`).

    Exact: for a record of `g` GPUs over [s, e] (e clipped to `now`; None means
    still running), the integral of g * 2^(-(now - t)/h) dt is
    g * h / ln 2 * 2^(-a) * (1 - 2^(-d)), where a = (now - e)/h and d = (e - s)/h,
    computed with expm1 so that short intervals keep their precision. Time after
    `now` is not counted; a team whose records add nothing still gets a 0.0.
    Per-team sums use math.fsum, so the order of the records does not matter.
    """
    if not half_life_hours > 0 or math.isinf(half_life_hours):
        raise ValueError(f"half_life_hours must be a positive number, got {half_life_hours!r}")
    h = float(half_life_hours)
    parts: dict[str, list[float]] = {}
    for team, gpus, start, end in records:
        bucket = parts.setdefault(team, [])
        stop = now if end is None or end > now else end
        if gpus <= 0 or stop <= start:
            continue
        a = (now - stop).total_seconds() / 3600.0 / h  # half-lives since the interval ended
        d = (stop - start).total_seconds() / 3600.0 / h  # its length, in half-lives
        bucket.append(gpus * h / _LN2 * 2.0 ** (-a) * -math.expm1(-d * _LN2))
    return {team: math.fsum(values) for team, values in parts.items()}


def fair_share_factors(usage: Mapping[str, float], shares: Mapping[str, float]) -> dict[str, float]:
    """Team -> F = 2^(-U/S) in (0, 1] for every team in `shares` (Slurm's classic factor).

    U = the team's usage / the usage of all teams in `usage` (0 when nobody has
    used anything); S = the team's share / the sum of `shares`. A team at exactly
    its share gets 0.5, an idle team 1.0, a team far over its share nears 0.
    Negative usage counts as 0. A team with no share (S = 0) gets 0.0 once it has
    used anything, 1.0 before.
    """
    total_usage = math.fsum(max(value, 0.0) for value in usage.values())
    total_share = math.fsum(max(value, 0.0) for value in shares.values())
    factors: dict[str, float] = {}
    for team, share in shares.items():
        used = max(usage.get(team, 0.0), 0.0) / total_usage if total_usage > 0 else 0.0
        normalized = max(share, 0.0) / total_share if total_share > 0 else 0.0
        if normalized <= 0:
            factors[team] = 0.0 if used > 0 else 1.0
        else:
            factors[team] = 2.0 ** (-used / normalized)
    return factors
