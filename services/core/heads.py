"""Queue heads and their expected start: what lower-ranked work may not delay (Slurm's backfill guarantee).

A gang that heads its team's queue (the first of the team's waiting gangs by priority and queue order) has an
expected start: now if it is admissible now (its quota fits and it has a placement); otherwise the earliest later time at
which, as the work holding GPUs and quota of its type gives them back by its time limits (a gang being
preempted: by its checkpoint deadline; work past its limit: now), its GPU type has room for its smallest
admissible gang and its team's quota admits it. Work without a time limit gives back its GPUs and quota only
`EVENTUALLY`, at unknown times after all work with one; a head that waits for it needs all that is free before
then. GPUs and quota held for other waiting gangs never come back in this count. Beyond now, node slots and topology are not modelled (like services/core/forecast.py). A head that holds
a reservation has its GPUs kept by its reserved nodes (EASY backfill, cell-wide), so only its quota counts here;
one with capacity held for it (CapacityHeld) is covered by the hold.

Lower-ranked work of the head's team and GPU type may start only when the head cannot start now, and then when it ends
by its own time limit before the head's expected start, or when the head still has room at that start with it
running (it uses only what the head will not need); a job without a time limit only the latter, and nothing
passes a head that waits for work without a time limit unless it leaves the head room just before that work's
unknown end. So admitting it never moves the head's expected start later. `head_start` is the plain definition on a folded state (the property tests use it as is); the
admitter's `Guard` computes the same once per head and cycle and keeps it current as the cycle admits.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeGuard

from projections.cell import CellState
from projections.jobs import Job, JobState
from projections.reservations import expected_end
from projections.tenancy import Tenancy
from projections.validate import LATEST_MS
from services.core.placement import CapacityView, Placement, off_limits, place_gang, shadow_times
from services.core.quota import quota_fit

if TYPE_CHECKING:  # the policy is a value the caller passes in
    from services.policy import Policy

#: The expected start of a head that waits for work without a time limit: later than any known time.
EVENTUALLY = LATEST_MS + 1

Usage = dict[tuple[str, str], int]


@dataclass
class HeadStart:
    """A head's expected start (None: it can never start on what the cell holds, so nothing delays it), with the
    GPUs of its type free and the quota usage at that time."""

    job: Job
    start: int | None
    free: int
    usage: Usage
    tenancy: Tenancy
    borrowing: bool
    count_gpus: bool = True  # False for a gang holding a reservation: its reserved nodes keep its GPUs

    def delayed_by(self, job: Job, gpus: int, now: int) -> bool:
        """Whether admitting `gpus` GPUs of `job` now would push the head's expected start later (when the head
        can start now, any admission of its GPU type might)."""
        if self.start is None or job.gpu_type != self.job.gpu_type:
            return False
        if self.start == now:
            return True
        return self._runs_at_start(job, now, self.start) and not self._fits(self.free - gpus, self._with(job, gpus))

    def admit(self, job: Job, gpus: int, now: int) -> bool:
        """Counts an admission that runs at the head's start; False when the start must be computed again (the
        admission took room the head needs: it ranked above the head)."""
        if self.start is None or job.gpu_type != self.job.gpu_type:
            return True
        if self.start == now:
            return False
        if not self._runs_at_start(job, now, self.start):
            return True
        self.free -= gpus
        self.usage = self._with(job, gpus)
        return self._fits(self.free, self.usage)

    @staticmethod
    def _runs_at_start(job: Job, now: int, start: int) -> bool:
        return job.time_limit_ms is None or start == EVENTUALLY or now + job.time_limit_ms > start

    def _with(self, job: Job, gpus: int) -> Usage:
        usage = dict(self.usage)
        key = (job.team, job.gpu_type)
        usage[key] = usage.get(key, 0) + gpus
        return usage

    def _fits(self, free: int, usage: Usage) -> bool:
        need = self.job.min_gpus
        return (free >= need or not self.count_gpus) and self.tenancy.admissible(self.job.team, self.job.gpu_type, need, self.borrowing,
                                                        usage).fits


def held_free(state: CellState, job: Job) -> int:
    """GPUs held for `job` that no job holds now: free for it alone."""
    nodes = state.cluster.nodes
    return sum(1 for _, name, gpus in job.held for g in gpus
               if name in nodes and nodes[name].schedulable and g not in nodes[name].holder
               and nodes[name].claimed.get(g) == job.job_id)


#: (when, GPUs that come free then, quota given back then, team): one job giving back what it holds.
Release = tuple[int, int, int, str]


def releases(state: CellState, gpu_type: str, admitted: Iterable[tuple[Job, int]] = (), now: int = 0) -> list[Release]:
    """When each job holding capacity of the type gives it back (EVENTUALLY without a time limit; a gang being
    preempted, by its deadline), with the GPUs that count as free then (those on schedulable nodes, healthy and
    held for no waiting gang) and its quota; `admitted` are gangs admitted at `now` but not folded yet. The list
    may be one kept in the state's memo (see `_Holding`): callers read it and never change it."""
    index = _Holding.of(state)
    held = index.ordered.get(gpu_type)
    if held is None:
        totals = index.totals.get(gpu_type, {})
        held = index.ordered[gpu_type] = sorted([_release(key, totals[key]) for key in index.keys.get(gpu_type, [])])
    if state.cluster.odd_holders.get(gpu_type):  # what comes back also depends on those nodes: kept per fold
        kept = index.odd.get(gpu_type)
        if kept is not None and kept[0] == state.changes:
            held = kept[1]
        else:
            held = _less_lost(held, _lost(state, index, gpu_type))
            index.odd[gpu_type] = (state.changes, held)
    extra = _admitted(admitted, gpu_type, now)
    return sorted([*held, *extra]) if extra else held


