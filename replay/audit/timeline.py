"""A job's whole history from a cell's log, one line per event about it, each told with the numbers of the
moment it happened: the log is folded in order (projections/evolve.py) and every event that names the job is
described from the state around it. What a line says:

- submitted: the gang's shape, team, priority and limits;
- queued: the admitter's reason and detail, at each change of reason (the admitter writes no other);
- admitted: the GPUs reserved, the team's quota use after it and, when it borrowed, from which teams
  (projections/tenancy.py); placed: the nodes and their racks; running: when its last worker started;
- checkpoints; preemption requested (by which job, which rule, the deadline) and preempted (the GPU-seconds
  it had trained since its last checkpoint, which are lost); interrupted (the node, the Xid or the silence);
- requeued (the checkpoint it resumes from, its back-off), finished, and the jobs it made room for;
- a decision the fold found stale (superseded) says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import Job, JobState
from replay.audit.text import clock, names, span


@dataclass(frozen=True)
class Line:
    """One event about the job."""

    offset: int
    at: int
    event: str
    reason: str
    message: str
    basis: int | None = None
    policy: str | None = None


@dataclass
class Timeline:
    """Every line about a job, and where it stands at the end of the log read."""

    job_id: str
    lines: list[Line] = field(default_factory=list)
    state: str | None = None  # None: no such job in the cell
    reason: str = ""
    offset: int = -1  # the last offset folded


@dataclass
class _Moment:
    """What a line may look at: the state after the event, the job before and after it, the events it cites."""

    state: CellState
    job: Job | None
    before: dict
    causes: dict[str, m.Event]


def timeline(records: Sequence[tuple[int, m.Event]], job_id: str) -> tuple[Timeline, CellState]:
    """Folds `records` and tells the job's story; returns it with the folded state (for --why and estimates)."""
    state = CellState(tracks_rows=False)
    out = Timeline(job_id)
    causes: dict[str, m.Event] = {}  # what interruptions cite: failures, faults and exits, by event id
    requests: set[str] = set()  # event ids of the job's cancel requests, whose rejection is about it
    inputs: set[int] = set()  # offsets of the records about the job, whose refusal is about it
    last: Job | None = None  # the job as last seen: an ended job leaves the state at the next Tick
    for offset, event in records:
        kind = type(event)
        if kind in _CITED:
            causes[event.envelope.event_id] = event
        if not _about(event, job_id, requests, inputs):
            evolve(state, event, offset)
            continue
        job = state.jobs.get(job_id)
        before = _before(job)
        refused = evolve(state, event, offset)
        job = state.jobs.get(job_id)
        last = job or last
        if refused is not None:
            message: str | None = f"refused by the cell ({refused.reason.value}): {refused.detail}"
        else:
            message = _DESCRIBE.get(kind, _plain)(event, _Moment(state, job, before, causes))
        if message is None:
            continue
        if _superseded(event, job, job_id, offset):
            message = "superseded: the state had moved on when it was folded (" + message + ")"
        envelope = event.envelope
        out.lines.append(Line(offset, envelope.at, event.event_type, _reason(event, refused), message,
                              envelope.basis_offset, envelope.policy_version))
        if not event.is_decision:
            inputs.add(offset)
        if isinstance(event, m.JobCancelRequested):
            requests.add(envelope.event_id)
    job = state.jobs.get(job_id) or last
    out.offset = state.offset
    if job is not None:
        out.state, out.reason = job.state.value, job.reason.value
    return out, state


def _about(event: m.Event, job_id: str, requests: set[str], inputs: set[int]) -> bool:
    fields = event.__dict__  # asked of every record: its fields without pydantic's lookups
    if fields.get("job_id") == job_id or fields.get("for_job_id") == job_id:
        return True
    if isinstance(event, m.RequestRejected):
        return event.request_event_id in requests
    return isinstance(event, m.RecordRefused) and event.refused_offset in inputs


def _superseded(event: m.Event, job: Job | None, job_id: str, offset: int) -> bool:
    """A decision about the job that the fold did not take (it notes it superseded in the job's history)."""
    return (type(event) in _FOLDED_ABOUT_JOB and job is not None and m.field_of(event, "job_id", None) == job_id
            and job.reason_offset != offset and event.envelope.reason is not m.Reason.DUPLICATE_JOB)


def _before(job: Job | None) -> dict:
    if job is None:
        return {}
    return {"state": job.state, "running_since": job.running_since, "checkpoint": job.checkpoint,
            "held_gpus": job.held_gpus, "gpus": job.gpus, "attempt": job.attempt}


