"""The decider protocol and the context a decision is made in.

A decision's envelope is derived from what caused it: its id from the producer and the basis
offset, its time from the cause, its correlation from the job. So the same log in gives the
same decisions out, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from events.models import Decision, Envelope, Event, Reason
from projections.cell import CellState


@dataclass
class Context:
    """What a decider knows besides the state: the event's offset, the cell's time, the policy, its name, and what it
    sees outside the main log. `heartbeats` is None in a replay, which has no side input: a decision made on
    side input is then taken from `recorded` (this service's decisions recorded at this basis) as a fact."""

    producer: str
    cause: Event
    basis_offset: int
    policy: Any  # a Policy: compiled (events/compiled.py), a dataclass's field types must exist when it loads
    heartbeats: Mapping[str, int] | None = None
    recorded: Sequence[Decision] = ()
    at: int | None = None  # the cell's time (CellState.now); the cause's own stamp when not given
    cell: str | None = None  # the replica's cell, which a refused cause may not name; the cause's when not given
    emitted: int = field(default=0)

    @property
    def now(self) -> int:
        """When the decision is made: the cell's monotone time, never an arbitrary event's own stamp."""
        return self.cause.envelope.at if self.at is None else self.at

    def envelope(self, reason: Reason, correlation_id: str | None = None) -> Envelope:
        """A fresh envelope for the next decision made on this event."""
        self.emitted += 1
        cause = self.cause.envelope
        return Envelope(
            event_id=f"{self.producer}-{self.basis_offset}-{self.emitted}",
            cell=self.cell or cause.cell,
            at=self.now,
            producer=self.producer,
            causation_id=cause.event_id,
            correlation_id=correlation_id or cause.correlation_id,
            basis_offset=self.basis_offset,
            policy_version=self.policy.version,
            reason=reason,
        )

    def replayed(self, decisions: Sequence[Decision]) -> list[Decision]:
        """Recorded side-input decisions taken as made here, numbered as they were."""
        self.emitted += len(decisions)
        return list(decisions)


#: `Decider.only_if` of a decider that asks to be asked on every trigger.
ASK_ALWAYS: Mapping[type, Callable[[CellState, Event], bool]] = MappingProxyType({})


class Decider(Protocol):
    """A service's pure core: the decisions one event triggers in a state that already includes it.
    `triggers` are the event types it answers; on any other event it decides nothing. `side_input` are the
    event types it reads from outside the main log (heartbeats), which a replay does not have. One decider
    `answers_refusals`: it writes the RecordRefused for each record the cell refuses to fold. `only_if` holds, for
    a trigger that mostly decides nothing, a cheap test on the folded state that is False only when `decide` would
    decide nothing on the event: a replica then spares building its context."""

    name: str
    triggers: frozenset[type]
    side_input: frozenset[type]
    answers_refusals: bool
    only_if: Mapping[type, Callable[[CellState, Event], bool]]

    def decide(self, state: CellState, event: Event, ctx: Context) -> list[Decision]: ...
