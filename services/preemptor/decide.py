"""The preemptor: evicts whole gangs only when that makes a waiting, entitled gang placeable.

Entitlement, in order: a lender reclaiming its nominal quota from borrowers, then higher
priority over lower (within a team, or over a team that is borrowing). Victims are chosen by
simulating admission after their eviction; among candidates it prefers the least work lost
since the last checkpoint, then the fewest victims. Victims of other teams come only from teams
that borrow, and a team stops giving victims once it no longer borrows; a job that just (re)started is protected for a minimum runtime. A victim is first asked to
checkpoint; it is preempted when the checkpoint completes or the deadline passes.
"""

from __future__ import annotations

import itertools

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.cluster import CELL
from projections.jobs import Job, JobState
from services.admitter.decide import queue_order
from services.decider import Context
from services.placement import CapacityView, Placement

#: How many of the most entitled waiting gangs a Tick reconsiders.
CANDIDATES_PER_TICK = 8


class Preemptor:
    name = "preemptor"

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
            waiting = [state.jobs[j] for j in state.queued if state.jobs[j].not_before <= ctx.now]
            memo: dict[tuple, list] = {}  # victims by what they depend on: the state does not change in this loop
            for job in itertools.islice(queue_order(state, waiting, ctx.policy.admission.fair_share, lazy=True,
                                                    nominal_first=ctx.policy.admission.nominal_first),
                                        CANDIDATES_PER_TICK):
                chosen = preempt_for(state, job, ctx, memo)
                decisions.extend(chosen)
                if chosen:
                    break  # one beneficiary per tick: the next tick sees the victims as preempting
        return decisions


def _preempted(victim: Job, reason: Reason, checkpoint_id: str | None, ctx: Context) -> m.JobPreempted:
    return m.JobPreempted(envelope=ctx.envelope(reason, victim.job_id), job_id=victim.job_id,
                          for_job_id=victim.preempted_for or "", checkpoint_id=checkpoint_id)


def preempt_for(state: CellState, job: Job, ctx: Context, memo: dict[tuple, list] | None = None) -> list[m.Decision]:
    """PreemptionRequested for the victims that make `job` admissible, or nothing. `memo` keeps candidate
    victims across calls on one unchanged state."""
    policy = ctx.policy.preemption
    if (job.state is not JobState.QUEUED or job.not_before > ctx.now
            or ctx.now - max(job.submitted_at, job.not_before) < policy.wait_before_preempting_ms
            or any(state.jobs[v].preempted_for == job.job_id for v in state.preempting)
            or not _may_have_victims(state, job, ctx)):
        return []
    if _admissible_after(state, job, [], ctx):
        return []  # the admitter will admit it without anyone's help
    tenancy = state.tenancy
    within_nominal = tenancy.used(job.team, job.gpu_type) + job.gpus <= tenancy.quota(job.team, job.gpu_type).nominal
    memo_key = (job.team, job.gpu_type, job.priority, within_nominal)  # all the victims depend on
    found = memo.get(memo_key) if memo is not None else None
    if found is None:
        found = _victims(state, job, ctx)
        if memo is not None:
            memo[memo_key] = found
    candidates, eligible = found
    # The shortest prefix of `eligible` after whose eviction the job is admissible. Evicting more
    # never makes it less admissible (quota use only falls, free slots only grow), so one check of
    # the whole list says whether any prefix works, and a binary search finds the shortest.
    if not eligible or not _admissible_after(state, job, eligible, ctx):
        return []
    low, high = 1, len(eligible)
    while low < high:
        middle = (low + high) // 2
        if _admissible_after(state, job, eligible[:middle], ctx):
            high = middle
        else:
            low = middle + 1
    chosen = eligible[:low]
    for victim in list(reversed(chosen)):  # drop victims the others make unnecessary
        rest = [v for v in chosen if v is not victim]
        if rest and _admissible_after(state, job, rest, ctx):
            chosen = rest
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


def _victims(state: CellState, job: Job, ctx: Context) -> tuple[list[tuple[tuple, Job]], list[Job]]:
    """(candidates with their sort keys, the victims in order that may be taken): a team of the pool
    stops giving victims once it no longer borrows."""
    candidates = _candidates(state, job, ctx)
    usage = dict(state.tenancy.usage)
    nominal = {t: state.tenancy.quota(t, job.gpu_type).nominal for t in state.tenancy.pool_members(job.team)}
    eligible: list[Job] = []
    for _, victim in candidates:
        key = (victim.team, victim.gpu_type)
        if victim.team != job.team and usage.get(key, 0) <= nominal.get(victim.team, 0):
            continue  # that team no longer borrows: never preempt a team within its nominal
        eligible.append(victim)
        usage[key] = usage.get(key, 0) - victim.gpus
    return candidates, eligible


