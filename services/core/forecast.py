"""Queue position and estimated start of every waiting gang: a pure function of the folded cell and the policy.

Position: in the cell's admission order (the admitter's `order_key`: within-nominal work first, then priority,
weighted dominant share, and deadline or submit order) and within the gang's team.

Estimated start: Slurm's conservative-backfill plan (`squeue --start`), counted in GPUs of each type, made
three times with three views of how long work holds its GPUs, which give the estimate and its interval:
- GPUs held now come back when the work holding them ends (a gang being preempted: at its checkpoint deadline);
  work without a time limit never gives its GPUs back.
- A gang holding a reservation starts when its reserved nodes drain (the reservation's shadow time).
- The other gangs are planned one by one in admission order (the first `horizon` of them): each at the
  earliest time its GPU type has room for its smallest admissible gang and its team's quota admits it, for as
  long as it holds GPUs (for ever without a time limit), and it takes that room from every gang behind it. Under
  a policy without backfill (strict FIFO) no gang starts before the one ahead of it.
- The gangs behind those are not planned one by one but as a queue draining (`queue_drain`): from the last
  planned start, the GPU-time still held then and the GPU-time of the gangs ahead of it run through the GPUs
  of its type that come back; it starts when they have (the `earliest`: when its GPUs are free with only the
  running work holding any, as for the gangs planned). Slots and quota are not modelled there.

How long work holds GPUs (`Runtimes`): jobs use part of their time limit, and the cell's own history says how
much. The fractions of their time limits that the cell's most recently finished jobs ran make a distribution;
a running job is expected to end at a quantile of that distribution among the fractions it has not yet passed
(at its time limit when it has passed them all), a planned gang to hold its GPUs for a quantile of it. The
`latest` start plans with time limits (work ends at its limit at the latest) and the `start` with the median.
The `earliest` plans with a low quantile and lets each gang see only the work running and the reservations, not
the gangs ahead of it (backfill's best case: those wait for bigger room than it needs, or get it elsewhere).
Without any history the `start` is the time-limit plan, and the `earliest` uses time limits too.

Node slots, fragmentation and topology constraints are not modelled, nor work that arrives later and is ranked
ahead: a gang may start later than estimated.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from projections.cell import CellState
from projections.jobs import Job, JobState
from projections.reservations import expected_end
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
    TIME_LIMITS = "time_limits"  # when running work ahead of it ends (by its time limit at the latest)
    RESERVATION = "reservation"  # when its reserved nodes drain
    BACKOFF = "backoff"  # when its requeue back-off ends
    UNKNOWN_END = "unknown_end"  # no start: the GPUs or quota it needs are held by work without a time limit
    BEHIND_UNKNOWN = "behind_unknown"  # no start: strict FIFO behind a gang whose start is unknown
    TOO_LARGE = "too_large"  # no start: larger than the GPUs in service, or than its quota can ever admit
    QUEUE_DRAIN = "queue_drain"  # behind the planned gangs: when the GPU-time held and queued ahead of it has run
    BEYOND_HORIZON = "beyond_horizon"  # no start: behind the planned gangs, and GPU-time ahead of it has no bound


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
    earliest: int | None = None  # the start if work ends early (a low quantile of the cell's runtimes)
    latest: int | None = None  # the start if work runs to its time limits


@dataclass
class _Segment:
    """From `start` until the next segment: GPUs of one type free, and quota used per (team, type)."""

    start: int
    free: int
    usage: dict[tuple[str, str], int]
    ending: list[str] = field(default_factory=list)  # jobs whose GPUs come back at `start`
    planned: int = 0  # GPUs taken by the gangs planned so far
    quota: dict[tuple[str, int], bool] = field(default_factory=dict)  # (team, GPUs) -> quota admits them here


class _Profile:
    """Free GPUs and quota usage of one GPU type over future time, as piecewise-constant segments."""

    def __init__(self, now: int, free: int, usage: dict[tuple[str, str], int]) -> None:
        self.segments = [_Segment(now, free, dict(usage))]
        self.starts = [now]  # each segment's start, for bisection
        self.never_back: list[str] = []  # holders without a time limit

    def split(self, at: int) -> int:
        """Index of the segment starting at `at`, made by splitting the one that covers it."""
        starts = self.starts
        i = bisect_left(starts, at)
        if i < len(starts) and starts[i] == at:
            return i
        before = self.segments[i - 1]
        self.segments.insert(i, _Segment(at, before.free, dict(before.usage), planned=before.planned))
        starts.insert(i, at)
        return i

    def change(self, since: int, until: int | None, gpus: int, key: tuple[str, str], job_id: str | None = None,
               ending: bool = False, planned: bool = False) -> None:
        """Adds `gpus` free GPUs (negative: takes them) and removes them from `key`'s usage over [since, until);
        `planned`: a planned gang takes them."""
        first = self.split(since)
        last = len(self.segments) if until is None else self.split(until)
        for segment in self.segments[first:last]:
            segment.free += gpus
            segment.usage[key] = segment.usage.get(key, 0) - gpus
            segment.quota.clear()
            if planned:
                segment.planned -= gpus
        if ending and job_id is not None:
            self.segments[first].ending.append(job_id)


#: The quantiles of the runtime distribution the three plans use (1.0: the time limits). With the 90th percentile
#: for the latest start instead of the limits, the share of real starts inside the interval fell from 95% to 72%
#: on the first 1,500 jobs of ITP cluster02 (replay/sim/estimates.py).
EARLIEST_QUANTILE, EXPECTED_QUANTILE, LATEST_QUANTILE = 0.1, 0.5, 1.0


@dataclass(frozen=True)
class Runtimes:
    """How long work holds its GPUs, as fractions of its time limit: sorted, from the cell's recent history."""

    fractions: tuple[float, ...] = ()

    def hold(self, job: Job, quantile: float) -> int | None:
        """How long a gang that has not started holds its GPUs (None: for ever, it has no time limit)."""
        limit = job.time_limit_ms
        if limit is None:
            return None
        return max(1, round(limit * _quantile(self.fractions, quantile))) if self.fractions and quantile < 1 else limit

    def end(self, job: Job, start: int, now: int, quantile: float) -> int | None:
        """When work that started at `start` is expected to end, given it still runs at `now` (None: never)."""
        limit = job.time_limit_ms
        if limit is None:
            return None
        if quantile >= 1 or not self.fractions:
            return max(start + limit, now)
        ran = (now - start) / limit
        left = self.fractions[bisect_left(self.fractions, ran):]  # the runtimes it has not yet passed
        fraction = _quantile(left, quantile) if left else 1.0
        return max(start + round(limit * fraction), now)


