"""Why a job waits, with numbers: the deciders re-run at the latest basis, and the constraints they weigh.

The state is the log folded to its last offset. The deciders are asked through their replicas
(services/core/replica.py), never re-implemented: the admitter answers a clock tick at the cell's time with a
full admission cycle (it restates a job's reason only when it changes, so the job's stated reason is cleared on
this private fold first), the preemptor answers the job's being queued (would it evict anyone for it?), and the
placer answers an admitted job's admission. Beside their verdicts stand the numbers they weigh: the gang's
shape; free GPUs of its type in the cell and in the largest domain of the level it requires; nodes reserved
for other gangs; its team's quota use and what its cohort has left to lend; whether a placement exists if quota
were no object (services/core/placement.py, the admitter's own function); and its place in the queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.jobs import Job, JobState
from replay.audit.text import clock, names, span
from services.admitter.decide import Admitter
from services.core.decider import Decider
from services.core.forecast import Estimate
from services.core.placement import CapacityView, Placement, off_limits, place_gang
from services.core.queue import queue_order
from services.core.replica import Replica
from services.placer.decide import Placer
from services.policy import Policy
from services.preemptor.decide import Preemptor


@dataclass
class Why:
    """The deciders' verdicts on a job at the latest basis, and the numbers behind them."""

    job_id: str
    offset: int
    at: int
    policy: str
    verdicts: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)


def why(state: CellState, job_id: str, policy: Policy, estimate: Estimate | None = None) -> Why:
    """Re-runs the deciders on `job_id` in `state` (folded to its last offset; it is changed: pass a private fold)."""
    job = state.jobs.get(job_id)
    out = Why(job_id, state.offset, state.now, policy.version)
    if job is None:  # an ended job leaves the deciders' state at the next Tick
        out.verdicts.append("not waiting: it has ended and left the deciders' state; nothing is decided about it")
    elif job.state is JobState.QUEUED:
        out.verdicts += _admitter(state, job, policy) + _preemptor(state, job, policy)
        out.constraints = constraints(state, job, policy, estimate)
    elif job.state is JobState.ADMITTED:
        out.verdicts += _placer(state, job, policy)
        out.constraints = constraints(state, job, policy, estimate)
    else:
        out.verdicts.append(_not_waiting(state, job))
    return out


def _probe(decider: Decider, policy: Policy, state: CellState, event: m.Event) -> list[m.Decision]:
    """The decisions `decider` makes on `event` at the state's offset, through its replica (nothing is folded)."""
    return Replica(decider, policy, state).answer(state.offset, event)


def _envelope(state: CellState, producer: str) -> m.Envelope:
    return m.Envelope(event_id=f"why-{producer}-{state.offset}", cell=state.cell, at=state.now, producer=producer)


def _admitter(state: CellState, job: Job, policy: Policy) -> list[str]:
    job.reason = Reason.UNSPECIFIED  # so the cycle states why it waits, even if that has not changed
    state.changes += 1  # a change outside the fold: no Tick found quiet before it may be skipped (CellState.memo)
    decisions = _probe(Admitter(), policy, state, m.Tick(envelope=_envelope(state, "clock")))
    mine = [d for d in decisions if getattr(d, "job_id", None) == job.job_id]
    if not mine:
        if job.not_before > state.now:
            return [f"admitter: not looked at: it backs off until {clock(job.not_before)} "
                    f"(in {span(job.not_before - state.now)})"]
        return ["admitter: the cycle left it as it was"]
    decision = mine[0]
    if isinstance(decision, m.JobAdmitted):
        return [f"admitter: would admit it now ({decision.envelope.reason.value}, {decision.gpus} GPUs, borrowing "
                f"{decision.borrowed}): nothing binds; it waits for the next admission cycle"]
    detail = getattr(decision, "detail", "")
    return [f"admitter: {decision.envelope.reason.value}" + (f": {detail}" if detail else "")]


