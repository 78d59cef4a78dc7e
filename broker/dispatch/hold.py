"""Whether a reclaimed job is held: it plans nothing for a while after our own reclaim.

After a reclaim the zone often sells spot again within minutes and takes the new
instance back within the hour (a "flap": 22 of V100's 47 reclaims), each a restart
billed and the work since the last checkpoint lost. A job reclaimed less than
`hold_hours` (W) ago is held, planning nothing even while spot is on sale, when both:

- the place of that reclaim has reclaimed at least as often as its catalog says (its
  learned rate, `broker.learned_rates`, as known at the reclaim, is at or above the
  prior): a steady place that reclaimed once is not a flapping one;
- its spare stays W + `hold_margin` (X) above the line where its spot policy would send
  it to on-demand: the policy, asked with W + X hours less spare and no spot on sale,
  would still wait. So a tight job is never held, and a hold costs only spare that the
  policy would have let the job wait away.

The hold ends W after the reclaim, or at the first pass its spare no longer affords it
(the spare only shrinks while the job waits). Both engines and the cadence ask here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from broker.dispatch.market import MarketAsk, spot_state
from broker.dispatch.settings import DispatchSettings

_EPS = 1e-9  # hours


@dataclass(frozen=True, slots=True)
class Hold:
    """The hold decision: `held`, why (the sentence `broker queue` shows), and, when
    held, the hours until its end at the latest (`ends_in`: W after the reclaim)."""

    held: bool
    reason: str
    ends_in: float = 0.0


def hold(ask: MarketAsk, settings: DispatchSettings) -> Hold:
    """The hold for the idle job `ask` describes now (module docstring)."""
    w, x = settings.hold_hours, settings.hold_margin
    if w <= 0:
        return Hold(False, "not held: no hold after a reclaim (hold_hours 0)")
    since = ask.since_reclaim
    if since + _EPS >= w:
        return Hold(False, f"not held: no reclaim in the last {w:g} h")
    if not ask.reclaimed_often:
        return Hold(False, "not held: the reclaim's place reclaims less than its catalog says")
    state = spot_state(ask, settings, spot_available=False)
    short = replace(state, work_left=state.work_left + w + x)
    if settings.policy().choose(short) != "wait":
        spare = f"{state.spare:.2f} h"
        return Hold(False, f"not held: spare {spare}, short of the wait line + {w + x:g} h")
    left = w - since
    return Hold(
        True,
        f"held: reclaimed {since:.2f} h ago at a place reclaiming at least as its catalog "
        f"says; spot again in {left:.2f} h at the latest",
        left,
    )
