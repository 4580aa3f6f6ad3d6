"""Decisions laid over a state and taken off again: how a replica decides with its assumed decisions in view
while its state stays the log folded in log order.

`Overlay.add(decision)` folds a decision where the state stands (as `fold_assumed` does) after keeping a copy
of every row it may touch: the job it names, the nodes of its old and new placement, reservation and hold
(GPUs claimed for a waiting gang), its team's quota usage and held quota, its reservation and hold entries, a
node's flags and heartbeat. `lift()` puts those rows back,
indexes included, so the state is exactly what it was before the first decision was laid.

An overlay may also stay laid while the log goes on, which spares a busy replica laying and lifting all its
decisions in flight for every record it reads:
- `commutes(event)` says whether folding `event` on top of the laid decisions gives the state that folding it
  under them would: the rows each reads and writes (its footprint) are disjoint from theirs;
- `land(decision, offset)` takes the oldest laid decision as folded at its place in the log: folded on top of
  the log up to there (everything folded since commutes with it), it is already exactly what the log's fold
  says, but for the offset its notes carry.
"""

from __future__ import annotations

import copy
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from events import models as m
from events.models import Event
from projections.cell import CellState
from projections.cluster import Node
from projections.evolve import advance, fold_assumed
from projections.jobs import Job


class _Missing:
    """A row that did not exist before a decision was laid (the same marker in any copy of an overlay)."""

    def __copy__(self) -> _Missing:
        return self

    def __deepcopy__(self, memo: dict) -> _Missing:
        return self


_MISSING = _Missing()
#: A row a footprint names, as a tuple: its kind and where it is (("gpu", node, index), ("job", id), ...).
Key = tuple
EVERYTHING: Key = ("*",)  # a footprint that conflicts with any other: configuration, registrations
_UNSET = -2  # no log offset: marks a reason offset a fold did not set


@dataclass
class Laid:
    """One laid decision: its rows as they were before it, what it reads and writes, and where its notes went."""

    decision: Event
    offset: int  # the state's offset when laid: what its notes carry until it lands
    jobs: list[tuple[str, Job]] = field(default_factory=list)
    history: tuple[str, int, int] | None = None  # (job, first note index, notes after) this decision appended
    sets_reason: bool = False  # its fold set its job's reason (and reason offset)
    ended: str | None = None  # the job its fold ended (then waiting to leave the state at the next Tick)
    #: (node, {GPU: holder before}, whom it drained for before or _MISSING, its flags before or None,
    #: {GPU: the gang it was claimed for before})
    nodes: list[tuple[Node, dict[int, object], object, tuple | None, dict[int, object]]] = field(
        default_factory=list)
    usage: tuple[tuple[str, str], int, bool] | None = None  # (team and GPU type, GPUs it added, whether new)
    held: tuple[tuple[str, str], int, bool] | None = None  # the same for the quota held for waiting gangs
    hold: tuple[str, bool] | None = None  # (job, whether capacity was held for it before)
    reservations: list[tuple[str, object]] = field(default_factory=list)
    heartbeats: list[tuple[str, object]] = field(default_factory=list)
    reads: frozenset[Key] = frozenset()
    writes: frozenset[Key] = frozenset()


