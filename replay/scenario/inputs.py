"""Turns one timed scenario input into the events (or agent behaviour) it stands for, at its time.

Inputs are resolved against the cell's state when their time comes, so `worker_exited` and
`checkpoint_completed` name the job's current attempt and the worker's node without the author
having to know them.
"""

from __future__ import annotations

from events import models as m
from events.submission import job_submitted
from replay.runner import VirtualCell
from replay.scenario.spec import Input, Scenario
from services.agent.simulated import SimulatedAgents


def apply(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    _HANDLERS[item.action](item, scenario, cell, agents)


def _submit(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    s = item.submit
    if s.runs_for is not None:
        agents.durations[s.job] = s.runs_for
    cell.schedule(job_submitted(
        s.job, s.team, s.workers, s.gpus_per_worker, s.gpu_type or scenario.gpu_types[0], cell=cell.cell, at=item.at,
        priority_class=s.priority_class, min_workers=s.min_workers, topology_required=s.topology_required,
        topology_preferred=s.topology_preferred, time_limit_ms=s.time_limit, max_restarts=s.max_restarts))


def _cancel(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    cell.schedule(m.JobCancelRequested(envelope=cell.envelope(item.at, "launcher", item.cancel), job_id=item.cancel))


def _checkpoint(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    spec = item.checkpoint_completed
    job = cell.job(spec.job)
    attempt = job.attempt if job else 1
    progress = spec.progress if spec.progress is not None else agents.progress(spec.job, attempt, item.at) or 0
    node = job.assignments[0][1] if job and job.assignments else "-"
    cell.schedule(m.CheckpointCompleted(envelope=cell.envelope(item.at, f"agent/{node}", spec.job), job_id=spec.job,
                                        attempt=attempt, checkpoint_id=f"{spec.job}/a{attempt}/{item.at}",
                                        progress_ms=progress))


def _worker_exited(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    spec = item.worker_exited
    if spec.on_finish:
        agents.fail_exit[spec.job] = (spec.worker, spec.code)
        return
    job = cell.job(spec.job)
    node = next((n for w, n, _ in job.assignments if w == spec.worker), "-") if job else "-"
    cell.schedule(m.WorkerExited(envelope=cell.envelope(item.at, f"agent/{node}", spec.job), job_id=spec.job,
                                 attempt=job.attempt if job else 1, worker=spec.worker, node=node,
                                 exit_code=spec.code))


def _node_failed(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    agents.silenced.add(item.node_failed)  # a dead node's agent stops heartbeating too
    cell.schedule(m.NodeFailed(envelope=cell.envelope(item.at, "operator").model_copy(update={"reason": m.Reason.OPERATOR}),
                               node=item.node_failed, last_heartbeat_at=cell.heartbeats.get(item.node_failed)))


def _gpu_error(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    e = item.gpu_error
    cell.schedule(m.GpuErrorReported(envelope=cell.envelope(item.at, f"agent/{e.node}"), node=e.node, gpu=e.gpu,
                                     xid=e.xid, message=f"Xid {e.xid}"))


def _silence(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    agents.silenced.add(item.heartbeat_silence)


def _quota(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    q = item.quota_change
    cell.schedule(m.QuotaSet(envelope=cell.envelope(item.at, "operator"), team=q.team,
                             gpu_type=q.gpu_type or scenario.gpu_types[0], nominal=q.nominal,
                             borrowing_limit=q.borrowing_limit, lending_limit=q.lending_limit))


def _cordon(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    cell.schedule(m.NodeCordoned(envelope=cell.envelope(item.at, "operator"), node=item.cordon, detail="scenario"))


def _uncordon(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    cell.schedule(m.NodeUncordoned(envelope=cell.envelope(item.at, "operator"), node=item.uncordon, detail="scenario"))


def _health(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    node = item.health_check_passed
    cell.schedule(m.NodeHealthCheckPassed(envelope=cell.envelope(item.at, f"agent/{node}"), node=node))
    if node in agents.silenced:  # the agent is back: it heartbeats again
        agents.silenced.discard(node)
        if agents.timing.heartbeat_every_ms:
            cell.schedule(m.NodeHeartbeat(envelope=cell.envelope(item.at, f"agent/{node}"), node=node, seq=item.at))


def _record(item: Input, scenario: Scenario, cell: VirtualCell, agents: SimulatedAgents) -> None:
    raw = item.record
    envelope = cell.envelope(item.at, "scenario").model_copy(update={
        "cell": raw.cell if raw.cell is not None else cell.cell,
        "at": raw.stamped if raw.stamped is not None else item.at})
    cell.schedule(m.EVENT_TYPES_BY_NAME[raw.type](envelope=envelope, **raw.fields), at=item.at)


_HANDLERS = {
    "submit": _submit, "cancel": _cancel, "checkpoint_completed": _checkpoint, "worker_exited": _worker_exited,
    "node_failed": _node_failed, "gpu_error": _gpu_error, "heartbeat_silence": _silence, "quota_change": _quota,
    "cordon": _cordon, "uncordon": _uncordon, "health_check_passed": _health, "record": _record,
}
