"""Spot-market decision policies: for one job, step by step, run on spot, on on-demand,
or wait. Pure functions of a `SpotState` (no I/O, no clock, no store), shared by the
controller, the simulator and the replayer in `replay.py`. See docs/spot-policy.md."""

from broker.spotpolicy.deadline_aware import DeadlineAware
from broker.spotpolicy.model import CHOICES, Choice, Market, SpotPolicy, SpotState
from broker.spotpolicy.registry import POLICIES, make_policy
from broker.spotpolicy.replay import ReplayJob, ReplayResult, replay
from broker.spotpolicy.uniform_progress import Greedy, OnDemand, SpotFailover, UniformProgress

__all__ = [
    "CHOICES",
    "POLICIES",
    "Choice",
    "DeadlineAware",
    "Greedy",
    "Market",
    "OnDemand",
    "ReplayJob",
    "ReplayResult",
    "SpotFailover",
    "SpotPolicy",
    "SpotState",
    "UniformProgress",
    "make_policy",
    "replay",
]
