"""The admitter: validates submissions and admits whole gangs against quota and free capacity.

Each admission cycle walks the queue in order (within-nominal work before borrowing, then
priority, weighted dominant share, and deadline or submit order) and admits a gang only when its quota fits
and a placement exists right now, so admitted work never holds quota it cannot use. A gang with
min_workers (Volcano minAvailable) takes as many workers as fit, from all of them down to its
minimum, all or nothing for that count; its quota is reserved for the placed workers only. A gang that
is blocked for capacity long enough holds a reservation: its nodes drain for it while smaller
work backfills elsewhere, or on the reserved nodes themselves when its time limit ends it before
the reservation's shadow time (Slurm's EASY backfill; see services/core/placement.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, cast

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.jobs import Job, JobState
from projections.pooled import PooledUsage
from projections.reservations import ends_before, shadow_time
from projections.tenancy import DEFAULT_PRIORITY
from projections.validate import request_problem, team_problem
from services.core.decider import ASK_ALWAYS, Context
from services.core.heads import EVENTUALLY, Guard, HeadStart, held_free, may_drain
from services.core.placement import (
    CapacityView,
    Placement,
    Unplaceable,
    bound,
    excluded_nodes,
    may_backfill,
    place_gang,
    shadow_times,
)
from services.core.queue import WaitingGangs, least_attained_service, order_key
from services.core.quiet import NEVER, compared_until, first_after, first_waiting, is_quiet, remember
from services.core.quota import quota_fit

if TYPE_CHECKING:
    from services.admitter.policy import AdmissionPolicy

#: Events after which queued work may fit: capacity or quota came free, or time passed. An interruption frees
#: capacity, but recovery requeues (or fails) the gang in the same batch: the cycle runs then, when the gang is
#: back in its team's queue, so work ranked after it cannot take its place in between.
CYCLE_TRIGGERS = (
    m.JobSubmitted, m.JobRequeued, m.JobPreempted, m.JobSucceeded, m.JobFailed, m.JobCancelled,
    m.PlacementPending, m.NodeRegistered, m.NodeRecovered, m.NodeUncordoned,
    m.SpareActivated, m.QuotaSet, m.TeamDefined, m.CohortDefined, m.CellConfigured, m.CapacityReleased, m.Tick,
)

#: Off only to show, in tests, that refusing a gang its team's head guards before looking for its room changes no
#: decision.
GUARD_BEFORE_PLACING = True
#: Quota limits of the cohort's shared pool (not of the team itself): a full pool is a full cell.
_POOL_LIMITS = frozenset({"cohort", "reclaim"})
_HEAD_WAITS = "strict FIFO: the head of the queue waits"
_QUOTA_REASONS = {"nominal": Reason.QUOTA_EXHAUSTED, "borrowing_limit": Reason.BORROWING_LIMIT,
                  "cohort": Reason.COHORT_EXHAUSTED, "reclaim": Reason.COHORT_EXHAUSTED}


class Admitter:
    name = "admitter"
    triggers = frozenset({m.JobCancelRequested, *CYCLE_TRIGGERS})
    side_input: frozenset[type] = frozenset()
    answers_refusals = True  # the gate: every record the cell refuses to fold is answered by the admitter
    only_if = ASK_ALWAYS

    def decide(self, state: CellState, event: m.Event, ctx: Context) -> list[m.Decision]:
        decisions: list[m.Decision] = []
        if isinstance(event, m.JobSubmitted):
            original = state.jobs.get(event.job_id)
            if (original is not None and original.submit_offset != ctx.basis_offset
                    and not resubmission_changes(state, original, event)):
                return []  # the same submission again (a retried request): it is the job already there
            rejection = validate(state, event, ctx)
            if rejection is not None:
                return [rejection]
        elif isinstance(event, m.JobCancelRequested):
            return [cancel(state, event, ctx)]
        elif isinstance(event, m.QuotaSet) and (invalid := invalid_quota(state, event, ctx)) is not None:
            return [invalid]
        elif isinstance(event, m.TeamDefined) and (problem := team_problem(event)) is not None:
            return [m.RequestRejected(envelope=ctx.envelope(Reason.INVALID_REQUEST),
                                      request_event_id=event.envelope.event_id, request_type="TeamDefined",
                                      detail=f"team {event.team} not defined: {problem}")]
        elif isinstance(event, m.CellConfigured):
            decisions.extend(unplaceable_after_reconfiguration(state, ctx))
        if isinstance(event, m.JobSubmitted) and ctx.policy.admission.backfill:
            # Nothing came free since the last cycle: only the newcomer can be admitted now.
            job = state.jobs.get(event.job_id)
            if job is not None and job.state is JobState.QUEUED:
                decisions.extend(admission_cycle(state, ctx, only=job))
        elif isinstance(event, m.Tick):
            decisions.extend(tick_cycle(state, ctx))
        elif isinstance(event, CYCLE_TRIGGERS):
            decisions.extend(admission_cycle(state, ctx, refresh=False))
        return decisions


def tick_cycle(state: CellState, ctx: Context) -> list[m.Decision]:
    """A Tick's full admission cycle, unless the last Tick's decided nothing but to restate why gangs wait, on this
    very state but for those restatements (nothing else folded since that counts, see CellState.changes and
    `restated`), and no time it compared `now` with has come since (`quiet_until`): then every comparison comes out
    as before, and so does the cycle, whose gangs now state the reasons it finds: nothing. Most Ticks on a busy cell
    are such, and a cycle's cost grows with the queue."""
    count = state.changes - state.restated  # a cycle reads a stated reason only to tell whether to restate it
    if is_quiet(state, "admitter", ctx, count):
        return []
    compared: list[int] = []
    waits: list[int] = []
    decisions = admission_cycle(state, ctx, refresh=True, compared=compared, waits=waits)
    restated_only = all(type(d) is m.JobQueued and not d.reserved_nodes for d in decisions)
    remember(state, "admitter", ctx, quiet_until(state, ctx.now, compared, waits) if restated_only else None, count,
             restating=len(decisions))
    return decisions