def runtimes(state: CellState) -> Runtimes:
    """The fractions of their time limits that the cell's most recently submitted finished jobs ran (their
    one attempt, from its gang running to success): the cell keeps them when the jobs leave its state."""
    return Runtimes(tuple(sorted(state.recent_runtimes())))


def _quantile(values: tuple[float, ...], q: float) -> float:
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def forecast(state: CellState, policy: Policy, horizon: int = DEFAULT_HORIZON,
             model: Runtimes | None = None) -> dict[str, Estimate]:
    """The estimate of every QUEUED gang, by job id."""
    admission = policy.admission
    waiting = list(queue_order(state, [state.jobs[j] for j in sorted(state.queued)], admission))
    team_rank: dict[str, int] = {}
    team_place: dict[str, int] = {}
    for job in waiting:
        team_rank[job.team] = team_rank.get(job.team, 0) + 1
        team_place[job.job_id] = team_rank[job.team]
    model = runtimes(state) if model is None else model
    latest = _plan(state, policy, waiting, horizon, model, LATEST_QUANTILE)
    expected = _plan(state, policy, waiting, horizon, model, EXPECTED_QUANTILE) if model.fractions else latest
    earliest = _plan(state, policy, waiting, horizon, model, EARLIEST_QUANTILE)
    out = {}
    for position, job in enumerate(waiting, 1):
        job_id = job.job_id
        start, basis, detail, waits_for, ahead = expected.get(
            job_id, (None, Basis.BEYOND_HORIZON, f"only the first {horizon} waiting gangs are planned", (), 0))
        low, high = earliest.get(job_id, (None,))[0], latest.get(job_id, (None,))[0]
        if start is not None and low is not None and high is not None:
            low, high = min(low, start), max(high, start)
            if high > low and basis in (Basis.TIME_LIMITS, Basis.RESERVATION, Basis.QUEUE_DRAIN):
                detail += _interval_note(model, low, high, state.now)
        else:
            low = high = None
        out[job_id] = Estimate(job_id, team_place[job_id], team_rank[job.team], position, len(waiting),
                               start, basis, detail, waits_for, ahead, low, high)
    return out


