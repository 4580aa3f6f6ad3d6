"""A replica: one decider, the state its log folds to, the decisions it made that the log has not given
back yet (assumed), its policy, and the offset it has folded to. `consume(offset, event)` is the one step
that every runner drives: the Kafka shell, verify, the scenario runner and the simulator.

The state is always the log folded in log order: an own decision is folded where it lands, like anyone
else's, so every reader of the log agrees with the replica. The decider decides on that state with its
assumed decisions laid over it (projections/overlay.py), so it never double-books while its own decisions
are in flight. A decision is therefore a function of the log up to its basis, the replica's own decisions
based earlier that land later, and the policy: what replay needs to reproduce it.

How the overlay is laid does not change a decision, only its cost. A replica that owns its state keeps the
overlay laid between records (`persistent`): a record that commutes with the decisions in flight is folded
on top of them, the oldest of them landing stays folded, and only a record that touches their rows lifts the
overlay first. It is laid only when a decision is to be made while decisions are in flight, and dropped once the
last of them has landed: a decision that lands before the replica decides again is simply folded where it lands.
Replicas sharing one state (the in-memory cell) lay and lift it around each decision instead.
`settle()` lifts it, leaving the state exactly the log folded in order (what a store saves).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.evolve import evolve
from projections.overlay import Overlay, lay
from projections.validate import MAX_DETAIL_LENGTH, Refusal, printable
from services.core.decider import Context, Decider

if TYPE_CHECKING:
    from services.policy import Policy

log = logging.getLogger("gangway.replica")

#: A replay's source of side-input decisions: this service's decisions recorded with a given basis offset.
Recorded = Callable[[int], Sequence[m.Decision]]


@dataclass
class Replica:
    """One decider over one cell's log. Live replicas see heartbeats (side input); a replay passes `recorded`."""

    decider: Decider
    policy: Any  # a Policy: compiled (events/compiled.py), a dataclass's field types must exist when it loads
    state: CellState = field(default_factory=CellState)
    assumed: dict[str, m.Decision] = field(default_factory=dict)  # own decisions not yet read back, in order made
    heartbeats: dict[str, int] = field(default_factory=dict)  # node -> latest heartbeat up to the cell's time
    #: heartbeats read but stamped later than the cell's time: they count once the log reaches their time
    pending_heartbeats: list[tuple[int, str]] = field(default_factory=list)
    recorded: Recorded | None = None
    persistent: bool = True
    _overlay: Overlay | None = field(default=None, repr=False)

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
        overlay = self._overlay
        if overlay is not None and overlay.laid:
            own = self.own(event)
            oldest = overlay.oldest()
            if own and oldest is not None and oldest is self.assumed.get(event.envelope.event_id):
                overlay.land(oldest, offset)  # already folded, exactly as the log has it
                if not overlay.laid:
                    self._overlay = None  # the next decision in flight is laid only when a decision needs it
                return self.answer(offset, event)
            if own or not overlay.commutes(event):
                self.settle()
        return self.answer(offset, event, fold(self.state, event, offset))

    def own(self, event: m.Event) -> bool:
        """One of this decider's decisions, read back: a record in its name that its signature does not vouch for
        (events/signing.py) is someone else's, even with the id of a decision in flight."""
        envelope = event.envelope
        return event.is_decision and envelope.producer == self.decider.name and \
            not (envelope.origin or "").startswith(m.UNVERIFIED)

    def settle(self) -> None:
        """Lifts the decisions in flight: the state is the log folded in order again."""
        if self._overlay is not None:
            self._overlay.lift()
            self._overlay = None

    def answer(self, offset: int, event: m.Event, refused: Refusal | None = None) -> list[m.Decision]:
        """The decisions on an event the state has just folded at `offset`, or refused to (several replicas of
        one in-memory cell share a state that folds each event once). A refused record is answered by the
        replica whose decider answers refusals; a decider that fails on a record answers it with its own
        refusal; decisions that could not be written to the log are replaced by one. All of this is a function
        of the log, so every replica and every replay does the same."""
        if self.own(event):
            self.assumed.pop(event.envelope.event_id, None)  # read back: folded where it landed
        if refused is not None:
            if not self.decider.answers_refusals:
                return []
            return self._remember([self._refusal(offset, event, refused)])
        if type(event) not in self.decider.triggers:
            return []
        if self.pending_heartbeats:
            self._count_heartbeats()
        if self.assumed and self._overlay is None:
            self._overlay = lay(self.state, self.assumed.values())
        try:
            worth = self.decider.only_if.get(type(event))
            decisions = [] if worth is not None and not worth(self.state, event) else \
                self.decider.decide(self.state, event, self._context(offset, event))
        except Exception as error:  # a decider bug must not stop the cell: answered, logged loudly
            log.exception("%s failed on %s at offset %d", self.decider.name, event.event_type, offset)
            decisions = [self._refusal(offset, event, Refusal(Reason.DECISION_FAILED, _what(error)))]
        finally:
            if not self.persistent:
                self.settle()
        if not decisions:
            return decisions
        unwritable = next((why for d in decisions if (why := unencodable(d))), "")
        if unwritable:
            log.error("%s decided something the log cannot hold on %s at offset %d: %s", self.decider.name,
                      event.event_type, offset, unwritable)
            decisions = [self._refusal(offset, event, Refusal(Reason.DECISION_UNENCODABLE, unwritable))]
        return self._remember(decisions)

    def _context(self, offset: int, event: m.Event) -> Context:
        recorded = self.recorded
        return Context(self.decider.name, event, offset, self.policy, at=self.state.now, cell=self.state.cell or None,
                       heartbeats=self.heartbeats if recorded is None else None,
                       recorded=() if recorded is None else recorded(offset))

    def _refusal(self, offset: int, event: m.Event, refused: Refusal) -> m.RecordRefused:
        ctx = self._context(offset, event)
        return m.RecordRefused(envelope=ctx.envelope(refused.reason), refused_offset=offset,
                               refused_type=event.event_type, refused_event_id=printable(event.envelope.event_id[:256])[:256],
                               detail=refused.detail[:MAX_DETAIL_LENGTH])

    def _remember(self, decisions: list[m.Decision]) -> list[m.Decision]:
        """The decisions are in flight now; a laid overlay takes them on top of the ones before."""
        for decision in decisions:
            self.assumed[decision.envelope.event_id] = decision
            if self._overlay is not None:
                self._overlay.add(decision)
        return decisions

    def observe(self, event: m.Event) -> None:
        """Side input from outside the main log: a heartbeat. It counts from when the cell's time reaches its
        stamp, so what a tick sees does not depend on how far ahead of the main log the side topic was read
        (after a restart, say): the latest heartbeat per node at or before the tick's time."""
        if not isinstance(event, m.NodeHeartbeat) or type(event) not in self.decider.side_input:
            return
        at, now = event.envelope.at, self.state.now
        if at < now - self.policy.recovery.heartbeat_timeout_ms:
            return  # too late to say anything (a stamp in the past cannot make a node look dead)
        # One stamped far ahead waits here until the cell's time reaches it (it cannot keep a node alive before);
        # it is not dropped against the clock now, which after a restart is the stored one, far behind.
        heapq.heappush(self.pending_heartbeats, (at, event.node))

    def _count_heartbeats(self) -> None:
        pending, now = self.pending_heartbeats, self.state.now
        while pending and pending[0][0] <= now:
            at, node = heapq.heappop(pending)
            # Whether the node exists is asked now, not when the heartbeat was read: after a restart the side topic
            # is read ahead of a main log that may not have registered the node yet.
            if node in self.state.cluster.nodes and at > self.heartbeats.get(node, -1):
                self.heartbeats[node] = at


