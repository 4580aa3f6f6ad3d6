"""`evolve(state, event, offset)`: folds one event into a cell's state. Pure: no I/O, no clock.

Decisions are validated as they are folded: a placement on GPUs that an earlier event took or
failed, a preemption of a job that is no longer running, an admission that no longer fits: each
is recorded in the job's history as superseded and otherwise ignored, so every replica resolves a
conflict the same way because it folds the same order. An admission reserves quota for the workers
it placed (`JobAdmitted.gpus`: with min_workers, possibly fewer than the gang asked for), and a
release gives back exactly that (`Job.held_gpus`). For speed `evolve` updates the state it is
given and returns it; callers that need the old state keep a copy.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable

from events import models as m
from projections.cell import RUNTIME_HISTORY, CellState
from projections.cluster import Node, domain_ids
from projections.jobs import Checkpoint, Job, JobState
from projections.reservations import ends_before, outranks, shadow_time
from projections.tenancy import DEFAULT_PRIORITY, PriorityClass, Quota, Team, TeamPreemption
from projections.validate import Limits, Refusal, refusal, request_problem, team_problem

SUPERSEDED = "SUPERSEDED"


def evolve(state: CellState, event: m.Event, offset: int) -> Refusal | None:
    """Folds `event` at `offset`, or refuses it (projections/validate.py) and folds nothing but the offset.
    Returns the refusal, if any. An offset already folded is a re-delivery: nothing happens."""
    if offset <= state.offset:
        return None
    state.offset = offset
    if not state.cell:
        state.cell = event.envelope.cell
    refused = refusal(state, event)
    envelope = event.envelope
    if envelope.origin_offset is not None and envelope.origin is not None and \
            (refused is None or refused.reason not in _NOT_TAKEN):
        _took(state, envelope.origin, envelope.origin_offset)
    if refused is not None:
        return refused
    _advance_time(state, event)
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        if not (type(event) is m.CheckpointCompleted or (type(event) is m.Tick and not state.ending)):
            state.changes += 1
        handler(state, event, offset)
        _mark_dirty(state, event)
    return None


#: Refusals of an input that do not count it as taken in: not its origin's to write, or too large to keep (an
#: origin of any length would become a row's key).
_NOT_TAKEN = (m.Reason.NOT_ITS_WRITER, m.Reason.OVERSIZED)


def _took(state: CellState, origin: str, origin_offset: int) -> None:
    """The input at `origin_offset` of `origin`'s topic is taken in (folded or refused for what it says)."""
    state.taken[origin] = origin_offset
    if state.tracks_rows:
        state.dirty.add(f"taken/{origin}")


def advance(state: CellState, event: m.Event, offset: int) -> None:
    """Moves the state to `offset` for an event whose effect is already in it: a replica's own decision, laid
    over its state when made, reaching its place in the log (projections/overlay.py)."""
    state.offset = offset
    state.changes += 1
    if type(event) is m.JobQueued and not event.reserved_nodes and not _holder(state, event.job_id):
        state.restated += 1  # landing a restatement of why a gang waits moves only its notes' offsets
    _advance_time(state, event)
    _mark_dirty(state, event)


def _holder(state: CellState, job_id: str) -> bool:
    """Whether capacity is held for the job (its stated reason then says what for: services/admitter/decide.py)."""
    job = state.jobs.get(job_id)
    return job is not None and job.has_hold


def _advance_time(state: CellState, event: m.Event) -> None:
    """A Tick sets the cell's clock; any event moves `now` to its stamp, but not past the clock plus the lead
    the cell allows, nor backwards."""
    at = event.envelope.at
    if isinstance(event, m.Tick):
        state.clock = at if state.clock is None else max(state.clock, at)
    lead = state.limits.max_event_lead_ms
    if state.clock is not None and lead is not None:
        at = min(at, state.clock + lead)
    state.now = max(state.now, at)


def _at(state: CellState, event: m.Event) -> int:
    """The event's stamp as the cell takes it: never later than the cell's `now`."""
    return min(event.envelope.at, state.now)


