"""The compared strategies, each a name with parameters mapped onto controller settings.

| name | manifest `spot` | spot policy (broker.spotpolicy) | strict | spot ranked by |
|---|---|---|---|---|
| on-demand | never | on-demand | no | - |
| spot-failover | only (prefer with allow_on_demand) | spot-failover | no | price alone |
| uniform-progress | prefer | uniform-progress | yes | cost model |
| broker | prefer | deadline-aware | yes | cost model (risk, egress) |
| burst-always | prefer, pool first then any cloud at once | deadline-aware | yes | cost model |

"strict" is the dispatch settings' `spot_strict`: the spot policy's "spot" and "wait"
plan the job on spot only, so it waits queued while no spot is on sale, as Can't Be
Late's rules and our deadline-aware policy mean. spot-failover relaunches after each
preemption in the cheapest open place; the reclaimed place is closed by the broker's
cool-down (broker.recovery), which is SkyPilot's EAGER_NEXT_REGION.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.dispatch.settings import DispatchSettings
from pricing.userio.suggest import hint

NAMES = ("broker", "spot-failover", "uniform-progress", "on-demand", "burst-always")


@dataclass(frozen=True)
class SimPolicy:
    name: str
    spot: str  # the manifests' placement.spot
    spot_policy: Any  # a broker.spotpolicy policy
    strict: bool = False
    price_only: bool = False  # rank spot offers by price alone (no interruption risk)
    # wait for spot in the checkpoint's region while the spot policy may wait, rather than
    # pay egress and a restart to move (broker.sim.engine._home)
    stay_home: bool = False
    cooldown_scale: float = 1.0  # x broker.recovery's reclaim cool-down
    # Starburst waiting budget for a full on-prem pool, x the job's hours
    # (broker.dispatch.pool); 0 bursts to a cloud at once
    pool_wait_factor: float = 0.0
    # move a steered spot run to spot at most this share of its price (broker.dispatch.move)
    move_below: float = 0.0
    # hold a reclaimed job W hours while its spare affords W + X (broker.dispatch.hold)
    hold_hours: float = 0.0
    hold_margin: float = 0.0
    params: Mapping[str, Any] = field(default_factory=dict)

    def settings(self, restart_hours: float, pass_hours: float) -> DispatchSettings:
        """The shared decisions' settings for a scenario with this restart overhead and
        pass interval (both engines plan through them)."""
        return DispatchSettings(
            spot_policy=self.spot_policy,
            spot_strict=self.strict,
            cooldown_scale=self.cooldown_scale,
            stay_home=self.stay_home,
            restart_hours=restart_hours,
            pass_hours=pass_hours,
            pool_wait_factor=self.pool_wait_factor,
            move_below=self.move_below,
            hold_hours=self.hold_hours,
            hold_margin=self.hold_margin,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "spot": self.spot,
            "strict": self.strict,
            "price_only": self.price_only,
            "stay_home": self.stay_home,
            "cooldown_scale": self.cooldown_scale,
            "pool_wait_factor": self.pool_wait_factor,
            "move_below": self.move_below,
            "hold_hours": self.hold_hours,
            "hold_margin": self.hold_margin,
            "spot_policy": self.spot_policy.describe(),
        }


def make(name: str, **params: Any) -> SimPolicy:
    """The named strategy; ValueError with a "did you mean" for an unknown name."""
    from broker.spotpolicy import DeadlineAware, OnDemand, SpotFailover, UniformProgress

    if name == "on-demand":
        return SimPolicy(name, "never", OnDemand(), params=params)
    if name == "spot-failover":
        allow = bool(params.get("allow_on_demand", False))
        return SimPolicy(name, "prefer" if allow else "only", SpotFailover(allow_on_demand=allow),
                         price_only=True, params=params)  # fmt: skip
    if name == "uniform-progress":
        return SimPolicy(name, "prefer", UniformProgress(**params), strict=True, params=params)
    if name in ("broker", "burst-always"):
        # production's settings (DispatchSettings' defaults), what `broker run` does;
        # burst-always only never waits for a full pool
        base = DispatchSettings()
        own = ("stay_home", "cooldown_scale", "pool_wait_factor", "strict", "move_below",
               "hold_hours", "hold_margin")  # fmt: skip
        rules = {k: v for k, v in params.items() if k not in own}
        stay = bool(params.get("stay_home", base.stay_home))
        scale = float(params.get("cooldown_scale", base.cooldown_scale))
        wait = float(params.get("pool_wait_factor",
                                base.pool_wait_factor if name == "broker" else 0.0))  # fmt: skip
        strict = bool(params.get("strict", base.spot_strict))
        below = float(params.get("move_below", base.move_below))
        held = float(params.get("hold_hours", base.hold_hours))
        margin = float(params.get("hold_margin", base.hold_margin))
        return SimPolicy(name, "prefer", DeadlineAware(**rules), strict=strict, params=params,
                         stay_home=stay, cooldown_scale=scale, pool_wait_factor=wait,
                         move_below=below, hold_hours=held, hold_margin=margin)  # fmt: skip
    raise ValueError(f"unknown policy {name!r}{hint(name, NAMES)}; known: {', '.join(NAMES)}")


def parse(text: str) -> list[SimPolicy]:
    """ "broker,spot-failover" -> policies; "uniform-progress:safety_margin=3" passes a
    parameter (numbers and true/false are converted)."""
    policies = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, rest = item.partition(":")
        params: dict[str, Any] = {}
        for pair in filter(None, rest.split(";")):
            key, _, value = pair.partition("=")
            params[key.strip()] = _value(value.strip())
        policies.append(make(name.strip(), **params))
    if not policies:
        raise ValueError("no policy given")
    return policies


def _value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return float(text)
    except ValueError:
        return text
