"""The Kafka shell of a service: read committed events of its cells, fold, decide, and write the
decisions with the consumed offsets in one transaction; then save the state with its offset.

- Cells are partitions: replicas of a service share them as one consumer group, and a cell that
  moves is restored from its RocksDB projection (or rebuilt from offset 0 when it has none).
- One transactional producer per service and cell (`gangway-<service>-<cell>`): a new owner
  fences the old one and aborts its open transaction at once.
- The service's own decisions are folded as soon as it makes them ("assumed") and not folded again
  when read back, so nothing is double-booked while they are in flight; read back, they are
  decided on like any other event (that is when their offset, the basis, is known).
- The projection is saved only after the transaction commits, so it never runs ahead of Kafka.
  If the process dies between the two, the events in between are folded again and re-decided
  silently (their decisions are already in the log), which is what determinism buys.
- Undecodable records go to the dead-letter topic inside the same transaction.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TopicPartition

from events.log import EventConsumer, EventProducer, LogRecord
from events.models import Decision, NodeHeartbeat
from events.topics import TopicNames
from projections.cell import CellState
from projections.evolve import fold_assumed
from projections.store import ProjectionStore
from services.core.decider import Context, Decider, step
from services.policy import Policy

log = logging.getLogger("gangway.shell")


@dataclass
class Timings:
    """Where a replica's time goes, summed over batches; logged when it stops."""

    batches: int = 0
    records: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("decode", "decide", "commit", "store"), 0.0))

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v * 1000:,.0f} ms" for k, v in self.seconds.items())
        return f"{self.batches:,} batches, {self.records:,} records: {parts}"


@dataclass
class CellRuntime:
    """What a replica keeps for one cell it owns."""

    cell: str
    partition: int
    state: CellState
    store: ProjectionStore
    producer: EventProducer
    assumed: dict[str, None] = field(default_factory=dict)  # own decisions folded, not yet read back
    replay_until: int = 0  # events below this offset were decided before: their output is in the log


