"""The preemptor: evicts whole gangs only when that makes a waiting, entitled gang placeable, and holds what they
free for that gang until it is admitted.

Entitlement follows each team's preemption rules (services/preemptor/victims.py: Kueue's within-team, reclaim
and borrow-within-cohort rules, per team on the log), and no other team is ever preempted below its nominal
quota. Victims are chosen by simulating admission after their eviction; among candidates it prefers the least
work lost since the last checkpoint, then the fewest victims (a single victim that suffices beats a set that
loses as much work). A job that just (re)started is protected for a minimum runtime. A gang with min_workers is
entitled to room for its minimum: it preempts only until that many workers fit, exactly as the admitter would
admit it.

A preemption finishes what it starts, in two steps. First the preemptor holds capacity for the gang
(`CapacityHeld`): the GPUs of its planned placement, those free now and those its victims will free, and its
quota, until the victims' checkpoint deadline; no other work may take them, the victims included. Once the
hold is on the log and still whole (no admission folded before it took a planned GPU or the quota), the victims
are asked to checkpoint by the deadline; otherwise the hold is released (HOLD_STALE) and nobody was asked. A
victim is preempted when its checkpoint completes or the deadline passes, and the gang is admitted on the held
capacity once the last one is gone; the admitter releases a hold whose gang was not admitted by its deadline.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from dataclasses import replace
from typing import cast

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.jobs import Job, JobState
from services.core.decider import Context
from services.core.placement import Placement
from services.core.queue import queue_order, service_varies
from services.core.quiet import compared_until, first_after, first_waiting, is_quiet, remember
from services.preemptor.consolidation import homeless, movable, moves_for
from services.preemptor.eviction import AfterEviction, greedy, plan, stale
from services.preemptor.policy import PreemptionPolicy
from services.preemptor.victims import (
    borrowing_teams,
    candidates,
    category,
    eligible,
    keeps_nominal,
    may_have_victims,
    rules,
    staying,
    within_nominal,
)

#: How many of the most entitled waiting gangs that may have victims a Tick reconsiders.
CANDIDATES_PER_TICK = 8
#: Decisions after which a gang no longer needs the victims still making room for it.
_BENEFICIARY_DONE = (m.JobAdmitted, m.JobCancelled, m.JobRejected, m.JobFailed)


def _of_a_victim(state: CellState, event: m.CheckpointCompleted) -> bool:
    return event.job_id in state.preempting


class Preemptor:
    name = "preemptor"
    triggers = frozenset({m.CheckpointCompleted, m.Tick, m.JobQueued, m.CapacityHeld, *_BENEFICIARY_DONE})
    side_input: frozenset[type] = frozenset()
    answers_refusals = False
    # a checkpoint decides something only for a victim making room (most are of jobs that just run)
    only_if = {m.CheckpointCompleted: _of_a_victim}

    def decide(self, state: CellState, event: m.Event, ctx: Context) -> list[m.Decision]:
        if isinstance(event, m.Tick):
            return tick(state, ctx)
        decisions: list[m.Decision] = []
        if isinstance(event, m.CheckpointCompleted):
            victim = state.jobs.get(event.job_id)
            if victim is not None and victim.state is JobState.PREEMPTING and victim.attempt == event.attempt:
                decisions.append(_preempted(victim, Reason.CHECKPOINT_COMPLETED, event.checkpoint_id, ctx))
        if isinstance(event, _BENEFICIARY_DONE):
            return withdraw(state, event.job_id, ctx)
        if isinstance(event, (m.CapacityHeld, m.JobQueued)):
            ctx = _time_sharing_gated(state, ctx)
        if isinstance(event, m.CapacityHeld):
            if event.envelope.reason in (Reason.HELD_FOR_PREEMPTION, Reason.CONSOLIDATED):
                decisions.extend(ask_victims(state, event, ctx))
            return decisions
        if not ctx.policy.preemption.enabled:
            return decisions
        if isinstance(event, m.JobQueued):
            job = state.jobs.get(event.job_id)
            if job is not None:
                decisions.extend(preempt_for(state, job, ctx, _shared(state, ctx)))
        return decisions


def tick(state: CellState, ctx: Context) -> list[m.Decision]:
    """Victims whose checkpoint deadline passed are preempted; then the most entitled waiting gangs that may have
    victims look for them, until one finds some. When the last Tick decided nothing on this very state
    (CellState.changes; checkpoints are not counted: only a search for victims or movers reads them, and such a
    search ends the quiet at once), that holds until the first time its tests compared `now` with comes
    (`quiet_until`, and the times `preempt_for` says it compared): the Tick is skipped."""
    if is_quiet(state, "preemptor", ctx):
        return []
    decisions: list[m.Decision] = []
    for victim in [state.jobs[j] for j in sorted(state.preempting)]:
        if victim.preemption_deadline is not None and ctx.now >= victim.preemption_deadline:
            checkpoint = victim.checkpoint.checkpoint_id if victim.checkpoint else None
            decisions.append(_preempted(victim, Reason.CHECKPOINT_DEADLINE_PASSED, checkpoint, ctx))
    gated = _time_sharing_gated(state, ctx)
    memo = _shared(state, gated)
    waiting = _may_preempt(state, gated, CANDIDATES_PER_TICK, memo) if gated.policy.preemption.enabled else []
    compared: list[int] = []
    for job in itertools.islice(queue_order(state, waiting, gated.policy.admission), CANDIDATES_PER_TICK):
        chosen = preempt_for(state, job, gated, memo, compared)
        decisions.extend(chosen)
        if chosen:
            break  # one beneficiary per tick: the next tick sees its hold and its victims
    remember(state, "preemptor", ctx, None if decisions else
             min(quiet_until(state, gated.policy.preemption, ctx.now), compared_until(state, compared, ctx.now)))
    return decisions


def _shared(state: CellState, ctx: Context) -> dict:
    """What `preempt_for`'s calls share (entitlements, victims alike for several gangs, consolidation's quota fits,
    heads and what delays them, releases and movers) while nothing they read changes: the same time and policy, no
    fold since but ones that only restate why a gang waits (an admission cycle's burst of them asks for a look at
    each), no checkpoint folded since."""
    key = (state.changes - state.restated, state.checkpoints, ctx.now, ctx.policy)
    kept = state.memo.get("preemptor/shared")
    if kept is None or kept[0] != key:
        kept = state.memo["preemptor/shared"] = (key, {})
    return kept[1]


def quiet_until(state: CellState, policy: PreemptionPolicy, now: int) -> int:
    """The earliest time after `now` at which a Tick on this state could find a deadline passed or a gang that may
    have victims: a victim's deadline; a waiting gang coming back from backing off or having waited long enough;
    with time-sharing, a running job's attained service reaching its next band (it may then yield to gangs of a
    lower band). Everything else these tests read is the state's."""
    jobs = state.jobs
    moments = [deadline for j in state.preempting if (deadline := jobs[j].preemption_deadline) is not None]
    if policy.time_share != "Never":
        for running in state.running_by_team.values():
            moments.extend(at for _, j in running if (at := jobs[j].next_band_at(now)) is not None)
    return min(first_after(moments, now), first_waiting(state, policy.wait_before_preempting_ms, now))