def quiet_until(state: CellState, now: int, compared: Sequence[int], waits: Sequence[int]) -> int:
    """The earliest time after `now` at which a cycle on this state could take another branch than the one just
    run. Such a cycle compares `now` with times of the state (when holds run out, when backing-off gangs come
    back), with the times at which the gangs it asked about a reservation will have waited long enough for one
    (`waits`: a gang it did not ask about is not asked on the same path either), and with the times it `compared`
    (the shadow times of reservations, the heads' expected starts, the next release of each GPU type it looked
    at), and `now` plus a waiting gang's time limit with the latter. A comparison with a time changes its outcome
    only where `now` reaches it or one past it; one with a time less a limit, one past that."""
    moments = [until for j in state.holds if (until := state.jobs[j].hold_until) is not None]
    return min(first_after(moments, now), first_waiting(state, None, now), first_after(waits, now),
               compared_until(state, compared, now))


def unplaceable_after_reconfiguration(state: CellState, ctx: Context) -> list[m.Decision]:
    """Waiting gangs that require a topology level the cell no longer declares can never be placed: rejected,
    which also releases any reservation they held."""
    known = ", ".join([*state.cluster.levels, "node"])
    return [m.JobRejected(envelope=ctx.envelope(Reason.UNKNOWN_TOPOLOGY_LEVEL, job.job_id), job_id=job.job_id,
                          detail=f"topology level {job.topology_required!r} is no longer one of: {known}")
            for job in state.jobs_in(JobState.QUEUED)
            if job.topology_required is not None and state.cluster.level_index(job.topology_required) is None]


_QUOTA_WHY = {
    "nominal": "exceed its nominal quota and it may not borrow",
    "borrowing_limit": "exceed its borrowing limit",
    "cohort": "need more than its cohort has left to lend",
    "reclaim": "are within its nominal, but borrowers use what it lent: the preemptor may reclaim it",
}


def cancel(state: CellState, event: m.JobCancelRequested, ctx: Context) -> m.Decision:
    job = state.jobs.get(event.job_id)
    if job is None or job.ended:
        if job is not None:
            why = f"job already {job.state.value}"
        else:
            why = "job already ended" if event.job_id in state.retired else "no such job"
        return m.RequestRejected(envelope=ctx.envelope(Reason.UNKNOWN_JOB, event.job_id),
                                 request_event_id=event.envelope.event_id, request_type="JobCancelRequested",
                                 detail=f"cannot cancel {event.job_id}: {why}")
    return m.JobCancelled(envelope=ctx.envelope(Reason.CANCELLED_BY_USER, job.job_id), job_id=job.job_id)


def invalid_quota(state: CellState, event: m.QuotaSet, ctx: Context) -> m.RequestRejected | None:
    """A rejection for a quota that `evolve` ignores (unknown team, negative amounts), so it is not dropped silently."""
    if event.team not in state.tenancy.teams:
        reason, detail = Reason.UNKNOWN_TEAM, f"team {event.team!r} is not defined"
    elif min(v for v in (event.nominal, event.borrowing_limit, event.lending_limit) if v is not None) < 0:
        reason, detail = Reason.INVALID_REQUEST, "quota amounts must not be negative"
    else:
        return None
    return m.RequestRejected(envelope=ctx.envelope(reason), request_event_id=event.envelope.event_id,
                             request_type="QuotaSet", detail=f"quota for {event.team} not set: {detail}")


def validate(state: CellState, e: m.JobSubmitted, ctx: Context) -> m.JobRejected | None:
    """A rejection for a submission that can never run as asked, or None."""
    problem = _problem(state, e, ctx.basis_offset)
    if problem is None:
        return None
    reason, detail = problem
    return m.JobRejected(envelope=ctx.envelope(reason, e.job_id), job_id=e.job_id, detail=detail)


