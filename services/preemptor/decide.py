"""The preemptor: evicts whole gangs only when that makes a waiting, entitled gang placeable.

Entitlement, in order: a lender reclaiming its nominal quota from borrowers, then higher
priority over lower (within a team, or over a team that is borrowing). Victims are chosen by
simulating admission after their eviction; among candidates it prefers the least work lost
since the last checkpoint, then the fewest victims (a single victim that suffices beats a set
that loses as much work). Victims of other teams come only from teams
that borrow, and a team stops giving victims once it no longer borrows; a job that just (re)started is protected for a minimum runtime. A victim is first asked to
checkpoint; it is preempted when the checkpoint completes or the deadline passes. A gang with
min_workers is entitled to room for its minimum: it preempts only until that many workers fit,
exactly as the admitter would admit it.
"""

from __future__ import annotations

import itertools

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.cluster import CELL
from projections.jobs import Job, JobState
from projections.reservations import ends_before, expected_end
from services.core.decider import Context
from services.core.placement import CapacityView, Placement, place_gang
from services.core.queue import queue_order
from services.core.quota import quota_fit

#: How many of the most entitled waiting gangs that may have victims a Tick reconsiders.
CANDIDATES_PER_TICK = 8


class Preemptor:
    name = "preemptor"
    triggers = frozenset({m.CheckpointCompleted, m.Tick, m.JobQueued})
    side_input: frozenset[type] = frozenset()
    answers_refusals = False

    def decide(self, state: CellState, event: m.Event, ctx: Context) -> list[m.Decision]:
        decisions: list[m.Decision] = []
        if isinstance(event, m.CheckpointCompleted):
            victim = state.jobs.get(event.job_id)
            if victim is not None and victim.state is JobState.PREEMPTING and victim.attempt == event.attempt:
                decisions.append(_preempted(victim, Reason.CHECKPOINT_COMPLETED, event.checkpoint_id, ctx))
        if isinstance(event, m.Tick):
            for victim in [state.jobs[j] for j in sorted(state.preempting)]:
                if victim.preemption_deadline is not None and ctx.now >= victim.preemption_deadline:
                    checkpoint = victim.checkpoint.checkpoint_id if victim.checkpoint else None
                    decisions.append(_preempted(victim, Reason.CHECKPOINT_DEADLINE_PASSED, checkpoint, ctx))
        if not ctx.policy.preemption.enabled:
            return decisions
        if isinstance(event, m.JobQueued):
            job = state.jobs.get(event.job_id)
            if job is not None:
                decisions.extend(preempt_for(state, job, ctx))
        elif isinstance(event, m.Tick):
            for job in itertools.islice(queue_order(state, _may_preempt(state, ctx), ctx.policy.admission.fair_share,
                                                    ctx.policy.admission.nominal_first),
                                        CANDIDATES_PER_TICK):
                chosen = preempt_for(state, job, ctx)
                decisions.extend(chosen)
                if chosen:
                    break  # one beneficiary per tick: the next tick sees the victims as preempting
        return decisions


def _preempted(victim: Job, reason: Reason, checkpoint_id: str | None, ctx: Context) -> m.JobPreempted:
    return m.JobPreempted(envelope=ctx.envelope(reason, victim.job_id), job_id=victim.job_id,
                          for_job_id=victim.preempted_for or "", checkpoint_id=checkpoint_id)


def _may_preempt(state: CellState, ctx: Context) -> list[Job]:
    """The waiting gangs that may be entitled to victims now (`preempt_for` looks no further at the others)."""
    waiting = [state.jobs[j] for j in state.queued if _waited_enough(state.jobs[j], ctx)]
    beneficiaries = {state.jobs[v].preempted_for for v in state.preempting}
    entitled: dict[tuple, bool] = {}  # the entitlement test depends only on these fields of the job
    out = []
    for job in waiting:
        key = (job.team, job.gpu_type, job.min_gpus, job.priority)
        if key not in entitled:
            entitled[key] = _may_have_victims(state, job, ctx)
        if entitled[key] and job.job_id not in beneficiaries:
            out.append(job)
    return out


def _waited_enough(job: Job, ctx: Context) -> bool:
    return (job.state is JobState.QUEUED and job.not_before <= ctx.now
            and ctx.now - max(job.submitted_at, job.not_before) >= ctx.policy.preemption.wait_before_preempting_ms)


