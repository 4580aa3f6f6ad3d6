"""Queue position and estimated start of every waiting gang: a pure function of the folded cell and the policy.

Position: in the cell's admission order (the admitter's `order_key`: within-nominal work first, then priority,
weighted dominant share and submit order) and within the gang's team.

Estimated start: Slurm's conservative-backfill estimate (`squeue --start`), counted in GPUs of each type:
- GPUs held now come back when the work holding them reaches its time limit (a gang being preempted: its
  checkpoint deadline); work past its limit counts as ending now, work without a limit never gives its GPUs back.
- A gang holding a reservation starts when its reserved nodes drain (the reservation's shadow time).
- The other gangs are planned one by one in admission order (the first `horizon` of them): each at the
  earliest time its GPU type has room for its smallest admissible gang and its team's quota admits it, for as
  long as its own time limit (for ever without one), and it takes that room from every gang behind it. Under a
  policy without backfill (strict FIFO) no gang starts before the one ahead of it.

Node slots, fragmentation and topology constraints are not modelled: a gang may start later than estimated.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from projections.cell import CellState
from projections.jobs import Job, JobState
from services.core.placement import expected_end, shadow_time
from services.core.queue import queue_order

if TYPE_CHECKING:  # the policy is a value the caller passes in
    from services.policy import Policy

#: Gangs planned in admission order; those behind are given positions but no estimated start (Slurm's
#: bf_max_job_test): planning is linear in the segments of the profile per gang.
DEFAULT_HORIZON = 500
_NAMED = 5  # jobs named in an explanation


class Basis(StrEnum):
    """How an estimated start was arrived at, or why there is none."""

    NOW = "now"  # room by GPU count and quota now
    TIME_LIMITS = "time_limits"  # when running work ahead of it reaches its time limits
    RESERVATION = "reservation"  # when its reserved nodes drain
    BACKOFF = "backoff"  # when its requeue back-off ends
    UNKNOWN_END = "unknown_end"  # no start: the GPUs or quota it needs are held by work without a time limit
    BEHIND_UNKNOWN = "behind_unknown"  # no start: strict FIFO behind a gang whose start is unknown
    TOO_LARGE = "too_large"  # no start: larger than the GPUs in service, or than its quota can ever admit
    BEYOND_HORIZON = "beyond_horizon"  # no start: not among the first gangs planned


@dataclass(frozen=True)
class Estimate:
    """A waiting gang's place in line and when it should start (event time, ms), with how that was computed."""

    job_id: str
    team_position: int  # 1 = next of its team
    team_waiting: int
    cell_position: int  # 1 = next in the cell's admission order
    cell_waiting: int
    start: int | None
    basis: Basis
    detail: str
    waits_for: tuple[str, ...] = ()  # jobs whose expected end lets it start (running, or planned ahead of it)
    ahead_gpus: int = 0  # GPUs of its type taken by gangs planned ahead of it and still held when it starts
    earliest: int | None = None  # the interval the start should fall in, when there is a start
    latest: int | None = None


@dataclass
class _Segment:
    """From `start` until the next segment: GPUs of one type free, and quota used per (team, type)."""

    start: int
    free: int
    usage: dict[tuple[str, str], int]
    ending: list[str] = field(default_factory=list)  # jobs whose GPUs come back at `start`


class _Profile:
    """Free GPUs and quota usage of one GPU type over future time, as piecewise-constant segments."""

    def __init__(self, now: int, free: int, usage: dict[tuple[str, str], int]) -> None:
        self.segments = [_Segment(now, free, dict(usage))]
        self.never_back: list[str] = []  # holders without a time limit

    def starts(self) -> list[int]:
        return [s.start for s in self.segments]

    def split(self, at: int) -> int:
        """Index of the segment starting at `at`, made by splitting the one that covers it."""
        starts = self.starts()
        i = bisect_left(starts, at)
        if i < len(starts) and starts[i] == at:
            return i
        before = self.segments[i - 1]
        self.segments.insert(i, _Segment(at, before.free, dict(before.usage)))
        return i

    def change(self, since: int, until: int | None, gpus: int, key: tuple[str, str], job_id: str | None = None,
               ending: bool = False) -> None:
        """Adds `gpus` free GPUs (negative: takes them) and removes them from `key`'s usage over [since, until)."""
        first = self.split(since)
        last = len(self.segments) if until is None else self.split(until)
        for segment in self.segments[first:last]:
            segment.free += gpus
            segment.usage[key] = segment.usage.get(key, 0) - gpus
        if ending and job_id is not None:
            self.segments[first].ending.append(job_id)


