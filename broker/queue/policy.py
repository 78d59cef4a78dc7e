"""The queue policy: which queued jobs launch now and why the others wait, as one pure function.

`schedule` takes plain data (queued jobs with their chosen placements, running jobs,
the policy, recent usage, this month's spend, free capacity, the time) and returns
one `Verdict` per queued job. No I/O, no clock, no state store: the controller
gathers the inputs and applies the verdicts, and the simulator and the tests call
the same code on made-up data. Same input, same output, whatever the input order.

Order (docs/policy.md): priority, higher first; then score = queue weight x
fair-share factor 2^(-U/S) (broker.queue.fairshare), higher first, rounded to 12
decimals so that equal scores tie exactly; then queued_at; then job_id.

Then each job in that order is checked against, in turn: its team's GPU quotas,
its team's monthly budget, and the capacity of its (cloud, region) when that place
is limited (listed in `free_gpus`), where it may preempt lower-priority
checkpointed work, or wait, reserving the place for itself so that later jobs
launch there only as backfill that does not delay it (EASY backfill: one
reservation per place, for the first job in order that waits for it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from broker.queue.fairshare import fair_share_factors
from broker.queue.verdict import Category, Verdict, Why

_EPS = 1e-9  # GPUs and dollars: a sum of floats within this of a limit is at the limit
Place = tuple[str, str]  # (cloud, region)


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job waiting to run, with the placement the planner chose for it."""

    job_id: str
    team: str
    queue: str
    priority: int
    queued_at: datetime
    gpus: float  # GPUs the chosen placement uses (count x nodes); 0 for CPU-only
    gpu_model: str  # canonical GPU name of the chosen placement; "" for CPU-only
    expected_cost: float  # USD, of the chosen placement
    expected_hours: float
    cloud: str
    region: str
    preemptible: bool = False  # has a checkpoint (can be preempted and resume)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs now."""

    job_id: str
    team: str
    priority: int
    started_at: datetime
    gpus: float
    gpu_model: str
    cloud: str
    region: str
    preemptible: bool  # has a checkpoint
    expected_end: datetime  # started_at + expected hours
    protected_until: datetime | None = None  # not preemptible before this


