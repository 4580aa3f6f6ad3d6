"""Decisions laid over a state and taken off again: how a replica decides with its assumed decisions in view
while its state stays the log folded in log order.

`lay(state, decisions)` folds each decision where the state stands (as `fold_assumed` does) after keeping
a copy of every row it may touch: the job it names, the nodes of its old and new placement and reservation,
its team's quota usage and held quota, its reservation and hold entries, the nodes its hold claims, a node's
flags and heartbeat. `Overlay.lift()` puts those
rows back, indexes included, so the state is exactly what it was. Only decisions are laid: their rows are
known before they are folded.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field

from events import models as m
from projections.cell import CellState
from projections.cluster import Node
from projections.evolve import fold_assumed
from projections.jobs import Job

_MISSING = object()


@dataclass
class Overlay:
    """Rows as they were before `lay`, to put back in reverse order."""

    state: CellState
    jobs: list[tuple[str, Job, int]] = field(default_factory=list)  # (id, copy, history length)
    nodes: list[tuple[Node, tuple]] = field(default_factory=list)  # (the node, its mutable fields as they were)
    usage: list[tuple[tuple[str, str], object]] = field(default_factory=list)
    held: list[tuple[tuple[str, str], object]] = field(default_factory=list)
    holds: list[tuple[str, bool]] = field(default_factory=list)
    reservations: list[tuple[str, object]] = field(default_factory=list)
    heartbeats: list[tuple[str, object]] = field(default_factory=list)

    def lift(self) -> None:
        """Restores every kept row, newest first, so each row ends as it was before the first decision."""
        state = self.state
        for name, before in reversed(self.heartbeats):
            _put(state.last_heartbeat, name, before)
        for job_id, before in reversed(self.reservations):
            _put(state.reservations, job_id, before)
        for key, value in reversed(self.usage):
            _put(state.tenancy.usage, key, value)
        for key, value in reversed(self.held):
            _put(state.tenancy.held, key, value)
        for job_id, member in reversed(self.holds):
            (state.holds.add if member else state.holds.discard)(job_id)
        for node, fields in reversed(self.nodes):
            (node.holder, node.retired, node.reserved_for, node.cordoned, node.fault_cordoned, node.failed,
             node.activated, node.claimed) = fields
            state.cluster.recount(node)
        for job_id, job, history in reversed(self.jobs):
            del job.history[history:]
            state.jobs[job_id] = job
            state.set_state(job, job.state)


def lay(state: CellState, decisions: Iterable[m.Event]) -> Overlay:
    """Folds `decisions` onto `state` at its current position and returns what takes them off again."""
    overlay = Overlay(state)
    for decision in decisions:
        _keep(overlay, decision)
        fold_assumed(state, decision)
    return overlay


def _keep(overlay: Overlay, event: m.Event) -> None:
    state = overlay.state
    nodes: set[str] = set()
    job_id = getattr(event, "job_id", None)
    if job_id is not None:
        job = state.jobs.get(job_id)
        if job is not None:
            overlay.jobs.append((job_id, copy.copy(job), len(job.history)))
            nodes.update(name for _, name, _ in job.assignments)
            nodes.update(job.reserved_nodes)
            nodes.update(name for _, name, _ in job.held)
            key = (job.team, job.gpu_type)
            overlay.usage.append((key, state.tenancy.usage.get(key, _MISSING)))
            overlay.held.append((key, state.tenancy.held.get(key, _MISSING)))
        overlay.reservations.append((job_id, state.reservations.get(job_id, _MISSING)))
        overlay.holds.append((job_id, job_id in state.holds))
        nodes.update(a.node for a in getattr(event, "assignments", ()))
        nodes.update(getattr(event, "reserved_nodes", ()) or ())
    node_name = getattr(event, "node", None)
    if node_name is not None:
        nodes.add(node_name)
        overlay.heartbeats.append((node_name, state.last_heartbeat.get(node_name, _MISSING)))
    for name in sorted(nodes):
        node = state.cluster.nodes.get(name)
        if node is not None:
            overlay.nodes.append((node, (dict(node.holder), node.retired, node.reserved_for, node.cordoned,
                                         node.fault_cordoned, node.failed, node.activated, dict(node.claimed))))


def _put(mapping: dict, key: object, value: object) -> None:
    if value is _MISSING:
        mapping.pop(key, None)
    else:
        mapping[key] = value