def fold_assumed(state: CellState, event: m.Event) -> CellState:
    """Folds an event whose log offset is not known yet (a service's own decision in flight, or a
    heartbeat from the side topic) at the current position, without moving the offset."""
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        state.changes += 1
        handler(state, event, state.offset)
        _mark_dirty(state, event)
    return state


def _mark_dirty(state: CellState, event: m.Event) -> None:
    """Names the snapshot rows this event may have changed, for the projection store."""
    if not state.tracks_rows:
        state.cluster.changed.clear()
        return
    dirty = state.dirty
    job_id = m.field_of(event, "job_id")
    if job_id is not None:
        dirty.add(f"job/{job_id}")
        dirty.add("tenancy")  # usage follows admissions and releases
    elif isinstance(event, (m.NodeHeartbeat, m.NodeRecovered)):  # a recovered node's silence starts afresh
        dirty.add(f"heartbeat/{event.node}")
    elif isinstance(event, (m.TeamDefined, m.CohortDefined, m.QuotaSet, m.PriorityClassDefined)):
        dirty.add("tenancy")
    if state.cluster.changed:
        dirty.update(f"node/{name}" for name in state.cluster.changed)
        state.cluster.changed.clear()


def _note(job: Job, event: m.Event, offset: int, reason: str | None = None) -> None:
    job.history.append((offset, event.envelope.at, type(event).__name__, reason or event.envelope.reason.value))


def _decided_about(state: CellState, event: m.Event, offset: int) -> Job | None:
    job_id = m.field_of(event, "job_id")
    job = state.jobs.get(job_id) if isinstance(job_id, str) else None
    if job is not None:
        job.reason = event.envelope.reason
        job.reason_offset = offset
        state.note_reason(job)
    return job


def _release(state: CellState, job: Job, at: int) -> None:
    """Frees the job's GPUs and quota; the running period it ends at `at` counts as service received."""
    job.attained_gpu_ms = job.attained(at)
    _unhold(state, job)
    if job.holds_capacity:
        key = (job.team, job.gpu_type)
        state.tenancy.use(key, -job.held_gpus)
    job.admitted_workers = 0
    job.admitted_at = None
    job.borrowed = 0
    job.started_workers = frozenset()
    job.succeeded_workers = frozenset()
    job.running_since = None
    job.preempted_for = None
    job.preemption_deadline = None
    _drop_reservation(state, job)


def _drop_reservation(state: CellState, job: Job) -> None:
    for name in job.reserved_nodes:
        node = state.cluster.nodes.get(name)
        if node is not None and node.reserved_for == job.job_id:
            node.reserved_for = None
            state.cluster.changed.add(name)
    job.reserved_nodes = ()
    job.reserved_since = None
    state.reservations.pop(job.job_id, None)


def _let_go(state: CellState, job_id: str, placements, rows: str) -> None:
    """Takes the job off the GPUs of `placements` ((worker, node, GPUs) triples) in the nodes' `rows`: `holder`
    (GPUs it runs on) or `claimed` (GPUs held for it); a GPU since given to another job stays that job's."""
    for _, name, gpus in placements:
        node = state.cluster.nodes.get(name)
        if node is None:
            continue
        owned = getattr(node, rows)
        for g in gpus:
            if owned.get(g) == job_id:
                del owned[g]
        state.cluster.recount(node)


def _drop_hold(state: CellState, job: Job) -> None:
    """Gives back the capacity held for the job: its claimed GPUs and its held quota."""
    if not job.has_hold:
        return
    _let_go(state, job.job_id, job.held, "claimed")
    key = (job.team, job.gpu_type)
    held = state.tenancy.held.get(key, 0) - job.held_quota
    if held:
        state.tenancy.held[key] = held
    else:
        state.tenancy.held.pop(key, None)
    job.held, job.held_quota, job.hold_victims, job.hold_until = (), 0, (), None
    state.holds.discard(job.job_id)


def _end(state: CellState, job: Job, final: JobState, at: int) -> None:
    _release(state, job, at)
    _drop_hold(state, job)
    state.set_state(job, final)
    job.ended_at = at
    state.ending.add(job.job_id)


#: Ended jobs kept per row of the retired ids in a store.
RETIRED_PER_ROW = 1000


