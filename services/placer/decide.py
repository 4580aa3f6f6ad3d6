"""The placer: places again what the admitter's plan could not bind, or says what stops it.

The admitter binds the placement it planned in the same transaction as the admission (JobPlaced right
after JobAdmitted), so a gang is placed one hop after it was submitted. When the plan went stale in
flight (a node failed, another placement took the GPUs first) the binding is superseded as it is folded,
and the placer plans again from the state; when no placement exists it returns the gang to the queue
with the binding constraint. It places exactly the workers the admission reserved quota for (fewer than
asked for a gang with min_workers). An admission that carries no plan is placed here too.
"""

from __future__ import annotations

from events import models as m
from projections.cell import CellState
from projections.jobs import Job, JobState
from services.core.decider import ASK_ALWAYS, Context
from services.core.placement import CapacityView, Placement, bound, off_limits

#: Events after which an admitted job may need (re)placing.
TRIGGERS = (m.JobAdmitted, m.JobPlaced)


class Placer:
    name = "placer"
    triggers = frozenset(TRIGGERS)
    side_input: frozenset[type] = frozenset()
    answers_refusals = False
    only_if = ASK_ALWAYS

    def decide(self, state: CellState, event: m.Event, ctx: Context) -> list[m.Decision]:
        if isinstance(event, m.JobAdmitted) and event.assignments:
            return []  # the admitter binds its plan itself, right after
        job = state.jobs.get(getattr(event, "job_id"))  # each of its triggers names a job
        if job is None or job.state is not JobState.ADMITTED:
            return []
        return [bind(state, job, ctx)]


def bind(state: CellState, job: Job, ctx: Context) -> m.Decision:
    nodes = state.cluster.nodes
    if job.assignments and all(nodes[n].schedulable for _, n, _ in job.assignments):
        return bound(job, job.assignments, job.domain, ctx)
    excluded = off_limits(state, job, ctx.now, by_deadline=ctx.policy.admission.earliest_deadline_first,
                          across_teams=ctx.policy.admission.priority_passes_reservations)
    outcome = CapacityView(state.cluster).place(job, ctx.policy.placement, excluded, job.admitted_workers)
    if isinstance(outcome, Placement):
        return bound(job, outcome.assignments, outcome.domain, ctx)
    return m.PlacementPending(envelope=ctx.envelope(outcome.reason, job.job_id), job_id=job.job_id,
                              detail=outcome.detail)