@dataclass
class Overlay:
    """Decisions laid over a state, oldest first, with what takes each off again."""

    state: CellState
    laid: deque[Laid] = field(default_factory=deque)
    _by_job: dict[str, deque[Laid]] = field(default_factory=dict)  # the laid decisions about each job, oldest first
    _reads: Counter = field(default_factory=Counter)
    _writes: Counter = field(default_factory=Counter)

    def add(self, decision: Event) -> None:
        """Keeps the rows `decision` may touch, then folds it where the state stands."""
        state = self.state
        reads, writes = footprint(state, decision)
        entry = Laid(decision, state.offset, reads=reads, writes=writes)
        _keep(entry, state, decision)
        job = state.jobs.get(_of(decision, "job_id") or "")
        before = len(job.history) if job is not None else 0
        key = (job.team, job.gpu_type) if job is not None else None
        used = state.tenancy.usage.get(key) if key is not None else None
        held = state.tenancy.held.get(key) if key is not None else None
        if job is not None:
            entry.hold = (job.job_id, job.job_id in state.holds)
            reason_offset, job.reason_offset = job.reason_offset, _UNSET  # to see whether the fold sets it
        ending = job is not None and job.job_id in state.ending
        fold_assumed(state, decision)
        if job is not None and not ending and job.job_id in state.ending:
            entry.ended = job.job_id
        if job is not None:
            entry.sets_reason = job.reason_offset != _UNSET
            if not entry.sets_reason:
                job.reason_offset = reason_offset
        if job is not None and state.jobs.get(job.job_id) is job and len(job.history) > before:
            entry.history = (job.job_id, before, len(job.history))
        if key is not None and state.tenancy.usage.get(key) != used:  # kept as a change: others' add up with it
            entry.usage = (key, state.tenancy.usage.get(key, 0) - (used or 0), used is None)
        if key is not None and state.tenancy.held.get(key) != held:
            entry.held = (key, state.tenancy.held.get(key, 0) - (held or 0), held is None)
        self.laid.append(entry)
        if job is not None:
            self._by_job.setdefault(job.job_id, deque()).append(entry)
        self._reads.update(reads)
        self._writes.update(writes)

    def lift(self) -> None:
        """Restores every kept row, newest first, so each row ends as it was before the first decision."""
        state = self.state
        state.changes += 1
        state.starts += 1
        for entry in reversed(self.laid):
            if entry.ended is not None:
                state.ending.discard(entry.ended)
            for name, before in reversed(entry.heartbeats):
                _put(state.last_heartbeat, name, before)
            for job_id, before in reversed(entry.reservations):
                _put(state.reservations, job_id, before)
            for change, rows in ((entry.usage, state.tenancy.usage), (entry.held, state.tenancy.held)):
                if change is not None:
                    key, added, new = change
                    rows[key] = rows.get(key, 0) - added
                    if not rows[key] and (new or rows is state.tenancy.held):
                        del rows[key]
            if entry.hold is not None:
                job_id, member = entry.hold
                (state.holds.add if member else state.holds.discard)(job_id)
            for node, gpus, reserved_for, flags, claims in reversed(entry.nodes):
                for g, holder in gpus.items():
                    _put(node.holder, g, holder)
                for g, claimant in claims.items():
                    _put(node.claimed, g, claimant)
                if reserved_for is not _MISSING:
                    node.reserved_for = cast(Any, reserved_for)
                if flags is not None:
                    node.retired, node.cordoned, node.fault_cordoned, node.failed, node.activated = flags
                state.cluster.recount(node)
            for job_id, job in reversed(entry.jobs):
                del job.history[_history_length(entry, job_id, job):]
                state.jobs[job_id] = job
                state.set_state(job, job.state)
        self.laid.clear()
        self._by_job.clear()
        self._reads.clear()
        self._writes.clear()

    def commutes(self, event: Event) -> bool:
        """Whether `event` may be folded on top of the laid decisions as if under them."""
        if not self.laid:
            return True
        if self._writes[EVERYTHING]:
            return False
        reads, writes = footprint(self.state, event)
        if EVERYTHING in writes:
            return False
        return not (any(self._reads[k] or self._writes[k] for k in writes) or any(self._writes[k] for k in reads))

    def oldest(self) -> Event | None:
        return self.laid[0].decision if self.laid else None

    def land(self, decision: Event, offset: int) -> None:
        """The oldest laid decision has landed at `offset`: it stays folded, now as the log's fold would have it
        (its notes carry `offset`), and no longer comes off with the others."""
        entry = self.laid.popleft()
        assert entry.decision is decision or entry.decision == decision
        advance(self.state, decision, offset)
        about = self._by_job.get(_of(decision, "job_id") or "")
        if about:
            about.popleft()
        if entry.history is not None:
            job_id, first, end = entry.history
            job = self.state.jobs[job_id]
            for i in range(first, end):
                note = job.history[i]
                job.history[i] = (offset, *note[1:])
            # The reason offset this decision set lives on in the live row, unless a later laid decision about the
            # job set its own; and in the rows kept by the later decisions about the job up to that one.
            if entry.sets_reason:
                for later in about or ():
                    for jid, kept in later.jobs:
                        if jid == job_id:
                            kept.reason_offset = offset
                    if later.sets_reason:
                        break
                else:
                    job.reason_offset = offset
        self._reads.subtract(entry.reads)
        self._writes.subtract(entry.writes)


def lay(state: CellState, decisions: Iterable[Event]) -> Overlay:
    """Folds `decisions` onto `state` at its current position and returns what takes them off again."""
    overlay = Overlay(state)
    for decision in decisions:
        overlay.add(decision)
    return overlay


def _history_length(entry: Laid, job_id: str, job: Job) -> int:
    """How many notes the job had before this decision: its history list is shared with the live job."""
    if entry.history is not None and entry.history[0] == job_id:
        return entry.history[1]
    return len(job.history)


def _keep(entry: Laid, state: CellState, event: Event) -> None:
    """Keeps exactly what the decision's fold may change: a job decision, its job row, its team's usage and held
    quota, its reservation and hold, and the GPUs, claims and reservations it may take or give back (other GPUs of
    those nodes are others' business, and may change on top of the overlay); a node decision, that node's flags and
    heartbeat."""
    gpus: dict[str, set[int]] = {}
    drains: set[str] = set()
    job_id = _of(event, "job_id")
    if job_id is not None:
        job = state.jobs.get(job_id)
        if job is not None:
            entry.jobs.append((job_id, copy.copy(job)))
            for _, name, held in (*job.assignments, *job.held):
                gpus.setdefault(name, set()).update(held)
            drains.update(job.reserved_nodes)
        entry.reservations.append((job_id, state.reservations.get(job_id, _MISSING)))
        for a in _of(event, "assignments") or ():
            gpus.setdefault(a.node, set()).update(a.gpus)
        drains.update(_of(event, "reserved_nodes") or ())
        for name in sorted(set(gpus) | drains):
            node = state.cluster.nodes.get(name)
            if node is not None:
                mine = sorted(gpus.get(name, ()))
                before: dict[int, object] = {g: node.holder.get(g, _MISSING) for g in mine}
                claims: dict[int, object] = {g: node.claimed.get(g, _MISSING) for g in mine}
                entry.nodes.append((node, before, node.reserved_for if name in drains else _MISSING, None, claims))
        return
    node_name = _of(event, "node")
    node = state.cluster.nodes.get(node_name) if node_name is not None else None
    if node is not None:
        entry.heartbeats.append((node_name, state.last_heartbeat.get(node_name, _MISSING)))
        entry.nodes.append((node, {}, _MISSING, (node.retired, node.cordoned, node.fault_cordoned, node.failed,
                                                   node.activated), {}))


