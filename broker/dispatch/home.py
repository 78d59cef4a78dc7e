"""Whether a reclaimed job waits for spot where its checkpoint lives.

Moving a checkpoint costs egress and copy time; waiting for its own region's spot to
come back costs only time. With the `stay_home` setting, a reclaimed job whose spot
policy would still wait, were no spot on sale anywhere, plans spot only in its
checkpoint's region. That holds for a checkpoint without data too: the job has the time
to wait (its policy says so), and the places open while home is closed are the ones the
planner ranked behind it, dearer or riskier. Moving at once cost 34.6 % over SkyNomad on
its 0 GB checkpoint scenario, waiting for home 0.2 % (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable

from broker.dispatch.settings import DispatchSettings


def stays_home(
    settings: DispatchSettings,
    *,
    has_home: bool,
    choice: str,
    choice_without_spot: Callable[[], str],
) -> bool:
    """True when the job's spot is kept to its checkpoint's region now.

    `has_home`: the job has a checkpoint somewhere (it was reclaimed after saving);
    `choice`: its spot policy's answer now; `choice_without_spot`: asks the policy
    again as if no spot were on sale at all (a policy that would then run on demand
    must not wait); asked last, only when everything else holds."""
    return (
        settings.stay_home
        and settings.spot_strict
        and choice in ("spot", "wait")
        and has_home
        and choice_without_spot() == "wait"
    )
