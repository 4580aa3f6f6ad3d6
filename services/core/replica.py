"""A replica: one decider, the state its log folds to, the decisions it made that the log has not given
back yet (assumed), its policy, and the offset it has folded to. `consume(offset, event)` is the one step
that every runner drives: the Kafka shell, verify, the scenario runner and the simulator.

The state is always the log folded in log order: an own decision is folded where it lands, like anyone
else's, so every reader of the log agrees with the replica. The decider decides on that state with its
assumed decisions laid over it (projections/overlay.py) and lifted off again, so it never double-books
while its own decisions are in flight. A decision is therefore a function of the log up to its basis, the
replica's own decisions based earlier that land later, and the policy: what replay needs to reproduce it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from projections.overlay import lay
from services.core.decider import Context, Decider

if TYPE_CHECKING:
    from services.policy import Policy

#: A replay's source of side-input decisions: this service's decisions recorded with a given basis offset.
Recorded = Callable[[int], Sequence[m.Decision]]


@dataclass
class Replica:
    """One decider over one cell's log. Live replicas see heartbeats (side input); a replay passes `recorded`."""

    decider: Decider
    policy: Policy
    state: CellState = field(default_factory=CellState)
    assumed: dict[str, m.Decision] = field(default_factory=dict)  # own decisions not yet read back, in order made
    heartbeats: dict[str, int] = field(default_factory=dict)  # node -> latest heartbeat up to the cell's time
    #: heartbeats read but stamped later than the cell's time: they count once the log reaches their time
    pending_heartbeats: list[tuple[int, str]] = field(default_factory=list)
    recorded: Recorded | None = None

    @property
    def name(self) -> str:
        return self.decider.name

    @property
    def offset(self) -> int:
        return self.state.offset

    def consume(self, offset: int, event: m.Event) -> list[m.Decision]:
        """Folds the event at `offset` and answers it; an offset already folded is a re-delivery: nothing."""
        if offset <= self.state.offset:
            return []
        evolve(self.state, event, offset)
        return self.answer(offset, event)

    def answer(self, offset: int, event: m.Event) -> list[m.Decision]:
        """The decisions on an event the state has just folded at `offset` (several replicas of one in-memory
        cell share a state that folds each event once)."""
        if event.envelope.producer == self.decider.name:
            self.assumed.pop(event.envelope.event_id, None)  # read back: folded where it landed
        if type(event) not in self.decider.triggers:
            return []
        self._count_heartbeats()
        ctx = Context(self.decider.name, event, offset, self.policy,
                      heartbeats=None if self.recorded is not None else self.heartbeats,
                      recorded=self.recorded(offset) if self.recorded is not None else ())
        overlay = lay(self.state, self.assumed.values()) if self.assumed else None
        try:
            decisions = self.decider.decide(self.state, event, ctx)
        finally:
            if overlay is not None:
                overlay.lift()
        for decision in decisions:
            self.assumed[decision.envelope.event_id] = decision
        return decisions

    def observe(self, event: m.Event) -> None:
        """Side input from outside the main log: a heartbeat. It counts from when the cell's time reaches its
        stamp, so what a tick sees does not depend on how far ahead of the main log the side topic was read
        (after a restart, say): the latest heartbeat per node at or before the tick's time."""
        if isinstance(event, m.NodeHeartbeat) and type(event) in self.decider.side_input:
            heapq.heappush(self.pending_heartbeats, (event.envelope.at, event.node))

    def _count_heartbeats(self) -> None:
        pending, now = self.pending_heartbeats, self.state.now
        while pending and pending[0][0] <= now:
            at, node = heapq.heappop(pending)
            if at > self.heartbeats.get(node, -1):
                self.heartbeats[node] = at


def replicas(deciders: Sequence[Decider], policy: Policy, state: CellState) -> list[Replica]:
    """One replica per decider, all over one shared state (an in-memory cell folds each event once)."""
    return [Replica(decider, policy, state) for decider in deciders]
