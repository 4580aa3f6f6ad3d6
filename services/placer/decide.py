"""The placer: binds each admitted gang to nodes and GPU indices, or says what stops it.

The admitter's planned assignment is bound as it stands when it is still valid; when the plan
went stale in flight (a node failed, a placement was superseded) the placer plans again, and
when no placement exists it returns the gang to the queue with the binding constraint. It places
exactly the workers the admission reserved quota for (fewer than asked for a gang with min_workers).
"""

from __future__ import annotations

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.jobs import Job, JobState
from services.core.decider import Context
from services.core.placement import CapacityView, Placement, off_limits

#: Events after which an admitted job may need (re)placing.
TRIGGERS = (m.JobAdmitted, m.JobPlaced)


class Placer:
    name = "placer"
    triggers = frozenset(TRIGGERS)
    side_input: frozenset[type] = frozenset()
    answers_refusals = False

    def decide(self, state: CellState, event: m.Event, ctx: Context) -> list[m.Decision]:
        job = state.jobs.get(event.job_id)
        if job is None or job.state is not JobState.ADMITTED:
            return []
        return [bind(state, job, ctx)]


def bind(state: CellState, job: Job, ctx: Context) -> m.Decision:
    nodes = state.cluster.nodes
    if job.assignments and all(nodes[n].schedulable for _, n, _ in job.assignments):
        return _placed(job, job.assignments, job.domain, Reason.PLACED, ctx)
    excluded = off_limits(state, job, ctx.now)
    outcome = CapacityView(state.cluster).place(job, ctx.policy.placement, excluded, job.admitted_workers)
    if isinstance(outcome, Placement):
        return _placed(job, outcome.assignments, outcome.domain, Reason.PLACED, ctx)
    return m.PlacementPending(envelope=ctx.envelope(outcome.reason, job.job_id), job_id=job.job_id,
                              detail=outcome.detail)


def _placed(job: Job, assignments, domain: str | None, reason: Reason, ctx: Context) -> m.JobPlaced:
    return m.JobPlaced(
        envelope=ctx.envelope(reason, job.job_id), job_id=job.job_id, attempt=job.attempt, domain=domain,
        assignments=[m.WorkerAssignment(worker=w, node=n, gpus=list(g)) for w, n, g in assignments],
    )
