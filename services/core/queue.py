"""The queue as an admission cycle walks it: gangs in queue order, one group of equal needs at a time.

Gangs with equal needs (team, GPU type, shape, constraints; see Job.needs) meet the same quota
and the same placement, so only the first of a group can be admitted before the rest, and when
it is refused the whole group is refused for the same reason. Time limits are not needs: they
matter only where a reservation's nodes could be backfilled, so a refusal for lack of room takes
along only the members that may backfill onto the same reservations as the refused one. Walking group heads through a heap
keeps a cycle's cost near the number of groups, not the number of queued gangs.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING

from events.models import Reason
from projections.cell import CellState
from projections.jobs import Job

if TYPE_CHECKING:  # the knobs are a value the caller passes in
    from services.admitter.policy import AdmissionPolicy


_ID = itemgetter(1)  # a group member's job id

#: Succeeded jobs a cell must have seen before `least_attained_service_min_cv` lets least attained service apply.
LAS_SAMPLES = 50


def service_varies(state: CellState, admission: AdmissionPolicy) -> bool:
    """Whether the GPU-time the cell's succeeded jobs received varies more than the policy's
    `least_attained_service_min_cv` asks (always when it is 0): least attained service, and preemption's
    time-sharing, apply only then."""
    if admission.least_attained_service_min_cv <= 0:
        return True
    n, total, squares = state.service_sums
    if n < LAS_SAMPLES or total <= 0:
        return False
    variance_n2 = n * squares - total * total  # n² times the variance, exactly
    return variance_n2 > (admission.least_attained_service_min_cv * total) ** 2


def least_attained_service(state: CellState, admission: AdmissionPolicy) -> bool:
    """Whether gangs go by least attained service now."""
    return admission.least_attained_service and service_varies(state, admission)


def order_key(state: CellState, admission: AdmissionPolicy) -> Callable[[Job], tuple]:
    """A gang moving to make room (consolidation) first (with `movers_in_plan_order`, biggest first, then by id),
    then within-nominal work (unless not `nominal_first`), priority, weighted dominant share (with `fair_share`),
    least attained service (while `least_attained_service` applies: its band), deadline (with
    `earliest_deadline_first`), submit order."""
    fair_share, nominal_first = admission.fair_share, admission.nominal_first
    movers_in_plan_order, by_deadline = admission.movers_in_plan_order, admission.earliest_deadline_first
    las = least_attained_service(state, admission)
    tenancy = state.tenancy
    shares: dict[str, int] = {}
    room: dict[tuple[str, str], int] = {}

    def key(job: Job) -> tuple:
        if job.moving and movers_in_plan_order:  # as the move's plan placed them: biggest first (all it asks)
            return (False, -job.workers * job.gpus_per_worker, job.job_id)
        team = (job.team, job.gpu_type)
        if team not in room:
            room[team] = tenancy.quota(*team).nominal - tenancy.used(*team)
        if fair_share and job.team not in shares:
            shares[job.team] = tenancy.dominant_share_milli(job.team)
        return (not job.moving, nominal_first and job.min_gpus > room[team], -job.priority, shares.get(job.team, 0),
                job.service_band if las else 0, job.deadline if by_deadline else job.submitted_at, job.submit_offset,
                job.job_id)

    return key


def _every(job: Job) -> bool:
    return True


class WaitingGangs:
    """Iterates waiting gangs in queue order; tell it whether each was `admitted()` or `refused()`."""

    def __init__(self, state: CellState, now: int, key: Callable[[Job], tuple],
                 groups: list[Sequence[tuple[object, str]]], needs: list[tuple | None] | None = None) -> None:
        self.state, self.now, self.key = state, now, key
        self.groups = groups
        #: each group's needs when it is a whole group of `state.queued_by_needs` (its reasons are counted there)
        self.needs = needs if needs is not None else [None] * len(groups)
        self.cursor = [0] * len(groups)
        self.current = -1
        # Entries (key, group) are distinct, so the heap pops them in one order however it was built: heapify.
        self.heap: list[tuple[tuple, int]] = [entry for entry in map(self._entry, range(len(groups)))
                                              if entry is not None]
        heapq.heapify(self.heap)

    @classmethod
    def of(cls, state: CellState, now: int, key: Callable[[Job], tuple],
           keep: Callable[[Job], bool] = _every, by_deadline: bool = False) -> WaitingGangs:
        """Every waiting gang: groups of equal needs, each in rank order (`by_deadline`: deadline order, as `key`
        has it), and on its own each gang that holds a reservation or capacity (it sees nodes the others don't) or
        is moving (it goes first). `keep` drops whole groups by their first member."""
        holders = (state.reservations.keys() | state.holds | state.moving if state.holds or state.moving
                   else state.reservations)
        groups: list[Sequence[tuple[object, str]]] = [[(None, job_id)] for job_id in sorted(holders)
                                                      if job_id in state.queued]
        needs: list[tuple | None] = [None] * len(groups)
        with_holders: dict[tuple, list[tuple[tuple, str]]] = {}  # needs -> the members that go on their own
        for job_id in holders:
            queued = state.queued_as(job_id)
            if queued is not None:
                with_holders.setdefault(queued.needs, []).append(
                    (queued.by_deadline if by_deadline else queued.rank, job_id))
        for alike, members in state.groups(by_deadline).items():  # (rank, job id), read in place: a cycle folds nothing
            whole: tuple | None = alike
            if alike in with_holders:
                members, whole = _without(members, with_holders[alike]), None
            if members and keep(state.jobs[members[0][1]]):
                groups.append(members)
                needs.append(whole)
        return cls(state, now, key, groups, needs)

    def _push(self, g: int) -> None:
        entry = self._entry(g)
        if entry is not None:
            heapq.heappush(self.heap, entry)

    def _entry(self, g: int) -> tuple[tuple, int] | None:
        """The heap entry of group `g`'s first member not backing off (None: every one is)."""
        members, i = self.groups[g], self.cursor[g]
        while i < len(members) and self.state.jobs[members[i][1]].not_before > self.now:
            i += 1  # still backing off
        self.cursor[g] = i
        return (self.key(self.state.jobs[members[i][1]]), g) if i < len(members) else None

    def __iter__(self) -> Iterator[Job]:
        while self.heap:
            _, self.current = heapq.heappop(self.heap)
            yield self.state.jobs[self.groups[self.current][self.cursor[self.current]][1]]

    def admitted(self) -> None:
        """The current gang was admitted: the next of its group takes its turn."""
        self.cursor[self.current] += 1
        self._push(self.current)

    def refused(self, alike: Callable[[Job], bool] | None = None, tell: Reason | None = None) -> list[Job]:
        """The current gang was refused: so are the rest of its group, and those of them not backing off that do
        not yet state the reason `tell` are returned, to be told it (none without `tell`). With `alike`, only the
        members it holds for are refused; the others stay in the queue as a group of their own."""
        g = self.current
        if alike is None and (tell is None or self._all_say(g, tell)):
            return []
        rest = list(map(self.state.jobs.__getitem__, map(_ID, self.groups[g][self.cursor[g] + 1:])))
        if alike is not None:
            held = list(map(alike, rest))  # once per member: `alike` may cost a look at every reservation
            others = [(None, job.job_id) for job, same in zip(rest, held) if not same]
            if others:
                rest = [job for job, same in zip(rest, held) if same]
                self.groups.append(others)
                self.needs.append(None)
                self.cursor.append(0)
                self._push(len(self.groups) - 1)
        if tell is None:
            return []
        return [job for job in rest if job.reason is not tell and job.not_before <= self.now]

    def _all_say(self, g: int, reason: Reason) -> bool:
        """Whether every member of group `g` after the current one states `reason` already (then none needs
        telling), known from the group's reason counts and its few members up to the current one."""
        needs = self.needs[g]
        if needs is None:
            return False
        members, cursor = self.groups[g], self.cursor[g]
        others = len(members) - self.state.queued_reasons.get(needs, {}).get(reason, 0)
        return others == sum(1 for _, j in members[:cursor + 1] if self.state.jobs[j].reason is not reason)


def _without(members: list[tuple[tuple, str]], gone: list[tuple[tuple, str]]) -> list[tuple[tuple, str]]:
    """A sorted group's members less `gone` (some of them), by slices around where each lies."""
    out: list[tuple[tuple, str]] = []
    start = 0
    for i in sorted(bisect_left(members, member) for member in gone):
        out += members[start:i]
        start = i + 1
    out += members[start:]
    return out


def queue_order(state: CellState, jobs: list[Job], admission: AdmissionPolicy) -> Iterator[Job]:
    """`jobs` in queue order, lazily (the preemptor looks at the first few)."""
    key = order_key(state, admission)
    keyed = [(key(j), j) for j in jobs]
    heapq.heapify(keyed)
    return (heapq.heappop(keyed)[1] for _ in range(len(keyed)))