def _copy(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A private copy, so that the caller changing its dict later cannot change the policy.

    A plain dict rather than a read-only proxy: `dataclasses.asdict`, `copy` and
    `pickle` must keep working on policies.
    """
    return dict(mapping)


@dataclass(frozen=True, slots=True)
class TeamPolicy:
    """One team's rules. Limits of None mean "no limit"."""

    share: float = 1.0  # fair-share weight, > 0
    max_gpus: float | None = None  # concurrent GPUs, all models
    max_gpus_by_model: Mapping[str, float] = field(default_factory=dict, hash=False)
    monthly_budget: float | None = None  # USD per calendar month, hard

    def __post_init__(self) -> None:
        if not self.share > 0:
            raise ValueError(f"share must be > 0, got {self.share!r}")
        limits = [self.max_gpus, self.monthly_budget, *self.max_gpus_by_model.values()]
        if any(limit is not None and not limit >= 0 for limit in limits):
            raise ValueError("GPU limits and budgets must be >= 0")
        object.__setattr__(self, "max_gpus_by_model", _copy(self.max_gpus_by_model))

    def model_limit(self, gpu_model: str) -> float | None:
        """The limit for `gpu_model` (names matched case-insensitively), or None."""
        wanted = gpu_model.casefold()
        for name, limit in self.max_gpus_by_model.items():
            if name.casefold() == wanted:
                return limit
        return None


_DEFAULT_TEAM = TeamPolicy()  # a team not listed (frozen: one value serves every call)


@dataclass(frozen=True, slots=True)
class Policy:
    """Queues, team rules and the switches of the scheduler (policy.yaml, broker.queue.config)."""

    queues: Mapping[str, float] = field(default_factory=lambda: {"default": 1.0}, hash=False)
    teams: Mapping[str, TeamPolicy] = field(default_factory=dict, hash=False)
    fair_share_half_life_hours: float = 24 * 7
    preemption: bool = True
    preemption_protect_minutes: float = 30
    backfill: bool = True

    def __post_init__(self) -> None:
        if any(not weight >= 0 for weight in self.queues.values()):
            raise ValueError("queue weights must be >= 0")
        if not self.fair_share_half_life_hours > 0:
            raise ValueError("fair_share_half_life_hours must be > 0")
        if not self.preemption_protect_minutes >= 0:
            raise ValueError("preemption_protect_minutes must be >= 0")
        object.__setattr__(self, "queues", _copy(self.queues))
        object.__setattr__(self, "teams", _copy(self.teams))

    def team(self, name: str) -> TeamPolicy:
        """The team's rules; a team not listed gets the defaults (share 1, no limits)."""
        return self.teams.get(name) or _DEFAULT_TEAM

    def queue_weight(self, name: str) -> float:
        """The queue's weight; a queue not listed weighs 1."""
        return self.queues.get(name, 1.0)


def job_scores(
    queued: Sequence[QueuedJob],
    running: Sequence[RunningJob],
    policy: Policy,
    usage: Mapping[str, float],
) -> dict[str, float]:
    """job_id -> queue weight x fair-share factor, rounded to 12 decimals (higher goes first).

    The teams sharing the cluster are those in the policy, the queue, the running
    jobs and `usage`; each team's share is its policy share (1 when not listed).
    """
    teams = set(policy.teams) | set(usage) | {j.team for j in queued} | {r.team for r in running}
    shares = {team: policy.team(team).share for team in sorted(teams)}
    factors = fair_share_factors(usage, shares)
    return {j.job_id: round(policy.queue_weight(j.queue) * factors[j.team], 12) for j in queued}


def schedule(
    queued: Sequence[QueuedJob],
    running: Sequence[RunningJob],
    *,
    policy: Policy,
    usage: Mapping[str, float],
    spent_this_month: Mapping[str, float],
    free_gpus: Mapping[Place, float],
    now: datetime,
) -> list[Verdict]:
    """One verdict per queued job, in queue order (the order described in the module docstring).

    usage: team -> decayed GPU-hours (fairshare.decayed_usage over finished and
    running attempts). spent_this_month: team -> USD counted against the monthly
    budget; pass the ledger's spend this month plus the expected remaining cost of
    running jobs, so that headroom already committed is not spent twice.
    free_gpus: (cloud, region) -> GPUs free now where capacity is limited (negative
    counts as 0); places not listed are unlimited. Raises ValueError on duplicate
    queued job ids.
    """
    ids = [job.job_id for job in queued]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate job ids in the queue")
    scores = job_scores(queued, running, policy, usage)
    order = sorted(queued, key=lambda j: (-j.priority, -scores[j.job_id], j.queued_at, j.job_id))
    state = _Pass(policy, running, spent_this_month, free_gpus, now, scores)
    return [state.decide(job, position) for position, job in enumerate(order, start=1)]


@dataclass(slots=True)
class _Reservation:
    """The first job waiting for a place: when it can start, and what it will leave over."""

    job: QueuedJob
    start: datetime | None  # None: running jobs' ends never free enough (nothing to protect)
    extra: float  # GPUs free at `start` beyond what the job needs


class _Pass:
    """The bookkeeping of one `schedule` call: what is used, spent, free and reserved."""

    def __init__(
        self,
        policy: Policy,
        running: Sequence[RunningJob],
        spent: Mapping[str, float],
        free_gpus: Mapping[Place, float],
        now: datetime,
        scores: Mapping[str, float],
    ) -> None:
        self.policy, self.now, self.scores = policy, now, scores
        self.spent: dict[str, float] = {team: float(v) for team, v in sorted(spent.items())}
        self.free: dict[Place, float] = {p: max(float(v), 0.0) for p, v in free_gpus.items()}
        self.initial_free = dict(self.free)
        self.team_gpus: dict[str, float] = {}
        self.model_gpus: dict[tuple[str, str], float] = {}
        self.ends: dict[Place, dict[str, tuple[datetime, float]]] = {p: {} for p in self.free}
        self.victims: dict[Place, list[RunningJob]] = {p: [] for p in self.free}
        self.launched: dict[Place, list[QueuedJob]] = {}
        self.reserved: dict[Place, _Reservation] = {}
        protect = timedelta(minutes=policy.preemption_protect_minutes)
        for job in sorted(running, key=lambda r: r.job_id):
            self._hold(job.team, job.gpu_model, job.gpus)
            place = (job.cloud, job.region)
            if place not in self.free:
                continue
            self.ends[place][job.job_id] = (max(job.expected_end, now), job.gpus)
            protected = (job.protected_until is not None and job.protected_until > now) or (
                now - job.started_at < protect
            )
            if policy.preemption and job.preemptible and not protected and job.gpus > 0:
                self.victims[place].append(job)

    def _hold(self, team: str, gpu_model: str, gpus: float) -> None:
        self.team_gpus[team] = self.team_gpus.get(team, 0.0) + gpus
        key = (team, gpu_model.casefold())
        self.model_gpus[key] = self.model_gpus.get(key, 0.0) + gpus

    # --- one job ---------------------------------------------------------------

    def decide(self, job: QueuedJob, position: int) -> Verdict:
        limited = self._quota(job) or self._budget(job)
        if limited is not None:
            return self._wait(job, position, limited)
        place = (job.cloud, job.region)
        if place not in self.free:
            return self._launch(job, position, None)
        label = f"{job.cloud}:{job.region}"
        fits = job.gpus <= self.free[place] + _EPS
        held = self.reserved.get(place)
        if held is not None:
            if not fits:
                return self._wait(job, position, self._capacity(job, place))
            head = held.job
            if not self.policy.backfill:
                behind = f"waits behind {head.job_id} for {label} (backfill off)"
                return self._wait(job, position, Why(self._behind(head, job), behind))
            ends = self.now + timedelta(hours=job.expected_hours)
            if held.start is None or ends <= held.start:
                why = Why("backfill", f"ends before {head.job_id} needs {label}")
                return self._launch(job, position, why)
            if job.gpus <= held.extra + _EPS:
                held.extra -= job.gpus
                why = Why("backfill", f"uses GPUs {head.job_id} will not need on {label}")
                return self._launch(job, position, why)
            delay = (
                f"would delay {head.job_id}, which needs {head.gpus:g} GPUs on "
                f"{label} at {_when(held.start)}"
            )
            return self._wait(job, position, Why("backfill", delay))
        if fits:
            return self._launch(job, position, None)
        chosen = self._choose_victims(job, place)
        if chosen:
            for victim in chosen:
                self._preempt(victim, place)
            ids = tuple(victim.job_id for victim in chosen)
            why = Why("preemption", f"preempts {', '.join(ids)} on {label}")
            return self._launch(job, position, why, ids)
        start, extra = self._expected_start(job, place)
        self.reserved[place] = _Reservation(job, start, extra)
        return self._wait(job, position, self._capacity(job, place, start))

    def _quota(self, job: QueuedJob) -> Why | None:
        if job.gpus <= 0:
            return None
        team = self.policy.team(job.team)
        used = self.team_gpus.get(job.team, 0.0)
        if team.max_gpus is not None and used + job.gpus > team.max_gpus + _EPS:
            detail = f"team {job.team} at {used:g}/{team.max_gpus:g} GPUs, job needs {job.gpus:g}"
            return Why("quota", detail)
        limit = team.model_limit(job.gpu_model) if job.gpu_model else None
        if limit is not None:
            used = self.model_gpus.get((job.team, job.gpu_model.casefold()), 0.0)
            if used + job.gpus > limit + _EPS:
                detail = (
                    f"team {job.team} at {used:g}/{limit:g} {job.gpu_model} GPUs, "
                    f"job needs {job.gpus:g}"
                )
                return Why("quota", detail)
        return None

    def _budget(self, job: QueuedJob) -> Why | None:
        budget = self.policy.team(job.team).monthly_budget
        if budget is None or job.expected_cost <= 0:
            return None
        spent = self.spent.get(job.team, 0.0)
        if spent + job.expected_cost > budget + _EPS:
            detail = (
                f"team {job.team} at ${spent:,.2f} of ${budget:,.2f} this month, "
                f"job needs ${job.expected_cost:,.2f}"
            )
            return Why("budget", detail)
        return None

    def _capacity(self, job: QueuedJob, place: Place, start: datetime | None = None) -> Why:
        """Why `job` does not fit: the GPUs went to a job ranked ahead, or there are too few."""
        label = f"{place[0]}:{place[1]}"
        taken = self.launched.get(place)
        if taken and job.gpus <= self.initial_free[place] + _EPS:
            first = taken[0]
            why = self._behind(first, job)
            if why != "capacity":
                return Why(why, f"the free GPUs on {label} went to {job_label(first)}")
        text = f"{self.free[place]:g} GPUs free on {label}, job needs {job.gpus:g}"
        if start is not None:
            text += f" (expected by {_when(start)})"
        return Why("capacity", text)

    def _behind(self, ahead: QueuedJob, job: QueuedJob) -> Category:
        """The category of why `ahead` ranks before `job`."""
        if ahead.priority > job.priority:
            return "lower priority"
        if self.scores[ahead.job_id] > self.scores[job.job_id]:
            return "fair share"
        return "capacity"  # first come, first served

    # --- preemption and backfill -------------------------------------------------

    def _choose_victims(self, job: QueuedJob, place: Place) -> tuple[RunningJob, ...]:
        """The victims that free enough GPUs for `job`, or () when none can.

        Candidates: preemptible, unprotected, lower priority, same GPU model (another
        model's GPUs cannot run the job). Among them: fewest victims; then the
        lowest highest priority; then the first set in the order (priority, most
        recently started, job_id).
        """
        need = job.gpus - self.free[place]
        model = job.gpu_model.casefold()
        pool = [
            r
            for r in self.victims[place]
            if r.priority < job.priority and (not model or r.gpu_model.casefold() == model)
        ]
        pool.sort(key=lambda r: (r.priority, -r.started_at.timestamp(), r.job_id))
        count = _fewest(pool, need)
        if count is None:
            return ()
        for ceiling in sorted({r.priority for r in pool}):
            allowed = [r for r in pool if r.priority <= ceiling]
            if _fewest(allowed, need) == count:
                pool = allowed
                break
        chosen: list[RunningJob] = []
        got, rest = 0.0, pool
        for slot in range(count):
            left = count - slot - 1
            for i, candidate in enumerate(rest):
                tail = sorted((r.gpus for r in rest[i + 1 :]), reverse=True)[:left]
                if got + candidate.gpus + sum(tail) >= need - _EPS:
                    chosen.append(candidate)
                    got += candidate.gpus
                    rest = rest[i + 1 :]
                    break
        return tuple(chosen)

    def _preempt(self, victim: RunningJob, place: Place) -> None:
        self.victims[place].remove(victim)
        del self.ends[place][victim.job_id]
        self.free[place] += victim.gpus
        self._hold(victim.team, victim.gpu_model, -victim.gpus)

    def _expected_start(self, job: QueuedJob, place: Place) -> tuple[datetime | None, float]:
        """When running jobs' expected ends first leave enough GPUs free, and how many spare."""
        free = self.free[place]
        for end, gpus in sorted(self.ends[place].values()):
            free += gpus
            if free + _EPS >= job.gpus:
                return end, free - job.gpus
        return None, math.inf

    # --- outcomes ----------------------------------------------------------------

    def _launch(
        self, job: QueuedJob, position: int, why: Why | None, preempts: tuple[str, ...] = ()
    ) -> Verdict:
        self._hold(job.team, job.gpu_model, job.gpus)
        self.spent[job.team] = self.spent.get(job.team, 0.0) + job.expected_cost
        place = (job.cloud, job.region)
        if place in self.free:
            self.free[place] -= job.gpus
            end = self.now + timedelta(hours=job.expected_hours)
            self.ends[place][job.job_id] = (end, job.gpus)
            self.launched.setdefault(place, []).append(job)
        if why is None:
            return Verdict(job.job_id, "launch", "", preempts, position)
        return Verdict(job.job_id, "launch", why.text, preempts, position, why.category)

    def _wait(self, job: QueuedJob, position: int, why: Why) -> Verdict:
        return Verdict(job.job_id, "wait", why.text, position=position, category=why.category)


def _fewest(pool: Sequence[RunningJob], need: float) -> int | None:
    """The fewest jobs of `pool` whose GPUs add up to `need`; None when all fall short."""
    got = 0.0
    for count, gpus in enumerate(sorted((r.gpus for r in pool), reverse=True), start=1):
        got += gpus
        if got >= need - _EPS:
            return count
    return None


def job_label(job: QueuedJob) -> str:
    """`job-id (team nlp, priority 5)`: a job as reasons name it."""
    return f"{job.job_id} (team {job.team}, priority {job.priority})"


def _when(moment: datetime) -> str:
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}{utc:-%m-%dT%H:%MZ}"