def fold(state: CellState, event: m.Event, offset: int) -> Refusal | None:
    """The one fold every runner uses: `evolve`, with a fold that raises turned into a refusal. A raising fold
    is a bug (projections/validate.py exists so that none does); whatever it changed before raising, it
    changed the same way in every replica and replay, so they still agree. Logged loudly."""
    try:
        return evolve(state, event, offset)
    except Exception as error:
        log.exception("folding %s at offset %d failed", event.event_type, offset)
        return Refusal(Reason.FOLD_FAILED, _what(error))


def _what(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:MAX_DETAIL_LENGTH]


#: What the log can hold: Avro longs are 64-bit, and a record must stay well inside the broker's message size.
_LONG = 2**63
MAX_DECISION_BYTES = 512 * 1024


def unencodable(decision: m.Event) -> str:
    """Why the decision could not be written to the log (a number beyond a 64-bit long, a record too large), or ''.
    Decisions are made from records the cell accepted, so only what a decider computes is checked: its times
    and numbers, and the size of its lists and free text."""
    size = 0
    for name, value in decision.__dict__.items():
        if isinstance(value, int) and not isinstance(value, bool):
            if not -_LONG <= value < _LONG:
                return f"{name} = {value} does not fit a 64-bit long"
        elif isinstance(value, str):
            size += len(value)
        elif isinstance(value, list):
            size += sum(len(v) if isinstance(v, str) else 8 * (len(v.gpus) + 1) + len(v.node) for v in value)
    if size > MAX_DECISION_BYTES:
        return f"{size:,} bytes, more than {MAX_DECISION_BYTES:,}"
    return ""


def replicas(deciders: Sequence[Decider], policy: Policy, state: CellState) -> list[Replica]:
    """One replica per decider, all over one shared state (an in-memory cell folds each event once): each lays
    its decisions in flight only while it decides, so the others find the state as the log folds it."""
    return [Replica(decider, policy, state, persistent=False) for decider in deciders]
