"""Consolidation (KAI's consolidate action): a waiting gang whose quota admits it and whose GPUs are free in number,
but scattered over nodes, gets whole nodes by moving smaller running jobs into the gaps elsewhere.

A move is a preemption like any other (the gang's hold first, then a checkpoint request, both CONSOLIDATED), bounded
so that it stays cheap and fair: a victim is smaller than the gang and past its minimum runtime; every victim fits the
free GPUs left once the gang has its placement, and is admitted again first (Job.moving), so none loses its turn;
the nominal-quota law holds as for any preemption; and no gang passes its team's protected head by a move.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

from projections.cell import CellState
from projections.jobs import Job, JobState
from services.core.decider import Context
from services.core.heads import Release, guards, head_compared, head_start, may_drain, releases, team_head
from services.core.placement import CapacityView, Placement, off_limits, place_gang
from services.core.queue import least_attained_service
from services.core.quota import quota_fit
from services.preemptor.eviction import AfterEviction, greedy, plan
from services.preemptor.policy import PreemptionPolicy
from services.preemptor.victims import eligible, lost_work_gpu_ms, staying

if TYPE_CHECKING:
    from services.policy import Policy


def movable(job: Job, victim: Job, policy: PreemptionPolicy, now: int) -> bool:
    """Whether `victim` may move to make room for `job`: a running, preemptible job of its GPU type, smaller than
    the gang, past its minimum runtime, never moved for this gang before."""
    return (victim.gpu_type == job.gpu_type and victim.held_gpus < job.min_gpus and _moves_for_another(job, victim)
            and _may_move(victim, policy, now))


def _may_move(victim: Job, policy: PreemptionPolicy, now: int) -> bool:
    """What `movable` asks of the victim alone."""
    return (victim.preemptible and victim.state in (JobState.RUNNING, JobState.PLACED)
            and victim.running_since is not None and now - victim.running_since >= policy.min_runtime_ms)


def _moves_for_another(job: Job, victim: Job) -> bool:
    return victim.job_id != job.job_id and job.job_id not in victim.yielded_to


def moves_for(state: CellState, job: Job, ctx: Context, memo: dict,
              compared: list[int] | None = None) -> tuple[list[Job], Placement] | None:
    """The running jobs to move so that `job` is placed, and its placement; None when its GPUs are not free in number
    (wherever they are), its quota does not admit it now, its admission would delay its team's head, or no set of
    smaller jobs that all fit elsewhere makes room. `memo` keeps what calls on the same state share: quota fits,
    each team's head, its start and whether a gang of a GPU type, size and time limit delays it, the releases of
    each GPU type, the jobs of each GPU type that may move. The tests run cheapest first.
    `compared` receives the times the answer compared `now` with: none for the first two tests (the state's
    alone), those of the head's expected start for the third (`head_compared`), and `now + 1` past it (a mover's
    runtime and lost work compare `now` in ways not bounded here)."""
    policy, now = ctx.policy, ctx.now
    if state.cluster.free_gpus(job.gpu_type) < job.min_gpus:
        return None
    fits = memo.setdefault("quota", {})  # quota_fit reads of the job only these fields
    key = (job.team, job.gpu_type, job.workers, job.gpus_per_worker, job.min_workers, job.held_quota)
    if key not in fits:
        fits[key] = quota_fit(state.tenancy, job, policy.admission.borrowing, state.tenancy.committed(job))[1].fits
    if not fits[key]:
        return None  # not placement alone: moving others would not admit it
    if _delays_its_head(state, job, policy, now, memo):
        if compared is not None:  # asked for by a Tick only: kept beside the head's start once computed
            times = memo.setdefault("head compared", {})
            if job.team not in times:
                start = memo["heads"][job.team][1]
                times[job.team] = head_compared(state, start, now, _released(state, start.job.gpu_type, memo))
            compared.extend(times[job.team])
        return None
    if compared is not None:
        compared.append(now + 1)
    after = AfterEviction(state, job, ctx)
    if after.admissible():
        return None  # the admitter places it as the cell stands
    movers = memo.get(("movers", job.gpu_type))
    if movers is None:
        movers = memo[("movers", job.gpu_type)] = _movers(state, job.gpu_type, policy.preemption, now)
    smaller = bisect_left(movers, job.min_gpus, key=_held_gpus)
    order = [c for c in movers[:smaller] if _moves_for_another(job, c[1])]
    # a move is a preemption: no other team moves below its nominal quota, as for any other
    chosen = greedy(after, eligible(state, job, order, staying(state, after.usage), policy.preemption.keep_nominal))
    if not chosen:
        return None
    placement = plan(state, job, chosen, ctx)
    if placement is None:
        return None
    planned = {(name, g) for _, name, gpus in placement.assignments for g in gpus}
    chosen = [v for v in chosen if any((name, g) in planned for _, name, gpus in v.assignments for g in gpus)]
    if not chosen or not _all_fit_elsewhere(state, placement, chosen, ctx):
        return None
    return chosen, placement


def _movers(state: CellState, gpu_type: str, policy: PreemptionPolicy, now: int) -> list[tuple[tuple, Job]]:
    """The running jobs of `gpu_type` that may move (for a gang bigger than they are), in the order moves are
    tried: the smallest first, from the emptiest nodes (one such move may free a whole node), least work lost."""
    nodes, jobs = state.cluster.nodes, state.jobs
    free_on: dict[str, int] = {}  # free GPUs per node, looked up once: most nodes hold several movers
    out = []
    for team in sorted(state.running_by_team):
        for victim_id in state.running_before(team, now - policy.min_runtime_ms):
            victim = jobs[victim_id]
            if victim.gpu_type != gpu_type or not _may_move(victim, policy, now):
                continue
            free = 0  # on the emptiest of its nodes (a node no longer in the cell counts as none free)
            for _, name, _ in victim.assignments:
                here = free_on.get(name)
                if here is None:
                    node = nodes.get(name)
                    here = free_on[name] = 0 if node is None else node.free
                if here > free:
                    free = here
            out.append(((victim.held_gpus, -free, lost_work_gpu_ms(victim, now), victim_id), victim))
    out.sort(key=_key)
    return out


def _key(candidate: tuple[tuple, Job]) -> tuple:
    return candidate[0]


def _held_gpus(candidate: tuple[tuple, Job]) -> int:
    return candidate[0][0]


def _delays_its_head(state: CellState, job: Job, policy: Policy, now: int, memo: dict) -> bool:
    """Whether admitting the gang now would push back the expected start of its team's head, which the admitter
    protects from any other gang (services/core/heads.py, `Guard.blocker`): a move must not let it pass. Kept in
    `memo` per team: the head and its start, and the answer for each GPU type, size and time limit (all that
    `HeadStart.delayed_by` reads of a gang)."""
    heads = memo.setdefault("heads", {})
    if job.team not in heads:
        head = team_head(state, job.team, las=least_attained_service(state, policy.admission),
                         by_deadline=policy.admission.earliest_deadline_first)
        start = (head_start(state, head, now, policy, _released(state, head.gpu_type, memo))
                 if head is not None and may_drain(state, head, policy.admission.max_drain_share) else None)
        heads[job.team] = (head, start, {})
    head, start, delays = heads[job.team]
    if start is None or not guards(head, job, state.holds):
        return False
    key = (job.gpu_type, job.min_gpus, job.time_limit_ms)
    if key not in delays:
        delays[key] = start.delayed_by(job, job.min_gpus, now)
    return delays[key]


def _released(state: CellState, gpu_type: str, memo: dict) -> list[Release]:
    """`releases` of the GPU type on this state, kept in `memo`."""
    key = ("releases", gpu_type)
    if key not in memo:
        memo[key] = releases(state, gpu_type)
    return memo[key]


def _all_fit_elsewhere(state: CellState, placement: Placement, victims: list[Job], ctx: Context) -> bool:
    """Whether the victims, biggest first, each find a placement in what is free once the gang holds `placement`."""
    view = _left_by(state, victims)
    view.hold(placement)
    return _each_placed(state, view, victims, ctx)


def _left_by(state: CellState, victims: list[Job]) -> CapacityView:
    """The cell's capacity once the victims have left their GPUs."""
    view = CapacityView(state.cluster)
    for victim in victims:
        view.release(victim)
    return view