def _time_sharing_gated(state: CellState, ctx: Context) -> Context:
    """The context with time-sharing off while the service jobs need varies too little (services/core/queue.py)."""
    preemption = ctx.policy.preemption
    if preemption.time_share == "Never" or service_varies(state, ctx.policy.admission):
        return ctx
    policy = replace(ctx.policy, preemption=replace(preemption, time_share="Never"))
    return replace(ctx, policy=policy)


def _preempted(victim: Job, reason: Reason, checkpoint_id: str | None, ctx: Context) -> m.JobPreempted:
    return m.JobPreempted(envelope=ctx.envelope(reason, victim.job_id), job_id=victim.job_id,
                          for_job_id=victim.preempted_for or "", checkpoint_id=checkpoint_id)


def _may_preempt(state: CellState, ctx: Context, first: int, memo: dict) -> list[Job]:
    """The waiting gangs that may be entitled to victims now (`preempt_for` looks no further at the others), in
    no particular order (queue_order sorts them by a total key), at most the `first` of each group of equal needs
    and every moving gang: a group's members share all of the queue's key but their rank (or deadline rank), in
    which the group is sorted, and whether they move (which goes first). A group of equal needs shares what the
    tests read besides a member's priority and wait, so they look at each group once."""
    beneficiaries = {state.jobs[v].preempted_for for v in state.preempting}
    policy = ctx.policy.preemption
    free: dict[str, int] = {}  # free GPUs per type: with consolidation, a gang they add up to may have moves
    out: dict[str, Job] = {}
    jobs, now, wait = state.jobs, ctx.now, policy.wait_before_preempting_ms

    def may(job: Job) -> bool:
        return _waited_enough(job, now, wait) and job.job_id not in beneficiaries and not job.has_hold

    moves_in: dict[tuple, bool] = {}  # per group: whether consolidation may place it (its GPUs are free in number)
    for needs, members in state.groups(ctx.policy.admission.earliest_deadline_first).items():
        head = jobs[members[0][1]]
        if policy.consolidate and head.gpu_type not in free:
            free[head.gpu_type] = state.cluster.free_gpus(head.gpu_type)
        moves = moves_in[needs] = policy.consolidate and free[head.gpu_type] >= head.min_gpus
        taken, i = 0, 0
        while i < len(members) and taken < first:
            job = jobs[members[i][1]]
            if not moves and not _entitled(state, job, policy, now, memo):  # nor the rest of its priority, after it
                i = bisect_right(members, members[i][0][0], lo=i, key=_priority_of)
                continue
            if may(job):
                out[job.job_id] = job
                taken += not job.moving
            i += 1
    for job_id in sorted(state.moving - out.keys()):  # past the first of their group, but first in the queue
        queued = state.queued_as(job_id)
        job = jobs[job_id]
        if queued is not None and may(job) and (moves_in[queued.needs] or _entitled(state, job, policy, now, memo)):
            out[job_id] = job
    return list(out.values())