def _preemptor(state: CellState, job: Job, policy: Policy) -> list[str]:
    if not policy.preemption.enabled:
        return ["preemptor: preemption is off under this policy"]
    queued = m.JobQueued(envelope=_envelope(state, "admitter"), job_id=job.job_id, team=job.team)
    requests = [d for d in _probe(Preemptor(), policy, state, queued) if isinstance(d, m.PreemptionRequested)]
    asked = [j for j in sorted(state.preempting) if state.jobs[j].preempted_for == job.job_id]
    if not requests and asked:
        return [f"preemptor: has asked {names(asked)} to make room; no other eviction is needed or allowed"]
    if not requests:
        return ["preemptor: no eviction it may make would let this gang run now"]
    return [f"preemptor: would ask {names(d.job_id for d in requests)} to checkpoint and make room "
            f"({requests[0].envelope.reason.value})"]


def _placer(state: CellState, job: Job, policy: Policy) -> list[str]:
    admitted = m.JobAdmitted(envelope=_envelope(state, "admitter"), job_id=job.job_id, team=job.team,
                             gpu_type=job.gpu_type, gpus=job.held_gpus)
    decisions = _probe(Placer(), policy, state, admitted)
    if not decisions:
        return ["placer: nothing to decide"]
    decision = decisions[0]
    if isinstance(decision, m.JobPlaced):
        return [f"placer: would place it now on {names(sorted({a.node for a in decision.assignments}))}"]
    return [f"placer: {decision.envelope.reason.value}: {getattr(decision, 'detail', '')}"]


def _not_waiting(state: CellState, job: Job) -> str:
    if job.state is JobState.PREEMPTING:
        return (f"not waiting: asked to checkpoint for {job.preempted_for} by {clock(job.preemption_deadline)}")
    if job.state is JobState.INTERRUPTED:
        return "not waiting: interrupted; recovery requeues it or fails it"
    if job.state in (JobState.PLACED, JobState.RUNNING):
        since = f" since {clock(job.running_since)}" if job.running_since is not None else ""
        return f"not waiting: {job.state.value}{since} on {names(job.nodes())}"
    return f"not waiting: {job.state.value} ({job.reason.value})"


# --- the numbers ------------------------------------------------------------------------------------------------


def constraints(state: CellState, job: Job, policy: Policy, estimate: Estimate | None) -> list[str]:
    """Every constraint on the gang, with the numbers of the folded state."""
    return [line for line in (_shape(job), _capacity(state, job), _reserved(state, job, policy),
                              _quota(state, job, policy), _making_room(state, job), _placement(state, job, policy),
                              _queue(state, job, policy, estimate)) if line]


def _shape(job: Job) -> str:
    need = f"needs {job.min_gpus} {job.gpu_type} GPUs ({job.min_count} workers x {job.gpus_per_worker})"
    if job.min_workers is not None and job.min_count < job.workers:
        need += f", up to {job.gpus} with all {job.workers} workers"
    if job.topology_required:
        need += f" in one {job.topology_required}"
    if job.not_before > 0:
        need += f"; backs off until {clock(job.not_before)}"
    return need


