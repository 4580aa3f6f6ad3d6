"""The rows `gangway nodes` and `gangway teams` show, from a cell's state: the launcher's client answers them from
the live read model, `gangway replay state` from a log folded to any point."""

from __future__ import annotations

from dataclasses import dataclass

from projections.cell import CellState
from projections.jobs import JobState


@dataclass(frozen=True)
class TeamUsage:
    team: str
    cohort: str | None
    gpu_type: str
    nominal: int
    used: int
    borrowed: int
    lent: int
    borrowing_limit: int | None
    lending_limit: int | None
    queued: int
    running: int


@dataclass(frozen=True)
class NodeStatus:
    node: str
    block: str
    rack: str
    gpu_type: str
    gpus: int
    used: int
    free: int
    state: str
    jobs: list[str]


def _node_state(node) -> str:
    for flag, name in ((node.failed, "failed"), (node.fault_cordoned, "fault-cordoned"), (node.cordoned, "cordoned")):
        if flag:
            return name
    if node.spare:
        return "active-spare" if node.activated else "spare"
    return "ready"


def team_usage(state: CellState) -> list[TeamUsage]:
    """Quota per team and GPU type: nominal, used, borrowed, lent, and its jobs queued and holding GPUs."""
    tenancy = state.tenancy
    counts: dict[tuple[str, str], list[int]] = {}
    for job in state.jobs.values():
        tally = counts.setdefault((job.team, job.gpu_type), [0, 0])
        tally[0] += job.state is JobState.QUEUED
        tally[1] += job.holds_capacity
    keys = sorted(set(tenancy.quotas) | set(tenancy.usage) | set(counts))
    lent = {(team, gpu_type): gpus for gpu_type in sorted({t for _, t in keys})
            for team, gpus in tenancy.lent(gpu_type).items()}
    out = []
    for team, gpu_type in keys:
        quota = tenancy.quota(team, gpu_type)
        spec = tenancy.teams.get(team)
        queued, running = counts.get((team, gpu_type), [0, 0])
        out.append(TeamUsage(team, spec.cohort if spec else None, gpu_type, quota.nominal, tenancy.used(team, gpu_type),
                             tenancy.borrowed(team, gpu_type), lent.get((team, gpu_type), 0), quota.borrowing_limit,
                             quota.lending_limit, queued, running))
    return out


def node_status(state: CellState) -> list[NodeStatus]:
    """Nodes by block and rack: GPUs used and free, state, jobs."""
    out = [NodeStatus(node.name, node.labels.get("block", "-"), node.labels.get("rack", "-"), node.gpu_type, node.gpus,
                      len(node.holder), node.free, _node_state(node), node.jobs())
           for node in state.cluster.nodes.values()]
    return sorted(out, key=lambda n: (n.block, n.rack, n.node))
