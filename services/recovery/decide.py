"""Recovery: turns silence and GPU errors into facts, and restarts the jobs they hit.

Heartbeat silence past the threshold becomes `NodeFailed` with its evidence; an Xid error
becomes `GpuFaulted` (retire the GPU, cordon the node, or the job's own fault). Jobs on failed
hardware are interrupted and requeued from their last checkpoint with exponential back-off, or
failed once their restart budget is spent. A free hot spare in the failed node's domain (at least its
outermost topology level, e.g. its block) joins the pool; a spare elsewhere never does. A node that
passes its health checks returns, unless an operator cordoned it. Worker exits end jobs.
"""

from __future__ import annotations

from events import models as m
from events.durations import format_duration
from events.models import Reason, XidAction
from projections.cell import CellState
from projections.cluster import Node
from projections.jobs import Job, JobState
from services.core.decider import ASK_ALWAYS, Context
from services.core.quiet import NEVER, is_quiet, remember
from services.recovery.xid import classify

_XID_REASONS = {XidAction.RETIRE_GPU: Reason.GPU_XID_HARDWARE, XidAction.CORDON_NODE: Reason.GPU_XID_NODE,
                XidAction.JOB_ONLY: Reason.GPU_XID_APPLICATION}


#: States in which a job's workers run, so their exits count (a preempting job may still finish).
_RUNS = (JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING)


class Recovery:
    name = "recovery"
    triggers = frozenset({m.Tick, m.NodeFailed, m.GpuErrorReported, m.GpuFaulted, m.WorkerExited,
                          m.NodeHealthCheckPassed})
    side_input = frozenset({m.NodeHeartbeat})  # read from the heartbeat topic, off the main log
    answers_refusals = False
    only_if = ASK_ALWAYS

    def decide(self, state: CellState, event: m.Event, ctx: Context) -> list[m.Decision]:
        if isinstance(event, m.Tick):
            return silent_nodes(state, ctx) + overdue(state, ctx)
        if isinstance(event, m.NodeFailed):
            node = state.cluster.nodes.get(event.node)
            if node is None:
                return []
            return node_lost(state, node, Reason.NODE_FAILED, f"node {node.name} failed", ctx)
        if isinstance(event, m.GpuErrorReported):
            return gpu_error(state, event, ctx)
        if isinstance(event, m.GpuFaulted):
            return gpu_faulted(state, event, ctx)
        if isinstance(event, m.WorkerExited):
            return worker_exited(state, event, ctx)
        if isinstance(event, m.NodeHealthCheckPassed):
            node = state.cluster.nodes.get(event.node)
            if node is not None and (node.failed or node.fault_cordoned or node.retired):  # an operator's cordon stays
                return [m.NodeRecovered(envelope=ctx.envelope(Reason.HEALTH_CHECK_PASSED), node=node.name)]
        return []


def silent_nodes(state: CellState, ctx: Context) -> list[m.Decision]:
    """NodeFailed for each node silent past the threshold. Heartbeats are side input, off the main log: a
    replay has none and takes the failures the log records for this tick as the facts they are.

    When most of the cell's heartbeating nodes fall silent together (two or more, and more than
    `mass_silence_percent` of them), it is far likelier that the path their heartbeats take to recovery stopped
    (the intake or its broker stalled) than that they all died at once: none is failed until enough are heard
    again, as Kubernetes' node lifecycle controller stops evicting in a fully disrupted zone."""
    if ctx.heartbeats is None:
        return ctx.replayed([d for d in ctx.recorded if isinstance(d, m.NodeFailed)
                             and d.envelope.reason is Reason.HEARTBEAT_MISSED])
    policy = ctx.policy.recovery
    # Only nodes that heartbeat can fall silent; a recovered node's silence counts from its recovery.
    watched = {name: max(at, state.last_heartbeat.get(name, at)) for name, at in ctx.heartbeats.items()
               if name in state.cluster.nodes and not state.cluster.nodes[name].failed}
    silent = sorted(name for name, last in watched.items() if ctx.now - last > policy.heartbeat_timeout_ms)
    if len(silent) >= 2 and len(silent) * 100 > policy.mass_silence_percent * len(watched):
        return []
    return [m.NodeFailed(envelope=ctx.envelope(Reason.HEARTBEAT_MISSED), node=name, last_heartbeat_at=watched[name],
                         threshold_ms=policy.heartbeat_timeout_ms)
            for name in silent]