def _entitled(state: CellState, job: Job, policy: PreemptionPolicy, now: int, memo: dict) -> bool:
    """`may_have_victims` on the state's committed quota, which reads of the job only these fields: kept in `memo`."""
    entitled = memo.setdefault("entitled", {})
    key = (job.team, job.gpu_type, job.min_gpus, job.priority, job.service_band)
    if key not in entitled:
        entitled[key] = may_have_victims(state, job, policy, state.tenancy.committed(), now)
    return entitled[key]


def _priority_of(member: tuple[tuple, str]) -> int:
    return member[0][0]  # a queued member's rank starts with its priority, negated


def _waited_enough(job: Job, now: int, wait_ms: int) -> bool:
    return job.state is JobState.QUEUED and job.not_before <= now and now - job.waiting_since >= wait_ms


def preempt_for(state: CellState, job: Job, ctx: Context, memo: dict | None = None,
                compared: list[int] | None = None) -> list[m.Decision]:
    """A CapacityHeld for the victims that make `job` admissible and the placement it would get, or nothing.
    `memo` is shared by the calls that see the same state (`_shared`): victims in other teams (see `candidates`), and
    what consolidation keeps (see `moves_for`). `compared` receives the times the answer compared `now` with besides
    those `quiet_until` names (the gang's wait, its entitlement's bands): `now + 1` once victims are searched for
    (their runtimes, bands and lost work compare `now` in ways not bounded here)."""
    policy, memo = ctx.policy.preemption, {} if memo is None else memo
    if (not _waited_enough(job, ctx.now, policy.wait_before_preempting_ms) or job.has_hold
            or any(state.jobs[v].preempted_for == job.job_id for v in state.preempting)):
        return []
    if not _entitled(state, job, policy, ctx.now, memo):
        return _consolidate(state, job, ctx, memo, compared) if policy.consolidate else []
    if compared is not None:
        compared.append(ctx.now + 1)
    after = AfterEviction(state, job, ctx)
    ranked = candidates(state, job, policy, ctx.now, after.usage, memo)
    if not ranked or after.admissible():
        # nobody to evict, or the admitter will admit it without anyone's help
        return _consolidate(state, job, ctx, memo) if policy.consolidate and not ranked else []
    usage = staying(state, after.usage)
    costs = {victim.job_id: (key[1], key[2]) for key, victim in ranked}  # (category rank, lost work)

    def cost(victims: list[Job]) -> tuple:
        return (max(costs[v.job_id][0] for v in victims), sum(costs[v.job_id][1] for v in victims), len(victims),
                sorted(v.job_id for v in victims))

    # The law (no other team below its nominal) makes the cheapest set order-dependent: the greedy pass runs in
    # the candidates' order and biggest first (few big borrowers can fit where many small ones cannot).
    first = eligible(state, job, ranked, usage, policy.keep_nominal)
    sets = [chosen] if (chosen := greedy(after, first)) else []
    if len(first) < len(ranked):  # the law passed over some: biggest first may find a set where that order did not
        # (rank, -GPUs, lost work, start, id): the key (rank, -GPUs, rank, lost, start, -GPUs, id) less repeats
        by_size = sorted(ranked, key=lambda c: (c[0][1], c[0][4], c[0][2], c[0][3], c[0][5]))
        if (chosen := greedy(after, eligible(state, job, by_size, usage, policy.keep_nominal))) is not None:
            sets.append(chosen)
    if sets or policy.single_victims_always:
        sets += _single_victims(state, job, ranked, after, usage, policy.keep_nominal)
    if not sets:  # not even all the victims the law allows would make room
        return _consolidate(state, job, ctx, memo) if policy.consolidate else []
    chosen = min(sets, key=cost)
    placement = plan(state, job, chosen, ctx)
    if placement is None:
        return []
    if policy.prefer_one_rack and _racks(state, placement.assignments) > 1:
        # room in one rack, if some set of victims no more protected than these makes it
        rank = cost(chosen)[0]
        local = [s for s in _one_rack(state, job, ranked, usage, policy.keep_nominal, ctx) if cost(s)[0] <= rank]
        if local and (packed := plan(state, job, cheapest := min(local, key=cost), ctx)) is not None:
            chosen, placement = cheapest, packed
    return [_held(job, chosen, placement, ctx, Reason.HELD_FOR_PREEMPTION)]