def _may_have_victims(state: CellState, job: Job, ctx: Context) -> bool:
    """Cheap test before the search: is any kind of entitlement possible at all?"""
    policy, tenancy = ctx.policy.preemption, state.tenancy
    if policy.priority and job.priority > min([0, *(c.value for c in tenancy.priority_classes.values())]):
        return True
    if not policy.reclaim_lent_quota:
        return False
    if tenancy.used(job.team, job.gpu_type) + job.gpus > tenancy.quota(job.team, job.gpu_type).nominal:
        return False
    return any(tenancy.borrowed(t, job.gpu_type) > 0 for t in tenancy.pool_members(job.team) if t != job.team)


def _lost_work_gpu_ms(victim: Job, now: int) -> int:
    since = victim.running_since or now
    if victim.checkpoint is not None:
        since = max(since, victim.checkpoint.at)
    return victim.gpus * max(0, now - since)


def _candidates(state: CellState, job: Job, ctx: Context) -> list[tuple[tuple, Job]]:
    """Possible victims with their sort key: reclaim before priority, least lost work, biggest first."""
    policy = ctx.policy.preemption
    tenancy = state.tenancy
    now = ctx.now
    gpu_type = job.gpu_type
    pool = tenancy.pool_members(job.team)
    within_nominal = tenancy.used(job.team, gpu_type) + job.gpus <= tenancy.quota(job.team, gpu_type).nominal
    usage = tenancy.usage
    borrowing = {t for t in pool if usage.get((t, gpu_type), 0) > tenancy.quota(t, gpu_type).nominal}
    teams = borrowing - {job.team}
    if policy.priority:
        teams.add(job.team)
    protected_after = now - policy.min_runtime_ms  # a job running since later is protected
    checkpoint_aware = policy.checkpoint_aware
    out = []
    # Visit order does not matter: the candidates are sorted by a total key below.
    for team in sorted(teams):
        # victims of another team in the pool only while it borrows; of the job's own team by priority
        reclaim = policy.reclaim_lent_quota and within_nominal and team != job.team
        by_priority = policy.priority and (team == job.team or team in borrowing)
        if not reclaim and not by_priority:
            continue
        for victim_id in state.holding_by_team.get(team, ()):
            victim = state.jobs[victim_id]
            if (victim.gpu_type != gpu_type or not victim.preemptible or victim_id == job.job_id
                    or victim.state not in (JobState.RUNNING, JobState.PLACED)):
                continue
            if victim.running_since is None or victim.running_since > protected_after:
                continue  # not running yet, or protected after a (re)start
            if reclaim:
                category, rank = Reason.RECLAIM_LENT_QUOTA, 0
            elif by_priority and victim.priority < job.priority:
                category, rank = Reason.HIGHER_PRIORITY, 1
            else:
                continue
            if checkpoint_aware:
                key = (category, rank, _lost_work_gpu_ms(victim, now), 0, -victim.gpus, victim_id)
            else:  # without checkpoint awareness: newest first, as Kueue does
                key = (category, rank, 0, -victim.running_since, -victim.gpus, victim_id)
            out.append((key, victim))
    out.sort(key=lambda c: c[0][1:])
    return out


def _admissible_after(state: CellState, job: Job, victims: list[Job], ctx: Context) -> bool:
    usage = dict(state.tenancy.usage)
    for victim in victims:
        key = (victim.team, victim.gpu_type)
        usage[key] = usage.get(key, 0) - victim.gpus
    if not state.tenancy.admissible(job.team, job.gpu_type, job.gpus, ctx.policy.admission.borrowing, usage).fits:
        return False
    if not _enough_slots_after(state, job, victims):
        return False  # cheap necessary condition, before the placement itself
    view = CapacityView(state.cluster)
    for victim in victims:
        view.release(victim)
    excluded = [n for holder, nodes in state.reservations.items() if holder != job.job_id for n in nodes]
    return isinstance(view.place(job, ctx.policy.placement, excluded), Placement)


def _enough_slots_after(state: CellState, job: Job, victims: list[Job]) -> bool:
    """Whether the cell would have `job.workers` slots of `job.gpus_per_worker` GPUs outside other gangs'
    reservations once the victims' GPUs are free, ignoring topology: necessary for a placement, not sufficient."""
    cluster, g = state.cluster, job.gpus_per_worker
    histogram = cluster.histogram.get((job.gpu_type, CELL, ""), ())
    slots = sum(count * (free // g) for free, count in enumerate(histogram) if free >= g)
    reserved = {n for holder, nodes in state.reservations.items() if holder != job.job_id for n in nodes}
    for name in reserved:
        if name in cluster.counted and cluster.nodes[name].gpu_type == job.gpu_type:
            slots -= cluster.counted[name] // g
    freed: dict[str, int] = {}
    for victim in victims:
        for _, name, gpus in victim.assignments:
            freed[name] = freed.get(name, 0) + len(gpus)
    for name, extra in freed.items():
        if name in cluster.counted and name not in reserved:  # schedulable, not held for another gang
            before = cluster.counted[name]
            slots += (before + extra) // g - before // g
    return slots >= job.workers