def _problem(state: CellState, e: m.JobSubmitted, offset: int) -> tuple[Reason, str] | None:
    job = state.jobs.get(e.job_id)
    if job is None and e.job_id in state.retired:
        return Reason.DUPLICATE_JOB, f"job id {e.job_id} was used by a job that has ended; ids are never reused"
    if job is None or job.submit_offset != offset:
        changes = "; ".join(resubmission_changes(state, job, e)) if job is not None else ""
        return Reason.DUPLICATE_JOB, f"job id {e.job_id} is already in use by another spec ({changes})"
    malformed = request_problem(e, state.limits)
    if malformed is not None:
        return malformed
    if e.team not in state.tenancy.teams:
        return Reason.UNKNOWN_TEAM, f"team {e.team!r} is not defined"
    if e.priority_class is not None and e.priority_class not in state.tenancy.priority_classes:
        return Reason.UNKNOWN_PRIORITY_CLASS, f"priority class {e.priority_class!r} is not defined"
    cluster = state.cluster
    for level in (e.topology_required, e.topology_preferred):
        if level is not None and cluster.level_index(level) is None:
            known = ", ".join([*cluster.levels, "node"])
            return Reason.UNKNOWN_TOPOLOGY_LEVEL, f"topology level {level!r} is not one of: {known}"
    sizes = {gpus: count for gpus, count in cluster.sizes.get(e.gpu_type, {}).items() if count}
    if not sizes:
        return Reason.UNKNOWN_GPU_TYPE, f"no {e.gpu_type!r} nodes in cell (types: {', '.join(cluster.gpu_types())})"
    if e.gpus_per_worker > max(sizes):
        return Reason.LARGER_THAN_NODE, f"{e.gpus_per_worker} GPUs per worker, largest node has {max(sizes)}"
    total = sum(count * (gpus // e.gpus_per_worker) for gpus, count in sizes.items())
    fewest = e.workers if e.min_workers is None else e.min_workers  # a gang with min_workers may run smaller
    if fewest > total:
        return Reason.LARGER_THAN_CELL, f"{fewest} workers x {e.gpus_per_worker} GPUs exceed the cell's {total} slots"
    required = cluster.level_index(e.topology_required) if e.topology_required is not None else None
    if required is not None:
        slots: dict[str, int] = {}
        for n in cluster.of_type(e.gpu_type):
            if not n.spare:
                domain = cluster.domain_of(n, required)
                slots[domain] = slots.get(domain, 0) + n.gpus // e.gpus_per_worker
        if fewest > max(slots.values()):
            return (Reason.LARGER_THAN_TOPOLOGY_DOMAIN,
                    f"{fewest} workers do not fit in any {e.topology_required} (largest holds {max(slots.values())})")
    return None


#: What a job keeps of its submission, and so what a second submission under its id is compared on.
_KEPT = ("team", "workers", "gpus_per_worker", "gpu_type", "min_workers", "topology_required", "topology_preferred",
         "time_limit_ms", "max_restarts")


def resubmission_changes(state: CellState, job: Job, e: m.JobSubmitted) -> list[str]:
    """How a submission under a known job id differs from that job ('field old -> new'); none: it is the same."""
    changes = [f"{name} {getattr(job, name)!r} -> {getattr(e, name)!r}" for name in _KEPT
               if getattr(job, name) != getattr(e, name)]
    priority = state.tenancy.priority_classes.get(e.priority_class or "", DEFAULT_PRIORITY).value
    if priority != job.priority:
        changes.append(f"priority {job.priority} -> {priority}")
    return changes


def admission_cycle(state: CellState, ctx: Context, only: Job | None = None, refresh: bool = True,
                    compared: list[int] | None = None, waits: list[int] | None = None) -> list[m.Decision]:
    """Admits what fits, in queue order. `only` tries one newcomer; without `refresh`, gangs bigger
    than the free GPUs of their type are skipped without restating why they wait (a Tick does). A full cycle
    first releases the holds that have run out; a gang with capacity held for it may use that capacity, and
    no lower-ranked work is admitted if it would delay the expected start of a head (services/core/heads.py).
    `compared` receives the times besides those of waiting gangs and holds that the cycle compared `now` with;
    `waits`, when each gang asked about a reservation too early will have waited long enough for one."""
    policy = ctx.policy.admission
    now, by_deadline, across_teams = ctx.now, policy.earliest_deadline_first, policy.priority_passes_reservations
    quiet = not refresh and only is None and policy.backfill
    view = CapacityView(state.cluster)
    usage = PooledUsage(state.tenancy.committed())
    decisions: list[m.Decision] = []
    released: set[str] = set()
    if only is None:
        for job, reason, detail in expired_holds(state, now, policy.release_holds_out_of_service):
            decisions.append(m.CapacityReleased(envelope=ctx.envelope(reason, job.job_id), job_id=job.job_id,
                                                detail=detail))
            released.add(job.job_id)
            view.unclaim(job)  # free for everyone from now on, the gang included
            usage[(job.team, job.gpu_type)] -= job.held_quota
    held = {job_id for job_id in state.holds if job_id not in released}
    reserved_by = {node: job for job, nodes in state.reservations.items() for node in nodes}
    reservations = dict(state.reservations)  # holder -> nodes, with the reservations made this cycle
    # Shadow times once per cycle; a reservation made this cycle has none (unknown) until it is folded.
    shadows = shadow_times(state, now) if reservations else {}
    if refresh and only is None and policy.replan_reservations:
        for holder in _replanned(state, ctx, reservations, reserved_by, decisions, waits):
            shadows.pop(holder, None)
    if ctx.policy.preemption.keep_room_for_moves:
        _keep_room_for_movers(state, view, ctx,
                              lambda mover: excluded_nodes(reservations, mover, now, shadows, state.jobs, by_deadline,
                                                           across_teams))
    # GPUs of each type free now, with those held for waiting gangs (the holders may use them)
    free = {t: view.free_gpus(t) + _held_free(state, t, held) for t in state.cluster.gpu_types()} if (
        only is None) else {}
    if only is not None:
        order = WaitingGangs(state, now, _alone, [[(None, only.job_id)]])
    else:
        order = WaitingGangs.of(state, now, order_key(state, policy),
                                lambda job: not quiet or job.min_gpus <= free.get(job.gpu_type, 0) or job.has_hold,
                                by_deadline)

    admissible = partial(_admissible, state, ctx, view, usage, reservations, shadows)
    guard = Guard(state, now, policy.borrowing, view.free_gpus, usage, admissible, reservations, held,
                  policy.max_drain_share, least_attained_service(state, policy), by_deadline) if (
        policy.protect_queue_heads and policy.backfill) else None
    admitted_per_team: dict[str, int] = {}
    # The smallest gang of each (GPU type, GPUs per worker) that found no room: bigger ones won't either.
    no_room: dict[tuple[str, int], int] = {}
    # Without `refresh`, only admissions are decided; why the others still wait is restated on the next Tick.
    say_why = _quiet if quiet else _requeue_reason

    no_more_room = partial(_no_more_room, state, now, reservations, shadows)
    may_reserve = partial(_may_reserve, state, now, policy, reservations, reserved_by, waits)

    refuse = _Refusals(order, quiet, say_why, decisions, ctx, no_more_room)
    reserve = partial(_reserve, state, ctx, guard, reservations, reserved_by, decisions, may_reserve)

    quota_blocked: dict[tuple[str, str], int] = {}  # smallest gang a team's quota refused this cycle
    free_left = dict(free) if quiet else {}
    for job in order:
        key_ = (job.gpu_type, job.gpus_per_worker)
        if quiet and not any(free_left.values()):
            break  # nothing left to admit into
        fewest = job.min_count
        holds = job.job_id in held
        # A reservation or hold holder, or a job that backfills onto reserved nodes, sees more than other
        # gangs, so their lack of room says nothing about it.
        shortcut = (job.topology_required is None and job.job_id not in reservations and not holds
                    and not (shadows and may_backfill(job, now, shadows)))
        # A quiet cycle skips a gang that what it noted before already refuses; with `quiet_cycles_reserve`, not one
        # that may then reserve nodes, as a full cycle would let it: whether it reserves must not depend on which
        # gangs the cycle looked at first.
        asks = quiet and policy.quiet_cycles_reserve and job.job_id not in reservations
        if quiet and not holds and (
                (fewest * job.gpus_per_worker >= quota_blocked.get((job.team, job.gpu_type), job.gpus + 1)
                 and not (asks and _drains_for(job, view, state, policy) and may_reserve(job)))
                or (shortcut and key_ in no_room and fewest >= no_room[key_] and not (asks and may_reserve(job)))):
            order.refused(no_more_room(job))
            continue
        if refuse.head_blocked:
            refuse(job, Reason.WAITING_FOR_QUEUE_HEAD, _HEAD_WAITS)
            continue
        limit = policy.admissions_per_team_per_cycle
        if limit is not None and admitted_per_team.get(job.team, 0) >= limit and not holds:
            refuse(job, Reason.ADMISSION_LIMIT_PER_CYCLE, f"team {job.team} already admitted {limit} gang(s) this cycle")
            continue
        own = (job.team, job.gpu_type)
        if holds:  # what is held for it is its own: quota and GPUs
            usage[own] -= job.held_quota
            view.unclaim(job)
        most, fit = quota_fit(state.tenancy, job, policy.borrowing, usage)
        if not fit.fits:
            if holds:
                usage[own] += job.held_quota
                view.reclaim(job)
                order.refused(lambda other: False)
                continue  # its victims are still making room: it keeps its hold and its reason
            smallest = fewest * job.gpus_per_worker
            quota_blocked[own] = min(quota_blocked.get(own, smallest), smallest)
            quota = state.tenancy.quota(job.team, job.gpu_type)
            detail = (f"team {job.team} uses {usage.get(own, 0)} of nominal {quota.nominal} "
                      f"{job.gpu_type}; {smallest} more {_QUOTA_WHY[fit.limit]}")
            if not policy.backfill:
                refuse.head_blocked = True  # strict FIFO: a head that its quota stops blocks the queue too
            elif fit.limit in _POOL_LIMITS and _drains_for(job, view, state, policy) and (
                    job.job_id in reservations or reserve(job)):
                refuse(job, _QUOTA_REASONS[fit.limit], detail, itself=False)
                continue  # the cohort's pool is used up, which drains like a full cell: the gang holds nodes
            refuse(job, _QUOTA_REASONS[fit.limit], detail)
            continue
        guarded = guard if not holds and not job.moving else None  # the guard that keeps its team's head
        # Quietly, a whole gang that its team's head would wait for waits and holds nothing wherever it would be
        # placed, or if it would not be (unless it may then reserve nodes), and so does its whole group either way
        # (when neither refusal spares any member of it): its room need not be looked for. Only a head start the
        # cycle has already computed is read, as the guard would read it after the placement; a shortage in number
        # is still noted for the gangs after it, as a failed placement would note it.
        blocker = (guarded.kept_blocker(job, fewest * job.gpus_per_worker)
                   if quiet and guarded is not None and GUARD_BEFORE_PLACING and job.min_workers is None
                   and job.job_id not in reservations else None)
        if (blocker is not None and not may_reserve(job) and no_more_room(job) is None
                and _ends_no_sooner(state, job) is None):
            if shortcut:
                short = view.shortage(job, most,
                                      excluded_nodes(reservations, job, now, shadows, state.jobs, by_deadline, across_teams))
                if short is not None and short.reason is Reason.INSUFFICIENT_FREE_GPUS:
                    no_room[key_] = min(no_room.get(key_, fewest), fewest)
            refuse(job, Reason.WOULD_DELAY_QUEUE_HEAD, _delay_detail(blocker, now))
            continue
        if shortcut and key_ in no_room and fewest >= no_room[key_]:
            outcome: Placement | Unplaceable = Unplaceable(
                Reason.INSUFFICIENT_FREE_GPUS, f"no room for {fewest * job.gpus_per_worker} {job.gpu_type} GPUs now")
        else:
            excluded = excluded_nodes(reservations, job, now, shadows, state.jobs, by_deadline, across_teams)
            # Its held GPUs are its own, even on nodes reserved for another gang; the rest of such a node is not.
            mine = _held_on(job, excluded) if holds else {}
            if mine:
                with view.only(mine):
                    outcome = place_gang(view, job, most, ctx.policy.placement,
                                         [name for name in excluded if name not in mine])
                    if isinstance(outcome, Placement):
                        outcome = outcome.chosen()  # on its held GPUs alone
            else:
                outcome = place_gang(view, job, most, ctx.policy.placement, excluded)
        if isinstance(outcome, Placement):
            gpus = outcome.workers * job.gpus_per_worker
            # a gang moving to make room was running: it takes its turn back, whatever waits behind it
            blocker = guarded.blocker(job, gpus) if guarded is not None else None
            if blocker is not None:
                if holds:
                    usage[own] += job.held_quota
                    view.reclaim(job)
                refuse(job, Reason.WOULD_DELAY_QUEUE_HEAD, _delay_detail(blocker, now), alike=_ends_no_sooner(state, job))
                continue
            if gpus < most * job.gpus_per_worker:  # fewer workers placed than the quota allowed: borrow less
                fit = state.tenancy.admissible(job.team, job.gpu_type, gpus, policy.borrowing, usage)
            backfilled = (any(reserved_by.get(n) not in (None, job.job_id) for _, n, _ in outcome.assignments)
                          or (guard is not None and guard.passes(job)))
            decisions.append(_admit(job, gpus, fit.borrowed, outcome, backfilled, ctx))
            # The plan binds in the same transaction: one hop from submission to placement. The placer steps in
            # only when the plan went stale before it was folded.
            decisions.append(bound(job, outcome.assignments, outcome.domain, ctx))
            view.hold(outcome)
            usage[own] = usage.get(own, 0) + gpus
            if guard is not None:
                guard.admit(job, gpus)
            if reservations.pop(job.job_id, None) is not None:  # its nodes are free for the rest of the cycle
                for name in [n for n, holder in reserved_by.items() if holder == job.job_id]:
                    del reserved_by[name]  # in place: `reserve` holds this very dict
            if quiet:
                free_left[job.gpu_type] -= gpus
            admitted_per_team[job.team] = admitted_per_team.get(job.team, 0) + 1
            order.admitted()
            continue
        if holds:
            usage[own] += job.held_quota
            view.reclaim(job)
            order.refused(lambda other: False)
            continue  # waits for its victims on what is held for it
        if shortcut and outcome.reason is Reason.INSUFFICIENT_FREE_GPUS:
            no_room[key_] = min(no_room.get(key_, fewest), fewest)
        if not policy.backfill:
            refuse.head_blocked = True
        if job.job_id in reservations:
            order.refused()
            continue  # keeps its reservation and its reason
        if policy.backfill and reserve(job):
            order.refused(lambda other: False)  # the rest of its group meets the new reservation: looked at again
            continue
        refuse(job, outcome.reason, outcome.detail, room=True)
    if compared is not None:
        # A shadow time of now (its nodes' holders all past their time limits) stays now: no gang, with a time
        # limit of at least 1 ms, ends before it at any time.
        compared.extend(shadow for shadow in shadows.values() if shadow is not None and shadow != now)
        if guard is not None:
            compared.extend(guard.compared())
    return decisions


def _alone(job: Job) -> tuple:
    """The queue key of a gang looked at alone: there is nothing to order it against."""
    return ()


def _keep_room_for_movers(state: CellState, view: CapacityView, ctx: Context,
                          excluded: Callable[[Job], list[str]]) -> None:
    """Jobs that move for a consolidation (the victims of a CONSOLIDATED hold) are admitted again first once they
    have left (Job.moving), into the room the move counted on: until they have left (yielded to the hold's gang),
    that room is kept from every other gang (held in `view`, biggest mover first), so none admitted meanwhile takes it."""
    jobs = state.jobs
    movers = {j for j in state.preempting if jobs[j].moving}
    for holder in state.holds:
        if jobs[holder].reason is Reason.CONSOLIDATED:
            movers.update(v for v in jobs[holder].hold_victims
                          if v in jobs and jobs[v].holds_capacity and holder not in jobs[v].yielded_to)
    for mover in sorted((jobs[j] for j in movers), key=lambda job: (-job.held_gpus, job.job_id)):
        room = place_gang(view, mover, mover.admitted_workers, ctx.policy.placement, excluded(mover))
        if isinstance(room, Placement):
            view.hold(room)


# An admission cycle's helpers live here, given what they read, rather than as closures in the cycle: compiled
# (events/compiled.py), a function's closures are kept in an object they point back to, a reference cycle per call
# that only the garbage collector frees (a sixth of a replay's time went to collecting them).

class _Refusals:
    """Tells a gang the cycle does not admit why it waits, and the rest of its group: the same reason, or once a
    strict FIFO head blocks (`head_blocked`), that."""

    def __init__(self, order: WaitingGangs, quiet: bool, say_why: Callable[..., None], decisions: list[m.Decision],
                 ctx: Context, no_more_room: Callable[[Job], Callable[[Job], bool] | None]) -> None:
        self.order, self.quiet, self.say_why, self.decisions, self.ctx = order, quiet, say_why, decisions, ctx
        self.no_more_room = no_more_room
        self.head_blocked = False

    def __call__(self, job: Job, reason: Reason, detail: str, itself: bool = True, room: bool = False,
                 alike: Callable[[Job], bool] | None = None) -> None:
        """The job waits, and so does the rest of its group, for the same reason (behind a strict FIFO
        head that now blocks, for that); for lack of `room`, only the members that may use the same
        reserved nodes; with `alike`, only those."""
        rest = (Reason.WAITING_FOR_QUEUE_HEAD, _HEAD_WAITS) if self.head_blocked else (reason, detail)
        for waiting in self.order.refused(self.no_more_room(job) if room else alike,
                                          tell=None if self.quiet else rest[0]):
            self.say_why(self.decisions, waiting, *rest, self.ctx)
        if itself:
            self.say_why(self.decisions, job, reason, detail, self.ctx)


def _reserve(state: CellState, ctx: Context, guard: Guard | None, reservations: dict[str, tuple[str, ...]],
             reserved_by: dict[str, str], decisions: list[m.Decision], may_reserve: Callable[[Job], bool],
             job: Job) -> bool:
    """Holds nodes for a blocked gang that waited long enough, while fewer than the most gangs do, if it
    is the first of its kind: gangs of equal needs share the reservation of the one that ranks first."""
    if not may_reserve(job):
        return False
    nodes = _plan(state, job, reserved_by, ctx.policy.admission, ctx.now)
    if not nodes:
        return False
    reservations[job.job_id] = tuple(nodes)
    for name in nodes:
        reserved_by[name] = job.job_id
    if guard is not None:
        guard.forget(job)
    decisions.append(m.JobQueued(envelope=ctx.envelope(Reason.HOLDS_RESERVATION, job.job_id),
                                 job_id=job.job_id, team=job.team, reserved_nodes=nodes,
                                 detail=f"nodes drain for this gang: {', '.join(nodes)}"))
    return True


def _admissible(state: CellState, ctx: Context, view: CapacityView, usage: PooledUsage,
                reservations: dict[str, tuple[str, ...]], shadows: dict[str, int | None], job: Job) -> bool:
    """Whether the job could be admitted now, as the cycle sees the cell."""
    policy, now = ctx.policy, ctx.now
    most, fit = quota_fit(state.tenancy, job, policy.admission.borrowing, usage)
    if job.not_before > now or not fit.fits:
        return False
    excluded = excluded_nodes(reservations, job, now, shadows, state.jobs, policy.admission.earliest_deadline_first,
                              policy.admission.priority_passes_reservations)
    return isinstance(place_gang(view, job, most, policy.placement, excluded), Placement)


def _no_more_room(state: CellState, now: int, reservations: dict[str, tuple[str, ...]],
                  shadows: dict[str, int | None], job: Job) -> Callable[[Job], bool] | None:
    """Whether another gang of `job`'s group meets the same refusal: it may backfill onto exactly the same
    reservations (fewer would refuse it too, but perhaps for another reason). None: every one does (no
    reservation to backfill onto, or every gang of its needs has its time limit)."""
    if not shadows or len(state.queued_limits.get(job.needs(), ())) == 1:
        return None
    return _SameRoom(now, reservations, shadows, _backfillable(job, now, reservations, shadows))


class _SameRoom:
    """Whether a gang may backfill onto exactly the reservations `usable`, as the refused gang could. A gang that
    holds no reservation may use those whose shadow its time limit ends by: which ones, is told by how many of the
    known shadow times come before `now` plus its limit (-1 without a limit: none)."""

    def __init__(self, now: int, reservations: dict[str, tuple[str, ...]], shadows: dict[str, int | None],
                 usable: set[str]) -> None:
        self.now, self.reservations, self.shadows, self.usable = now, reservations, shadows, usable
        self.known = sorted({shadow for shadow in shadows.values() if shadow is not None})
        self.by_rank: dict[int, bool] = {}

    def __call__(self, other: Job) -> bool:
        if other.job_id in self.reservations:
            return _backfillable(other, self.now, self.reservations, self.shadows) == self.usable
        limit = other.time_limit_ms
        rank = -1 if limit is None else bisect_left(self.known, self.now + limit)
        if rank not in self.by_rank:
            self.by_rank[rank] = _backfillable(other, self.now, self.reservations, self.shadows) == self.usable
        return self.by_rank[rank]


def _backfillable(job: Job, now: int, reservations: dict[str, tuple[str, ...]],
                  shadows: dict[str, int | None]) -> set[str]:
    return {holder for holder in reservations if holder != job.job_id and ends_before(job, now, shadows.get(holder))}


def _may_reserve(state: CellState, now: int, policy: AdmissionPolicy, reservations: dict[str, tuple[str, ...]],
                 reserved_by: dict[str, str], waits: list[int] | None, job: Job) -> bool:
    """Whether a blocked gang may hold nodes, if there are nodes to drain for it; `waits` receives when it will
    have waited long enough, if it has not yet."""
    since = job.waiting_since
    if now - since < policy.reservation_after_ms:
        if waits is not None:
            waits.append(since + policy.reservation_after_ms)
        return False
    return (len(reservations) < policy.max_reservations and _may_drain(state, job, policy, now, reserved_by, waits)
            and _first_of_kind(state, job, reservations, now, policy.earliest_deadline_first))


def _plan(state: CellState, job: Job, others: dict[str, str], policy: AdmissionPolicy, now: int) -> list[str]:
    """The nodes a reservation for the gang would drain, besides those reserved for `others` (node -> gang)."""
    return reservation_for(state, job, others, now if policy.reserve_earliest_free else None)


def _may_drain(state: CellState, job: Job, policy: AdmissionPolicy, now: int, others: dict[str, str],
               waits: list[int] | None) -> bool:
    """Whether the gang may drain nodes for itself: it needs at most `max_drain_share` of its GPU type, or it has
    waited `big_gangs_reserve_after_ms`, or (`big_gangs_reserve_on_known_drain`) as long as the drain of the nodes
    it would reserve besides those of `others` takes by their jobs' time limits. `waits` receives when a bigger
    gang will have waited long enough on this state."""
    if may_drain(state, job, policy.max_drain_share):
        return True
    since = job.waiting_since
    after = policy.big_gangs_reserve_after_ms
    if after is not None:
        if now - since >= after:
            return True
        if waits is not None:
            waits.append(since + after)
    if not policy.big_gangs_reserve_on_known_drain:
        return False
    plan = _plan(state, job, others, policy, now)
    shadow = shadow_time(state, plan, now) if plan else None
    if shadow is None:
        return False  # no nodes to drain, or a job on them without a time limit: the drain's length is unknown
    if now - since >= shadow - now:
        return True
    if waits is not None:
        waits.append((since + shadow + 1) // 2)  # the first time at which it has waited as long as the drain takes
    return False


def expired_holds(state: CellState, now: int, out_of_service: bool = False) -> list[tuple[Job, Reason, str]]:
    """Gangs whose hold has run out (HOLD_EXPIRED: past its end), or, with `out_of_service`, can no longer be
    honoured (HOLD_STALE: a node of it failed or was cordoned), with none of its victims still making room; each
    with the reason and detail of its release."""
    making_room = {state.jobs[v].preempted_for for v in state.preempting}
    out = []
    for job_id in sorted(state.holds):
        if job_id in making_room:
            continue
        job = state.jobs[job_id]
        if (until := job.hold_until) is not None and until < now:
            out.append((job, Reason.HOLD_EXPIRED, _expiry(state, job)))
        elif out_of_service and (lost := _out_of_service(state, job)):
            out.append((job, Reason.HOLD_STALE, f"node {lost} of its hold is out of service: what it holds goes back "
                                                f"to every gang, and room is looked for again"))
    return out


def _out_of_service(state: CellState, job: Job) -> str:
    """The first node of the gang's hold that is out of service (failed, cordoned, gone), or ''. A spare that
    recovery holds before it activates it is not: it joins."""
    nodes = state.cluster.nodes
    return next((name for _, name, _ in job.held if name not in nodes or not nodes[name].in_service), "")


def _expiry(state: CellState, job: Job) -> str:
    ready = held_free(state, job)
    return (f"not admitted by the end of its hold at {job.hold_until}: {ready} of the {job.held_quota} "
            f"{job.gpu_type} GPUs held for it are free and usable now; what it holds goes back to every gang")


def _held_free(state: CellState, gpu_type: str, held: set[str]) -> int:
    """GPUs of the type held for waiting gangs (`held`) that no job holds now: free for those gangs alone."""
    return sum(held_free(state, state.jobs[j]) for j in sorted(held) if state.jobs[j].gpu_type == gpu_type)


def _held_on(job: Job, nodes: Sequence[str]) -> dict[str, set[int]]:
    """The GPUs held for `job` on each of `nodes` (reserved for other gangs) where it holds any."""
    reserved = set(nodes)
    mine: dict[str, set[int]] = {}
    for _, name, gpus in job.held:
        if name in reserved:
            mine.setdefault(name, set()).update(gpus)
    return mine


def _ends_no_sooner(state: CellState, job: Job) -> Callable[[Job], bool] | None:
    """Gangs of `job`'s group that run at least as long by their time limits: they would delay the head too.
    None when every gang of its needs does, as the state's count of their limits shows."""
    limit = job.time_limit_ms
    limits = state.queued_limits.get(job.needs(), {})
    if None in limits and len(limits) == 1:
        return None
    if limit is not None and min(cast("set[int]", limits.keys() - {None}), default=limit) >= limit:
        return None
    return lambda other: other.time_limit_ms is None or (limit is not None and other.time_limit_ms >= limit)


def _delay_detail(blocker: HeadStart, now: int) -> str:
    head = blocker.job
    when = "once work without a time limit ends" if blocker.start == EVENTUALLY else (
        f"in {max(0, (blocker.start or now) - now) // 1000} s")
    return (f"it would delay {head.job_id}, which heads the queue and is expected to start {when} "
            f"({head.min_gpus} {head.gpu_type} GPUs); only work that ends by then, or leaves it room, may pass it")


def _first_of_kind(state: CellState, job: Job, reservations: dict[str, tuple[str, ...]], now: int,
                   by_deadline: bool) -> bool:
    """No gang of equal needs holds a reservation or ranks before `job` (`by_deadline`: by deadline) among those not
    backing off."""
    members = state.groups(by_deadline).get(job.needs(), ())
    for _, other in members:
        if other == job.job_id:
            return not any(holder in reservations for _, holder in members)
        if other in reservations or state.jobs[other].not_before <= now:
            return False
    return True


def _drains_for(job: Job, view: CapacityView, state: CellState, policy: AdmissionPolicy) -> bool:
    """A gang its quota refuses may reserve nodes only if it alone fits its team's nominal quota: it is owed those
    GPUs once the work holding them ends; a gang that would have to borrow gets no reservation over others. Without
    `quota_held_reserves_free_nodes`, only while its GPUs are not free in number either: a reservation on nodes
    already free would only keep other teams' work off them."""
    return (job.min_gpus <= state.tenancy.quota(job.team, job.gpu_type).nominal
            and (policy.quota_held_reserves_free_nodes or view.free_gpus(job.gpu_type) < job.min_gpus))


def _admit(job: Job, gpus: int, borrowed: int, placement: Placement, backfilled: bool,
           ctx: Context) -> m.JobAdmitted:
    reason = Reason.BORROWED_FROM_COHORT if borrowed else Reason.WITHIN_NOMINAL_QUOTA
    if not borrowed and backfilled:
        reason = Reason.BACKFILLED  # onto nodes reserved for another gang, or past its team's waiting head
    return m.JobAdmitted(
        envelope=ctx.envelope(reason, job.job_id), job_id=job.job_id, team=job.team, gpu_type=job.gpu_type,
        gpus=gpus, borrowed=borrowed, domain=placement.domain,
        assignments=[m.WorkerAssignment(worker=w, node=n, gpus=list(g)) for w, n, g in placement.assignments],
    )


def _requeue_reason(decisions: list[m.Decision], job: Job, reason: Reason, detail: str, ctx: Context) -> None:
    """Says why the job waits, but only when the reason changed (the log stays quiet otherwise)."""
    if job.reason is not reason:
        decisions.append(m.JobQueued(envelope=ctx.envelope(reason, job.job_id), job_id=job.job_id, team=job.team,
                                     detail=detail))


def _quiet(decisions: list[m.Decision], job: Job, reason: Reason, detail: str, ctx: Context) -> None:
    """Leaves the job's stated reason as it is."""


def _replanned(state: CellState, ctx: Context, reservations: dict[str, tuple[str, ...]], reserved_by: dict[str, str],
               decisions: list[m.Decision], waits: list[int] | None) -> list[str]:
    """Reservations holding a node out of service (cordoned, failed), planned again on nodes in service where the
    gang may still drain them (Slurm plans a pending job's start again on each backfill pass); where it finds none,
    a reservation stays and waits for its node. `reservations` and `reserved_by` take the new plans; the gangs
    replanned are returned, and `waits` when a holder not yet allowed to drain will be (`_may_drain`)."""
    policy, now, nodes = ctx.policy.admission, ctx.now, state.cluster.nodes
    out = []
    for holder, held in sorted(state.reservations.items()):
        lost = [name for name in held if name in nodes and not nodes[name].schedulable]
        job = state.jobs[holder]
        unfit = False
        if not lost and policy.replan_unfit_reservations:
            lost = _short_of_gpus(state, job, held)
            unfit = bool(lost)
        if not lost:
            continue
        others = {name: j for name, j in reserved_by.items() if j != holder}
        plan = _plan(state, job, others, policy, now) if _may_drain(state, job, policy, now, others, waits) else []
        if not plan and unfit:  # a node out of service may come back; retired GPUs stay lost until a repair
            for name in held:
                reserved_by.pop(name, None)
            del reservations[holder]
            decisions.append(m.JobQueued(
                envelope=ctx.envelope(Reason.INSUFFICIENT_FREE_GPUS, holder), job_id=holder, team=job.team,
                detail=f"its reservation of {', '.join(held)} is given up: {', '.join(lost)} lost GPUs, and the "
                       f"nodes no longer hold the gang; no other nodes may drain for it now"))
            out.append(holder)
            continue
        if not plan:
            continue
        for name in held:
            reserved_by.pop(name, None)
        reservations[holder] = tuple(plan)
        reserved_by.update(dict.fromkeys(plan, holder))
        decisions.append(m.JobQueued(envelope=ctx.envelope(Reason.HOLDS_RESERVATION, holder), job_id=holder,
                                     team=job.team, reserved_nodes=plan,
                                     detail=f"nodes drain for this gang: {', '.join(plan)} (planned again: "
                                            f"{', '.join(lost)} {_LOST_GPUS if unfit else 'out of service'})"))
        out.append(holder)
    return out


_LOST_GPUS = "lost GPUs: the reserved nodes no longer hold the gang"


def _short_of_gpus(state: CellState, job: Job, held: tuple[str, ...]) -> list[str]:
    """The reserved nodes that lost GPUs (retired after an Xid), when together the reserved nodes can no longer hold
    the gang's smallest size once drained; else nothing."""
    nodes, g = state.cluster.nodes, job.gpus_per_worker
    slots = sum(nodes[name].healthy_gpus // g for name in held if name in nodes)
    if slots >= job.min_count:
        return []
    return [name for name in held if name in nodes and nodes[name].healthy_gpus < nodes[name].gpus]


def reservation_for(state: CellState, job: Job, reserved_by: dict[str, str], now: int | None = None) -> list[str]:
    """Nodes to drain for a blocked gang: inside the tightest domain that could hold it when empty,
    the domain and nodes with the most free GPUs now; with `now` (`reserve_earliest_free`), the nodes, and then the
    domain, expected free first by their jobs' time limits (a node with a job of no limit last), then those."""
    cluster = state.cluster
    free_at: dict[str, int] = {}
    if now is not None:
        for node in cluster.of_type(job.gpu_type):
            shadow = shadow_time(state, (node.name,), now)  # when its jobs should have ended; None: one has no limit
            free_at[node.name] = NEVER if shadow is None else shadow
    g = job.gpus_per_worker
    nodes = [n for n in cluster.of_type(job.gpu_type) if n.schedulable and n.name not in reserved_by]
    level = cluster.level_index(job.topology_required) if job.topology_required else None
    workers = job.min_count  # drain for the smallest gang the job accepts
    groups: dict[str | None, list] = {}
    for node in nodes:
        groups.setdefault(cluster.domain_of(node, level) if level is not None else None, []).append(node)
    best: tuple[tuple[int, int], str, list[str]] | None = None
    for domain, members in sorted(groups.items(), key=lambda kv: kv[0] or ""):
        members = sorted(members, key=lambda n: (free_at.get(n.name, 0), -n.free, n.name))
        chosen, slots = [], 0
        for node in members:
            if slots >= workers:
                break
            if node.healthy_gpus // g:
                chosen.append(node)
                slots += node.healthy_gpus // g
        if slots < workers:
            continue
        cost = (max(free_at.get(n.name, 0) for n in chosen), sum(n.healthy_gpus - n.free for n in chosen))
        if best is None or cost < best[0]:
            best = (cost, domain or "", sorted(n.name for n in chosen))
    return best[2] if best else []