def overdue(state: CellState, ctx: Context) -> list[m.Decision]:
    """Attempts that overran a limit. With `enforce_time_limits`, a run longer than its job's time limit ends the
    job (JobFailed, as Slurm ends a job at its TimeLimit; backfill promised a reservation that such work ends by
    then). With `start_timeout_ms`, a gang whose workers have not all started that long after its admission is
    interrupted and requeued with back-off (Kueue's waitForPodsReady): GPUs held by workers that never run serve
    nobody. A Tick before the first such moment is skipped (quiet Ticks) while no attempt started since
    (`CellState.starts`): any other change can only take a limit away, never bring the first one nearer."""
    policy = ctx.policy.recovery
    if (not policy.enforce_time_limits and policy.start_timeout_ms is None) or is_quiet(state, "recovery", ctx,
                                                                                         state.starts):
        return []
    now, jobs = ctx.now, state.jobs
    limits, timeout = policy.enforce_time_limits, policy.start_timeout_ms
    due: list[str] = []
    until = NEVER  # the first moment after now at which an attempt holding GPUs becomes overdue
    for job_id in state.holding:  # every Tick whose state changed reads them all: kept lean
        job = jobs[job_id]
        if job.running_since is not None:
            if not limits or job.time_limit_ms is None:
                continue
            end = job.running_since + job.time_limit_ms + 1
        elif timeout is not None and job.admitted_at is not None:
            end = job.admitted_at + timeout + 1
        else:
            continue
        if end <= now:
            due.append(job_id)
        elif end < until:
            until = end
    remember(state, "recovery", ctx, None if due else until, state.starts)
    decisions: list[m.Decision] = []
    for job in (jobs[j] for j in sorted(due)):
        if job.running_since is not None:
            ran = format_duration((now - job.running_since) // 1000 * 1000)
            decisions.append(m.JobFailed(envelope=ctx.envelope(Reason.TIME_LIMIT_EXCEEDED, job.job_id),
                                         job_id=job.job_id, detail=f"its run of {ran} exceeded its time limit of "
                                                                   f"{format_duration(job.time_limit_ms or 0)}"))
        else:
            started = len(job.started_workers)
            detail = (f"{started} of {len(job.assignments) or job.admitted_workers} workers started within "
                      f"{format_duration(policy.start_timeout_ms or 0)} of its admission")
            decisions.extend(interrupt(state, [job], None, Reason.WORKERS_NOT_STARTED, detail, ctx))
    return decisions


def gpu_error(state: CellState, event: m.GpuErrorReported, ctx: Context) -> list[m.Decision]:
    node = state.cluster.nodes.get(event.node)
    if node is None or not 0 <= event.gpu < node.gpus:
        return [m.RequestRejected(envelope=ctx.envelope(Reason.INVALID_REQUEST),
                                  request_event_id=event.envelope.event_id, request_type="GpuErrorReported",
                                  detail=f"no GPU {event.gpu} on node {event.node!r}")]
    action, meaning = classify(event.xid)
    return [m.GpuFaulted(envelope=ctx.envelope(_XID_REASONS[action]), node=node.name, gpu=event.gpu,
                         xid=event.xid, action=action)]


def gpu_faulted(state: CellState, event: m.GpuFaulted, ctx: Context) -> list[m.Decision]:
    node = state.cluster.nodes.get(event.node)
    if node is None:
        return []
    _, meaning = classify(event.xid)
    detail = f"Xid {event.xid} on {node.name} GPU {event.gpu}: {meaning}"
    reason = _XID_REASONS[event.action]
    if event.action is XidAction.CORDON_NODE:
        return node_lost(state, node, reason, detail, ctx)
    holder = node.holder.get(event.gpu)
    jobs = [state.jobs[holder]] if holder is not None else []
    return interrupt(state, jobs, node.name, reason, detail, ctx)


def worker_exited(state: CellState, event: m.WorkerExited, ctx: Context) -> list[m.Decision]:
    job = state.jobs.get(event.job_id)
    if job is None or job.attempt != event.attempt or job.state not in _RUNS:
        return []
    if event.exit_code != 0:
        return interrupt(state, [job], event.node, Reason.WORKER_FAILED,
                         f"worker {event.worker} exited with code {event.exit_code}", ctx)
    if len(job.succeeded_workers) >= len(job.assignments):
        return [m.JobSucceeded(envelope=ctx.envelope(Reason.ALL_WORKERS_SUCCEEDED, job.job_id), job_id=job.job_id)]
    return []


def node_lost(state: CellState, node: Node, reason: Reason, detail: str, ctx: Context) -> list[m.Decision]:
    """A node is out of service: the jobs on it are interrupted, and a spare of its domain joins the pool. Each
    interrupted gang that will restart first gets its surviving GPUs and room on the spare held for it through
    its back-off, so queued work does not take its place meanwhile (Kueue's node hot swap)."""
    jobs = _jobs_on(state, node)
    spare = activate_spare(state, node, ctx)
    holds = hold_through_backoff(state, jobs, node, spare[0].node if spare else None, ctx)
    return [*holds, *interrupt(state, jobs, node.name, reason, detail, ctx), *spare]


def hold_through_backoff(state: CellState, jobs: list[Job], lost: Node, spare: str | None,
                         ctx: Context) -> list[m.Decision]:
    """CapacityHeld for each gang on the lost node that will be requeued: its GPUs on the other nodes, and for
    its workers on the lost node GPUs of the spare, as far as the spare has room, with its quota, until its
    back-off ends (and `hold_grace_ms` after, so that the admission cycle at its end finds the hold). A gang
    with nothing left to keep (it ran on the lost node alone, and no spare has room) gets no hold."""
    policy = ctx.policy.recovery
    if not policy.hold_through_backoff:
        return []
    node = state.cluster.nodes.get(spare) if spare is not None else None
    room = node.free_indices() if node is not None and node.gpu_type == lost.gpu_type else []
    decisions: list[m.Decision] = []
    for job in sorted(jobs, key=lambda j: j.job_id):
        backoff = _backoff(job, policy)
        if not job.holds_capacity or backoff is None:
            continue
        if job.state is JobState.PREEMPTING and not policy.hold_victims_through_backoff:
            continue  # what it keeps is held for the gang it was making room for
        g = job.gpus_per_worker
        held = [(w, name, gpus) for w, name, gpus in job.assignments if name != lost.name]
        for w, name, _ in job.assignments:
            if name == lost.name and spare is not None and len(room) >= g:
                held.append((w, spare, tuple(room[:g])))
                room = room[g:]
        if not held:
            continue  # nothing of its place is left to keep
        until = ctx.now + backoff + policy.hold_grace_ms
        decisions.append(m.CapacityHeld(
            envelope=ctx.envelope(Reason.HELD_THROUGH_BACKOFF, job.job_id), job_id=job.job_id, team=job.team,
            gpu_type=job.gpu_type, gpus=job.held_gpus, until=until,
            assignments=[m.WorkerAssignment(worker=w, node=n, gpus=list(gpus)) for w, n, gpus in sorted(held)],
            detail=f"{lost.name} was lost: {', '.join(sorted({n for _, n, _ in held}))} held until it restarts"))
    return decisions


def _backoff(job: Job, policy) -> int | None:
    """How long the job backs off before its next attempt, or None when its restart budget is spent."""
    restarts = job.restarts + 1
    if restarts > job.max_restarts:
        return None
    return min(policy.backoff_max_ms, policy.backoff_base_ms * 2 ** (restarts - 1))


def interrupt(state: CellState, jobs: list[Job], node: str | None, reason: Reason, detail: str,
              ctx: Context) -> list[m.Decision]:
    """JobInterrupted for each job, then JobRequeued with back-off or JobFailed when its budget is spent."""
    policy = ctx.policy.recovery
    decisions: list[m.Decision] = []
    for job in sorted(jobs, key=lambda j: j.job_id):
        if not job.holds_capacity:
            continue
        decisions.append(m.JobInterrupted(envelope=ctx.envelope(reason, job.job_id), job_id=job.job_id,
                                          attempt=job.attempt, node=node, detail=detail))
        backoff = _backoff(job, policy)
        if backoff is None:
            decisions.append(m.JobFailed(envelope=ctx.envelope(Reason.RESTART_BUDGET_SPENT, job.job_id),
                                         job_id=job.job_id,
                                         detail=f"{job.restarts + 1} interruptions, restart budget {job.max_restarts}"))
            continue
        decisions.append(m.JobRequeued(
            envelope=ctx.envelope(Reason.BACKOFF_SCHEDULED, job.job_id), job_id=job.job_id,
            attempt=job.attempt + 1, not_before=ctx.now + backoff,
            resume_checkpoint_id=job.checkpoint.checkpoint_id if job.checkpoint else None,
        ))
    return decisions


def activate_spare(state: CellState, failed: Node, ctx: Context) -> list[m.SpareActivated]:
    """The free spare of the same GPU type and outermost domain that shares the deepest domain with `failed`."""
    if not ctx.policy.recovery.use_hot_spares:
        return []
    needed = 1 if state.cluster.levels else 0  # same block (outermost level) when the cell declares levels
    spares = [n for n in state.cluster.of_type(failed.gpu_type)
              if n.spare and not n.activated and n.in_service and shared_depth(failed, n) >= needed]
    if not spares:
        return []
    best = min(spares, key=lambda s: (-shared_depth(failed, s), s.name))
    return [m.SpareActivated(envelope=ctx.envelope(Reason.SPARE_REPLACES_FAILED_NODE), node=best.name,
                             replaces=failed.name)]


def shared_depth(a: Node, b: Node) -> int:
    """How many topology levels, outermost first, two nodes share."""
    depth = 0
    for mine, theirs in zip(a.domains, b.domains):
        if mine != theirs:
            break
        depth += 1
    return depth


def _jobs_on(state: CellState, node: Node) -> list[Job]:
    return [state.jobs[j] for j in node.jobs() if j in state.jobs]