def _capacity(state: CellState, job: Job) -> str:
    cluster, gpu_type = state.cluster, job.gpu_type
    nodes = [n for n in cluster.of_type(gpu_type) if n.schedulable]
    free = sum(n.free for n in nodes)
    capacity = sum(n.healthy_gpus for n in nodes)
    out = f"{gpu_type}: {free} free of {capacity} in service on {len(nodes)} nodes"
    slots = sum(n.free // job.gpus_per_worker for n in nodes)
    out += f"; {slots} free slots of {job.gpus_per_worker} GPUs for {job.min_count} workers"
    level_name = job.topology_required or job.topology_preferred
    level = cluster.level_index(level_name) if level_name else None
    if level is not None and level < len(cluster.levels):
        by_domain: dict[str, int] = {}
        for n in nodes:
            by_domain[n.domains[level]] = by_domain.get(n.domains[level], 0) + n.free
        if by_domain:
            best = max(sorted(by_domain), key=lambda d: by_domain[d])
            out += f"; the largest free {level_name} has {by_domain[best]} ({best})"
    elif level is not None:  # one node
        best_node = max(nodes, key=lambda n: (n.free, n.name), default=None)
        if best_node is not None:
            out += f"; the freest node has {best_node.free} ({best_node.name})"
    return out


def _reserved(state: CellState, job: Job, policy: Policy) -> str:
    excluded = set(off_limits(state, job, state.now, by_deadline=policy.admission.earliest_deadline_first,
                              across_teams=policy.admission.priority_passes_reservations))
    nodes = state.cluster.nodes
    held = [n for n in sorted(excluded) if n in nodes and nodes[n].gpu_type == job.gpu_type]
    own = state.reservations.get(job.job_id)
    parts = []
    if held:
        holders = sorted({nodes[n].reserved_for for n in held if nodes[n].reserved_for})
        parts.append(f"{len(held)} node(s) with {sum(nodes[n].free for n in held)} free GPUs are reserved for "
                     f"{names(holders)}")
    if own:
        parts.append(f"it holds a reservation on {names(own)} ({sum(nodes[n].free for n in own if n in nodes)} "
                     "free GPUs there now)")
    return "; ".join(parts)


def _quota(state: CellState, job: Job, policy: Policy) -> str:
    tenancy, gpu_type = state.tenancy, job.gpu_type
    quota = tenancy.quota(job.team, gpu_type)
    used = tenancy.used(job.team, gpu_type)
    out = f"team {job.team} uses {used} of nominal {quota.nominal} {gpu_type}"
    if quota.borrowing_limit is not None:
        out += f" (may borrow {quota.borrowing_limit})"
    team = tenancy.teams.get(job.team)
    if team is None or team.cohort is None:
        return out + "; it has no cohort to borrow from"
    if not policy.admission.borrowing:
        return out + "; borrowing is off under this policy"
    left = tenancy.pool_size(job.team, gpu_type) - tenancy.pool_used(job.team, gpu_type)
    out += f"; cohort {tenancy.root_cohort(team.cohort)} has {max(0, left)} to lend"
    lent = tenancy.lent(gpu_type).get(job.team, 0)
    if lent:
        out += f"; {lent} of its nominal are lent to teams that borrow"
    return out


def _making_room(state: CellState, job: Job) -> str:
    victims = [state.jobs[j] for j in sorted(state.preempting) if state.jobs[j].preempted_for == job.job_id]
    if not victims:
        return ""
    return "already asked to make room for it: " + ", ".join(
        f"{v.job_id} ({v.held_gpus} GPUs, checkpoint by {clock(v.preemption_deadline)})" for v in victims)


def _placement(state: CellState, job: Job, policy: Policy) -> str:
    view = CapacityView(state.cluster)
    outcome = place_gang(view, job, job.workers, policy.placement,
                         off_limits(state, job, state.now, by_deadline=policy.admission.earliest_deadline_first,
                                    across_teams=policy.admission.priority_passes_reservations))
    if isinstance(outcome, Placement):
        nodes = sorted({n for _, n, _ in outcome.assignments})
        where = f" in {outcome.domain}" if outcome.domain else ""
        return f"quota aside, {len(outcome.assignments)} workers fit now on {names(nodes)}{where}"
    return f"quota aside, no placement now: {outcome.detail} ({outcome.reason.value})"


def _queue(state: CellState, job: Job, policy: Policy, estimate: Estimate | None) -> str:
    if job.state is not JobState.QUEUED:
        return ""
    order = list(queue_order(state, [state.jobs[j] for j in sorted(state.queued)], policy.admission))
    ahead = order[:next(i for i, j in enumerate(order) if j.job_id == job.job_id)]
    same = [j for j in ahead if j.gpu_type == job.gpu_type]
    out = f"{len(ahead)} gang(s) ahead of it in the cell's admission order" if ahead else "first in the cell's queue"
    if same:
        out += (f", {len(same)} of them asking {sum(j.min_gpus for j in same)} {job.gpu_type} GPUs "
                f"({names(j.job_id for j in same[:6])})")
    if estimate is not None and estimate.start is not None:
        out += f"; estimated start {clock(estimate.start)}"
    return out

