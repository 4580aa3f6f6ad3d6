"""The cell as it was at a point of its log: nodes by topology domain, jobs by state, quota use per team, in the
rows `gangway nodes` and `gangway teams` show for the live cell (services/launcher/client.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import JobState
from projections.usage import NodeStatus, TeamUsage, node_status, team_usage
from replay.audit.text import clock, names, table


@dataclass
class CellView:
    cell: str
    offset: int
    at: int
    nodes: list[NodeStatus] = field(default_factory=list)
    jobs: dict[str, list[str]] = field(default_factory=dict)  # state -> job ids
    quotas: list[TeamUsage] = field(default_factory=list)


def at(records: Sequence[tuple[int, m.Event]], cell: str) -> CellView:
    """Folds the records and describes the cell after the last of them."""
    state = CellState(tracks_rows=False)
    ended: dict[str, str] = {}  # ended jobs leave the state at the next Tick: their final states are kept here
    for offset, event in records:
        if state.ending and isinstance(event, m.Tick):
            ended.update((j, job.state.value) for j, job in state.leaving().items())
        evolve(state, event, offset)
    return describe(state, cell, ended)


def describe(state: CellState, cell: str, ended: dict[str, str] | None = None) -> CellView:
    by_state: dict[str, list[str]] = {}
    finals = {**(ended or {}), **{j: job.state.value for j, job in state.jobs.items()}}
    for job_id in sorted(finals):
        by_state.setdefault(finals[job_id], []).append(job_id)
    jobs = {s.value: by_state[s.value] for s in JobState if s.value in by_state}
    return CellView(cell, state.offset, state.now, node_status(state), jobs, team_usage(state))


def render(view: CellView) -> str:
    out = [f"cell {view.cell} as of offset {view.offset} ({clock(view.at)})", "", "nodes"]
    out.append(table([[n.block, n.rack, n.node, n.gpu_type, str(n.gpus), str(n.used), str(n.free), n.state,
                       ",".join(n.jobs) or "-"] for n in view.nodes],
                     ["BLOCK", "RACK", "NODE", "TYPE", "GPUS", "USED", "FREE", "STATE", "JOBS"]))
    out += ["", "jobs"]
    out.append(table([[s, str(len(ids)), names(ids, 8)] for s, ids in view.jobs.items()], ["STATE", "COUNT", "JOBS"]))
    out += ["", "quota"]
    out.append(table([[q.team, q.cohort or "-", q.gpu_type, str(q.nominal), str(q.used), str(q.borrowed), str(q.lent),
                       str(q.queued), str(q.running)] for q in view.quotas],
                     ["TEAM", "COHORT", "TYPE", "NOMINAL", "USED", "BORROWED", "LENT", "QUEUED", "HOLDING"]))
    return "\n".join(out)