class ServiceShell:
    """Runs one decider on Kafka for whichever cells the consumer group gives this replica."""

    def __init__(self, decider: Decider, bootstrap_servers: str, topics: TopicNames, cells: Sequence[str],
                 data_dir: Path, policy: Policy, batch_size: int = 500, name_prefix: str = "") -> None:
        self.decider, self.policy = decider, policy
        self.bootstrap, self.topics, self.cells = bootstrap_servers, topics, tuple(cells)
        self.data_dir, self.batch_size = Path(data_dir), batch_size
        self.runtimes: dict[int, CellRuntime] = {}
        self.stopping = False
        self.timings = Timings()
        self.name_prefix = name_prefix  # isolates group and transactional ids like the topic prefix does
        self.consumer = EventConsumer(bootstrap_servers, f"{name_prefix}gangway-{decider.name}", topics, cells)
        wanted = [topics.events] + ([topics.heartbeats] if decider.name == "recovery" else [])
        self.consumer.subscribe(wanted, self._on_assign, self._on_revoke)

    # --- cells coming and going -------------------------------------------------------------

    def _on_assign(self, consumer, partitions: list[TopicPartition]) -> None:
        starts = []
        for p in partitions:
            if p.topic != self.topics.events:
                starts.append(TopicPartition(p.topic, p.partition, -1))  # heartbeats: from the latest
                continue
            runtime = self._open(p.partition)
            committed = self.consumer.committed([TopicPartition(p.topic, p.partition)])[0].offset
            runtime.replay_until = max(committed, 0)
            starts.append(TopicPartition(p.topic, p.partition, runtime.state.offset + 1))
            log.info("%s owns %s from offset %d (committed %d)", self.decider.name, runtime.cell,
                     runtime.state.offset + 1, committed)
        consumer.assign(starts)

    def _on_revoke(self, consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            runtime = self.runtimes.pop(p.partition, None) if p.topic == self.topics.events else None
            if runtime is not None:
                runtime.store.close()
                log.info("%s gave up %s", self.decider.name, runtime.cell)

    def _open(self, partition: int) -> CellRuntime:
        cell = self.cells[partition]
        store = ProjectionStore(self.data_dir / self.decider.name / cell)
        state = store.load() or CellState(cell=cell)
        assumed = json.loads(store.extra("assumed") or b"[]")
        producer = EventProducer(self.bootstrap, f"{self.name_prefix}gangway-{self.decider.name}-{cell}",
                                 self.topics, self.cells)
        runtime = CellRuntime(cell, partition, state, store, producer, dict.fromkeys(assumed))
        self.runtimes[partition] = runtime
        return runtime

    # --- the loop ---------------------------------------------------------------------------

    def run(self, max_batches: int | None = None) -> None:
        """Polls and decides until stopped (SIGTERM / SIGINT) or `max_batches` polls."""
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        polls = 0
        try:
            while not self.stopping and (max_batches is None or polls < max_batches):
                self.poll_once()
                polls += 1
        finally:
            self.consumer.close()
            for runtime in self.runtimes.values():
                runtime.store.close()
            log.info("%s timings: %s", self.decider.name, self.timings.summary())

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def poll_once(self, timeout: float = 0.5) -> int:
        records = self.consumer.poll(self.batch_size, timeout)
        self.timings.seconds["decode"] = self.consumer.decode_seconds
        if records:
            self.timings.batches += 1
            self.timings.records += len(records)
        by_cell: dict[int, list[LogRecord]] = {}
        heartbeats: dict[int, list[LogRecord]] = {}
        for record in records:
            target = by_cell if record.topic == self.topics.events else heartbeats
            target.setdefault(record.partition, []).append(record)
        for partition in sorted(set(by_cell) | set(heartbeats)):
            runtime = self.runtimes.get(partition)
            if runtime is not None:
                self.process(runtime, by_cell.get(partition, []), heartbeats.get(partition, []))
        return len(records)

    def process(self, runtime: CellRuntime, records: list[LogRecord], heartbeats: list[LogRecord]) -> None:
        state = runtime.state
        for record in heartbeats:
            if isinstance(record.event, NodeHeartbeat):
                fold_assumed(state, record.event)
        clock = time.perf_counter()
        output: list[Decision] = []
        letters = []
        for record in records:
            if record.offset <= state.offset:
                continue  # re-delivered: already folded
            fresh = record.offset >= runtime.replay_until
            event = record.event
            if event is None:
                state.offset = record.offset
                if fresh:
                    letters.append(record.dead_letter(self.decider.name, state.now))
                continue
            if event.envelope.event_id in runtime.assumed:
                del runtime.assumed[event.envelope.event_id]
                state.offset = record.offset  # folded when it was decided, but answered only now that it has
                # an offset, like any event: recovery acts on its own NodeFailed / GpuFaulted (interrupts the
                # jobs on the node), exactly as the in-memory runner, which decides on every log entry.
                decisions = self.decider.decide(state, event, Context(self.decider.name, event, record.offset,
                                                                      self.policy))
            else:
                decisions = step(state, event, record.offset, [self.decider], self.policy)
            for decision in decisions:
                fold_assumed(state, decision)
                runtime.assumed[decision.envelope.event_id] = None
            if fresh:
                output.extend(decisions)
        consumed = records + heartbeats
        clock = self._lap("decide", clock)
        if output or letters:
            with runtime.producer.transaction(self.consumer, consumed):
                for decision in output:
                    runtime.producer.produce(decision)
                for letter in letters:
                    runtime.producer.produce_dead_letter(letter)
        elif consumed:
            # Nothing to write: no transaction needed. The projection below is what a restart resumes
            # from, so the group's offsets only need to follow now and then (for lag, and hand-over).
            self.consumer.commit_later(consumed)
        clock = self._lap("commit", clock)
        runtime.store.save(state, extra={"assumed": json.dumps(sorted(runtime.assumed)).encode()})
        self._lap("store", clock)

    def _lap(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self.timings.seconds[phase] += now - since
        return now
