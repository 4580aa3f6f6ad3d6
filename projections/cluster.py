"""Nodes, their GPUs and the topology domains they sit in: the physical half of a cell's state."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

NODE_LEVEL = "node"


@dataclass
class Node:
    """One node: which GPU indices are free, held by a job, or retired; and whether it takes work."""

    name: str
    gpu_type: str
    gpus: int
    domains: tuple[str, ...]  # domain id at each topology level, outermost first
    labels: dict[str, str] = field(default_factory=dict)  # topology level -> domain name, as registered
    spare: bool = False
    activated: bool = False  # a spare that has replaced a failed node
    cordoned: bool = False  # by an operator (NodeCordoned) until NodeUncordoned; health checks leave it alone
    fault_cordoned: bool = False  # by recovery (GpuFaulted CORDON_NODE) until NodeRecovered
    failed: bool = False  # by recovery or an operator (NodeFailed) until NodeRecovered
    retired: frozenset[int] = frozenset()
    holder: dict[int, str] = field(default_factory=dict)  # GPU index -> job id holding it
    reserved_for: str | None = None  # a queued gang that holds this node as its reservation
    claimed: dict[int, str] = field(default_factory=dict)  # GPU index -> waiting gang it is held for (CapacityHeld)

    @property
    def in_service(self) -> bool:
        """Neither failed nor cordoned, by recovery or by an operator."""
        return not self.failed and not self.fault_cordoned and not self.cordoned

    @property
    def schedulable(self) -> bool:
        return self.in_service and (not self.spare or self.activated)

    @property
    def healthy_gpus(self) -> int:
        return self.gpus - len(self.retired)

    def free_indices(self) -> list[int]:
        return [i for i in range(self.gpus) if i not in self.holder and i not in self.retired and i not in self.claimed]

    @property
    def free(self) -> int:
        """GPUs that no job holds, no waiting gang has claimed and that are not retired."""
        if self.claimed:
            return self.gpus - len(self.holder.keys() | self.retired | self.claimed.keys())
        if self.retired:
            return self.gpus - len(self.holder) - len(self.retired - self.holder.keys())
        return self.gpus - len(self.holder)

    def jobs(self) -> list[str]:
        return sorted(set(self.holder.values()))


def domain_ids(labels: dict[str, str], levels: tuple[str, ...]) -> tuple[str, ...]:
    """Hierarchical ids ('b1', 'b1/r3') so two racks named alike in different blocks stay apart."""
    ids, path = [], []
    for level in levels:
        path.append(labels.get(level, "-"))
        ids.append("/".join(path))
    return tuple(ids)


CELL = -1  # level index of the whole cell in the capacity index


@dataclass
class Cluster:
    """All nodes of a cell, indexed by GPU type, plus the declared topology levels.

    It also keeps a capacity index, updated by `recount` whenever a node changes: for every GPU
    type and topology domain a histogram of schedulable nodes by free GPUs, and the nodes of each
    free count. Placement then asks "which domain has room for w workers of g GPUs" in time
    proportional to the number of domains, not the number of nodes.
    """

    levels: tuple[str, ...] = ()
    nodes: dict[str, Node] = field(default_factory=dict)
    by_type: dict[str, list[str]] = field(default_factory=dict)  # gpu type -> sorted node names
    #: (gpu type, level index or CELL, domain) -> count of schedulable nodes by free GPUs
    histogram: dict[tuple[str, int, str], list[int]] = field(default_factory=dict)
    #: (gpu type, level index) -> sorted domain ids;  (gpu type, level index, domain) -> sorted node names
    domains: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    members: dict[tuple[str, int, str], list[str]] = field(default_factory=dict)
    #: gpu type -> free GPU count -> sorted names of schedulable nodes with that many free
    by_free: dict[str, dict[int, list[str]]] = field(default_factory=dict)
    #: (gpu type, level index or CELL, domain) -> free GPUs of its schedulable nodes (the histogram's total)
    free_in: dict[tuple[str, int, str], int] = field(default_factory=dict)
    counted: dict[str, int] = field(default_factory=dict)  # node -> free count it is indexed under
    counted_healthy: dict[str, int] = field(default_factory=dict)  # node -> healthy GPUs it is indexed with
    healthy: dict[str, int] = field(default_factory=dict)  # gpu type -> healthy GPUs of its schedulable nodes
    #: gpu type -> GPUs per node -> number of (non-spare) nodes of that size, for validating requests
    sizes: dict[str, dict[int, int]] = field(default_factory=dict)
    claimed_on: set[str] = field(default_factory=set)  # nodes with GPUs held for a waiting gang
    #: gpu type -> nodes where a job holds GPUs that may not count as free when they come back (the node is out
    #: of service, or has retired or claimed GPUs): the few nodes a release forecast must look at one by one
    odd_holders: dict[str, set[str]] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set, compare=False, repr=False)  # nodes changed since last saved

    def add(self, node: Node) -> None:
        old = self.nodes.get(node.name)
        if old is not None:
            self._uncount(old)
            self._unlist(old)
            self.odd_holders.get(old.gpu_type, set()).discard(old.name)
        self.nodes[node.name] = node
        self._list(node)
        self.recount(node)

    def reindex(self) -> None:
        """Rebuilds the domain lists and the capacity index (after the topology levels change)."""
        self.histogram.clear()
        self.domains.clear()
        self.members.clear()
        self.by_free.clear()
        self.free_in.clear()
        self.counted.clear()
        self.counted_healthy.clear()
        self.healthy.clear()
        self.claimed_on.clear()
        self.odd_holders.clear()
        self.by_type.clear()
        self.sizes.clear()
        for name in sorted(self.nodes):
            self._list(self.nodes[name])
            self.recount(self.nodes[name])

    def _keys(self, node: Node) -> list[tuple[str, int, str]]:
        keys = [(node.gpu_type, CELL, "")]
        keys += [(node.gpu_type, i, domain) for i, domain in enumerate(node.domains)]
        return keys

    def _list(self, node: Node) -> None:
        if not node.spare:
            sizes = self.sizes.setdefault(node.gpu_type, {})
            sizes[node.gpus] = sizes.get(node.gpus, 0) + 1
        insort_unique(self.by_type.setdefault(node.gpu_type, []), node.name)
        for key in self._keys(node):
            insort_unique(self.domains.setdefault(key[:2], []), key[2])
            insort_unique(self.members.setdefault(key, []), node.name)

    def _unlist(self, node: Node) -> None:
        if not node.spare:
            self.sizes[node.gpu_type][node.gpus] -= 1
        remove_sorted(self.by_type.get(node.gpu_type, []), node.name)
        for key in self._keys(node):
            remove_sorted(self.members.get(key, []), node.name)

    def recount(self, node: Node) -> None:
        """Re-indexes one node after its GPUs, health or flags changed."""
        self.changed.add(node.name)
        if node.claimed:
            self.claimed_on.add(node.name)
        else:
            self.claimed_on.discard(node.name)
        odd = self.odd_holders.setdefault(node.gpu_type, set())
        if node.holder and (not node.schedulable or node.retired or node.claimed):
            odd.add(node.name)
        else:
            odd.discard(node.name)
        self._uncount(node)
        if node.schedulable:
            free = node.free
            self.counted[node.name] = free
            self.counted_healthy[node.name] = node.healthy_gpus
            self.healthy[node.gpu_type] = self.healthy.get(node.gpu_type, 0) + node.healthy_gpus
            for key in self._keys(node):
                histogram = self.histogram.setdefault(key, [0] * (node.gpus + 1))
                if len(histogram) <= free:
                    histogram.extend([0] * (free + 1 - len(histogram)))
                histogram[free] += 1
                self.free_in[key] = self.free_in.get(key, 0) + free
            insort_unique(self.by_free.setdefault(node.gpu_type, {}).setdefault(free, []), node.name)

    def _uncount(self, node: Node) -> None:
        free = self.counted.pop(node.name, None)
        if free is None:
            return
        self.healthy[node.gpu_type] -= self.counted_healthy.pop(node.name)
        for key in self._keys(node):
            self.histogram[key][free] -= 1
            self.free_in[key] -= free
        remove_sorted(self.by_free[node.gpu_type][free], node.name)

    def gpu_types(self) -> list[str]:
        return sorted(t for t, names in self.by_type.items() if names)

    def of_type(self, gpu_type: str) -> list[Node]:
        return [self.nodes[name] for name in self.by_type.get(gpu_type, ())]

    def free_gpus(self, gpu_type: str) -> int:
        """Free GPUs of a type on schedulable nodes (kept by the capacity index)."""
        return self.free_in.get((gpu_type, CELL, ""), 0)

    def capacity(self, gpu_type: str) -> int:
        """Healthy GPUs of a type on nodes that could take work (spares excluded until activated)."""
        return self.healthy.get(gpu_type, 0)

    def level_index(self, level: str) -> int | None:
        """Position of a topology level; the implicit node level comes after the declared ones."""
        if level == NODE_LEVEL:
            return len(self.levels)
        return self.levels.index(level) if level in self.levels else None

    def domain_of(self, node: Node, level_index: int) -> str:
        return node.name if level_index >= len(self.levels) else node.domains[level_index]


def insort_unique(items: list[str], item: str) -> None:
    i = bisect_left(items, item)
    if i == len(items) or items[i] != item:
        items.insert(i, item)


def remove_sorted(items: list[str], item: str) -> None:
    i = bisect_left(items, item)
    if i < len(items) and items[i] == item:
        del items[i]
