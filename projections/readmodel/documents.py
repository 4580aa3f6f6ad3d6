"""The read model's documents, as plain JSON-ready data built from a folded cell: jobs, their timeline
entries, nodes with the state of every GPU, teams' quota use per GPU type, the cohort tree, and the keys of
the secondary indexes that list jobs by team, state and priority. Pure: no I/O."""

from __future__ import annotations

from itertools import combinations
from typing import Any

from events import models as m
from projections.cell import CellState
from projections.cluster import Node
from projections.jobs import Job, JobState

SEP = "\x00"  # between the parts of a key: job ids and team names may hold any other character
#: Filters a job listing may combine; every combination has an index, in each sort order.
INDEX_DIMENSIONS = ("team", "state", "priority")
SORTS = ("submitted", "priority")
GPU_STATES = ("busy", "free", "reserved", "cordoned", "failed", "spare")
NODE_STATES = ("idle", "busy", "reserved", "cordoned", "failed", "spare")
_PRIORITY_BIAS = 1 << 40  # priorities may be negative; keys sort as text


def cell_prefix(cell: str) -> str:
    return f"c/{cell}/"


def dimensions_name(dims: tuple[str, ...]) -> str:
    return "+".join(dims) or "all"


def index_prefix(cell: str, sort: str, filters: dict[str, str]) -> str:
    """The key prefix under which the jobs matching `filters` (dimension -> value) lie in `sort` order."""
    dims = tuple(d for d in INDEX_DIMENSIONS if d in filters)
    return SEP.join([f"{cell_prefix(cell)}ix", sort, dimensions_name(dims), *(filters[d] for d in dims), ""])


def sort_key(job: Job, sort: str) -> str:
    submitted = f"{job.submitted_at:016d}.{job.submit_offset:012d}"
    if sort == "priority":  # highest first, then oldest first
        return f"{_PRIORITY_BIAS - job.priority:014d}.{submitted}"
    return submitted


def index_keys(cell: str, job: Job, state: JobState) -> list[str]:
    """Every index entry of a job in `state`: one per sort order and combination of filters."""
    values = {"team": job.team, "state": state.value, "priority": str(job.priority)}
    keys = []
    for sort in SORTS:
        suffix = sort_key(job, sort) + SEP + job.job_id
        for n in range(len(INDEX_DIMENSIONS) + 1):
            for dims in combinations(INDEX_DIMENSIONS, n):
                keys.append(index_prefix(cell, sort, {d: values[d] for d in dims}) + suffix)
    return keys


def job_document(cell: str, job: Job, detail: str, timeline_length: int) -> dict[str, Any]:
    """Everything about a job but its timeline: the spec it was submitted with, where it is and why."""
    last = job.history[-1] if job.history else (job.submit_offset, job.submitted_at, "JobSubmitted", "SUBMITTED")
    return {
        "cell": cell, "job_id": job.job_id, "team": job.team, "state": job.state.value, "reason": job.reason.value,
        "detail": detail,
        "spec": {"workers": job.workers, "gpus_per_worker": job.gpus_per_worker, "gpu_type": job.gpu_type,
                 "gpus": job.gpus, "priority": job.priority, "preemptible": job.preemptible,
                 "min_workers": job.min_workers, "topology_required": job.topology_required,
                 "topology_preferred": job.topology_preferred, "time_limit_ms": job.time_limit_ms,
                 "max_restarts": job.max_restarts},
        "submitted_at": job.submitted_at, "submit_offset": job.submit_offset, "admitted_at": job.admitted_at,
        "running_since": job.running_since, "ended_at": job.ended_at, "updated_at": last[1], "updated_offset": last[0],
        "attempt": job.attempt, "restarts": job.restarts, "not_before": job.not_before, "borrowed": job.borrowed,
        "gpus_held": job.held_gpus,
        "placement": {"domain": job.domain, "nodes": job.nodes(),
                      "workers": [{"worker": w, "node": n, "gpus": list(g)} for w, n, g in job.assignments]},
        "reserved_nodes": list(job.reserved_nodes), "preempted_for": job.preempted_for,
        "preemption_deadline": job.preemption_deadline,
        "checkpoint": None if job.checkpoint is None else {
            "checkpoint_id": job.checkpoint.checkpoint_id, "progress_ms": job.checkpoint.progress_ms,
            "at": job.checkpoint.at},
        "timeline_length": timeline_length,
    }


def event_detail(event: m.Event | None) -> str:
    """What a timeline entry says besides its type and reason."""
    if event is None:
        return ""
    if isinstance(event, (m.JobPlaced, m.JobAdmitted)):
        nodes = sorted({a.node for a in event.assignments})
        where = f"on {', '.join(nodes)}" if nodes else ""
        return where + (f" (domain {event.domain})" if event.domain else "")
    if isinstance(event, m.PreemptionRequested):
        return f"for {event.for_job_id}, checkpoint by {event.checkpoint_deadline}"
    if isinstance(event, m.JobPreempted):
        return f"for {event.for_job_id}" + (f", from checkpoint {event.checkpoint_id}" if event.checkpoint_id else "")
    if isinstance(event, m.JobRequeued):
        return f"attempt {event.attempt}, not before {event.not_before}"
    if isinstance(event, m.JobInterrupted):
        return (f"on {event.node}: " if event.node else "") + event.detail
    if isinstance(event, m.JobSubmitted):
        return f"{event.workers} x {event.gpus_per_worker} {event.gpu_type}"
    return m.field_of(event, "detail", "") or ""