def _of(event: Event, name: str) -> Any:
    """A field's value, or None where the event's type has none (`field_of`), as the caller knows its type."""
    return m.field_of(event, name)


def _put(mapping: dict, key: object, value: object) -> None:
    if value is _MISSING:
        mapping.pop(key, None)
    else:
        mapping[key] = value


# --- footprints ----------------------------------------------------------------------------------------

#: Events that release the quota and GPUs their job holds.
_RELEASES = frozenset({m.PlacementPending, m.JobPreempted, m.JobInterrupted, m.JobRejected, m.JobSucceeded,
                       m.JobFailed, m.JobCancelled})
#: Events whose fold changes nothing a decision can see (or is not folded at all).
_INERT = frozenset({m.JobCancelRequested, m.GpuErrorReported, m.NodeHealthCheckPassed, m.RequestRejected,
                    m.RecordRefused, m.DeadLetter})
#: Events that change what the whole cell means: they commute with nothing.
_GLOBAL = frozenset({m.CellConfigured, m.CohortDefined, m.TeamDefined, m.QuotaSet, m.PriorityClassDefined,
                     m.NodeRegistered})


def footprint(state: CellState, event: Event) -> tuple[frozenset[Key], frozenset[Key]]:
    """The rows folding `event` (validation included) may read and write, as keys: ("job", X), ("gpu", N, G) (a
    GPU's holder), ("node", N) (a node's flags), ("reserve", N) (whom a node drains for), ("pool", ROOT, TYPE) (a
    lending pool's usage), ("hb", N); EVERYTHING for events that reconfigure the cell. Conservative: a key too many
    only costs a lift."""
    kind = type(event)
    if kind in _INERT:
        return frozenset(), frozenset()
    if kind is m.Tick:  # the jobs that ended leave the state
        return frozenset(), frozenset(("job", job_id) for job_id in state.ending)
    if kind in _GLOBAL:
        return frozenset(), frozenset({EVERYTHING})
    reads: set[Key] = set()
    writes: set[Key] = set()
    node = m.field_of(event, "node")
    if node is not None and m.field_of(event, "job_id") is None:  # a node's own facts and decisions
        writes |= {("node", node), ("hb", node)}
        return frozenset(reads), frozenset(writes)
    job_id = _of(event, "job_id")
    if job_id is None:
        return frozenset(reads), frozenset({EVERYTHING})  # an event type this table does not know
    writes.add(("job", job_id))
    job = state.jobs.get(job_id)
    if kind is m.JobSubmitted:
        reads.add(("config",))  # priority classes, the cell's bounds
    if kind is m.PreemptionRequested:
        reads.add(("job", _of(event, "for_job_id")))
    if job is not None:
        pool = _pool(state, job)
        for _, name, gpus in job.assignments:
            writes.update(("gpu", name, g) for g in gpus)
        writes.update(("reserve", name) for name in job.reserved_nodes)
        if kind in _RELEASES and job.holds_capacity:
            writes.add(pool)
        if kind is m.JobAdmitted:
            reads.add(pool)
            writes.add(pool)
        if job.has_hold or kind is m.CapacityHeld:  # its hold may be dropped or replaced: claims and held quota
            for _, name, gpus in job.held:
                writes.update(("gpu", name, g) for g in gpus)
            writes.add(pool)
    for assignment in _of(event, "assignments") or ():
        reads.add(("node", assignment.node))
        reads.add(("reserve", assignment.node))
        writes.update(("gpu", assignment.node, g) for g in assignment.gpus)
        reserved = state.cluster.nodes.get(assignment.node)
        if kind is m.JobAdmitted and reserved is not None and reserved.reserved_for not in (None, job_id):
            writes.add(EVERYTHING)  # a backfill onto another gang's reservation reads that reservation's whole world
    writes.update(("reserve", name) for name in _of(event, "reserved_nodes") or ())
    return frozenset(reads), frozenset(writes)


def _pool(state: CellState, job: Job) -> Key:
    team = state.tenancy.teams.get(job.team)
    root = state.tenancy.root_cohort(team.cohort) if team is not None else None
    return ("pool", root if root is not None else "team/" + job.team, job.gpu_type)