def _release(key: tuple[int, str], total: list[int]) -> Release:
    """The release of the work of one team ending at one time: (when, GPUs, quota, team)."""
    return (key[0], total[0], total[1], key[1])


def _lost(state: CellState, index: _Holding, gpu_type: str) -> dict[tuple[int, str], int]:
    """Per (time, team) of the releases, the GPUs that do not count as free when they come back: those on nodes
    out of service, and retired or claimed ones (the odd nodes, where a holder's GPUs are looked at one by one)."""
    cluster = state.cluster
    lost: dict[tuple[int, str], int] = {}
    for node in [cluster.nodes[name] for name in sorted(cluster.odd_holders.get(gpu_type, ()))]:
        for job_id in sorted(set(node.holder.values())):
            mine = index.contributions.get(job_id)
            if mine is None or mine[0] != gpu_type:
                continue
            for _, name, indices in state.jobs[job_id].assignments:
                if name == node.name:
                    counted = sum(1 for g in indices if g not in node.retired and g not in node.claimed) \
                        if node.schedulable else 0
                    lost[mine[1]] = lost.get(mine[1], 0) + len(indices) - counted
    return lost


def _less_lost(held: list[Release], lost: dict[tuple[int, str], int]) -> list[Release]:
    """The sorted releases `held` with the GPUs `lost` taken off theirs, sorted again (in few steps: only releases
    of one time can change places)."""
    if not any(lost.values()):
        return held
    out = list(held)
    for (at, team), gone in lost.items():
        if gone:
            i = bisect_left(out, (at,))  # the first release of that time: one per team follows
            while out[i][3] != team:
                i += 1
            _, gpus, quota, _ = out[i]
            out[i] = (at, gpus - gone, quota, team)
    out.sort()
    return out