def timeline_entry(entry: tuple[int, int, str, str], event: m.Event | None) -> dict[str, Any]:
    offset, at, kind, reason = entry
    return {"offset": offset, "at": at, "type": kind, "reason": reason, "detail": event_detail(event)}


def _out_of_service(node: Node) -> str | None:
    """Why a node takes no work, if it takes none: failed, cordoned, or a spare not yet activated."""
    if node.failed:
        return "failed"
    if node.cordoned or node.fault_cordoned:
        return "cordoned"
    if node.spare and not node.activated:
        return "spare"
    return None


def gpu_state(node: Node, index: int) -> str:
    """Failed (its node or itself), busy, cordoned, spare, reserved for a waiting gang, or free."""
    if node.failed or index in node.retired:
        return "failed"
    if index in node.holder:
        return "busy"
    return _out_of_service(node) or ("reserved" if node.reserved_for is not None else "free")


def node_state(node: Node) -> str:
    return _out_of_service(node) or ("reserved" if node.reserved_for is not None
                                     else "busy" if node.holder else "idle")


def node_labels(state: CellState, node: Node) -> list[str]:
    """The node's domain name at each topology level, outermost first."""
    return [node.labels.get(level, "-") for level in state.cluster.levels]


def node_key(cell: str, state: CellState, node: Node) -> str:
    """Nodes lie in topology order (block, rack, ..., name), so a domain is a prefix."""
    return SEP.join([f"{cell_prefix(cell)}node", *node_labels(state, node), node.name])


def node_document(state: CellState, node: Node) -> dict[str, Any]:
    gpus = []
    for index in range(node.gpus):
        holder = node.holder.get(index)
        owner = state.jobs.get(holder) if holder is not None else None
        gpus.append({"index": index, "state": gpu_state(node, index), "job_id": holder,
                     "team": owner.team if owner is not None else None})
    return {"name": node.name, "gpu_type": node.gpu_type, "gpus": node.gpus, "state": node_state(node),
            "domains": dict(zip(state.cluster.levels, node_labels(state, node))),
            "spare": node.spare, "reserved_for": node.reserved_for, "gpu": gpus}


def gpu_counts(document: dict[str, Any]) -> dict[str, int]:
    counts = dict.fromkeys(GPU_STATES, 0)
    for gpu in document["gpu"]:
        counts[gpu["state"]] += 1
    return counts


def tenancy_document(state: CellState) -> dict[str, Any]:
    """Teams with nominal, used, borrowed, lent and weighted share per GPU type, and the cohort tree."""
    t = state.tenancy
    gpu_types = sorted({k[1] for k in t.quotas} | {k[1] for k in t.usage})
    lent = {gpu_type: state.tenancy.lent(gpu_type) for gpu_type in gpu_types}
    teams = []
    for name in sorted(set(t.teams) | {k[0] for k in t.quotas} | {k[0] for k in t.usage}):
        spec = t.teams.get(name)
        weight = spec.weight_milli if spec is not None else 1000
        quotas = []
        for gpu_type in gpu_types:
            if (name, gpu_type) not in t.quotas and not t.used(name, gpu_type):
                continue
            quota = t.quota(name, gpu_type)
            pool = sum(t.quota(member, gpu_type).nominal for member in t.pool_members(name)) if spec else quota.nominal
            used = t.used(name, gpu_type)
            quotas.append({"gpu_type": gpu_type, "nominal": quota.nominal, "borrowing_limit": quota.borrowing_limit,
                           "lending_limit": quota.lending_limit, "used": used, "borrowed": t.borrowed(name, gpu_type),
                           "lent": lent[gpu_type].get(name, 0),
                           "weighted_share": round(used * 1000 / (max(pool, 1) * max(weight, 1)), 4)})
        teams.append({"team": name, "cohort": spec.cohort if spec else None, "weight": weight / 1000,
                      "quotas": quotas})
    return {"teams": teams, "cohorts": cohort_tree(state)}


#: Cohorts nest at most this deep in the tree (`gangway apply` refuses deeper ones); a cohort deeper in a chain
#: the log holds, or in a cycle of parents, is listed from the top of the tree instead of left out.
MOST_COHORT_DEPTH = 16


def cohort_tree(state: CellState) -> list[dict[str, Any]]:
    """Cohorts nested under their parents, teams under their cohorts; roots first, names sorted."""
    t = state.tenancy
    children: dict[str | None, list[str]] = {}
    for cohort, parent in sorted(t.cohort_parent.items()):
        children.setdefault(parent if parent in t.cohort_parent else None, []).append(cohort)
    members: dict[str | None, list[str]] = {}
    for name, team in sorted(t.teams.items()):
        members.setdefault(team.cohort, []).append(name)

    reached: set[str] = set()

    def cohort(name: str, seen: frozenset[str]) -> dict[str, Any]:
        reached.add(name)
        nested = [cohort(c, seen | {c}) for c in children.get(name, [])  # a cycle stops, and so does a deep chain
                  if c not in seen and c not in reached and len(seen) < MOST_COHORT_DEPTH]
        return {"name": name, "kind": "cohort",
                "children": nested + [{"name": team, "kind": "team", "children": []} for team in members.get(name, [])]}

    roots = [cohort(name, frozenset({name})) for name in children.get(None, [])]
    # Deeper than the tree nests (where the chain was cut first), or in a cycle of parents: listed from the top.
    pending = sorted(set(t.cohort_parent) - reached)
    while pending:
        start = next((c for c in pending if t.cohort_parent.get(c) in reached), pending[0])
        roots.append(cohort(start, frozenset({start})))
        pending = [c for c in pending if c not in reached]
    return roots + [{"name": team, "kind": "team", "children": []} for team in members.get(None, [])]
