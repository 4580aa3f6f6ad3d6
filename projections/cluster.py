"""Nodes, their GPUs and the topology domains they sit in: the physical half of a cell's state."""

from __future__ import annotations

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
    cordoned: bool = False
    failed: bool = False
    retired: frozenset[int] = frozenset()
    holder: dict[int, str] = field(default_factory=dict)  # GPU index -> job id holding it
    reserved_for: str | None = None  # a queued gang that holds this node as its reservation

    @property
    def schedulable(self) -> bool:
        return not self.failed and not self.cordoned and (not self.spare or self.activated)

    @property
    def healthy_gpus(self) -> int:
        return self.gpus - len(self.retired)

    def free_indices(self) -> list[int]:
        return [i for i in range(self.gpus) if i not in self.holder and i not in self.retired]

    @property
    def free(self) -> int:
        return self.gpus - len(self.holder) - len(self.retired - self.holder.keys())

    def jobs(self) -> list[str]:
        return sorted(set(self.holder.values()))


def domain_ids(labels: dict[str, str], levels: tuple[str, ...]) -> tuple[str, ...]:
    """Hierarchical ids ('b1', 'b1/r3') so two racks named alike in different blocks stay apart."""
    ids, path = [], []
    for level in levels:
        path.append(labels.get(level, "-"))
        ids.append("/".join(path))
    return tuple(ids)


@dataclass
class Cluster:
    """All nodes of a cell, indexed by GPU type, plus the declared topology levels."""

    levels: tuple[str, ...] = ()
    nodes: dict[str, Node] = field(default_factory=dict)
    by_type: dict[str, list[str]] = field(default_factory=dict)  # gpu type -> sorted node names

    def add(self, node: Node) -> None:
        old = self.nodes.get(node.name)
        if old is not None and old.gpu_type != node.gpu_type:
            self.by_type[old.gpu_type].remove(old.name)
        self.nodes[node.name] = node
        names = self.by_type.setdefault(node.gpu_type, [])
        if node.name not in names:
            names.append(node.name)
            names.sort()

    def gpu_types(self) -> list[str]:
        return sorted(self.by_type)

    def of_type(self, gpu_type: str) -> list[Node]:
        return [self.nodes[name] for name in self.by_type.get(gpu_type, ())]

    def capacity(self, gpu_type: str) -> int:
        """Healthy GPUs of a type on nodes that could take work (spares excluded until activated)."""
        return sum(n.healthy_gpus for n in self.of_type(gpu_type) if n.schedulable)

    def level_index(self, level: str) -> int | None:
        """Position of a topology level; the implicit node level comes after the declared ones."""
        if level == NODE_LEVEL:
            return len(self.levels)
        return self.levels.index(level) if level in self.levels else None

    def domain_of(self, node: Node, level_index: int) -> str:
        return node.name if level_index >= len(self.levels) else node.domains[level_index]