def _interval_note(model: Runtimes, low: int, high: int, now: int) -> str:
    if not model.fractions:
        return ""
    median = _quantile(model.fractions, EXPECTED_QUANTILE)
    return (f" (expected: work runs {median:.0%} of its time limit, the median of the cell's last "
            f"{len(model.fractions)} finished jobs; between {_clock(low, now)} if it ends early and "
            f"{_clock(high, now)} if it runs to its limits)")


Planned = tuple[int | None, Basis, str, tuple[str, ...], int]


def _plan(state: CellState, policy: Policy, waiting: list[Job], horizon: int, model: Runtimes,
          quantile: float) -> dict[str, Planned]:
    """Each waiting gang's start, how it was arrived at, whom it waits for, and GPUs taken ahead of it."""
    planner = _Planner(state, policy, _profiles(state, model, quantile), model, quantile,
                       detail=quantile == EXPECTED_QUANTILE or not model.fractions, queue=quantile != EARLIEST_QUANTILE)
    planned: dict[str, Planned] = {}
    holders = [job for job in waiting if job.job_id in state.reservations]
    for job in holders:
        planned[job.job_id] = planner.plan_reserved(job)
    rest = [job for job in waiting if job.job_id not in state.reservations]
    planning = max(0, horizon - len(holders))
    for job in rest[:planning]:
        planned[job.job_id] = planner.plan(job)
    for job in rest[planning:]:
        planned[job.job_id] = planner.drain(job, horizon)
    return planned


def _release_time(job: Job, now: int, model: Runtimes, quantile: float) -> int | None:
    """When a job holding GPUs gives them back: its checkpoint deadline when preempted, else when it is expected
    to end."""
    if job.state is JobState.PREEMPTING and job.preemption_deadline is not None:
        return max(job.preemption_deadline, now)
    start = job.running_since if job.running_since is not None else job.admitted_at
    return None if start is None else model.end(job, start, now, quantile)