def _tick(state: CellState, e: m.Tick, offset: int) -> None:
    """Time passes: the jobs that ended before it leave the state, their ids kept (in id order per tick)."""
    if not state.ending:
        return
    for job_id in sorted(state.ending):
        job = state.jobs.get(job_id)
        if job is None or not job.ended:
            continue  # ended and submitted again cannot happen (ids are never reused), but stay safe
        del state.jobs[job_id]
        fraction = job.runtime_fraction()
        if fraction is not None:
            insort(state.runtimes, (job.submit_offset, fraction))
            del state.runtimes[:-RUNTIME_HISTORY]
        if job.state is JobState.SUCCEEDED:
            n, total, squares = state.service_sums
            service = job.attained_gpu_ms
            state.service_sums = (n + 1, total + service, squares + service * service)
        state.retired.add(job_id)
        state.retired_order.append(job_id)
        if state.tracks_rows:
            state.dirty.add(f"job/{job_id}")
            state.dirty.add(f"retired/{(len(state.retired_order) - 1) // RETIRED_PER_ROW:09d}")
    state.ending.clear()


# --- configuration ---------------------------------------------------------------------------


def _cell_configured(state: CellState, e: m.CellConfigured, offset: int) -> None:
    state.limits = Limits.of(e)
    state.cluster.levels = tuple(e.topology_levels)
    for node in state.cluster.nodes.values():
        node.domains = domain_ids(node.labels, state.cluster.levels)
    state.cluster.reindex()


def _cohort_defined(state: CellState, e: m.CohortDefined, offset: int) -> None:
    state.tenancy.cohort_parent[e.cohort] = e.parent
    state.tenancy.configuration_changed()


def _rule(rule: m.PreemptionRule | None) -> str | None:
    return None if rule is None else rule.value


def _team_defined(state: CellState, e: m.TeamDefined, offset: int) -> None:
    if team_problem(e) is not None:
        return  # the admitter rejects it; the team stays as it was
    rules = TeamPreemption(_rule(e.within_team), _rule(e.reclaim_within_cohort), _rule(e.borrow_within_cohort),
                           e.max_priority_threshold)
    state.tenancy.teams[e.team] = Team(e.team, e.cohort, e.weight_milli, rules)
    if e.cohort is not None:
        state.tenancy.cohort_parent.setdefault(e.cohort, None)
    state.tenancy.configuration_changed()


def _quota_set(state: CellState, e: m.QuotaSet, offset: int) -> None:
    amounts = [v for v in (e.nominal, e.borrowing_limit, e.lending_limit) if v is not None]
    if e.team in state.tenancy.teams and min(amounts) >= 0:  # else the admitter rejects the request
        state.tenancy.quotas[(e.team, e.gpu_type)] = Quota(e.nominal, e.borrowing_limit, e.lending_limit)
    state.tenancy.configuration_changed()


def _priority_class_defined(state: CellState, e: m.PriorityClassDefined, offset: int) -> None:
    state.tenancy.priority_classes[e.name] = PriorityClass(e.name, e.value, e.preemptible)


# --- nodes -----------------------------------------------------------------------------------


def _node_registered(state: CellState, e: m.NodeRegistered, offset: int) -> None:
    """A node (re-)registers. What the cell knows of it outlives a re-registration: the work placed on it and
    its reservation (its size and type cannot change under them: projections/validate.py), an operator's
    cordon, recovery's failure and cordon, retired GPUs and an activated spare's role."""
    old = state.cluster.nodes.get(e.node)
    node = Node(e.node, e.gpu_type, e.gpus, domain_ids(e.labels, state.cluster.levels), labels=dict(e.labels),
                spare=e.spare)
    if old is not None:
        node.holder = {i: j for i, j in old.holder.items() if i < e.gpus}
        node.retired = frozenset(i for i in old.retired if i < e.gpus)
        node.reserved_for, node.cordoned = old.reserved_for, old.cordoned
        node.claimed = {i: j for i, j in old.claimed.items() if i < e.gpus}
        node.failed, node.fault_cordoned, node.activated = old.failed, old.fault_cordoned, old.activated
    state.cluster.add(node)