def forecast(state: CellState, policy: Policy, horizon: int = DEFAULT_HORIZON) -> dict[str, Estimate]:
    """The estimate of every QUEUED gang, by job id."""
    admission = policy.admission
    waiting = list(queue_order(state, [state.jobs[j] for j in sorted(state.queued)], admission.fair_share,
                               admission.nominal_first))
    team_rank: dict[str, int] = {}
    team_place: dict[str, int] = {}
    for job in waiting:
        team_rank[job.team] = team_rank.get(job.team, 0) + 1
        team_place[job.job_id] = team_rank[job.team]
    profiles = _profiles(state, policy)
    planner = _Planner(state, policy, profiles)
    planned: dict[str, tuple[int | None, Basis, str, tuple[str, ...], int]] = {}
    holders = [job for job in waiting if job.job_id in state.reservations]
    for job in holders:
        planned[job.job_id] = planner.plan_reserved(job)
    for job in [job for job in waiting if job.job_id not in state.reservations][:max(0, horizon - len(holders))]:
        planned[job.job_id] = planner.plan(job)
    out = {}
    for position, job in enumerate(waiting, 1):
        start, basis, detail, waits_for, ahead = planned.get(
            job.job_id, (None, Basis.BEYOND_HORIZON, f"only the first {horizon} waiting gangs are planned", (), 0))
        out[job.job_id] = Estimate(job.job_id, team_place[job.job_id], team_rank[job.team], position, len(waiting),
                                   start, basis, detail, waits_for, ahead)
    return out


def _release_time(job: Job, now: int) -> int | None:
    """When a job holding GPUs gives them back: its checkpoint deadline when preempted, else its time limit."""
    if job.state is JobState.PREEMPTING and job.preemption_deadline is not None:
        end = job.preemption_deadline
    else:
        end = expected_end(job)
    return None if end is None else max(end, now)


def _profiles(state: CellState, policy: Policy) -> dict[str, _Profile]:
    """Per GPU type: GPUs free now, and when the work holding GPUs and quota gives them back."""
    now, cluster = state.now, state.cluster
    profiles = {}
    for gpu_type in cluster.gpu_types():
        free = sum(node.free for node in cluster.of_type(gpu_type) if node.schedulable)
        usage = {key: used for key, used in state.tenancy.usage.items() if key[1] == gpu_type}
        profiles[gpu_type] = _Profile(now, free, usage)
    for job_id in sorted(state.holding):
        job = state.jobs[job_id]
        profile = profiles.get(job.gpu_type)
        if profile is None:
            continue
        end = _release_time(job, now)
        if end is None:
            profile.never_back.append(job_id)
            continue
        # GPUs on nodes that cannot take work stay out of the count when they come back.
        gpus = sum(len([g for g in indices if g not in cluster.nodes[name].retired])
                   for _, name, indices in job.assignments
                   if name in cluster.nodes and cluster.nodes[name].schedulable)
        profile.change(end, None, gpus, (job.team, job.gpu_type), job_id, ending=True)
        if gpus != job.held_gpus:  # quota is given back in full even where GPUs are not
            for segment in profile.segments[profile.split(end):]:
                segment.usage[(job.team, job.gpu_type)] -= job.held_gpus - gpus
    return profiles