def _profiles(state: CellState, model: Runtimes, quantile: float) -> dict[str, _Profile]:
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
        end = _release_time(job, now, model, quantile)
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

    def __init__(self, state: CellState, policy: Policy, profiles: dict[str, _Profile], model: Runtimes,
                 quantile: float, detail: bool = True, queue: bool = True) -> None:
        self.state, self.policy, self.profiles = state, policy, profiles
        self.model, self.quantile = model, quantile
        self.detail = detail  # count the GPUs held ahead of each gang (only the plan whose words are shown needs it)
        self.queue = queue  # gangs take room from those behind them; without, each sees only running work and
        # reservations (backfill's best case: the gangs ahead of it wait for bigger room than it needs)
        self.fifo = not policy.admission.backfill
        self.last_start = state.now  # strict FIFO: no gang starts before the one ahead of it
        self.blocked_by: str | None = None  # strict FIFO: the first gang without a start
        self.planned: dict[str, tuple[int, int | None]] = {}  # planned gang -> (start, when it gives its GPUs back)
        self.frontier: dict[str, int] = {}  # GPU type -> the latest start planned one by one
        self.queues: dict[str, _Drain] = {}  # GPU type -> the queue behind the gangs planned one by one
        self.first_free: dict[tuple[str, int], int | None] = {}  # (GPU type, GPUs) -> when so many are free for good

    def plan_reserved(self, job: Job) -> Planned:
        nodes = self.state.reservations[job.job_id]
        shadow = self._shadow(nodes)
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
               + (f", when the work on them ends ({_names(draining)})" if draining else ""))
        return start, Basis.RESERVATION, why, tuple(draining[:_NAMED]), 0

    def _shadow(self, nodes: tuple[str, ...]) -> int | None:
        """When reserved nodes drain: the latest expected end of the work on them (None: one has no time limit)."""
        state, now = self.state, self.state.now
        holders = sorted({j for n in nodes if n in state.cluster.nodes for j in state.cluster.nodes[n].holder.values()})
        shadow = now
        for job_id in holders:
            end = _release_time(state.jobs[job_id], now, self.model, self.quantile)
            if end is None:
                return None
            shadow = max(shadow, end)
        return shadow

    def _never(self, job: Job) -> Planned | None:
        """Why the gang has no start whatever runs: too large for the cell or its quota, or strict FIFO behind a
        gang without one."""
        state, need, gpu_type = self.state, job.min_gpus, job.gpu_type
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
        return None

    def plan(self, job: Job) -> Planned:
        now = self.state.now
        need, gpu_type = job.min_gpus, job.gpu_type
        never = self._never(job)
        if never is not None:
            return never
        profile = self.profiles.get(gpu_type)
        ready = max(now, job.not_before, self.last_start if self.fifo else now)
        start = self._earliest(job, profile, ready) if profile is not None else None
        if start is None:
            self.blocked_by = job.job_id if self.fifo else None
            never = profile.never_back if profile is not None else []
            return (None, Basis.UNKNOWN_END,
                    f"needs {need} {gpu_type} GPUs that only come free when work without a time limit ends"
                    + (f" ({_names(never)})" if never else ""), tuple(never[:_NAMED]), 0)
        ahead = self._ahead_gpus(profile, start, job) if self.detail else 0
        if self.queue or self.fifo:
            self._take(job, start)
        self.last_start = start
        self.frontier[gpu_type] = max(self.frontier.get(gpu_type, now), start)
        if start == now:
            return (start, Basis.NOW, f"{need} {gpu_type} GPUs are free and its quota admits them now; it waits for "
                    "the next admission cycle, or for room on fitting nodes", (), ahead)
        ending = profile.segments[profile.split(start)].ending
        if start == job.not_before and not ending:
            return start, Basis.BACKOFF, f"backs off after a requeue until {_clock(start, now)}", (), ahead
        running = [j for j in ending if j not in self.planned]
        planned = [j for j in ending if j in self.planned]
        parts = [f"running work ends ({_names(running)})"] if running else []
        parts += [f"gangs planned ahead of it end ({_names(planned)})"] if planned else []
        queue = f"; gangs planned ahead of it hold {ahead} {gpu_type} GPUs then" if ahead else ""
        return (start, Basis.TIME_LIMITS, f"{need} {gpu_type} GPUs free by {_clock(start, now)}, when "
                + " and ".join(parts or ["work ends"]) + queue, tuple(ending[:_NAMED]), ahead)

    def drain(self, job: Job, horizon: int) -> Planned:
        """A gang behind those planned one by one: when the GPU-time held at the last planned start, and that of
        the gangs between them and it, has run through the GPUs of its type that come back."""
        never = self._never(job)
        if never is not None:
            return never
        now, gpu_type = self.state.now, job.gpu_type
        if not self.queue and not self.fifo:  # backfill's best case: it sees only the running work, as those planned
            return self._first_free(job, horizon)
        queue = self.queues.get(gpu_type)
        if queue is None:
            queue = self.queues[gpu_type] = _Drain.behind(self.profiles.get(gpu_type),
                                                          self.frontier.get(gpu_type, now))
        if queue.unbounded is not None or queue.rate < job.min_gpus:
            why = (f"behind the first {horizon} waiting gangs, planned one by one; the GPUs it needs come back only "
                   "when work without a time limit ends" + (f" ({queue.unbounded})" if queue.unbounded else ""))
            return None, Basis.BEYOND_HORIZON, why, (queue.unbounded,) if queue.unbounded else (), 0
        ahead_ms = queue.held_ms + queue.queued_ms
        start = max(now, job.not_before, queue.since + -(-ahead_ms // queue.rate))
        if self.fifo:
            start = max(start, self.last_start)
            self.last_start = start
        hold = self.model.hold(job, self.quantile)
        if hold is None:
            queue.unbounded = job.job_id  # those behind it wait on work without a time limit
        else:
            queue.queued_ms += job.min_gpus * hold
        queue.gangs += 1
        why = (f"behind the first {horizon} waiting gangs, planned one by one: when the "
               f"{ahead_ms / 3_600_000:,.0f} GPU-hours held at the last of their starts ({_clock(queue.since, now)}) "
               f"and queued ahead of it ({queue.gangs - 1} gangs) have run on {queue.rate} {gpu_type} GPUs")
        return start, Basis.QUEUE_DRAIN, why, (), 0

    def _first_free(self, job: Job, horizon: int) -> Planned:
        """When the gang's GPUs are free if only the running work holds GPUs: their number only grows then, so the
        first moment they fit is for good (quota is not modelled here)."""
        need, gpu_type, now = job.min_gpus, job.gpu_type, self.state.now
        key = (gpu_type, need)
        if key not in self.first_free:
            profile = self.profiles.get(gpu_type)
            self.first_free[key] = next((segment.start for segment in profile.segments if segment.free >= need),
                                        None) if profile else None
        first = self.first_free[key]
        if first is None:
            return (None, Basis.BEYOND_HORIZON, f"behind the first {horizon} waiting gangs; the GPUs it needs come back "
                    "only when work without a time limit ends", (), 0)
        start = max(now, job.not_before, first)
        return start, Basis.QUEUE_DRAIN, f"{need} {gpu_type} GPUs free by {_clock(start, now)}", (), 0

    def _earliest(self, job: Job, profile: _Profile, ready: int) -> int | None:
        """The earliest time from `ready` at which the gang fits for as long as it holds GPUs."""
        tenancy, borrowing = self.state.tenancy, self.policy.admission.borrowing
        need, duration = job.min_gpus, self.model.hold(job, self.quantile)
        segments = profile.segments
        i = max(0, bisect_left(profile.starts, ready + 1) - 1)  # the segment covering `ready`
        window: int | None = None  # start of the run of fitting segments being extended
        key, asked = (job.team, job.gpu_type), (job.team, need)
        nominal = tenancy.quota(*key).nominal
        for segment in segments[i:]:
            if window is not None and duration is not None and segment.start >= window + duration:
                return window
            fits = segment.free >= need
            if fits and segment.usage.get(key, 0) + need > nominal:  # within its nominal, quota always allows it
                fits = segment.quota.get(asked)
                if fits is None:
                    fits = segment.quota[asked] = _quota_allows(
                        tenancy.admissible(job.team, job.gpu_type, need, borrowing, segment.usage))
            if not fits:
                window = None
            elif window is None:
                window = max(segment.start, ready)
        return window

    def _take(self, job: Job, start: int) -> None:
        """The gang holds its GPUs and quota from `start` for as long as it is expected to (for ever without a
        time limit)."""
        profile = self.profiles.get(job.gpu_type)
        hold = self.model.hold(job, self.quantile)
        until = None if hold is None else start + hold
        self.planned[job.job_id] = (start, until)
        if profile is None:
            return
        profile.change(start, until, -job.min_gpus, (job.team, job.gpu_type), planned=True)
        if until is not None:
            profile.segments[profile.split(until)].ending.append(job.job_id)

    def _ahead_gpus(self, profile: _Profile, start: int, job: Job) -> int:
        """GPUs of gangs planned ahead of `job` that are still held when it starts."""
        return profile.segments[bisect_right(profile.starts, start) - 1].planned


@dataclass
class _Drain:
    """The gangs of one GPU type behind those planned one by one, as a queue draining at `rate` GPUs from `since`."""

    since: int  # the last start planned one by one
    rate: int  # GPUs of the type that are free once all work with a known end has ended
    held_ms: int  # GPU-ms still held at `since` by work and planned gangs that end
    queued_ms: int = 0  # GPU-ms of the gangs queued behind so far
    gangs: int = 0
    unbounded: str | None = None  # a gang queued behind without a time limit: no start after it

    @classmethod
    def behind(cls, profile: _Profile | None, since: int) -> _Drain:
        if profile is None:
            return cls(since, 0, 0)
        segments = profile.segments
        rate = segments[-1].free  # what is held for ever never comes back
        held = 0
        for segment, following in zip(segments, segments[1:]):
            begin = max(segment.start, since)
            if following.start > begin:
                held += max(0, rate - segment.free) * (following.start - begin)
        return cls(since, rate, held)


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