def homeless(state: CellState, victims: list[Job], ctx: Context) -> Job | None:
    """The first of a folded CONSOLIDATED hold's victims (biggest first) that no longer finds a placement in what is
    free now, or None: the hold's GPUs are claimed for its gang, and work admitted or a reservation made since the
    plan may have taken the room the moves counted on."""
    placed: list[Job] = []  # counted as the plan counted them: each leaves its GPUs the hold does not claim
    _each_placed(state, _left_by(state, victims), victims, ctx, placed)
    return next((v for v in _biggest_first(victims) if v not in placed), None)


def _each_placed(state: CellState, view: CapacityView, victims: list[Job], ctx: Context,
                 placed: list[Job] | None = None) -> bool:
    """Places the victims in `view`, biggest first, each where the others placed before it left room (`placed`
    receives them); False at the first that finds no room."""
    gone = frozenset(v.job_id for v in victims)
    for victim in _biggest_first(victims):
        again = place_gang(view, victim, victim.admitted_workers, ctx.policy.placement,
                           off_limits(state, victim, ctx.now, gone, ctx.policy.admission.earliest_deadline_first,
                                      ctx.policy.admission.priority_passes_reservations))
        if not isinstance(again, Placement):
            return False
        view.hold(again)
        if placed is not None:
            placed.append(victim)
    return True


def _biggest_first(victims: list[Job]) -> list[Job]:
    return sorted(victims, key=lambda v: (-v.held_gpus, v.job_id))
