"""Gang placement: the whole gang on healthy nodes of its GPU type, in the tightest domain that fits.

Shared by the admitter (is this gang placeable right now?), the placer (bind it) and the
preemptor (would it be placeable after these evictions?). A `CapacityView` overlays holds and
releases on the cluster's capacity index without touching the folded state, so a decider can try
several gangs in a row. Domains are compared through the index's free-GPU histograms; only the
chosen domain's nodes are looked at one by one.

Which nodes a gang may use is decided here too, once for all three (`excluded_nodes`): not the
nodes reserved for another gang, except by Slurm's EASY backfill rule: a job with a time limit
may use a reservation's nodes when it will end before that reservation's shadow time; and a gang
that outranks the holder in their team's queue may use them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import mul
from typing import TYPE_CHECKING

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.cluster import CELL, Cluster, Node
from projections.jobs import Job
from projections.reservations import ends_before, outranks, shadow_time

if TYPE_CHECKING:  # the placer's knobs, passed in by whichever decider places
    from services.core.decider import Context
    from services.placer.policy import PlacementPolicy

Assignments = tuple[tuple[int, str, tuple[int, ...]], ...]  # (worker, node, GPU indices)
_NO_NODES: tuple[int, ...] = ()  # the histogram of a domain without schedulable nodes


class Placement:
    """Room for `workers` workers of a gang. Which domain, nodes and GPU indices they get (`domain`, `assignments`)
    is worked out when first read, on the view as it is then: read them before the view changes, or call
    `chosen()`. Most placements only answer whether a gang fits, and never pay for the choice."""

    def __init__(self, workers: int, choose: Callable[[], tuple[str | None, Assignments]]) -> None:
        self.workers = workers
        self.choose = choose
        # kept by hand: compiled (events/compiled.py), a cached_property is a plain property
        self._chosen: tuple[str | None, Assignments] | None = None

    def __repr__(self) -> str:
        return f"Placement(workers={self.workers})"

    @property
    def _choice(self) -> tuple[str | None, Assignments]:
        if self._chosen is None:
            self._chosen = self.choose()
        return self._chosen

    @property
    def domain(self) -> str | None:
        return self._choice[0]

    @property
    def assignments(self) -> Assignments:
        return self._choice[1]

    def chosen(self) -> Placement:
        """The placement with its domain and assignments worked out now."""
        self._choice  # noqa: B018 - cached from here on
        return self


@dataclass(frozen=True)
class Unplaceable:
    reason: Reason
    detail: str


def _slots(histogram: list[int], g: int) -> int:
    return sum(count * (free // g) for free, count in enumerate(histogram[g:], g) if count)


class CapacityView:
    """Free GPUs of a cell as one decider sees them while it tries placements. GPUs held for a waiting gang
    (claimed) are not free, except after `unclaim` (to place that gang, or once its hold is released)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.taken: dict[str, set[int]] = {}
        self.released: dict[str, set[int]] = {}
        self.unclaimed: dict[str, set[int]] = {}
        self.effective: dict[str, int] = {}  # node -> free count in this view, where it differs from the index
        self.histogram: dict[tuple[str, int, str], list[int]] = {}  # overrides of the index
        self.free_in: dict[tuple[str, int, str], int] = {}  # overrides of the index's free GPUs per domain

    # --- what the view holds and gives back -------------------------------------------------

    def free_indices(self, node: Node) -> list[int]:
        taken = self.taken.get(node.name, ())
        released = self.released.get(node.name, ())
        unclaimed = self.unclaimed.get(node.name, ())
        return [i for i in range(node.gpus)
                if (i not in node.holder or i in released) and i not in node.retired and i not in taken
                and (i not in node.claimed or i in unclaimed)]

    def free(self, node: Node) -> int:
        if node.name in self.effective:
            return self.effective[node.name]
        return self.cluster.counted.get(node.name, 0)

    def _set_free(self, node: Node, before: int, after: int) -> None:
        if not node.schedulable:
            return
        for key in self.cluster._keys(node):
            histogram = self.histogram.get(key)
            if histogram is None:
                histogram = self.histogram[key] = list(self.cluster.histogram[key])
            if len(histogram) <= max(before, after):
                histogram.extend([0] * (max(before, after) + 1 - len(histogram)))
            histogram[before] -= 1
            histogram[after] += 1
            self.free_in[key] = self.free_in.get(key, self.cluster.free_in.get(key, 0)) + after - before
        self.effective[node.name] = after

    def hold(self, placement: Placement) -> None:
        for _, name, gpus in placement.assignments:
            node = self.cluster.nodes[name]
            before = self.free(node)
            self.taken.setdefault(name, set()).update(gpus)
            self._set_free(node, before, len(self.free_indices(node)))

    def release(self, job: Job) -> None:
        """Gives back what `job` holds in the folded state (for preemption what-ifs)."""
        for _, name, gpus in job.assignments:
            node = self.cluster.nodes.get(name)
            if node is None or not node.schedulable:
                continue
            released = self.released.setdefault(name, set())
            taken = self.taken.get(name, ())
            # GPUs that become free in this view: held in the folded state, not yet released, healthy, not taken,
            # not held for a waiting gang
            unclaimed = self.unclaimed.get(name, ())
            freed = sum(1 for g in gpus if g in node.holder and g not in released and g not in node.retired
                        and g not in taken and (g not in node.claimed or g in unclaimed))
            released.update(gpus)
            if freed:
                before = self.free(node)
                self._set_free(node, before, before + freed)

    def free_gpus(self, gpu_type: str) -> int:
        """Free GPUs of a type in this view, on schedulable nodes."""
        histogram = self.histogram.get((gpu_type, CELL, ""))
        if not histogram:
            return self.cluster.free_gpus(gpu_type)
        return sum(free * count for free, count in enumerate(histogram))

    def unclaim(self, job: Job) -> None:
        """Makes the GPUs held for `job` usable in this view (by it, or by anyone once its hold is gone)."""
        self._claims(job, True)

    def reclaim(self, job: Job) -> None:
        """Undoes `unclaim`: the GPUs held for `job` are off limits again."""
        self._claims(job, False)

    @contextmanager
    def only(self, allowed: Mapping[str, set[int]]) -> Iterator[None]:
        """Within the block, of each named node only the `allowed` GPUs are free in this view: a gang with GPUs
        held for it on a node reserved for another gang may use those GPUs there, and no others."""
        hidden: dict[str, set[int]] = {}
        for name in sorted(allowed):
            node = self.cluster.nodes[name]
            extra = set(self.free_indices(node)) - allowed[name]
            if extra:
                before = self.free(node)
                self.taken.setdefault(name, set()).update(extra)
                self._set_free(node, before, len(self.free_indices(node)))
                hidden[name] = extra
        try:
            yield
        finally:
            for name in sorted(hidden):
                node = self.cluster.nodes[name]
                before = self.free(node)
                self.taken[name] -= hidden[name]
                self._set_free(node, before, len(self.free_indices(node)))

    def _claims(self, job: Job, usable: bool) -> None:
        for _, name, gpus in job.held:
            node = self.cluster.nodes.get(name)
            if node is None or not node.schedulable:
                continue
            mine = {g for g in gpus if node.claimed.get(g) == job.job_id}
            unclaimed = self.unclaimed.setdefault(name, set())
            if (mine <= unclaimed) if usable else not mine & unclaimed:
                continue  # already so
            before = self.free(node)
            if usable:
                unclaimed |= mine
            else:
                unclaimed -= mine
            self._set_free(node, before, len(self.free_indices(node)))

    def _histogram(self, key: tuple[str, int, str], excluded: dict[str, Node]) -> list[int]:
        histogram = self.histogram.get(key) or self.cluster.histogram.get(key) or [0]
        hidden = [n for n in excluded.values() if key[1] == CELL or n.domains[key[1]] == key[2]] if excluded else []
        if hidden:
            histogram = list(histogram)
            for node in hidden:
                histogram[self.free(node)] -= 1
        return histogram

    # --- placing a gang -----------------------------------------------------------------------

    def place(self, job: Job, policy: PlacementPolicy, excluded: Iterable[str] = (),
              workers: int | None = None) -> Placement | Unplaceable:
        """Chooses nodes and GPU indices for `workers` workers of `job` (default: all), or says what prevents it."""
        cluster = self.cluster
        g = job.gpus_per_worker
        workers = job.workers if workers is None else workers
        gpu_type = job.gpu_type
        short, hidden, cell, free_total = self._count(job, workers, excluded)
        if short is not None:
            return short
        if _slots(cell, g) < workers:
            return Unplaceable(Reason.FRAGMENTED,
                               f"{free_total} {gpu_type} GPUs free but only {_slots(cell, g)} slots of {g} GPUs "
                               f"for {workers} workers")
        for level in _search_levels(cluster, job, policy):
            where = self._tightest(job, workers, level, hidden, policy.pack_domains)
            if where is not None:
                return Placement(workers, lambda: self._choose(where, job, workers, policy, hidden))
        return Unplaceable(Reason.TOPOLOGY_DOMAIN_TOO_SMALL,
                           f"no single {job.topology_required} has {workers} free slots of {g} {gpu_type} GPUs")

    def shortage(self, job: Job, workers: int, excluded: Iterable[str] = ()) -> Unplaceable | None:
        """What `place` says when the free GPUs outside `excluded` are too few in number for `workers` workers of
        `job` (wherever they are), without looking for where they would go; None when they are enough."""
        return self._count(job, workers, excluded)[0]

    def _count(self, job: Job, workers: int, excluded: Iterable[str]
               ) -> tuple[Unplaceable | None, dict[str, Node], list[int], int]:
        """The shortage, the excluded nodes of the type, the free-GPU histogram outside them and its total."""
        cluster, gpu_type = self.cluster, job.gpu_type
        need = workers * job.gpus_per_worker
        hidden = {n: cluster.nodes[n] for n in excluded
                  if n in cluster.nodes and cluster.nodes[n].gpu_type == gpu_type and cluster.nodes[n].schedulable}
        cell = self._histogram((gpu_type, CELL, ""), hidden)
        if not any(cell):
            if hidden:
                return (Unplaceable(Reason.WAITING_BEHIND_RESERVATION,
                                    f"every schedulable {gpu_type} node is reserved for another gang"), hidden, cell, 0)
            return Unplaceable(Reason.NO_HEALTHY_NODES_OF_TYPE, f"no schedulable {gpu_type} node in the cell"), hidden, cell, 0
        free_total = sum(map(mul, range(len(cell)), cell))  # GPUs free: each count of nodes times their free GPUs
        if free_total < need:
            kept = self._kept_for_others(gpu_type, hidden)
            if free_total + kept >= need:
                return (Unplaceable(Reason.WAITING_BEHIND_RESERVATION,
                                    f"needs {need} {gpu_type} GPUs, {free_total} free; {kept} more are free but "
                                    f"reserved or held for other gangs"), hidden, cell, free_total)
            return (Unplaceable(Reason.INSUFFICIENT_FREE_GPUS, f"needs {need} {gpu_type} GPUs, {free_total} free"),
                    hidden, cell, free_total)
        return None, hidden, cell, free_total

    def _kept_for_others(self, gpu_type: str, hidden: dict[str, Node]) -> int:
        """Free GPUs of the type that this placement may not use: on nodes reserved for other gangs, or held for
        another waiting gang."""
        kept = sum(self.free(node) for node in hidden.values())
        for name in sorted(self.cluster.claimed_on):
            node = self.cluster.nodes[name]
            if node.gpu_type == gpu_type and node.schedulable and name not in hidden:
                unclaimed = self.unclaimed.get(name, ())
                taken = self.taken.get(name, ())
                kept += sum(1 for g in node.claimed if g not in node.holder and g not in unclaimed and g not in taken)
        return kept

    def _choose(self, where: Callable[[], tuple[str | None, list[str]]], job: Job, workers: int,
                policy: PlacementPolicy, hidden: dict[str, Node]) -> tuple[str | None, Assignments]:
        domain, members = where()
        return domain, self._assign(members, job, workers, policy, hidden)

    def _tightest(self, job: Job, workers: int, level: int, hidden: dict[str, Node],
                  pack: bool) -> Callable[[], tuple[str | None, list[str]]] | None:
        """Whether `workers` workers fit in one domain of the level, and if so how to name the tightest such domain
        and its nodes (worked out only when asked)."""
        cluster, g, gpu_type = self.cluster, job.gpus_per_worker, job.gpu_type
        if level == CELL:
            return lambda: (None, cluster.members.get((gpu_type, CELL, ""), []))
        if level >= len(cluster.levels):
            best_node = self._best_node(job, workers * g, hidden)
            if best_node is None:
                return None
            free, name = best_node
            if pack and cluster.levels:
                return lambda: self._in_fullest_rack(gpu_type, free, hidden)
            return lambda: (name, [name])
        best: tuple[int, str] | None = None
        for domain in cluster.domains.get((gpu_type, level), ()):
            slots = _slots(self._histogram((gpu_type, level, domain), hidden), g)
            if slots >= workers and (best is None or slots < best[0]):
                best = (slots, domain)
        if best is None:
            return None
        tightest = best[1]
        return lambda: (tightest, cluster.members[(gpu_type, level, tightest)])

    def _best_node(self, job: Job, need: int, hidden: dict[str, Node]) -> tuple[int, str] | None:
        """The node with the fewest free GPUs that still holds `need` GPUs of the gang (its free count, its name); of
        those, with packing, the one in the fullest rack (then block) is taken (`_in_fullest_rack`), which keeps
        free nodes together where larger gangs can use them."""
        best: tuple[int, str] | None = None
        buckets = self.cluster.by_free.get(job.gpu_type, {})
        for free in sorted(f for f in buckets if f >= need):
            for name in buckets[free]:
                if name not in self.effective and name not in hidden:
                    best = (free, name)
                    break
            if best is not None:
                break
        for name, free in self.effective.items():
            node = self.cluster.nodes[name]
            if node.gpu_type == job.gpu_type and name not in hidden and free >= need and (
                    best is None or (free, name) < best):
                best = (free, name)
        return best

    def _in_fullest_rack(self, gpu_type: str, tightest: int, hidden: dict[str, Node]) -> tuple[str, list[str]]:
        """Of the usable nodes with `tightest` free GPUs, the one in the fullest rack (then block, ...; then by name).
        The racks that have such a node come from that bucket of nodes or from the racks' histograms, whichever is
        shorter; only the fullest racks' nodes are looked at one by one."""
        cluster, level = self.cluster, len(self.cluster.levels) - 1
        fullness = _Fullness(self, gpu_type, hidden)
        racks = cluster.domains.get((gpu_type, level), ())
        bucket = cluster.by_free.get(gpu_type, {}).get(tightest, ())
        if len(bucket) + len(self.effective) < len(racks):
            nodes = cluster.nodes
            tight = {nodes[name].domains[level] for name in bucket if name not in self.effective and name not in hidden}
            tight.update(nodes[name].domains[level] for name, free in self.effective.items()
                         if free == tightest and name not in hidden and nodes[name].gpu_type == gpu_type)
            racks = sorted(tight)
        elif hidden:
            racks = [rack for rack in racks if _has(self._histogram((gpu_type, level, rack), hidden), tightest)]
        else:  # the same, inline: this is the hot path of packing a large, empty cell
            base, over = cluster.histogram, self.histogram
            racks = [rack for rack in racks
                     if len(h := over.get(key := (gpu_type, level, rack)) or base.get(key) or _NO_NODES) > tightest
                     and h[tightest] > 0]
        free = {rack: fullness.in_domain(level, rack) for rack in racks}
        least = min(free.values())
        racks = [rack for rack in racks if free[rack] == least]
        if len(racks) > 1:  # as full as each other: the outer domains decide
            keys = {rack: fullness.of(cluster.nodes[cluster.members[(gpu_type, level, rack)][0]]) for rack in racks}
            fullest = min(keys.values())
            racks = [rack for rack in racks if keys[rack] == fullest]
        # members are sorted by name: each rack's first usable one is its lowest
        name = min(next(name for name in cluster.members[(gpu_type, level, rack)]
                        if name not in hidden and cluster.nodes[name].schedulable
                        and self.free(cluster.nodes[name]) == tightest) for rack in racks)
        return name, [name]

    def _assign(self, members: list[str], job: Job, workers: int, policy: PlacementPolicy,
                hidden: dict[str, Node]) -> Assignments:
        g = job.gpus_per_worker
        nodes = [self.cluster.nodes[n] for n in members if n not in hidden]
        frees = {n.name: self.free(n) if n.schedulable else 0 for n in nodes}
        usable = [n for n in nodes if frees[n.name] >= g]
        if policy.best_fit and policy.pack_domains and self.cluster.levels:
            fullness = _Fullness(self, job.gpu_type, hidden)
            usable.sort(key=lambda n: (frees[n.name], fullness.of(n), n.name))
        elif policy.best_fit:
            usable.sort(key=lambda n: (frees[n.name], n.name))
        assignments: list[tuple[int, str, tuple[int, ...]]] = []
        for node in usable:
            indices = self.free_indices(node)
            for k in range(len(indices) // g):
                if len(assignments) == workers:
                    return tuple(assignments)
                assignments.append((len(assignments), node.name, tuple(indices[k * g:(k + 1) * g])))
        return tuple(assignments)


def _has(histogram: list[int], free: int) -> bool:
    return len(histogram) > free and histogram[free] > 0


class _Fullness:
    """Free GPUs of a type in each domain around a node, innermost (rack) first, as a view sees them: the smaller,
    the fuller. Read off the index's per-domain totals; with nodes hidden (reserved for others), each domain is
    counted once per placement."""

    def __init__(self, view: CapacityView, gpu_type: str, hidden: dict[str, Node]) -> None:
        self.view, self.gpu_type, self.hidden = view, gpu_type, hidden
        self.free: dict[tuple[int, str], int] = {}

    def of(self, node: Node) -> tuple[int, ...]:
        return tuple(self.in_domain(level, node.domains[level]) for level in range(len(node.domains) - 1, -1, -1))

    def in_domain(self, level: int, domain: str) -> int:
        view, key = self.view, (self.gpu_type, level, domain)
        if not self.hidden:
            free = view.free_in.get(key)
            return view.cluster.free_in.get(key, 0) if free is None else free
        free = self.free.get((level, domain))
        if free is None:
            free = view.free_in.get(key, view.cluster.free_in.get(key, 0))
            free -= sum(view.free(n) for n in self.hidden.values() if n.domains[level] == domain)
            self.free[(level, domain)] = free
        return free


def bound(job: Job, assignments: Sequence[tuple[int, str, Sequence[int]]], domain: str | None,
          ctx: Context) -> m.JobPlaced:
    """The decision that binds a gang's workers to these nodes and GPU indices (for its current attempt)."""
    return m.JobPlaced(
        envelope=ctx.envelope(Reason.PLACED, job.job_id), job_id=job.job_id, attempt=job.attempt, domain=domain,
        assignments=[m.WorkerAssignment(worker=w, node=n, gpus=list(g)) for w, n, g in assignments],
    )


def place_gang(view: CapacityView, job: Job, most: int, policy: PlacementPolicy,
               excluded: Iterable[str] = ()) -> Placement | Unplaceable:
    """Places `most` workers of `job`, else (with min_workers) the largest smaller count down to its minimum."""
    outcome = view.place(job, policy, excluded, most)
    if job.min_workers is None or isinstance(outcome, Placement):
        return outcome
    excluded = list(excluded)
    for count in range(most - 1, job.min_count - 1, -1):
        outcome = view.place(job, policy, excluded, count)
        if isinstance(outcome, Placement):
            break
    return outcome


def _search_levels(cluster: Cluster, job: Job, policy: PlacementPolicy) -> list[int]:
    """Level indices to try, innermost (the node) first; CELL is the whole cell."""
    inner_to_outer = list(range(len(cluster.levels), -1, -1))
    if job.topology_required is not None:
        limit = cluster.level_index(job.topology_required)
        return [i for i in inner_to_outer if limit is not None and i >= limit]
    if not policy.topology_aware:
        return [CELL]
    return [*inner_to_outer, CELL]


# --- reserved nodes and EASY backfill ----------------------------------------------------------


def shadow_times(state: CellState, now: int, gone: frozenset[str] = frozenset()) -> dict[str, int | None]:
    """The shadow time of every reservation, by the gang holding it."""
    return {holder: shadow_time(state, nodes, now, gone) for holder, nodes in state.reservations.items()}


def may_backfill(job: Job, now: int, shadows: Mapping[str, int | None]) -> bool:
    """Whether `job` may use some other gang's reserved nodes now."""
    return job.time_limit_ms is not None and any(
        holder != job.job_id and ends_before(job, now, shadow) for holder, shadow in shadows.items())


def excluded_nodes(reservations: Mapping[str, Sequence[str]], job: Job, now: int,
                   shadows: Mapping[str, int | None], jobs: Mapping[str, Job], by_deadline: bool = False,
                   across_teams: bool = False) -> list[str]:
    """Nodes reserved for other gangs that `job` may not use: all of them but those of reservations it ends
    before (EASY backfill), and those of gangs it outranks (of its own team; `across_teams`: of another team, of a
    lower priority): a reservation keeps lower-ranked work off a gang's nodes, not higher-ranked. A reservation
    missing from `shadows` has an unknown shadow."""
    return [name for holder, nodes in reservations.items()
            if holder != job.job_id and not ends_before(job, now, shadows.get(holder))
            and not outranks(job, jobs.get(holder), by_deadline, across_teams) for name in nodes]


def off_limits(state: CellState, job: Job, now: int, gone: frozenset[str] = frozenset(),
               by_deadline: bool = False, across_teams: bool = False) -> list[str]:
    """The reserved nodes `job` may not use in the folded state (were the jobs in `gone` evicted)."""
    shadows = shadow_times(state, now, gone) if job.time_limit_ms is not None else {}
    return excluded_nodes(state.reservations, job, now, shadows, state.jobs, by_deadline, across_teams)