class _Holding:
    """Each holding job's release (GPU type, (when, team), its GPUs, its quota) and their sums by type, time and
    team, kept in the state's memo and brought up to date from the jobs that moved since (`CellState.moved`): an
    admission cycle reads them without going through every running job. `ordered` keeps each type's releases sorted
    while none of its holders moves (most records move none: checkpoints, heartbeats, waiting gangs told why); where
    a holder's node is odd, `odd` keeps them until the next fold that may change anything (`CellState.changes`)."""

    KEY: ClassVar[str] = "heads.holding"

    def __init__(self, state: CellState) -> None:
        self.moved: set[str] = set()
        self.contributions: dict[str, tuple[str, tuple[int, str], int, int]] = {}
        self.totals: dict[str, dict[tuple[int, str], list[int]]] = {}  # type -> (when, team) -> [GPUs, quota, jobs]
        self.keys: dict[str, list[tuple[int, str]]] = {}  # type -> its totals' (when, team), sorted
        self.ordered: dict[str, list[Release]] = {}  # type -> its totals as `releases`, while no node is odd
        #: type -> (`CellState.changes`, its releases) made while some of its nodes were odd
        self.odd: dict[str, tuple[int, list[Release]]] = {}
        for job_id in state.holding:
            self._add(state.jobs[job_id])

    @classmethod
    def of(cls, state: CellState) -> _Holding:
        index = state.memo.get(cls.KEY)
        if index is None or state.moved is None or index.moved is not state.moved:
            index = state.memo[cls.KEY] = cls(state)
            state.moved = index.moved
        elif index.moved:
            for job_id in sorted(index.moved):
                index._remove(job_id)
                if job_id in state.holding:
                    index._add(state.jobs[job_id])
            index.moved.clear()
        return index

    def _add(self, job: Job) -> None:
        end = job.preemption_deadline if job.state is JobState.PREEMPTING else expected_end(job)
        key = (EVENTUALLY if end is None else end, job.team)
        gpus, quota = sum(len(indices) for _, _, indices in job.assignments), job.held_gpus
        self.contributions[job.job_id] = (job.gpu_type, key, gpus, quota)
        self.ordered.pop(job.gpu_type, None)
        total = self.totals.setdefault(job.gpu_type, {}).get(key)
        if total is None:
            self.totals[job.gpu_type][key] = [gpus, quota, 1]
            insort(self.keys.setdefault(job.gpu_type, []), key)
        else:
            total[0] += gpus
            total[1] += quota
            total[2] += 1

    def _remove(self, job_id: str) -> None:
        mine = self.contributions.pop(job_id, None)
        if mine is None:
            return
        gpu_type, key, gpus, quota = mine
        self.ordered.pop(gpu_type, None)
        total = self.totals[gpu_type][key]
        total[0] -= gpus
        total[1] -= quota
        total[2] -= 1
        if not total[2]:
            del self.totals[gpu_type][key]
            keys = self.keys[gpu_type]
            del keys[bisect_left(keys, key)]


def _admitted(admitted: Iterable[tuple[Job, int]], gpu_type: str, now: int) -> list[Release]:
    return [(EVENTUALLY if job.time_limit_ms is None else now + job.time_limit_ms, gpus, gpus, job.team)
            for job, gpus in admitted if job.gpu_type == gpu_type]


def expected_start(tenancy: Tenancy, head: Job, now: int, free: int, usage: Usage, borrowing: bool,
                   released: list[Release], admissible_now: bool, reserved: bool) -> HeadStart:
    """The head's expected start given whether it is admissible now, the GPUs of its type free now, the quota
    usage now (both as the head sees them: what is held for it counts as free) and the `releases` of the work
    holding capacity of its type. A head that holds a reservation is protected in GPUs by its reserved nodes
    (EASY backfill), so only its quota is counted here."""
    usage = dict(usage)
    count_gpus = not reserved
    if admissible_now:
        return HeadStart(head, now, free, usage, tenancy, borrowing, count_gpus)
    at = max(now, head.not_before)
    i = 0
    while True:
        if at == now:  # not admissible now, whatever the counts say: the first chance is the next release
            first = next((r[0] for r in released if r[0] > now), None)
            if first is None:
                return HeadStart(head, None, free, usage, tenancy, borrowing, count_gpus)
            at = first
        if at == EVENTUALLY:  # its start waits for work without a time limit: what is free before that is its own
            start = HeadStart(head, EVENTUALLY, free, dict(usage), tenancy, borrowing, count_gpus)
        while i < len(released) and released[i][0] <= at:
            _, gpus, quota, team = released[i]
            free += gpus
            key = (team, head.gpu_type)
            usage[key] = usage.get(key, 0) - quota
            i += 1
        if at != EVENTUALLY:
            start = HeadStart(head, at, free, usage, tenancy, borrowing, count_gpus)
        if start._fits(free, usage):
            return start
        if i == len(released):
            start.start = None
            return start
        at = released[i][0]