def _node_heartbeat(state: CellState, e: m.NodeHeartbeat, offset: int) -> None:
    state.last_heartbeat[e.node] = max(_at(state, e), state.last_heartbeat.get(e.node, 0))


def _node_flag(flag: str, value: bool) -> Callable[[CellState, m.Event, int], None]:
    def handler(state: CellState, e: m.Event, offset: int) -> None:
        node = state.cluster.nodes.get(e.node)  # type: ignore[attr-defined]
        if node is not None:
            setattr(node, flag, value)
            state.cluster.recount(node)
    return handler


def _node_recovered(state: CellState, e: m.NodeRecovered, offset: int) -> None:
    """The node passed its health checks, every GPU of it: clears recovery's flags and retired GPUs. An
    operator's cordon stays until NodeUncordoned."""
    node = state.cluster.nodes.get(e.node)
    if node is not None:
        node.failed = False
        node.fault_cordoned = False
        node.retired = frozenset()
        state.cluster.recount(node)
        state.last_heartbeat[e.node] = _at(state, e)


def _gpu_faulted(state: CellState, e: m.GpuFaulted, offset: int) -> None:
    node = state.cluster.nodes.get(e.node)
    if node is None:
        return
    if e.action is m.XidAction.RETIRE_GPU and 0 <= e.gpu < node.gpus:
        node.retired = node.retired | {e.gpu}
    elif e.action is m.XidAction.CORDON_NODE:
        node.fault_cordoned = True
    state.cluster.recount(node)


# --- jobs ------------------------------------------------------------------------------------


def _job_submitted(state: CellState, e: m.JobSubmitted, offset: int) -> None:
    if state.knows(e.job_id):
        return  # a duplicate id: the admitter rejects it, the original job is untouched
    pclass = state.tenancy.priority_classes.get(e.priority_class or "", DEFAULT_PRIORITY)
    problem = request_problem(e, state.limits)
    job = Job(
        job_id=e.job_id, team=e.team, workers=e.workers, gpus_per_worker=e.gpus_per_worker, gpu_type=e.gpu_type,
        priority=pclass.value, preemptible=pclass.preemptible, submitted_at=_at(state, e), submit_offset=offset,
        min_workers=e.min_workers, topology_required=e.topology_required, topology_preferred=e.topology_preferred,
        time_limit_ms=e.time_limit_ms, max_restarts=e.max_restarts, reason=m.Reason.SUBMITTED, reason_offset=offset,
    )
    state.jobs[e.job_id] = job
    _note(job, e, offset, m.Reason.SUBMITTED.value)
    if problem is not None:  # never queued: no decider sees a gang it cannot reason about
        job.reason = problem[0]
        _end(state, job, JobState.REJECTED, _at(state, e))
        return
    state.set_state(job, JobState.QUEUED)