def preempt_for(state: CellState, job: Job, ctx: Context) -> list[m.Decision]:
    """PreemptionRequested for the victims that make `job` admissible, or nothing."""
    if (not _waited_enough(job, ctx) or any(state.jobs[v].preempted_for == job.job_id for v in state.preempting)
            or not _may_have_victims(state, job, ctx)):
        return []
    policy = ctx.policy.preemption
    candidates = _candidates(state, job, ctx)
    after = _AfterEviction(state, job, ctx)
    if not candidates or after.admissible():
        return []  # nobody to evict, or the admitter will admit it without anyone's help
    eligible = _eligible(state, job, candidates)
    # Evicting more never makes the job less admissible (quota use only falls, free slots only grow,
    # shadow times only come earlier): when all of them do not suffice, no prefix will.
    for victim in eligible:
        after.evict(victim)
    enough = after.admissible()
    for victim in eligible:
        after.keep(victim)
    if not enough:
        return []
    chosen: list[Job] = []
    for victim in eligible:  # the shortest prefix that suffices
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
    costs = {victim.job_id: (key[1], key[2]) for key, victim in candidates}  # (category rank, lost work)

    def cost(victims: list[Job]) -> tuple:
        return (max(costs[v.job_id][0] for v in victims), sum(costs[v.job_id][1] for v in victims), len(victims),
                sorted(v.job_id for v in victims))

    chosen = min([chosen, *_single_victims(state, job, candidates, after)], key=cost)
    reasons = {victim.job_id: key[0] for key, victim in candidates}
    deadline = ctx.now + (policy.checkpoint_grace_ms if policy.checkpoint_aware else 0)
    decisions: list[m.Decision] = []
    for v in sorted(chosen, key=lambda v: v.job_id):
        decisions.append(m.PreemptionRequested(envelope=ctx.envelope(reasons[v.job_id], v.job_id), job_id=v.job_id,
                                               for_job_id=job.job_id, checkpoint_deadline=deadline))
        if deadline <= ctx.now:  # no grace: evicted at once, from its last checkpoint, not at the next tick
            checkpoint = v.checkpoint.checkpoint_id if v.checkpoint else None
            decisions.append(m.JobPreempted(envelope=ctx.envelope(Reason.CHECKPOINT_DEADLINE_PASSED, v.job_id),
                                            job_id=v.job_id, for_job_id=job.job_id, checkpoint_id=checkpoint))
    return decisions


def _eligible(state: CellState, job: Job, candidates: list[tuple[tuple, Job]]) -> list[Job]:
    """The candidates in order, less those of a team that would no longer borrow once the earlier ones are
    gone: a team is never preempted below its nominal quota."""
    usage = dict(state.tenancy.usage)
    out = []
    for _, victim in candidates:
        key = (victim.team, victim.gpu_type)
        if victim.team != job.team and usage.get(key, 0) <= state.tenancy.quota(*key).nominal:
            continue
        out.append(victim)
        usage[key] = usage.get(key, 0) - victim.held_gpus
    return out


def _may_have_victims(state: CellState, job: Job, ctx: Context) -> bool:
    """Cheap test before the search: is any kind of entitlement possible at all?"""
    policy, tenancy = ctx.policy.preemption, state.tenancy
    if policy.priority and job.priority > min([0, *(c.value for c in tenancy.priority_classes.values())]):
        return True
    if not policy.reclaim_lent_quota:
        return False
    if tenancy.used(job.team, job.gpu_type) + job.min_gpus > tenancy.quota(job.team, job.gpu_type).nominal:
        return False
    return any(tenancy.borrowed(t, job.gpu_type) > 0 for t in tenancy.pool_members(job.team) if t != job.team)


def _single_victims(state: CellState, job: Job, candidates: list[tuple[tuple, Job]],
                    after: _AfterEviction) -> list[list[Job]]:
    """Each candidate that alone makes room (`after` evicts none and is left so): one victim may lose no
    more work than the several the greedy pass picked, and then fewer victims is better."""
    free = sum(n.free for n in state.cluster.of_type(job.gpu_type) if n.schedulable)
    out = []
    for _, victim in candidates:
        if victim.held_gpus + free >= job.min_gpus:
            after.evict(victim)
            if after.admissible():
                out.append([victim])
            after.keep(victim)
    return out


def _lost_work_gpu_ms(victim: Job, now: int) -> int:
    since = victim.running_since or now
    if victim.checkpoint is not None:
        since = max(since, victim.checkpoint.at)
    return victim.held_gpus * max(0, now - since)


def _candidates(state: CellState, job: Job, ctx: Context) -> list[tuple[tuple, Job]]:
    """Possible victims with their sort key: reclaim before priority, least lost work, biggest first."""
    policy = ctx.policy.preemption
    tenancy = state.tenancy
    now = ctx.now
    pool = set(tenancy.pool_members(job.team))
    within_nominal = tenancy.used(job.team, job.gpu_type) + job.min_gpus <= tenancy.quota(job.team, job.gpu_type).nominal
    # Only borrowing teams give victims to other teams, and only lower priorities give way to a higher one.
    borrowing_teams = {t for t in pool if t != job.team and tenancy.borrowed(t, job.gpu_type) > 0}
    outranks = policy.priority and job.priority > min([0, *(c.value for c in tenancy.priority_classes.values())])
    teams = set(borrowing_teams) if (policy.reclaim_lent_quota and within_nominal) or outranks else set()
    if outranks:
        teams.add(job.team)
    out = []
    # Visit order does not matter: the candidates are sorted by a total key below.
    started_by = now - policy.min_runtime_ms  # later starters are protected for their minimum runtime
    for victim_id in [v for t in sorted(teams) for v in state.running_before(t, started_by)]:
        victim = state.jobs[victim_id]
        if (victim.state not in (JobState.RUNNING, JobState.PLACED) or not victim.preemptible
                or victim.gpu_type != job.gpu_type or victim.job_id == job.job_id):
            continue
        if victim.running_since is None or now - victim.running_since < policy.min_runtime_ms:
            continue  # not running yet, or protected after a (re)start
        borrowing = victim.team in borrowing_teams
        if (policy.reclaim_lent_quota and within_nominal and victim.team != job.team and victim.team in pool
                and borrowing):
            category = Reason.RECLAIM_LENT_QUOTA
        elif policy.priority and victim.priority < job.priority and (
                victim.team == job.team or (victim.team in pool and borrowing)):
            category = Reason.HIGHER_PRIORITY
        else:
            continue
        rank = 0 if category is Reason.RECLAIM_LENT_QUOTA else 1
        lost = _lost_work_gpu_ms(victim, now) if policy.checkpoint_aware else 0
        started = -(victim.running_since or 0)  # without checkpoint awareness: newest first, as Kueue does
        out.append(((category, rank, lost, started if not policy.checkpoint_aware else 0, -victim.held_gpus,
                     victim.job_id), victim))
    out.sort(key=lambda c: c[0][1:])
    return out