def _consolidate(state: CellState, job: Job, ctx: Context, memo: dict,
                 compared: list[int] | None = None) -> list[m.Decision]:
    """A hold for the gang on whole nodes that smaller jobs leave by moving elsewhere, or nothing."""
    moves = moves_for(state, job, ctx, memo, compared)
    return [] if moves is None else [_held(job, *moves, ctx, Reason.CONSOLIDATED)]


def _held(job: Job, chosen: list[Job], placement: Placement, ctx: Context, reason: Reason) -> m.CapacityHeld:
    """The gang's hold: HELD_FOR_PREEMPTION for victims its team's rules allow, CONSOLIDATED for jobs that move."""
    policy = ctx.policy.preemption
    victims = sorted(v.job_id for v in chosen)
    deadline = ctx.now + (policy.checkpoint_grace_ms if policy.checkpoint_aware else 0)
    gpus = len(placement.assignments) * job.gpus_per_worker
    return m.CapacityHeld(
        envelope=ctx.envelope(reason, job.job_id), job_id=job.job_id, team=job.team,
        gpu_type=job.gpu_type, gpus=gpus, victims=victims, until=deadline,
        assignments=[m.WorkerAssignment(worker=w, node=n, gpus=list(g)) for w, n, g in placement.assignments],
        detail=f"{gpus} {job.gpu_type} GPUs held until {len(victims)} victim(s) make room: {', '.join(victims)}")


def ask_victims(state: CellState, held: m.CapacityHeld, ctx: Context) -> list[m.Decision]:
    """The second step: once the hold is folded and whole, PreemptionRequested for each of its victims (and, with
    no grace, JobPreempted at once); a hold that is no longer whole is released before anyone is asked."""
    job = state.jobs.get(held.job_id)
    if (job is None or job.state is not JobState.QUEUED or job.hold_until != held.until
            or job.hold_victims != tuple(held.victims)):
        return []  # superseded, replaced, or the gang was admitted meanwhile
    why = stale(state, job, ctx)
    if why:
        return [m.CapacityReleased(envelope=ctx.envelope(Reason.HOLD_STALE, job.job_id), job_id=job.job_id,
                                   detail=f"no victim asked: {why}")]
    # A victim that ended, or was interrupted, meanwhile has freed its GPUs into the hold already.
    victims = [state.jobs[v] for v in job.hold_victims
               if v in state.jobs and state.jobs[v].state in (JobState.RUNNING, JobState.PLACED)]
    policy = ctx.policy.preemption
    if held.envelope.reason is Reason.CONSOLIDATED:  # jobs that move: each still may
        reasons = {v.job_id: Reason.CONSOLIDATED if policy.consolidate and movable(job, v, policy, ctx.now) else None
                   for v in victims}
    else:
        usage = state.tenancy.committed(job)
        team_rules = rules(state, job.team, policy)
        within = within_nominal(state, job, usage)
        borrowing = borrowing_teams(state, job, usage)
        reasons = {v.job_id: category(job, v, team_rules, within, borrowing, policy.time_share, ctx.now)
                   for v in victims}
    if None in reasons.values():
        unentitled = next(v for v, reason in reasons.items() if reason is None)
        return [m.CapacityReleased(envelope=ctx.envelope(Reason.HOLD_STALE, job.job_id), job_id=job.job_id,
                                   detail=f"no victim asked: {unentitled} may no longer be preempted for it")]
    # The law is asked again: a hold decided while another gang's hold (since released) counted in a team's use
    # may have found that team borrowing, which it no longer is.
    if not keeps_nominal(state, job, victims, staying(state, state.tenancy.committed(job)), policy.keep_nominal):
        return [m.CapacityReleased(envelope=ctx.envelope(Reason.HOLD_STALE, job.job_id), job_id=job.job_id,
                                   detail="no victim asked: together they would take another team below its "
                                          "nominal quota")]
    if (held.envelope.reason is Reason.CONSOLIDATED and policy.keep_room_for_moves
            and (stranded := homeless(state, victims, ctx)) is not None):
        return [m.CapacityReleased(envelope=ctx.envelope(Reason.HOLD_STALE, job.job_id), job_id=job.job_id,
                                   detail=f"no victim asked: {stranded.job_id} would no longer fit elsewhere")]
    entitled = cast("dict[str, Reason]", reasons)  # none is None now
    decisions: list[m.Decision] = []
    for victim in victims:
        victim_id, reason = victim.job_id, entitled[victim.job_id]
        decisions.append(m.PreemptionRequested(envelope=ctx.envelope(reason, victim_id), job_id=victim_id,
                                               for_job_id=job.job_id, checkpoint_deadline=held.until))
        if held.until <= ctx.now:  # no grace: evicted at once, from its last checkpoint, not at the next tick
            checkpoint = victim.checkpoint.checkpoint_id if victim.checkpoint else None
            decisions.append(m.JobPreempted(envelope=ctx.envelope(Reason.CHECKPOINT_DEADLINE_PASSED, victim_id),
                                            job_id=victim_id, for_job_id=job.job_id, checkpoint_id=checkpoint))
    return decisions