def team_head(state: CellState, team: str, skip: Container[str] = frozenset(), las: bool = False,
              by_deadline: bool = False) -> Job | None:
    """The team's first waiting gang by priority, service band (with `las`: least attained service first) and
    submit order (`by_deadline`: deadline, then submit order), backing off or not, other than `skip`."""
    best: tuple | None = None
    for needs in state.needs_by_team.get(team, ()):  # the first by a key that names the job: any order will do
        band = needs[-1] if las else 0  # a group's gangs share their band (Job.needs)
        for rank, job_id in state.groups(by_deadline)[needs]:
            if job_id not in skip:
                if best is None or (rank[0], band, rank, job_id) < best:
                    best = (rank[0], band, rank, job_id)
                break
    return state.jobs[best[-1]] if best is not None else None


def guards(head: Job | None, job: Job, held: Container[str]) -> TypeGuard[Job]:
    """Whether `head`'s expected start is kept from `job`: another gang of its team and GPU type, while the head has
    no capacity held for it (its hold covers it then)."""
    return head is not None and head.job_id != job.job_id and head.gpu_type == job.gpu_type and head.job_id not in held


def may_drain(state: CellState, job: Job, share: float) -> bool:
    """Whether the gang may drain capacity for itself (a reservation, a protected queue head): it needs at most
    `share` of its GPU type's schedulable GPUs (AdmissionPolicy.max_drain_share)."""
    return job.min_gpus <= share * state.cluster.capacity(job.gpu_type)


def admissible_now(state: CellState, head: Job, now: int, policy: Policy) -> bool:
    """Whether the admitter would admit the gang now on the folded state: not backing off, its quota fits and a
    placement exists outside the nodes reserved for other gangs it may not backfill onto."""
    if head.not_before > now:
        return False
    most, fit = quota_fit(state.tenancy, head, policy.admission.borrowing, state.tenancy.committed(head))
    if not fit.fits:
        return False
    view = CapacityView(state.cluster)
    view.unclaim(head)
    return isinstance(place_gang(view, head, most, policy.placement,
                                 off_limits(state, head, now, by_deadline=policy.admission.earliest_deadline_first,
                                            across_teams=policy.admission.priority_passes_reservations)),
                      Placement)


def head_start(state: CellState, head: Job, now: int, policy: Policy,
               released: list[Release] | None = None) -> HeadStart:
    """The plain definition on a folded state: the head's expected start (`released`: `releases` of its GPU type on
    this state, when the caller has them)."""
    free = state.cluster.free_gpus(head.gpu_type) + held_free(state, head)
    usage = state.tenancy.committed(head)
    return expected_start(state.tenancy, head, now, free, usage, policy.admission.borrowing,
                          releases(state, head.gpu_type) if released is None else released,
                          admissible_now(state, head, now, policy), bool(head.reserved_nodes))


def head_compared(state: CellState, start: HeadStart, now: int, released: list[Release] | None = None) -> list[int]:
    """The times `head_start` and `HeadStart.delayed_by` compare `now` with, on this folded state: the head's return
    from backing off, the next release of its GPU type after now (the first chance of a head not admissible now),
    its known start (which a gang's `now` plus time limit is compared with), and the shadow times of the
    reservations its placement is checked against (`off_limits`; compared with `now` plus its time limit). A start
    of now stays now while the head stays admissible, which the rest decides."""
    head = start.job
    out = [head.not_before] if head.not_before > now else []
    released = releases(state, head.gpu_type) if released is None else released
    out.extend(itertools.islice((r[0] for r in released if r[0] > now), 1))
    if _later(start.start, now):
        out.append(start.start)
    if head.time_limit_ms is not None:
        out.extend(shadow for shadow in shadow_times(state, now).values() if shadow is not None and shadow != now)
    return out


def _later(start: int | None, now: int) -> TypeGuard[int]:
    """Whether a head's expected start is a known time other than now."""
    return start is not None and start != EVENTUALLY and start != now


