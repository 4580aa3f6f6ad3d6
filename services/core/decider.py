"""The decider protocol and `step`: fold one event, then let each decider answer it.

A decision's envelope is derived from what caused it: its id from the producer and the basis
offset, its time from the cause, its correlation from the job. So the same log in gives the
same decisions out, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from events.models import Decision, Envelope, Event, Reason
from projections.cell import CellState
from projections.evolve import evolve

if TYPE_CHECKING:  # knobs are values the caller passes in; the core does not depend on the deciders' policies
    from services.policy import Policy


@dataclass
class Context:
    """What a decider knows besides the state: the event's offset, the policy, and its own name."""

    producer: str
    cause: Event
    basis_offset: int
    policy: Policy
    emitted: int = 0

    @property
    def now(self) -> int:
        return self.cause.envelope.at

    def envelope(self, reason: Reason, correlation_id: str | None = None) -> Envelope:
        """A fresh envelope for the next decision made on this event."""
        self.emitted += 1
        cause = self.cause.envelope
        return Envelope(
            event_id=f"{self.producer}-{self.basis_offset}-{self.emitted}",
            cell=cause.cell,
            at=cause.at,
            producer=self.producer,
            causation_id=cause.event_id,
            correlation_id=correlation_id or cause.correlation_id,
            basis_offset=self.basis_offset,
            policy_version=self.policy.version,
            reason=reason,
        )


class Decider(Protocol):
    """A service's pure core: the decisions one event triggers in a state that already includes it."""

    name: str

    def decide(self, state: CellState, event: Event, ctx: Context) -> list[Decision]: ...


def step(state: CellState, event: Event, offset: int, deciders: Sequence[Decider],
         policy: Policy) -> list[Decision]:
    """Folds `event` at `offset`, then asks every decider, in the given order, what it decides."""
    evolve(state, event, offset)
    decisions: list[Decision] = []
    for decider in deciders:
        decisions.extend(decider.decide(state, event, Context(decider.name, event, offset, policy)))
    return decisions