class _AfterEviction:
    """Whether the admitter would admit one waiting job were the victims gone (its quota fits and a
    placement exists), while victims are evicted and kept one at a time: the quota usage, the freed GPUs
    per node and the reservations' shadow times follow each change, so a check costs the reservations and
    the nodes touched, not a rebuild. Without a required topology domain the whole cell is the last domain
    a placement tries, so enough slots outside the excluded nodes is exactly "placeable"; gangs that need
    a particular domain get a real placement on a view."""

    def __init__(self, state: CellState, job: Job, ctx: Context) -> None:
        self.state, self.job, self.ctx = state, job, ctx
        cluster, g = state.cluster, job.gpus_per_worker
        self.usage = dict(state.tenancy.usage)
        self.victims: dict[str, Job] = {}
        self.freed: dict[str, int] = {}  # node -> GPUs the victims give back there
        histogram = cluster.histogram.get((job.gpu_type, CELL, ""), ())
        self.slots = sum(count * (free // g) for free, count in enumerate(histogram) if free >= g)
        # Other gangs' reservations, each with the expected end of every job holding GPUs on its nodes;
        # whether the job may use one changes only while a victim holds GPUs there.
        self.reservations: list[tuple[list[str], list[tuple[str, int | None]]]] = []
        self.touches: dict[str, list[int]] = {}  # job id -> reservations it holds GPUs in
        for holder, nodes in state.reservations.items():
            if holder == job.job_id:
                continue
            jobs = sorted({j for n in nodes if n in cluster.nodes for j in cluster.nodes[n].holder.values()})
            for j in jobs:
                self.touches.setdefault(j, []).append(len(self.reservations))
            self.reservations.append((list(nodes), [(j, expected_end(state.jobs[j])) for j in jobs]))
        self.closed = [self._closed(r) for r in range(len(self.reservations))]

    def evict(self, victim: Job) -> None:
        self._shift(victim, 1)
        self.victims[victim.job_id] = victim
        self._retouch(victim)

    def keep(self, victim: Job) -> None:
        self._shift(victim, -1)
        del self.victims[victim.job_id]
        self._retouch(victim)

    def _retouch(self, victim: Job) -> None:
        for r in self.touches.get(victim.job_id, ()):
            self.closed[r] = self._closed(r)

    def _shift(self, victim: Job, sign: int) -> None:
        key = (victim.team, victim.gpu_type)
        self.usage[key] = self.usage.get(key, 0) - sign * victim.held_gpus
        cluster = self.state.cluster
        for _, name, gpus in victim.assignments:
            node = cluster.nodes.get(name)
            if name in cluster.counted and node.gpu_type == self.job.gpu_type:
                freed = sum(1 for i in gpus if i in node.holder and i not in node.retired)
                self.freed[name] = self.freed.get(name, 0) + sign * freed

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

    def _excluded(self) -> set[str]:
        return {n for r, (nodes, _) in enumerate(self.reservations) if self.closed[r] for n in nodes}

    def admissible(self) -> bool:
        state, job = self.state, self.job
        most, fit = quota_fit(state.tenancy, job, self.ctx.policy.admission.borrowing, self.usage)
        if not fit.fits:
            return False
        excluded = self._excluded()
        if job.topology_required is not None:  # the placement itself, with the victims' GPUs given back
            view = CapacityView(state.cluster)
            for victim in self.victims.values():
                view.release(victim)
            return isinstance(place_gang(view, job, most, self.ctx.policy.placement, sorted(excluded)), Placement)
        counted, g, slots = state.cluster.counted, job.gpus_per_worker, self.slots
        for name in excluded:
            if name in counted and state.cluster.nodes[name].gpu_type == job.gpu_type:
                slots -= counted[name] // g
        for name, extra in self.freed.items():
            if extra and name not in excluded:
                before = counted[name]
                slots += (before + extra) // g - before // g
        return slots >= job.min_count