def _job_queued(state: CellState, e: m.JobQueued, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or job.state is not JobState.QUEUED:
        return
    # The admitter reserves nodes of the cell, each once; a record naming others (another writer's) reserves those
    # alone: a node the cell does not have would never drain, and never be planned again.
    nodes = state.cluster.nodes
    reserved = tuple(dict.fromkeys(name for name in e.reserved_nodes if name in nodes))
    if not (job.reserved_nodes or reserved or job.has_hold):
        state.restated += 1  # only its reason and its notes change (a holder's reason tells what its hold is for)
    _decided_about(state, e, offset)
    _note(job, e, offset)
    _drop_reservation(state, job)
    if reserved:
        job.reserved_nodes = reserved
        job.reserved_since = _at(state, e)
        state.reservations[job.job_id] = reserved
        for name in reserved:
            nodes[name].reserved_for = job.job_id
            state.cluster.changed.add(name)


def _job_admitted(state: CellState, e: m.JobAdmitted, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or job.state is not JobState.QUEUED:
        if job is not None:
            _note(job, e, offset, SUPERSEDED)
        return
    count = _admitted_count(job, e.gpus)
    usage = state.tenancy.committed(job)  # quota held for other gangs is not this one's to take
    fit = state.tenancy.admissible(job.team, job.gpu_type, e.gpus, usage=usage) if count else None
    if count is None or fit is None or not fit.fits or fit.borrowed > e.borrowed:
        _note(job, e, offset, SUPERSEDED)  # an admission folded since took the quota this one was decided on
        return
    if _delays_a_reservation(state, job, e, _at(state, e)):
        _note(job, e, offset, SUPERSEDED)  # a backfill that no longer ends before the reservation it used
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    _drop_reservation(state, job)
    _drop_hold(state, job)
    key = (job.team, job.gpu_type)
    state.tenancy.use(key, e.gpus)
    job.admitted_workers = count
    job.admitted_at = _at(state, e)
    state.starts += 1
    job.borrowed = e.borrowed
    job.moving = False
    state.set_state(job, JobState.ADMITTED)
    if _assignable(state, job, e.assignments):
        _hold(state, job, e.assignments, e.domain)  # the planned topology assignment
    # else the plan went stale in flight: the placer sees no assignment and plans again


def _delays_a_reservation(state: CellState, job: Job, e: m.JobAdmitted, now: int) -> bool:
    """A backfill onto another gang's reserved nodes must end by its time limit before the reservation's shadow
    time. The admitter checked it on the state it decided on; a fact folded since (the reserved nodes' other work
    gone early, a new reservation) can make it false, and then the admission does not take effect. As for the
    admitter, a gang may use the reserved nodes of a gang of its team that it outranks, in either order (the fold
    knows no policy: it takes what an admitter of either order let pass), and the nodes where capacity is held for
    it (CapacityHeld)."""
    nodes = state.cluster.nodes
    mine = {name for _, name, _ in job.held}
    reserved = {holder for a in e.assignments
                if a.node in nodes and a.node not in mine and (holder := nodes[a.node].reserved_for) is not None}
    for holder in sorted(reserved - {job.job_id}):
        holding = state.jobs.get(holder)  # knowing no policy, accepts a gang that comes before the holder in any order
        if outranks(job, holding) or outranks(job, holding, by_deadline=True) or outranks(job, holding, across_teams=True):
            continue
        shadow = shadow_time(state, state.reservations.get(holder, ()), now, frozenset({job.job_id}))
        if not ends_before(job, now, shadow):
            return True
    return False


def _admitted_count(job: Job, gpus: int) -> int | None:
    """Workers an admission of `gpus` GPUs stands for, when that is a gang size the job accepts."""
    count, rest = divmod(gpus, job.gpus_per_worker)
    return count if not rest and job.min_count <= count <= job.workers else None


def _assignable(state: CellState, job: Job, assignments: list[m.WorkerAssignment]) -> bool:
    nodes = state.cluster.nodes
    if len(assignments) != job.admitted_workers:
        return False
    for a in assignments:
        node = nodes.get(a.node)
        if (node is None or not node.schedulable or node.gpu_type != job.gpu_type or len(a.gpus) != job.gpus_per_worker
                or any(node.holder.get(g, job.job_id) != job.job_id or g in node.retired or not 0 <= g < node.gpus
                       or node.claimed.get(g, job.job_id) != job.job_id for g in a.gpus)):
            return False
    return True


def _hold(state: CellState, job: Job, assignments: list[m.WorkerAssignment], domain: str | None) -> None:
    for a in assignments:
        node = state.cluster.nodes[a.node]
        for g in a.gpus:
            node.holder[g] = job.job_id
        state.cluster.recount(node)
    job.assignments = _assignments(assignments)
    job.domain = domain
    state.note_moved(job.job_id)


def _assignments(assignments: list[m.WorkerAssignment]) -> tuple[tuple[int, str, tuple[int, ...]], ...]:
    """A decision's worker assignments as a job holds them."""
    return tuple((a.worker, a.node, tuple(a.gpus)) for a in assignments)


def _unhold(state: CellState, job: Job) -> None:
    _let_go(state, job.job_id, job.assignments, "holder")
    job.assignments = ()
    job.domain = None
    state.note_moved(job.job_id)


def _job_rejected(state: CellState, e: m.JobRejected, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or e.envelope.reason is m.Reason.DUPLICATE_JOB:
        return
    if job.state is JobState.REJECTED and job.submit_offset == e.envelope.basis_offset:
        _decided_about(state, e, offset)  # rejected as it was folded; the admitter says why
        _note(job, e, offset)
        return
    if job.state is not JobState.QUEUED:
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    _end(state, job, JobState.REJECTED, _at(state, e))


def _job_placed(state: CellState, e: m.JobPlaced, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or job.state is not JobState.ADMITTED or e.attempt != job.attempt:
        if job is not None:
            _note(job, e, offset, SUPERSEDED)
        return
    # Whether the binding is assignable reads the same with the job's GPUs held by it as with them let go.
    if not _assignable(state, job, e.assignments):
        _unhold(state, job)
        _note(job, e, offset, m.Reason.PLACEMENT_SUPERSEDED.value)  # the placer plans again from scratch
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    if e.domain != job.domain or job.assignments != _assignments(e.assignments):  # not the plan it holds already
        _unhold(state, job)
        _hold(state, job, e.assignments, e.domain)
    state.set_state(job, JobState.PLACED)


def _placement_pending(state: CellState, e: m.PlacementPending, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or job.state is not JobState.ADMITTED:
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    _release(state, job, _at(state, e))  # quota goes back: an unplaceable gang must not hold it
    state.set_state(job, JobState.QUEUED)


def _worker_started(state: CellState, e: m.WorkerStarted, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or job.attempt != e.attempt or job.state not in (JobState.PLACED, JobState.RUNNING):
        return
    job.started_workers = job.started_workers | {e.worker}
    if job.state is JobState.PLACED and len(job.started_workers) >= len(job.assignments):
        job.running_since = _at(state, e)
        state.starts += 1
        state.set_state(job, JobState.RUNNING)
        _note(job, e, offset, "RUNNING")


def _worker_exited(state: CellState, e: m.WorkerExited, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is not None and job.attempt == e.attempt and e.exit_code == 0 and job.holds_capacity:
        job.succeeded_workers = job.succeeded_workers | {e.worker}


def _checkpoint_completed(state: CellState, e: m.CheckpointCompleted, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is not None and job.attempt == e.attempt and not job.ended:
        if job.checkpoint is None or e.progress_ms >= job.checkpoint.progress_ms:
            job.checkpoint = Checkpoint(e.checkpoint_id, e.progress_ms, _at(state, e))
            state.checkpoints += 1


def _preemption_requested(state: CellState, e: m.PreemptionRequested, offset: int) -> None:
    victim = state.jobs.get(e.job_id)
    beneficiary = state.jobs.get(e.for_job_id)
    if (victim is None or victim.state not in (JobState.PLACED, JobState.RUNNING)
            or beneficiary is None or beneficiary.state is not JobState.QUEUED):
        if victim is not None:
            _note(victim, e, offset, SUPERSEDED)
        return
    _decided_about(state, e, offset)
    _note(victim, e, offset)
    victim.preempted_for = e.for_job_id
    victim.preemption_deadline = e.checkpoint_deadline
    victim.moving = e.envelope.reason is m.Reason.CONSOLIDATED
    state.set_state(victim, JobState.PREEMPTING)


def _preemption_withdrawn(state: CellState, e: m.PreemptionWithdrawn, offset: int) -> None:
    victim = state.jobs.get(e.job_id)
    if victim is None or victim.state is not JobState.PREEMPTING or victim.preempted_for != e.for_job_id:
        return
    _decided_about(state, e, offset)
    _note(victim, e, offset)
    victim.preempted_for = None
    victim.preemption_deadline = None
    victim.moving = False
    state.set_state(victim, JobState.RUNNING)


def _job_preempted(state: CellState, e: m.JobPreempted, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or job.state is not JobState.PREEMPTING:
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    _release(state, job, _at(state, e))
    job.attempt += 1
    job.not_before = _at(state, e)
    if e.for_job_id and e.for_job_id not in job.yielded_to:
        job.yielded_to = (*job.yielded_to, e.for_job_id)
    state.set_state(job, JobState.QUEUED)


def _capacity_held(state: CellState, e: m.CapacityHeld, offset: int) -> None:
    """Claims the planned GPUs for the gang (those free now, and those its victims or its own interrupted attempt
    still hold, which stay claimed when they are released) and holds its quota; a hold replaces the gang's last."""
    job = state.jobs.get(e.job_id)
    if job is None or job.ended or (job.team, job.gpu_type) != (e.team, e.gpu_type) or not 0 < e.gpus <= job.gpus:
        if job is not None:
            _note(job, e, offset, SUPERSEDED)
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    _drop_hold(state, job)
    held = []
    for a in e.assignments:
        node = state.cluster.nodes.get(a.node)
        if node is None or node.gpu_type != job.gpu_type:
            continue
        gpus = tuple(g for g in a.gpus if 0 <= g < node.gpus and g not in node.retired
                     and node.claimed.get(g, job.job_id) == job.job_id)
        for g in gpus:
            node.claimed[g] = job.job_id
        state.cluster.recount(node)
        held.append((a.worker, a.node, gpus))
    job.held, job.held_quota, job.hold_victims, job.hold_until = tuple(held), e.gpus, tuple(e.victims), e.until
    key = (job.team, job.gpu_type)
    state.tenancy.held[key] = state.tenancy.held.get(key, 0) + job.held_quota
    state.holds.add(job.job_id)


def _capacity_released(state: CellState, e: m.CapacityReleased, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or not job.has_hold:
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    _drop_hold(state, job)


def _job_interrupted(state: CellState, e: m.JobInterrupted, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or job.attempt != e.attempt or not job.holds_capacity:
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    _release(state, job, _at(state, e))
    job.restarts += 1
    state.set_state(job, JobState.INTERRUPTED)


def _job_requeued(state: CellState, e: m.JobRequeued, offset: int) -> None:
    job = state.jobs.get(e.job_id)
    if job is None or job.state is not JobState.INTERRUPTED:
        return
    _decided_about(state, e, offset)
    _note(job, e, offset)
    job.attempt = e.attempt
    job.not_before = e.not_before
    state.set_state(job, JobState.QUEUED)


def _job_ended(final: JobState) -> Callable[[CellState, m.Event, int], None]:
    def handler(state: CellState, e: m.Event, offset: int) -> None:
        job = state.jobs.get(e.job_id)  # type: ignore[attr-defined]
        if job is None or job.ended:
            return
        _decided_about(state, e, offset)
        _note(job, e, offset)
        _end(state, job, final, _at(state, e))
    return handler


_HANDLERS: dict[type, Callable] = {
    m.Tick: _tick,
    m.CellConfigured: _cell_configured,
    m.CohortDefined: _cohort_defined,
    m.TeamDefined: _team_defined,
    m.QuotaSet: _quota_set,
    m.PriorityClassDefined: _priority_class_defined,
    m.NodeRegistered: _node_registered,
    m.NodeHeartbeat: _node_heartbeat,
    m.NodeCordoned: _node_flag("cordoned", True),
    m.NodeUncordoned: _node_flag("cordoned", False),
    m.NodeFailed: _node_flag("failed", True),
    m.SpareActivated: _node_flag("activated", True),
    m.NodeRecovered: _node_recovered,
    m.GpuFaulted: _gpu_faulted,
    m.JobSubmitted: _job_submitted,
    m.JobQueued: _job_queued,
    m.JobAdmitted: _job_admitted,
    m.JobRejected: _job_rejected,
    m.JobPlaced: _job_placed,
    m.PlacementPending: _placement_pending,
    m.WorkerStarted: _worker_started,
    m.WorkerExited: _worker_exited,
    m.CheckpointCompleted: _checkpoint_completed,
    m.PreemptionRequested: _preemption_requested,
    m.PreemptionWithdrawn: _preemption_withdrawn,
    m.JobPreempted: _job_preempted,
    m.CapacityHeld: _capacity_held,
    m.CapacityReleased: _capacity_released,
    m.JobInterrupted: _job_interrupted,
    m.JobRequeued: _job_requeued,
    m.JobSucceeded: _job_ended(JobState.SUCCEEDED),
    m.JobFailed: _job_ended(JobState.FAILED),
    m.JobCancelled: _job_ended(JobState.CANCELLED),
}