def _reason(event: m.Event, refused) -> str:
    if refused is not None:
        return refused.reason.value
    if event.is_decision:
        return event.envelope.reason.value
    if isinstance(event, m.WorkerStarted):
        return "RUNNING"
    return "SUBMITTED" if isinstance(event, m.JobSubmitted) else "-"


# --- one message per kind of event ---------------------------------------------------------------------------


def _submitted(e: m.JobSubmitted, at: _Moment) -> str:
    job = at.job
    shape = f"{e.workers} x {e.gpus_per_worker} {e.gpu_type} ({e.workers * e.gpus_per_worker} GPUs)"
    parts = [f"submitted {shape} for team {e.team}"]
    if e.min_workers is not None:
        parts.append(f"at least {e.min_workers} workers")
    if job is not None and e.priority_class:
        protected = "" if job.preemptible else ", not preemptible"
        parts.append(f"priority class {e.priority_class} ({job.priority}{protected})")
    if e.topology_required:
        parts.append(f"all workers in one {e.topology_required}")
    elif e.topology_preferred:
        parts.append(f"preferably in one {e.topology_preferred}")
    parts.append(f"time limit {span(e.time_limit_ms)}" if e.time_limit_ms else "no time limit")
    if job is not None and job.submit_offset != at.state.offset:
        return "submitted again under this id (" + ", ".join(parts) + ")"
    if job is not None and job.state is JobState.REJECTED:
        parts.append("refused as it was folded")
    return ", ".join(parts)


def _queued(e: m.JobQueued, at: _Moment) -> str:
    text = f"waits: {e.detail}" if e.detail else "waits"
    if e.reserved_nodes:
        text += f" (holds {len(e.reserved_nodes)} node(s): {names(e.reserved_nodes)})"
    return text


