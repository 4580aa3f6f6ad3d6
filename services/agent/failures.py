"""The fleet's failure injection: node losses and Xid errors as one seeded Poisson process over all nodes."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

HOUR_MS = 3_600_000
XID_CODES = (79, 48, 13)  # fell off the bus (cordon node), double-bit ECC (retire GPU), app fault (job only)


@dataclass(frozen=True)
class FailureSpec:
    """Failure injection: Poisson rates per node-hour, a seed, and how long a repair takes."""

    node_rate: float = 0.0  # node losses per node-hour
    xid_rate: float = 0.0  # Xid errors per node-hour
    seed: int = 0
    repair_ms: int = 10 * 60_000
    fail_node: str | None = None  # test hook: lose this node (FIRST_BUSY: the first node a worker starts on) ...
    fail_at_ms: int = 0  # ... this long after its first worker starts (so it always hits a busy node)


#: `fail_node` for whichever node a worker starts on first: a busy node, wherever placement puts the work.
FIRST_BUSY = "first-busy"


class Failure(NamedTuple):
    at: int
    node: str
    gpu: int
    xid: int | None  # None: the node is lost (stops heartbeating)


def failure_schedule(nodes: Sequence[str], gpus_per_node: int, spec: FailureSpec, start_ms: int) -> Iterator[Failure]:
    """The failures of a fleet in time order, forever: one Poisson process over all nodes, drawn from the seed."""
    total = spec.node_rate + spec.xid_rate
    if total <= 0 or not nodes:
        return
    rng = random.Random(spec.seed)
    per_ms = len(nodes) * total / HOUR_MS
    at = start_ms
    while True:
        at += max(1, round(rng.expovariate(per_ms)))
        lost = rng.random() * total < spec.node_rate
        node, gpu, xid = rng.choice(nodes), rng.randrange(gpus_per_node), rng.choice(XID_CODES)
        yield Failure(at, node, gpu, None if lost else xid)
