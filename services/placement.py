"""Gang placement: the whole gang on healthy nodes of its GPU type, in the tightest domain that fits.

Shared by the admitter (is this gang placeable right now?), the placer (bind it) and the
preemptor (would it be placeable after these evictions?). A `CapacityView` is a scratch copy of
free GPUs that callers can hold and release in without touching the folded state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from events.models import Reason
from projections.cluster import Cluster
from projections.jobs import Job
from services.placer.policy import PlacementPolicy


@dataclass(frozen=True)
class Placement:
    assignments: tuple[tuple[int, str, tuple[int, ...]], ...]  # (worker, node, GPU indices)
    domain: str | None


@dataclass(frozen=True)
class Unplaceable:
    reason: Reason
    detail: str


class CapacityView:
    """Free GPU indices per schedulable node of one cell, as a caller's scratch pad."""

    def __init__(self, cluster: Cluster, excluded: Iterable[str] = ()) -> None:
        self.cluster = cluster
        skip = set(excluded)
        self.free: dict[str, list[int]] = {}
        for name, node in cluster.nodes.items():
            if node.schedulable and name not in skip:
                self.free[name] = node.free_indices()

    def hold(self, placement: Placement) -> None:
        for _, node, gpus in placement.assignments:
            taken = set(gpus)
            self.free[node] = [g for g in self.free.get(node, []) if g not in taken]

    def release(self, job: Job) -> None:
        """Gives back what `job` holds in the folded state (for preemption what-ifs)."""
        for _, name, gpus in job.assignments:
            node = self.cluster.nodes.get(name)
            if node is not None and node.schedulable:
                self.free[name] = sorted(set(self.free.get(name, [])) | {g for g in gpus if g not in node.retired})

    def place(self, job: Job, policy: PlacementPolicy, excluded: frozenset[str] = frozenset()) -> Placement | Unplaceable:
        return place(self, job, policy, excluded)


def place(view: CapacityView, job: Job, policy: PlacementPolicy,
          excluded: frozenset[str] = frozenset()) -> Placement | Unplaceable:
    """Chooses nodes and GPU indices for every worker of `job`, or says what prevents it."""
    cluster = view.cluster
    g, workers = job.gpus_per_worker, job.workers
    nodes = [cluster.nodes[n] for n in cluster.by_type.get(job.gpu_type, ())]
    healthy = [n for n in nodes if n.schedulable]
    if not healthy:
        return Unplaceable(Reason.NO_HEALTHY_NODES_OF_TYPE, f"no schedulable {job.gpu_type} node in the cell")
    slots: dict[str, int] = {}
    free_total = 0
    for node in healthy:
        if node.name in excluded:
            continue
        free = len(view.free.get(node.name, ()))
        free_total += free
        if free >= g:
            slots[node.name] = free // g
    if free_total < job.gpus:
        return Unplaceable(Reason.INSUFFICIENT_FREE_GPUS,
                           f"needs {job.gpus} {job.gpu_type} GPUs, {free_total} free")
    if sum(slots.values()) < workers:
        return Unplaceable(Reason.FRAGMENTED,
                           f"{free_total} {job.gpu_type} GPUs free but only {sum(slots.values())} nodes' worth "
                           f"of {g}-GPU slots for {workers} workers")
    candidates = [cluster.nodes[n] for n in sorted(slots)]
    levels = _search_levels(cluster, job, policy)
    for level in levels:
        chosen = _tightest_domain(cluster, candidates, slots, workers, level)
        if chosen is not None:
            domain, members = chosen
            return Placement(_assign(view, members, slots, job, policy), domain)
    required = job.topology_required
    return Unplaceable(Reason.TOPOLOGY_DOMAIN_TOO_SMALL,
                       f"no single {required} has {workers} free slots of {g} {job.gpu_type} GPUs")


def _search_levels(cluster: Cluster, job: Job, policy: PlacementPolicy) -> list[int | None]:
    """Level indices to try, innermost first; None is the whole cell."""
    inner_to_outer: list[int | None] = list(range(len(cluster.levels), -1, -1))
    if job.topology_required is not None:
        limit = cluster.level_index(job.topology_required)
        return [i for i in inner_to_outer if i is not None and limit is not None and i >= limit]
    if not policy.topology_aware:
        return [None]
    return [*inner_to_outer, None]


def _tightest_domain(cluster: Cluster, candidates: list, slots: dict[str, int], workers: int,
                     level: int | None) -> tuple[str | None, list] | None:
    if level is None:
        return (None, candidates)
    totals: dict[str, int] = {}
    members: dict[str, list] = {}
    for node in candidates:
        domain = cluster.domain_of(node, level)
        totals[domain] = totals.get(domain, 0) + slots[node.name]
        members.setdefault(domain, []).append(node)
    fitting = [(total, domain) for domain, total in totals.items() if total >= workers]
    if not fitting:
        return None
    _, best = min(fitting)
    return (best, members[best])


def _assign(view: CapacityView, members: list, slots: dict[str, int], job: Job,
            policy: PlacementPolicy) -> tuple[tuple[int, str, tuple[int, ...]], ...]:
    g = job.gpus_per_worker
    order = sorted(members, key=lambda n: (slots[n.name], n.name)) if policy.best_fit else members
    assignments = []
    worker = 0
    for node in order:
        free = view.free[node.name]
        for k in range(slots[node.name]):
            if worker == job.workers:
                break
            assignments.append((worker, node.name, tuple(free[k * g:(k + 1) * g])))
            worker += 1
        if worker == job.workers:
            break
    return tuple(assignments)