def _admitted(e: m.JobAdmitted, at: _Moment) -> str:
    tenancy = at.state.tenancy
    quota = tenancy.quota(e.team, e.gpu_type)
    used = tenancy.used(e.team, e.gpu_type)
    workers = len(e.assignments) or (e.gpus // max(1, at.job.gpus_per_worker if at.job else 1))
    text = (f"admitted {e.gpus} {e.gpu_type} GPUs ({workers} workers); team {e.team} now uses {used} of "
            f"nominal {quota.nominal}")
    if e.borrowed:
        usage = dict(tenancy.usage)
        usage[(e.team, e.gpu_type)] = used - e.gpus  # what the lenders had idle just before
        given = tenancy.lenders(e.team, e.gpu_type, e.borrowed, usage)
        source = ", ".join(f"{team} {gpus}" for team, gpus in given.items()) or "its cohort"
        text += f"; borrowed {e.borrowed} from {source}"
    return text


def _placed(e: m.JobPlaced, at: _Moment) -> str:
    nodes = at.state.cluster.nodes
    by_node: dict[str, int] = {}
    for a in e.assignments:
        by_node[a.node] = by_node.get(a.node, 0) + len(a.gpus)
    racks = sorted({nodes[n].domains[-1] for n in by_node if n in nodes and nodes[n].domains})
    where = names([f"{n} ({g})" for n, g in sorted(by_node.items())])
    text = f"attempt {e.attempt} placed on {where}"
    if racks:
        level = at.state.cluster.levels[-1] if at.state.cluster.levels else "domain"
        text += f"; {level}{'s' if len(racks) > 1 else ''} {names(racks)}"
    return text


def _pending(e: m.PlacementPending, at: _Moment) -> str:
    return f"not placeable now: {e.detail}; back to the queue" if e.detail else "not placeable now; back to the queue"


def _started(e: m.WorkerStarted, at: _Moment) -> str | None:
    job = at.job
    if job is None or at.before.get("state") is not JobState.PLACED or job.state is not JobState.RUNNING:
        return None  # only the start that makes the whole gang run is worth a line
    return f"running: all {len(job.started_workers)} workers of attempt {e.attempt} started (last on {e.node})"


def _exited(e: m.WorkerExited, at: _Moment) -> str | None:
    if e.exit_code == 0:
        return None
    return f"worker {e.worker} of attempt {e.attempt} exited with code {e.exit_code} on {e.node}"


def _checkpoint(e: m.CheckpointCompleted, at: _Moment) -> str:
    step = f", step {e.step}" if e.step is not None else ""
    if at.job is None or at.job.attempt != e.attempt or at.job.checkpoint is None or (
            at.job.checkpoint.checkpoint_id != e.checkpoint_id):
        return f"checkpoint {e.checkpoint_id} of attempt {e.attempt} ignored: that attempt had ended or saved more"
    return f"checkpoint {e.checkpoint_id}: {span(e.progress_ms)} of training saved{step}"


def _preemption_requested(e: m.PreemptionRequested, at: _Moment) -> str:
    rule = {m.Reason.RECLAIM_LENT_QUOTA: "its team reclaims quota it lent",
            m.Reason.HIGHER_PRIORITY: "it has a higher priority",
            m.Reason.TIME_SHARED: "it has received less GPU-time",
            m.Reason.CONSOLIDATED: "a move: the gang needs whole nodes, the victim fits in free GPUs elsewhere"}.get(e.envelope.reason, e.envelope.reason.value)
    if at.job is not None and e.job_id == at.job.job_id:
        return (f"asked to checkpoint and make room for {e.for_job_id} ({rule}) by {clock(e.checkpoint_deadline)} "
                f"(in {span(e.checkpoint_deadline - e.envelope.at)})")
    return f"asked {e.job_id} to checkpoint and make room for this job ({rule})"


def _preempted(e: m.JobPreempted, at: _Moment) -> str:
    if at.job is None or e.job_id != at.job.job_id:
        return f"{e.job_id} preempted to make room for this job"
    lost = lost_gpu_ms(at.before, e.envelope.at)
    kept = f"resumes from checkpoint {e.checkpoint_id}" if e.checkpoint_id else "no checkpoint: starts over"
    return f"preempted for {e.for_job_id}; {kept}; {lost // 1000:,} GPU-seconds since its last checkpoint lost"


def _interrupted(e: m.JobInterrupted, at: _Moment) -> str:
    cause = at.causes.get(e.envelope.causation_id or "")
    if isinstance(cause, m.NodeFailed) and cause.last_heartbeat_at is not None:
        why = (f"node {cause.node} silent since {clock(cause.last_heartbeat_at)} "
               f"(threshold {span(cause.threshold_ms)})")
    elif isinstance(cause, m.GpuFaulted):
        why = f"{e.detail} ({cause.action.value})"
    else:
        why = e.detail or "its hardware failed"
    lost = lost_gpu_ms(at.before, e.envelope.at)
    where = f" on {e.node}" if e.node else ""
    return f"attempt {e.attempt} interrupted{where}: {why}; {lost // 1000:,} GPU-seconds since its last checkpoint lost"


def _requeued(e: m.JobRequeued, at: _Moment) -> str:
    resume = f"resumes from {e.resume_checkpoint_id}" if e.resume_checkpoint_id else "starts over (no checkpoint)"
    return f"requeued as attempt {e.attempt}; {resume}; not before {clock(e.not_before)}"


def _ended(verb: str) -> Callable[[m.Event, _Moment], str]:
    def describe(e: m.Event, at: _Moment) -> str:
        detail = m.field_of(e, "detail", "")
        return f"{verb}: {detail}" if detail else verb
    return describe


def _cancel_requested(e: m.JobCancelRequested, at: _Moment) -> str:
    return f"cancel requested by {e.envelope.producer}"


def _plain(e: m.Event, at: _Moment) -> str:
    return m.field_of(e, "detail", "") or e.event_type


def lost_gpu_ms(before: dict, at: int) -> int:
    """GPU-milliseconds a stopped attempt had trained since its last checkpoint (or its start): lost work."""
    since = before.get("running_since")
    if since is None:
        return 0
    checkpoint = before.get("checkpoint")
    if checkpoint is not None and checkpoint.at > since:
        since = checkpoint.at
    return max(0, at - since) * before.get("held_gpus", 0)


_DESCRIBE: dict[type, Callable] = {
    m.JobSubmitted: _submitted,
    m.JobQueued: _queued,
    m.JobAdmitted: _admitted,
    m.JobPlaced: _placed,
    m.PlacementPending: _pending,
    m.WorkerStarted: _started,
    m.WorkerExited: _exited,
    m.CheckpointCompleted: _checkpoint,
    m.PreemptionRequested: _preemption_requested,
    m.JobPreempted: _preempted,
    m.JobInterrupted: _interrupted,
    m.JobRequeued: _requeued,
    m.JobSucceeded: _ended("succeeded"),
    m.JobFailed: _ended("failed"),
    m.JobCancelled: _ended("cancelled"),
    m.JobRejected: _ended("rejected"),
    m.JobCancelRequested: _cancel_requested,
}

#: Decisions about the job that `evolve` folds only while they still hold (else it notes them superseded).
_FOLDED_ABOUT_JOB = frozenset({m.JobQueued, m.JobAdmitted, m.JobPlaced, m.PlacementPending, m.PreemptionRequested,
                               m.JobPreempted, m.JobInterrupted, m.JobRequeued, m.JobRejected})
#: Events an interruption may name as its cause.
_CITED = (m.NodeFailed, m.GpuFaulted, m.WorkerExited)
