"""The whole state of one cell, folded from its log: cluster, tenancy, jobs and heartbeats."""

from __future__ import annotations

import copy
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from projections.cluster import Cluster
from projections.jobs import Job, JobState
from projections.tenancy import Tenancy
from projections.validate import Limits

#: Finished jobs whose runtimes a cell keeps for its start-time forecast.
RUNTIME_HISTORY = 200


class Queued(NamedTuple):
    """A queued job as the queue's indexes hold it: taken out again by these same values."""

    needs: tuple  # its group in `queued_by_needs`
    rank: tuple  # its place in the group
    by_deadline: tuple  # its place in the group of `queued_by_deadline`
    reason: Any  # its stated reason, as counted in `queued_reasons`
    limit: int | None  # its time limit
    back: int  # when it comes back from backing off (`not_before`)
    since: int  # when it waits from: the later of its submission and its return


#: How many more moved jobs than holding ones a reader of `CellState.moved` may leave unread before it is dropped.
MOVED_LIMIT = 4096


@dataclass
class CellState:
    """Everything a decider may look at. `offset` is the log position of the last folded event. `clock` is the
    time of the latest Tick the cell accepted; `now`, the time decisions are made at, follows the stamps of
    folded events but never runs further than the cell allows past the clock, and never backwards."""

    cell: str = ""
    offset: int = -1
    now: int = 0
    clock: int | None = None
    limits: Limits = field(default_factory=Limits)
    cluster: Cluster = field(default_factory=Cluster)
    tenancy: Tenancy = field(default_factory=Tenancy)
    jobs: dict[str, Job] = field(default_factory=dict)
    queued: set[str] = field(default_factory=set)  # job ids in state QUEUED
    admitted: set[str] = field(default_factory=set)  # job ids admitted but not yet placed
    holding: set[str] = field(default_factory=set)  # job ids holding GPUs or quota
    preempting: set[str] = field(default_factory=set)  # job ids asked to checkpoint and make room
    moving: set[str] = field(default_factory=set)  # queued job ids preempted to move (consolidation)
    holding_by_team: dict[str, set[str]] = field(default_factory=dict)
    #: RUNNING jobs per team as sorted (running since, job id): the only possible victims, oldest first,
    #: so a search can stop at the ones still protected by their minimum runtime
    running_by_team: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    _running_since: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False)
    #: QUEUED jobs grouped by their needs (Job.needs), each group sorted by rank: admission looks at
    #: the first of each group instead of the whole queue
    queued_by_needs: dict[tuple, list[tuple[tuple, str]]] = field(default_factory=dict)
    #: The same groups, each sorted by deadline rank (Job.deadline_rank): the order within a group when gangs go by
    #: deadline (AdmissionPolicy.earliest_deadline_first)
    queued_by_deadline: dict[tuple, list[tuple[tuple, str]]] = field(default_factory=dict)
    #: team -> the needs of its groups in `queued_by_needs` (a team's needs start with the team): where its queue
    #: head is found without going through every team's groups
    needs_by_team: dict[str, set[tuple]] = field(default_factory=dict)
    #: needs -> stated reason (Job.reason) -> how many of the group state it: a cycle that refuses a group tells
    #: only the members whose reason differs, and sees that none does without going through the group
    queued_reasons: dict[tuple, dict[object, int]] = field(default_factory=dict)
    #: needs -> time limit (None: none) -> how many of the group have it: whether a refusal that holds for gangs
    #: running at least as long holds for the whole group
    queued_limits: dict[tuple, dict[int | None, int]] = field(default_factory=dict)
    #: The queued jobs' time limits (those that have one), the times they come back from backing off (`not_before`)
    #: and the times they count as waiting from (the later of their submission and their return), each sorted, with
    #: repeats: where a quiet Tick's next moment is found by bisection instead of a pass over the queue
    #: (services/core/quiet.py). None of them changes while a job waits.
    queued_limit_values: list[int] = field(default_factory=list, repr=False)
    queued_returns: list[int] = field(default_factory=list, repr=False)
    queued_since: list[int] = field(default_factory=list, repr=False)
    _queued: dict[str, Queued] = field(default_factory=dict, repr=False)  # job id -> as indexed when queued
    last_heartbeat: dict[str, int] = field(default_factory=dict)
    reservations: dict[str, tuple[str, ...]] = field(default_factory=dict)  # queued job -> nodes draining for it
    holds: set[str] = field(default_factory=set)  # job ids with capacity held for them (CapacityHeld)
    #: Ended jobs leave the state at the next Tick (no decision depends on them after that; the log and the read
    #: models keep them): `ending` holds them until then, and `retired` (its order in `retired_order`) is all a
    #: cell keeps of them, so an id is never used twice. Memory follows live work, not history.
    ending: set[str] = field(default_factory=set)
    retired: set[str] = field(default_factory=set)
    retired_order: list[str] = field(default_factory=list)
    #: (submit offset, runtime fraction) of the latest-submitted retired jobs that have one (Job.runtime_fraction),
    #: at most RUNTIME_HISTORY: what the start-time forecast learns from once the jobs have left.
    runtimes: list[tuple[int, float]] = field(default_factory=list)
    #: How many retired jobs succeeded, the sum of the GPU-ms they received and of its squares: how much the
    #: service jobs need varies, which tells whether least attained service pays (services/core/queue.py)
    service_sums: tuple[int, int, int] = (0, 0, 0)
    #: origin ('team/T', 'node/N', 'operator') -> the input-topic offset of the latest input the cell took from it:
    #: the intake takes each input topic in order, so an input at or below it is a copy written again (refused)
    taken: dict[str, int] = field(default_factory=dict)
    #: How many folds may have changed what a decision reads: every fold but a Tick that retires no job and a
    #: completed checkpoint (which only the preemptor reads). With `memo`, deciders' caches of results that depend on
    #: the state only through what `changes` counts: a cache entry made at an older count is stale.
    changes: int = field(default=0, compare=False, repr=False)
    #: How many folds may have given an attempt a start a limit counts from (an admission, all workers started) or
    #: brought one back (an overlay lifted): between two equal counts, limits only went away (services/recovery).
    starts: int = field(default=0, compare=False, repr=False)
    #: How many of the folds `changes` counts only restated why a gang waits (a JobQueued that neither drops nor
    #: makes a reservation), and how many completed checkpoints were folded: the preemptor reads no stated reason
    #: but reads checkpoints, so its caches hold while `changes - restated` and `checkpoints` stay (services/preemptor).
    restated: int = field(default=0, compare=False, repr=False)
    checkpoints: int = field(default=0, compare=False, repr=False)
    memo: dict = field(default_factory=dict, compare=False, repr=False)
    #: Ids of the jobs that changed state or GPUs since a reader of the holding jobs last looked (None: no reader
    #: keeps an index of them; services/core/heads.py does), so the reader redoes those alone.
    moved: set[str] | None = field(default=None, compare=False, repr=False)
    #: keys of the snapshot rows changed since a store last saved them (see projections/snapshot.py)
    dirty: set[str] = field(default_factory=set, compare=False, repr=False)
    #: False for a state no store saves (an audit's fold, the simulator's cell): `dirty` is then left empty,
    #: which is a third of such a fold's time
    tracks_rows: bool = field(default=True, compare=False, repr=False)

    def __deepcopy__(self, memo: dict) -> CellState:
        """A copy of the state without the deciders' caches (`memo`): the copy makes its own as it needs them. (They
        may hold values that compiled classes cannot be rebuilt from field by field; events/compiled.py.)"""
        return CellState(**{f.name: copy.deepcopy(getattr(self, f.name), memo) for f in fields(self) if f.name != "memo"})

    def job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def leaving(self) -> dict[str, Job]:
        """The ended jobs the next Tick takes out of the state, by id: what readers that keep ended jobs save
        before folding a Tick."""
        return {j: self.jobs[j] for j in sorted(self.ending) if j in self.jobs}

    def recent_runtimes(self) -> list[float]:
        """The runtime fractions of the RUNTIME_HISTORY latest-submitted jobs that succeeded on their first
        attempt, whether they have left the state or are about to."""
        ending = [(j.submit_offset, f) for j in map(self.jobs.get, self.ending)
                  if j is not None and (f := j.runtime_fraction()) is not None]
        return [f for _, f in sorted(self.runtimes + ending)[-RUNTIME_HISTORY:]]

    def knows(self, job_id: str) -> bool:
        """Whether the id names a job, live or ended (and retired)."""
        return job_id in self.jobs or job_id in self.retired

    def jobs_in(self, *states: JobState) -> list[Job]:
        return [self.jobs[j] for j in sorted(self.jobs) if self.jobs[j].state in states]

    def set_state(self, job: Job, state: JobState) -> None:
        """Moves a job to a new state, keeping the queued / admitted / holding indexes in step."""
        job.state = state
        self.note_moved(job.job_id)
        for index, member in ((self.queued, state is JobState.QUEUED),
                              (self.admitted, state is JobState.ADMITTED),
                              (self.preempting, state is JobState.PREEMPTING),
                              (self.moving, state is JobState.QUEUED and job.moving),
                              (self.holding, job.holds_capacity)):
            if member:
                index.add(job.job_id)
            else:
                index.discard(job.job_id)
        team = self.holding_by_team.setdefault(job.team, set())
        if job.holds_capacity:
            team.add(job.job_id)
        else:
            team.discard(job.job_id)
        queued = self._queued.pop(job.job_id, None)
        if queued is not None:
            needs = queued.needs
            group = self.queued_by_needs[needs]
            del group[bisect_left(group, (queued.rank, job.job_id))]
            soonest = self.queued_by_deadline[needs]
            del soonest[bisect_left(soonest, (queued.by_deadline, job.job_id))]
            _count(self.queued_reasons, needs, queued.reason, -1)
            _count(self.queued_limits, needs, queued.limit, -1)
            if queued.limit is not None:
                _drop(self.queued_limit_values, queued.limit)
            _drop(self.queued_returns, queued.back)
            _drop(self.queued_since, queued.since)
            if not group:
                del self.queued_by_needs[needs], self.queued_by_deadline[needs]
                team_needs = self.needs_by_team[needs[0]]
                team_needs.discard(needs)
                if not team_needs:
                    del self.needs_by_team[needs[0]]
        if state is JobState.QUEUED:
            needs, rank, by_deadline = job.needs(), job.rank_key(), job.deadline_rank()
            insort(self.queued_by_needs.setdefault(needs, []), (rank, job.job_id))
            insort(self.queued_by_deadline.setdefault(needs, []), (by_deadline, job.job_id))
            self.needs_by_team.setdefault(needs[0], set()).add(needs)
            limit, back, since = job.time_limit_ms, job.not_before, job.waiting_since
            self._queued[job.job_id] = Queued(needs, rank, by_deadline, job.reason, limit, back, since)
            _count(self.queued_reasons, needs, job.reason, 1)
            _count(self.queued_limits, needs, limit, 1)
            if limit is not None:
                insort(self.queued_limit_values, limit)
            insort(self.queued_returns, back)
            insort(self.queued_since, since)
        entry = self._running_since.pop(job.job_id, None)
        if entry is not None:
            running = self.running_by_team[entry[0]]
            del running[bisect_left(running, (entry[1], job.job_id))]
        if state is JobState.RUNNING:
            since = job.running_since or 0
            insort(self.running_by_team.setdefault(job.team, []), (since, job.job_id))
            self._running_since[job.job_id] = (job.team, since)

    def groups(self, by_deadline: bool) -> dict[tuple, list[tuple[tuple, str]]]:
        """The queued gangs grouped by needs, each group in rank order or, `by_deadline`, in deadline order."""
        return self.queued_by_deadline if by_deadline else self.queued_by_needs

    def queued_as(self, job_id: str) -> Queued | None:
        """How a queued job is indexed (None: it is not queued): its needs say its group, its rank its place in it."""
        return self._queued.get(job_id)

    def note_reason(self, job: Job) -> None:
        """Keeps `queued_reasons` in step after the job's stated reason changed."""
        queued = self._queued.get(job.job_id)
        if queued is not None and queued.reason is not job.reason:
            _count(self.queued_reasons, queued.needs, queued.reason, -1)
            self._queued[job.job_id] = queued._replace(reason=job.reason)
            _count(self.queued_reasons, queued.needs, job.reason, 1)

    def note_moved(self, job_id: str) -> None:
        """Tells the reader of `moved`, if any, that the job's state or GPUs changed; a reader that falls far behind
        is dropped (it starts again from the holding jobs), so the set stays bounded by live work."""
        moved = self.moved
        if moved is not None:
            moved.add(job_id)
            if len(moved) > MOVED_LIMIT + len(self.holding):
                self.moved = None

    def running_before(self, team: str, at: int) -> list[str]:
        """Ids of the team's RUNNING jobs that started at or before `at`, oldest first."""
        running = self.running_by_team.get(team, [])
        return [job_id for _, job_id in running[:bisect_right(running, (at, "\U0010ffff"))]]


def _drop(values: list[int], value: int) -> None:
    """Takes one `value` out of a sorted list that holds it."""
    del values[bisect_left(values, value)]


def _count(counts: dict[tuple, dict], needs: tuple, value: object, delta: int) -> None:
    """Adds `delta` to how many of a group of equal needs have `value`; a count of zero leaves no entry."""
    group = counts.setdefault(needs, {})
    group[value] = group.get(value, 0) + delta
    if not group[value]:
        del group[value]
        if not group:
            del counts[needs]