class Guard:
    """The heads one admission cycle protects, each with its expected start kept current as the cycle admits:
    every team's head, against the rest of its team. Gangs with capacity held for them are covered by their
    hold instead."""

    def __init__(self, state: CellState, now: int, borrowing: bool, free: Callable[[str], int], usage: Usage,
                 admissible: Callable[[Job], bool], reservations: Container[str], held: Container[str],
                 drain_share: float = 1.0, las: bool = False, by_deadline: bool = False) -> None:
        self.state, self.now, self.borrowing, self.drain_share, self.las = state, now, borrowing, drain_share, las
        self.by_deadline = by_deadline
        # The cycle's view, live: free GPUs by type, quota usage, whether a gang is admissible, reservation holders,
        # and the gangs with capacity held for them (less the holds this cycle released).
        self.free, self.usage, self.admissible = free, usage, admissible
        self.reservations, self.held = reservations, held
        self.admitted: list[tuple[Job, int]] = []
        self.admitted_ids: set[str] = set()
        self.team_heads: dict[str, Job | None] = {}
        self.starts: dict[str, HeadStart] = {}
        self.running: dict[str, list[Release]] = {}  # GPU type -> releases of the work the folded state holds
        # Brought up to date by every cycle, with the jobs that moved since the last: built once on a young cell,
        # not over every running job when a head's start is first asked for.
        _Holding.of(state)

    def blocker(self, job: Job, gpus: int) -> HeadStart | None:
        """The head whose expected start admitting `gpus` GPUs of `job` now would push later, or None."""
        head = self.team_head(job.team)
        if not guards(head, job, self.held):
            return None
        start = self.start(head)
        return start if start.delayed_by(job, gpus, self.now) else None

    def kept_blocker(self, job: Job, gpus: int) -> HeadStart | None:
        """`blocker` from a head whose expected start the cycle has already computed and kept (as `blocker` would
        read it); None where it has not (computing it here could give another start than the cycle would where it
        first asks: kept starts follow the cycle's admissions only roughly)."""
        head = self.team_heads.get(job.team)
        if head is None or not guards(head, job, self.held) or head.job_id not in self.starts \
                or not may_drain(self.state, head, self.drain_share):
            return None
        start = self.starts[head.job_id]
        return start if start.delayed_by(job, gpus, self.now) else None

    def passes(self, job: Job) -> bool:
        """Whether `job` is admitted past a waiting head of its GPU type (it backfills)."""
        head = self.team_head(job.team)
        return guards(head, job, self.held) and self.start(head).start is not None

    def team_head(self, team: str) -> Job | None:
        """The team's head, if it may drain (a gang too big to drain is not protected)."""
        if team not in self.team_heads:
            self.team_heads[team] = team_head(self.state, team, self.admitted_ids, self.las, self.by_deadline)
        head = self.team_heads[team]
        return head if head is not None and may_drain(self.state, head, self.drain_share) else None

    def start(self, head: Job) -> HeadStart:
        start = self.starts.get(head.job_id)
        if start is None:
            if head.gpu_type not in self.running:
                self.running[head.gpu_type] = releases(self.state, head.gpu_type)
            admitted = _admitted(self.admitted, head.gpu_type, self.now)
            # the folded releases come sorted: only admissions this cycle need merging in
            released = sorted([*self.running[head.gpu_type], *admitted]) if admitted else self.running[head.gpu_type]
            start = self.starts[head.job_id] = expected_start(self.state.tenancy, head, self.now,
                                                              self.free(head.gpu_type), self.usage, self.borrowing,
                                                              released, self.admissible(head),
                                                              head.job_id in self.reservations)
        return start

    def compared(self) -> list[int]:
        """The times the expected starts computed so far compared `now` with: each known start later than now (a
        start of now, a head admissible now, stays now while nothing else changes), and the next
        release after now of each GPU type looked at (nothing comes free before it)."""
        out = [s.start for s in self.starts.values() if _later(s.start, self.now)]
        for released in self.running.values():
            out.extend(itertools.islice((r[0] for r in released if r[0] > self.now), 1))
        return out

    def forget(self, head: Job) -> None:
        """The head's expected start must be computed again (it now holds a reservation)."""
        self.starts.pop(head.job_id, None)

    def admit(self, job: Job, gpus: int) -> None:
        self.admitted.append((job, gpus))
        self.admitted_ids.add(job.job_id)
        if self.team_heads.get(job.team) is job:
            del self.team_heads[job.team]
        for head_id, start in list(self.starts.items()):
            if head_id == job.job_id or not start.admit(job, gpus, self.now):
                del self.starts[head_id]
