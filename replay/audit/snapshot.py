"""The cell as it was at a point of its log: nodes by topology domain, jobs by state, quota use per team."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from events import models as m
from projections.cell import CellState
from projections.cluster import Node
from projections.evolve import evolve
from projections.jobs import JobState
from replay.audit.lending import lent_now
from replay.audit.text import clock, names, table


@dataclass(frozen=True)
class NodeRow:
    domain: str  # the node's domains, outermost first, e.g. b0/r1
    node: str
    gpu_type: str
    gpus: int
    used: int
    free: int
    state: str
    jobs: list[str]


@dataclass(frozen=True)
class QuotaRow:
    team: str
    cohort: str | None
    gpu_type: str
    nominal: int
    used: int
    borrowed: int
    lent: int
    queued: int
    running: int


@dataclass
class CellView:
    cell: str
    offset: int
    at: int
    nodes: list[NodeRow] = field(default_factory=list)
    jobs: dict[str, list[str]] = field(default_factory=dict)  # state -> job ids
    quotas: list[QuotaRow] = field(default_factory=list)


def at(records: Sequence[tuple[int, m.Event]], cell: str) -> CellView:
    """Folds the records and describes the cell after the last of them."""
    state = CellState()
    for offset, event in records:
        evolve(state, event, offset)
    return describe(state, cell)


def describe(state: CellState, cell: str) -> CellView:
    view = CellView(cell, state.offset, state.now)
    cluster = state.cluster
    for node in sorted(cluster.nodes.values(), key=lambda n: (n.domains, n.name)):
        view.nodes.append(NodeRow(node.domains[-1] if node.domains else "-", node.name, node.gpu_type,
                                  node.gpus, len(node.holder), node.free if node.schedulable else 0, _node_state(node),
                                  node.jobs()))
    for job_id in sorted(state.jobs):
        view.jobs.setdefault(state.jobs[job_id].state.value, []).append(job_id)
    view.jobs = {s.value: view.jobs[s.value] for s in JobState if s.value in view.jobs}
    tenancy = state.tenancy
    lent = {gpu_type: lent_now(tenancy, gpu_type) for gpu_type in sorted({t for _, t in tenancy.quotas})}
    for (team, gpu_type) in sorted(tenancy.quotas):
        members = [state.jobs[j] for j in sorted(state.jobs) if state.jobs[j].team == team
                   and state.jobs[j].gpu_type == gpu_type]
        view.quotas.append(QuotaRow(
            team, tenancy.teams[team].cohort if team in tenancy.teams else None, gpu_type,
            tenancy.quota(team, gpu_type).nominal, tenancy.used(team, gpu_type), tenancy.borrowed(team, gpu_type),
            lent[gpu_type].get(team, 0), sum(j.state is JobState.QUEUED for j in members),
            sum(j.state is JobState.RUNNING for j in members)))
    return view


def _node_state(node: Node) -> str:
    if node.failed:
        return "failed"
    if node.cordoned or node.fault_cordoned:
        return "cordoned"
    if node.spare and not node.activated:
        return "spare"
    return f"reserved for {node.reserved_for}" if node.reserved_for else "ready"


def render(view: CellView) -> str:
    out = [f"cell {view.cell} as of offset {view.offset} ({clock(view.at)})", "", "nodes"]
    out.append(table([[n.domain, n.node, n.gpu_type, str(n.gpus), str(n.used), str(n.free), n.state,
                       ",".join(n.jobs) or "-"] for n in view.nodes],
                     ["DOMAIN", "NODE", "TYPE", "GPUS", "USED", "FREE", "STATE", "JOBS"]))
    out += ["", "jobs"]
    out.append(table([[s, str(len(ids)), names(ids, 8)] for s, ids in view.jobs.items()], ["STATE", "COUNT", "JOBS"]))
    out += ["", "quota"]
    out.append(table([[q.team, q.cohort or "-", q.gpu_type, str(q.nominal), str(q.used), str(q.borrowed), str(q.lent),
                       str(q.queued), str(q.running)] for q in view.quotas],
                     ["TEAM", "COHORT", "TYPE", "NOMINAL", "USED", "BORROWED", "LENT", "QUEUED", "RUNNING"]))
    return "\n".join(out)