def withdraw(state: CellState, job_id: str, ctx: Context) -> list[m.Decision]:
    """PreemptionWithdrawn for the victims still making room for a gang that no longer waits (admitted on other
    capacity, or ended): they keep running."""
    job = state.jobs.get(job_id)
    if job is None or job.state is JobState.QUEUED:
        return []
    how = "was admitted" if job.holds_capacity else f"is {job.state.value}"
    return [m.PreemptionWithdrawn(envelope=ctx.envelope(Reason.NO_LONGER_NEEDED, v), job_id=v, for_job_id=job_id,
                                  detail=f"{job_id} {how} before it was preempted for it")
            for v in sorted(state.preempting) if state.jobs[v].preempted_for == job_id]


def _racks(state: CellState, assignments) -> int:
    """How many racks (the innermost topology level) the assignments span; 1 in a cell without levels."""
    nodes = state.cluster.nodes
    return len({nodes[name].domains[-1] for _, name, _ in assignments if nodes[name].domains}) or 1


def _one_rack(state: CellState, job: Job, ranked: list[tuple[tuple, Job]], usage: dict[tuple[str, str], int],
              law: bool, ctx: Context) -> list[list[Job]]:
    """For each rack whose free GPUs and candidates' GPUs could hold the gang, the victims that make room for the
    whole gang inside one rack (the greedy pass over the candidates with GPUs there, in their order)."""
    cluster = state.cluster
    level = len(cluster.levels) - 1
    racked = replace(job, topology_required=cluster.levels[level])
    room = {rack: sum(f * c for f, c in enumerate(cluster.histogram.get((job.gpu_type, level, rack), ())))
            for rack in cluster.domains.get((job.gpu_type, level), ())}
    there: dict[str, list[tuple[tuple, Job]]] = {}
    for candidate in ranked:
        for rack in sorted({cluster.nodes[n].domains[level] for _, n, _ in candidate[1].assignments
                            if n in cluster.nodes and cluster.nodes[n].gpu_type == job.gpu_type}):
            there.setdefault(rack, []).append(candidate)
            room[rack] += sum(len(g) for _, n, g in candidate[1].assignments
                              if n in cluster.nodes and cluster.nodes[n].domains[level] == rack)
    out = []
    for rack in sorted(there):
        if room[rack] >= job.min_gpus:
            chosen = greedy(AfterEviction(state, racked, ctx), eligible(state, racked, there[rack], usage, law))
            if chosen is not None:
                out.append(chosen)
    return out


def _single_victims(state: CellState, job: Job, ranked: list[tuple[tuple, Job]], after: AfterEviction,
                    usage: dict[tuple[str, str], int], law: bool) -> list[list[Job]]:
    """Each candidate that alone makes room and keeps its team at its nominal quota (`after` evicts none and is
    left so): one victim may lose no more work than the several the greedy pass picked, and then fewer victims
    is better."""
    free = sum(n.free for n in state.cluster.of_type(job.gpu_type) if n.schedulable)
    out = []
    for _, victim in ranked:
        if victim.held_gpus + free >= job.min_gpus and keeps_nominal(state, job, [victim], usage, law):
            after.evict(victim)
            if after.admissible():
                out.append([victim])
            after.keep(victim)
    return out