class _Planner:
    """Plans gangs one by one into the profiles, in the order it is given them."""

    def __init__(self, state: CellState, policy: Policy, profiles: dict[str, _Profile]) -> None:
        self.state, self.policy, self.profiles = state, policy, profiles
        self.fifo = not policy.admission.backfill
        self.last_start = state.now  # strict FIFO: no gang starts before the one ahead of it
        self.blocked_by: str | None = None  # strict FIFO: the first gang without a start
        self.planned: dict[str, tuple[int, int | None]] = {}  # planned gang -> (start, when it gives its GPUs back)

    def plan_reserved(self, job: Job) -> tuple[int | None, Basis, str, tuple[str, ...], int]:
        nodes = self.state.reservations[job.job_id]
        shadow = shadow_time(self.state, nodes, self.state.now)
        if shadow is None:
            holders = sorted({j for n in nodes if n in self.state.cluster.nodes
                              for j in self.state.cluster.nodes[n].holder.values()
                              if expected_end(self.state.jobs[j]) is None})
            return (None, Basis.UNKNOWN_END,
                    f"holds a reservation on {_names(nodes)}, held by work without a time limit ({_names(holders)})",
                    tuple(holders[:_NAMED]), 0)
        start = max(shadow, job.not_before)
        self._take(job, start)
        draining = sorted({j for n in nodes if n in self.state.cluster.nodes
                           for j in self.state.cluster.nodes[n].holder.values()})
        why = (f"holds a reservation on {_names(nodes)}: they drain by {_clock(start, self.state.now)}"
               + (f", when the work on them ends by its time limit ({_names(draining)})" if draining else ""))
        return start, Basis.RESERVATION, why, tuple(draining[:_NAMED]), 0

    def plan(self, job: Job) -> tuple[int | None, Basis, str, tuple[str, ...], int]:
        state, now = self.state, self.state.now
        need, gpu_type = job.min_gpus, job.gpu_type
        capacity = state.cluster.capacity(gpu_type)
        if need > capacity:
            return None, Basis.TOO_LARGE, f"needs {need} {gpu_type} GPUs; {capacity} are in service", (), 0
        if not state.tenancy.admissible(job.team, gpu_type, need, self.policy.admission.borrowing, {}).fits:
            quota = state.tenancy.quota(job.team, gpu_type)
            why = f"its team's quota cannot admit {need} {gpu_type} GPUs even unused (nominal {quota.nominal})"
            return None, Basis.TOO_LARGE, why, (), 0
        if self.blocked_by is not None:
            return (None, Basis.BEHIND_UNKNOWN, f"strict FIFO: waits behind {self.blocked_by}, whose start is unknown",
                    (self.blocked_by,), 0)
        profile = self.profiles.get(gpu_type)
        ready = max(now, job.not_before, self.last_start if self.fifo else now)
        start = self._earliest(job, profile, ready) if profile is not None else None
        if start is None:
            self.blocked_by = job.job_id if self.fifo else None
            never = profile.never_back if profile is not None else []
            return (None, Basis.UNKNOWN_END,
                    f"needs {need} {gpu_type} GPUs that only come free when work without a time limit ends"
                    + (f" ({_names(never)})" if never else ""), tuple(never[:_NAMED]), 0)
        ahead = self._ahead_gpus(profile, start, job)
        self._take(job, start)
        self.last_start = start
        if start == now:
            return (start, Basis.NOW, f"{need} {gpu_type} GPUs are free and its quota admits them now; it waits for "
                    "the next admission cycle, or for room on fitting nodes", (), ahead)
        ending = profile.segments[profile.split(start)].ending
        if start == job.not_before and not ending:
            return start, Basis.BACKOFF, f"backs off after a requeue until {_clock(start, now)}", (), ahead
        running = [j for j in ending if j not in self.planned]
        planned = [j for j in ending if j in self.planned]
        parts = [f"running work ends by its time limit ({_names(running)})"] if running else []
        parts += [f"gangs planned ahead of it end by their time limits ({_names(planned)})"] if planned else []
        queue = f"; gangs planned ahead of it hold {ahead} {gpu_type} GPUs then" if ahead else ""
        return (start, Basis.TIME_LIMITS, f"{need} {gpu_type} GPUs free by {_clock(start, now)}, when "
                + " and ".join(parts or ["work reaches its time limits"]) + queue, tuple(ending[:_NAMED]), ahead)

    def _earliest(self, job: Job, profile: _Profile, ready: int) -> int | None:
        """The earliest time from `ready` at which the gang fits for as long as its time limit."""
        tenancy, borrowing = self.state.tenancy, self.policy.admission.borrowing
        need, duration = job.min_gpus, job.time_limit_ms
        segments = profile.segments
        i = max(0, bisect_left(profile.starts(), ready + 1) - 1)  # the segment covering `ready`
        window: int | None = None  # start of the run of fitting segments being extended
        for segment in segments[i:]:
            if window is not None and duration is not None and segment.start >= window + duration:
                return window
            fits = (segment.free >= need
                    and _quota_allows(tenancy.admissible(job.team, job.gpu_type, need, borrowing, segment.usage)))
            if not fits:
                window = None
            elif window is None:
                window = max(segment.start, ready)
        return window

    def _take(self, job: Job, start: int) -> None:
        """The gang holds its GPUs and quota from `start` for its time limit (for ever without one)."""
        profile = self.profiles.get(job.gpu_type)
        until = None if job.time_limit_ms is None else start + job.time_limit_ms
        self.planned[job.job_id] = (start, until)
        if profile is None:
            return
        profile.change(start, until, -job.min_gpus, (job.team, job.gpu_type))
        if until is not None:
            profile.segments[profile.split(until)].ending.append(job.job_id)

    def _ahead_gpus(self, profile: _Profile, start: int, job: Job) -> int:
        """GPUs of gangs planned ahead of `job` that are still held when it starts."""
        return sum(self.state.jobs[j].min_gpus for j, (began, end) in self.planned.items()
                   if self.state.jobs[j].gpu_type == job.gpu_type and began <= start and (end is None or end > start))


def _quota_allows(fit) -> bool:
    """Quota admits the gang, or would once the preemptor reclaims what its team lent."""
    return fit.fits or fit.limit == "reclaim"


def _names(ids) -> str:
    ids = list(ids)
    shown = ", ".join(ids[:_NAMED])
    return shown + (f" and {len(ids) - _NAMED} more" if len(ids) > _NAMED else "")


def _clock(at: int, now: int) -> str:
    """A time as an offset from now, in the log's terms (event time)."""
    seconds = max(0, at - now) // 1000
    if seconds < 120:
        return f"now + {seconds} s"
    if seconds < 7200:
        return f"now + {seconds // 60} min"
    return f"now + {seconds // 3600} h {seconds % 3600 // 60} min"
