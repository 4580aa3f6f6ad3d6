"""An in-memory cell in virtual time: the four services as replicas on one ordered log. Inputs and agent
reports are appended in time order; each entry is folded once into the state the replicas share, then
each replica answers it in service order and its decisions are appended to the log, where every replica
reads them back as the Kafka services would. So the log written here is a log Kafka could hold for the
same inputs, and `gangway verify` replays it exactly as it replays a cell's log on Kafka. Heartbeats are
side input, as on Kafka: handed to the replicas, never appended to the log."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

from events import models as m
from projections.cell import CellState
from projections.jobs import Job
from services.core.decider import Decider
from services.core.replica import Replica, fold, replicas
from services.deciders import DECIDERS
from services.policy import DEFAULT_POLICY, Policy


def all_deciders() -> list[Decider]:
    """The four services, in the order they answer an event."""
    return [cast(Decider, decider()) for decider in DECIDERS.values()]


Observer = Callable[["VirtualCell", m.Event, int], None]
SideObserver = Callable[["VirtualCell", m.Event], None]


@dataclass
class VirtualCell:
    """One cell's log, state and deciders; `schedule` future events, `run_until` plays them."""

    cell: str = "cell-a"
    policy: Policy = DEFAULT_POLICY
    deciders: list[Decider] = field(default_factory=all_deciders)
    tick_ms: int = 10_000
    state: CellState = field(default_factory=lambda: CellState(tracks_rows=False))
    log: list[m.Event] = field(default_factory=list)
    observers: list[Observer] = field(default_factory=list)
    side_observers: list[SideObserver] = field(default_factory=list)  # see the heartbeats, which the log does not
    #: Keep every job that ended (the cell's state lets them go): what scenarios and the simulator look at
    #: afterwards. Off, the cell holds live work only.
    keep_ended: bool = True
    ended: dict[str, Job] = field(default_factory=dict)
    #: Keep the log (what verify, scenarios and the simulator read). Off, `log` holds only what is being
    #: played out and `first_offset` is the offset of its first entry: a long run's memory is its live work.
    keep_log: bool = True
    first_offset: int = 0
    now: int = 0
    _pending: list[tuple[int, int, m.Event]] = field(default_factory=list)
    _seq: int = 0
    _next_tick: int = 0
    replicas: list[Replica] = field(init=False)

    def __post_init__(self) -> None:
        self.state.cell = self.state.cell or self.cell  # a record naming another cell is refused from the start
        self.replicas = replicas(self.deciders, self.policy, self.state)

    @property
    def length(self) -> int:
        """How many events the log has had, kept or not."""
        return self.first_offset + len(self.log)

    def job(self, job_id: str) -> Job | None:
        """A job, live or (with `keep_ended`) ended."""
        return self.state.jobs.get(job_id) or self.ended.get(job_id)

    def all_jobs(self) -> dict[str, Job]:
        """Every job the cell has seen, live and (with `keep_ended`) ended."""
        return {**self.ended, **self.state.jobs}

    @property
    def heartbeats(self) -> dict[str, int]:
        """The latest heartbeat per node, as recovery sees it."""
        return self.replicas[-1].heartbeats if self.replicas else {}

    def envelope(self, at: int, producer: str, correlation_id: str | None = None) -> m.Envelope:
        self._seq += 1
        return m.Envelope(event_id=f"{producer}-{self._seq}", cell=self.cell, at=at, producer=producer,
                          correlation_id=correlation_id)

    def schedule(self, event: m.Event, at: int | None = None) -> None:
        """Plays `event` at `at` (default: its own stamp, which a hostile record may put anywhere)."""
        self._seq += 1
        heapq.heappush(self._pending, (event.envelope.at if at is None else at, self._seq, event))

    def schedule_all(self, events: Iterable[m.Event]) -> None:
        for event in events:
            self.schedule(event)

    def append(self, event: m.Event) -> None:
        """Appends one event and plays the log forward until every decision it caused is folded; a heartbeat
        goes to the replicas instead, as side input."""
        if isinstance(event, m.NodeHeartbeat):
            for replica in self.replicas:
                replica.observe(event)
            for side in self.side_observers:
                side(self, event)
            return
        cursor = len(self.log)
        self.log.append(event)
        while cursor < len(self.log):
            current, offset = self.log[cursor], self.first_offset + cursor
            if self.keep_ended and isinstance(current, m.Tick):  # the jobs that ended leave the state now
                self.ended.update(self.state.leaving())
            refused = fold(self.state, current, offset)
            for replica in self.replicas:
                self.log.extend(replica.answer(offset, current, refused))
            for observer in self.observers:
                observer(self, current, offset)
            cursor += 1
        if not self.keep_log:
            self.first_offset += len(self.log)
            self.log.clear()

    def append_recorded(self, event: m.Event) -> None:
        """Appends an event of a recorded log and folds it with no replica answering: the cell as the log had
        it (what-if takes over a cell at a cut this way)."""
        offset = len(self.log)
        self.log.append(event)
        fold(self.state, event, offset)

    def next_scheduled_at(self) -> int | None:
        """Time of the earliest scheduled event, or None when nothing is scheduled."""
        return self._pending[0][0] if self._pending else None

    def play_next(self) -> None:
        """Appends the earliest scheduled event (and plays out what it causes)."""
        at, _, event = heapq.heappop(self._pending)
        self.now = max(self.now, at)
        self.append(event)

    def run_until(self, until: int) -> None:
        """Plays scheduled events and clock ticks in time order up to and including `until`."""
        while True:
            next_event_at = self._pending[0][0] if self._pending else None
            if self._next_tick <= until and (next_event_at is None or self._next_tick < next_event_at):
                self.now = self._next_tick
                self.append(m.Tick(envelope=self.envelope(self.now, "clock")))
                self._next_tick += self.tick_ms
                continue
            if next_event_at is None or next_event_at > until:
                break
            at, _, event = heapq.heappop(self._pending)
            self.now = max(self.now, at)
            self.append(event)
        self.now = max(self.now, until)
