"""The preemptor's what-if: would the admitter admit a waiting gang were some victims gone, and where would it go.

`AfterEviction` answers "admissible?" while victims are evicted and kept one at a time, cheaply enough for the
victim search; `plan` gives the placement the gang's hold claims once the victims are chosen. GPUs held for
another waiting gang (claimed) never count as free, even when a victim gives them back.
"""

from __future__ import annotations

from projections.cell import CellState
from projections.cluster import CELL
from projections.jobs import Job
from projections.reservations import ends_before, expected_end, outranks
from services.core.decider import Context
from services.core.placement import CapacityView, Placement, off_limits, place_gang
from services.core.quota import quota_fit


class AfterEviction:
    """Whether the admitter would admit one waiting job were the victims gone (its quota fits and a
    placement exists), while victims are evicted and kept one at a time: the quota usage, the freed GPUs
    per node and the reservations' shadow times follow each change, so a check costs the reservations and
    the nodes touched, not a rebuild. Without a required topology domain the whole cell is the last domain
    a placement tries, so enough slots outside the excluded nodes is exactly "placeable"; gangs that need
    a particular domain get a real placement on a view."""

    def __init__(self, state: CellState, job: Job, ctx: Context) -> None:
        self.state, self.job, self.ctx = state, job, ctx
        cluster, g = state.cluster, job.gpus_per_worker
        self.usage = dict(state.tenancy.committed(job))
        self.victims: dict[str, Job] = {}
        self.freed: dict[str, int] = {}  # node -> GPUs the victims give back there
        histogram = cluster.histogram.get((job.gpu_type, CELL, ""), ())
        self.slots = sum(count * (free // g) for free, count in enumerate(histogram) if free >= g)
        # Other gangs' reservations, each with the expected end of every job holding GPUs on its nodes;
        # whether the job may use one changes only while a victim holds GPUs there.
        self.reservations: list[tuple[list[str], list[tuple[str, int | None]]]] = []
        by_deadline = ctx.policy.admission.earliest_deadline_first
        across_teams = ctx.policy.admission.priority_passes_reservations
        self.touches: dict[str, list[int]] = {}  # job id -> reservations it holds GPUs in
        for holder, nodes in state.reservations.items():
            if holder == job.job_id or outranks(job, state.jobs.get(holder), by_deadline, across_teams):
                continue
            jobs = sorted({j for n in nodes if n in cluster.nodes for j in cluster.nodes[n].holder.values()})
            for j in jobs:
                self.touches.setdefault(j, []).append(len(self.reservations))
            self.reservations.append((list(nodes), [(j, expected_end(state.jobs[j])) for j in jobs]))
        self.closed = [self._closed(r) for r in range(len(self.reservations))]
        self._gives: dict[str, list[tuple[str, int]]] = {}  # job id -> GPUs its eviction gives back, per node
        self._off: tuple[set[str], int] | None = None  # `_off_limits()` while no reservation opens or closes
        # The slots for the job's workers that the freed GPUs add outside the off-limits nodes, kept current by
        # `_shift` while `_off` holds (None: counted again from `freed`)
        self._gain: int | None = None

    def evict(self, victim: Job) -> None:
        self._shift(victim, 1)
        self.victims[victim.job_id] = victim
        self._retouch(victim)

    def keep(self, victim: Job) -> None:
        self._shift(victim, -1)
        del self.victims[victim.job_id]
        self._retouch(victim)

    def admissible_without(self, victims: list[Job]) -> bool:
        """Whether the job is admissible with `victims` evicted too (none of them evicted now), leaving `after`
        as it was: what `evict` of each then `admissible` would say, with the GPUs they give back added up first
        and the slots they make counted once, and each reservation looked at once."""
        saved = self.usage, self.freed, self.victims, self.closed, self._off, self._gain
        usage, freed, evicted = dict(self.usage), dict(self.freed), dict(self.victims)
        gives_of, touches = self._gives, self.touches
        touched: set[int] = set()
        for victim in victims:
            key = (victim.team, victim.gpu_type)
            usage[key] = usage.get(key, 0) - victim.held_gpus
            gives = gives_of.get(victim.job_id)
            if gives is None:
                gives = gives_of[victim.job_id] = self._given_back(victim)
            for name, gpus in gives:
                if gpus:
                    freed[name] = freed.get(name, 0) + gpus
            evicted[victim.job_id] = victim
            touched.update(touches.get(victim.job_id, ()))
        self.usage, self.freed, self.victims, self.closed, self._gain = usage, freed, evicted, list(self.closed), None
        for r in touched:
            self._reclose(r)
        try:
            return self.admissible()
        finally:
            self.usage, self.freed, self.victims, self.closed, self._off, self._gain = saved

    def _retouch(self, victim: Job) -> None:
        for r in self.touches.get(victim.job_id, ()):
            self._reclose(r)

    def _reclose(self, r: int) -> None:
        closed = self._closed(r)
        if closed != self.closed[r]:
            self.closed[r] = closed
            self._off = self._gain = None

    def _shift(self, victim: Job, sign: int) -> None:
        key = (victim.team, victim.gpu_type)
        self.usage[key] = self.usage.get(key, 0) - sign * victim.held_gpus
        gives = self._gives.get(victim.job_id)
        if gives is None:  # the state does not change while victims are tried: counted once per victim
            gives = self._gives[victim.job_id] = self._given_back(victim)
        freed, gain = self.freed, self._gain
        counted, g = self.state.cluster.counted, self.job.gpus_per_worker
        excluded = off[0] if gain is not None and (off := self._off) is not None else ()
        for name, gpus in gives:  # only nodes where victims give GPUs back stay in `freed`
            had = freed.get(name, 0)
            left = had + sign * gpus
            if left:
                freed[name] = left
            else:
                freed.pop(name, None)
            if gain is not None and name not in excluded:
                before = counted[name]
                gain += (before + left) // g - (before + had) // g
        self._gain = gain

    def _given_back(self, victim: Job) -> list[tuple[str, int]]:
        """The GPUs of the job's type that `victim` holds and would give back, per worker's node (claimed ones stay
        claimed, retired ones stay retired)."""
        cluster = self.state.cluster
        out: list[tuple[str, int]] = []
        for _, name, gpus in victim.assignments:
            node = cluster.nodes.get(name)
            if node is not None and name in cluster.counted and node.gpu_type == self.job.gpu_type:
                out.append((name, sum(1 for i in gpus if i in node.holder and i not in node.retired
                                      and i not in node.claimed)))
        return out

    def _closed(self, r: int) -> bool:
        """Whether reservation `r` is off limits to the job, as `off_limits` would say with the victims gone."""
        job, now = self.job, self.ctx.now
        if job.time_limit_ms is None:
            return True
        shadow = now
        for job_id, end in self.reservations[r][1]:
            if job_id in self.victims:
                continue
            if end is None:
                return True
            shadow = max(shadow, end)
        return not ends_before(job, now, shadow)

    def _off_limits(self) -> tuple[set[str], int]:
        """The nodes of the closed reservations, and the slots for the job's workers that their free GPUs hold now."""
        if self._off is None:
            state, job = self.state, self.job
            excluded = {n for r, (nodes, _) in enumerate(self.reservations) if self.closed[r] for n in nodes}
            counted, g = state.cluster.counted, job.gpus_per_worker
            self._off = (excluded, sum(counted[name] // g for name in excluded
                                       if name in counted and state.cluster.nodes[name].gpu_type == job.gpu_type))
        return self._off

    def admissible(self) -> bool:
        """Its quota fits and it has a placement; the room is counted first (it is what most evictions change)."""
        state, job = self.state, self.job
        excluded, lost = self._off_limits()
        if job.topology_required is None:
            if self._gain is None:
                counted, g, gain = state.cluster.counted, job.gpus_per_worker, 0
                for name, extra in self.freed.items():
                    if name not in excluded:
                        before = counted[name]
                        gain += (before + extra) // g - before // g
                self._gain = gain
            if self.slots - lost + self._gain < job.min_count:
                return False
        most, fit = quota_fit(state.tenancy, job, self.ctx.policy.admission.borrowing, self.usage)
        if not fit.fits:
            return False
        if job.topology_required is not None:  # the placement itself, with the victims' GPUs given back
            view = CapacityView(state.cluster)
            for victim in self.victims.values():
                view.release(victim)
            return isinstance(place_gang(view, job, most, self.ctx.policy.placement, sorted(excluded)), Placement)
        return True


def greedy(after: AfterEviction, order: list[Job]) -> list[Job] | None:
    """The shortest prefix of `order` that makes the job admissible, less the victims the others make unnecessary;
    None when all of them do not suffice (`after` is left with none evicted)."""
    # Evicting more never makes the job less admissible (quota use only falls, free slots only grow,
    # shadow times only come earlier): when all of them do not suffice, no prefix will.
    if not after.admissible_without(order):
        return None
    chosen: list[Job] = []
    for victim in order:  # the shortest prefix that suffices
        chosen.append(victim)
        after.evict(victim)
        if after.admissible():
            break
    for victim in list(reversed(chosen)):  # drop victims the others make unnecessary
        if len(chosen) > 1:
            after.keep(victim)
            if after.admissible():
                chosen = [v for v in chosen if v is not victim]  # by identity: Job equality compares every field
            else:
                after.evict(victim)
    for victim in chosen:
        after.keep(victim)
    return chosen


def plan(state: CellState, job: Job, victims: list[Job], ctx: Context) -> Placement | None:
    """Where the admitter would place the gang were `victims` gone: the GPUs its hold claims."""
    usage = dict(state.tenancy.committed(job))
    for victim in victims:
        key = (victim.team, victim.gpu_type)
        usage[key] = usage.get(key, 0) - victim.held_gpus
    most, fit = quota_fit(state.tenancy, job, ctx.policy.admission.borrowing, usage)
    if not fit.fits:
        return None
    view = CapacityView(state.cluster)
    for victim in victims:
        view.release(victim)
    excluded = off_limits(state, job, ctx.now, frozenset(v.job_id for v in victims),
                          ctx.policy.admission.earliest_deadline_first, ctx.policy.admission.priority_passes_reservations)
    outcome = place_gang(view, job, most, ctx.policy.placement, excluded)
    return outcome if isinstance(outcome, Placement) else None


def stale(state: CellState, job: Job, ctx: Context) -> str:
    """Why the capacity held for `job` no longer makes it admissible once its victims are gone (a GPU of its plan
    taken by other work, a node lost, a victim claimed by another gang, quota used meanwhile), or ''."""
    victims = set(job.hold_victims)
    for victim_id in job.hold_victims:
        victim = state.jobs.get(victim_id)
        if victim is not None and victim.preempted_for not in (None, job.job_id):
            return f"victim {victim_id} is already making room for {victim.preempted_for}"
    workers = 0
    allowed = (None, *victims)  # a GPU may still be free or held by one of the victims
    for _, name, gpus in job.held:
        node = state.cluster.nodes.get(name)
        if node is None or not node.schedulable or len(gpus) != job.gpus_per_worker:
            return f"the planned GPUs on {name} are no longer usable"
        taken = [g for g in gpus if node.holder.get(g) not in allowed]
        if taken:
            return f"GPU {taken[0]} of {name} was taken by {node.holder[taken[0]]} before the hold was folded"
        workers += 1
    if workers * job.gpus_per_worker < job.held_quota:
        return "part of the planned GPUs were already held for another gang"
    usage = dict(state.tenancy.committed(job))
    for victim_id in job.hold_victims:
        victim = state.jobs.get(victim_id)
        if victim is not None and victim.holds_capacity:
            usage[(victim.team, victim.gpu_type)] -= victim.held_gpus
    fit = state.tenancy.admissible(job.team, job.gpu_type, job.held_quota, ctx.policy.admission.borrowing, usage)
    if not fit.fits:
        return f"its team's quota no longer admits {job.held_quota} {job.gpu_type} GPUs ({fit.limit})"
    return ""
