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
from events.models import Reason, XidAction
from projections.cell import CellState
from projections.cluster import Node
from projections.jobs import Job, JobState
from services.core.decider import Context
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

    def decide(self, state: CellState, event: m.Event, ctx: Context) -> list[m.Decision]:
        if isinstance(event, m.Tick):
            return silent_nodes(state, ctx)
        if isinstance(event, m.NodeFailed):
            node = state.cluster.nodes.get(event.node)
            if node is None:
                return []
            return [*interrupt(state, _jobs_on(state, node), node.name, Reason.NODE_FAILED,
                               f"node {node.name} failed", ctx), *activate_spare(state, node, ctx)]
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
    replay has none and takes the failures the log records for this tick as the facts they are."""
    if ctx.heartbeats is None:
        return ctx.replayed([d for d in ctx.recorded if isinstance(d, m.NodeFailed)
                             and d.envelope.reason is Reason.HEARTBEAT_MISSED])
    threshold = ctx.policy.recovery.heartbeat_timeout_ms
    # Only nodes that heartbeat can fall silent; a recovered node's silence counts from its recovery.
    last_seen = {name: max(at, state.last_heartbeat.get(name, at)) for name, at in ctx.heartbeats.items()}
    return [
        m.NodeFailed(envelope=ctx.envelope(Reason.HEARTBEAT_MISSED), node=name,
                     last_heartbeat_at=last, threshold_ms=threshold)
        for name, last in sorted(last_seen.items())
        if ctx.now - last > threshold and name in state.cluster.nodes and not state.cluster.nodes[name].failed
    ]


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
        return [*interrupt(state, _jobs_on(state, node), node.name, reason, detail, ctx),
                *activate_spare(state, node, ctx)]
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
        restarts = job.restarts + 1
        if restarts > job.max_restarts:
            decisions.append(m.JobFailed(envelope=ctx.envelope(Reason.RESTART_BUDGET_SPENT, job.job_id),
                                         job_id=job.job_id,
                                         detail=f"{restarts} interruptions, restart budget {job.max_restarts}"))
            continue
        backoff = min(policy.backoff_max_ms, policy.backoff_base_ms * 2 ** (restarts - 1))
        decisions.append(m.JobRequeued(
            envelope=ctx.envelope(Reason.BACKOFF_SCHEDULED, job.job_id), job_id=job.job_id,
            attempt=job.attempt + 1, not_before=ctx.now + backoff,
            resume_checkpoint_id=job.checkpoint.checkpoint_id if job.checkpoint else None,
        ))
    return decisions


def activate_spare(state: CellState, failed: Node, ctx: Context) -> list[m.Decision]:
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
