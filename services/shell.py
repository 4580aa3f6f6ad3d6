"""The Kafka shell of a service: for each cell the consumer group gives it, a replica (services/core/replica.py)
consumes the cell's committed events; the shell writes the replica's decisions in one transaction, then saves
the replica's state with its offset in one RocksDB write batch.

- Cells are partitions: replicas of a service share them as one consumer group, and a cell that moves is
  restored from its RocksDB projection (or rebuilt from offset 0 when it has none). A store remembers the
  log it was folded from (cluster, topic, partition) and refuses to resume on another one.
- Two transactional producers per service and cell (`gangway-<service>-<cell>` and the same with `~2`), one
  transaction each in turn (events/log.py, `by_turns`): a new owner fences both of the old owner's and aborts
  their open transactions at once.
- Each decision names the record it was based on (`basis_offset`), so the log itself says how far a replica has
  decided: a replica opening a cell decides again only after its latest decision's basis there (or the group's
  committed offset, if later). Its transactions therefore carry no consumed offsets, which saves two of a
  transaction's five round trips to the broker; the group's offsets follow outside them, now and then, for its
  lag and for where a store-less replica starts (a batch with dead letters, which the log does not show, still
  commits its offsets in its transaction).
- The projection is saved only after the transaction commits, so it never runs ahead of Kafka. If the
  process dies between the two, the events in between are consumed again and their decisions, already in
  the log, are not written twice (the replica remembers them as in flight, which they are).
- Side input (recovery's heartbeats) is read from the position the store recorded, caught up to the
  topic's end before the cell's main log, so a restart sees the heartbeats it would have seen running.
- Undecodable records go to the dead-letter topic inside the same transaction; so does a record the cell
  refused because its writer may not write it (NOT_ITS_WRITER: a decision from another producer, a request
  from another team), besides the refusal on the log.
- A replica that owns no cell while its consumer stays out of step with its group (librdkafka's statistics)
  joins again with a new consumer: after every broker went away, a consumer was once seen never to rejoin.
- Every record of the cell's log is checked against its writer's signature as it is read (events/signing.py);
  what the shell writes, its producer signs.
- Tracing: each decision written gets a span (events/tracing.py), child of its job's trace (the traceparent
  of the job's latest traced record) and linked to the record that triggered it; its traceparent travels in
  the decision's record headers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from events import models as m
from events.auth import service_principal
from events.codec import EventCodec
from events.collector import BetweenBatches
from events.log import EventConsumer, EventProducer, LogRecord, ProducerFenced, transient
from events.models import Decision, Reason
from events.reader import LogReader
from events.topics import TopicNames
from events.tracing import Tracer
from projections.cell import CellState
from projections.snapshot import OutdatedSnapshot
from projections.store import ProjectionStore
from services.core.decider import Decider
from services.core.replica import Replica
from services.policy import Policy
from services.stop import StopRequest

log = logging.getLogger("gangway.shell")

#: The store is saved at most this often (and when a cell is given up or the service stops): a restart re-reads
#: what came after, silently. Each save lifts the decisions in flight off the state and costs a write batch; the
#: next decision lays them all again. So while decisions are in flight (a replica behind the log, where laying a
#: thousand costs more than the save) the store waits up to BUSY_SAVE_EVERY_S.
SAVE_EVERY_S = 2.0
BUSY_SAVE_EVERY_S = 10.0

#: How many jobs' trace contexts a shell remembers per cell (the least recently traced are forgotten first; after
#: a restart, in job id order).
TRACED_JOBS = 100_000
#: The store's rows of trace contexts: `trace/<job>` holds the job's latest traceparent.
TRACE_ROW = "trace/"
#: A W3C traceparent's length (version 00): a header of any other length is not kept.
TRACEPARENT_LENGTH = 55
#: A replica that owns no cell while its consumer has been out of step with its group this long rejoins with a new
#: consumer: librdkafka can stay out of its group after every broker went away (confluentinc/librdkafka#3396).
#: Longer than a rebalance takes here (every member rejoins at its next poll, within a batch's time).
UNSETTLED_S = 60.0
#: How often the consumer reports its group state (librdkafka statistics), for the check above.
GROUP_STATS_MS = 5_000
#: A replica whose consumer's offset commits have failed this long, one after another, gives up its cells and joins
#: its group anew: after every broker restarted, a consumer was seen keeping its cell while nothing it committed
#: went through (the group's offset stayed behind for good, and closing it hung). Longer than a coordinator's move.
COMMITS_FAILING_S = 30.0
#: How long a replica reopening a cell waits for the group to say the cell's committed offset before joining anew.
COMMITTED_WAIT_S = 10.0
#: How many records back from a cell's end a replica opening it first looks for its own latest decision (each look
#: further back takes twice as many, down to where its store or the group's offset says it had decided).
SCAN_CHUNK = 2_000


def save_every_s(replica: Replica) -> float:
    """How long a replica's store may go unsaved: longer while its own decisions are in flight."""
    return BUSY_SAVE_EVERY_S if replica.assumed else SAVE_EVERY_S


@dataclass
class Timings:
    """Where a replica's time goes, summed over batches; logged when it stops."""

    batches: int = 0
    records: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("decode", "decide", "commit", "store"), 0.0))
    collecting: float = 0.0  # seconds of the phases' time the cyclic garbage collector took
    cpu: float = 0.0  # the process's CPU seconds while it ran

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v * 1000:,.0f} ms" for k, v in self.seconds.items())
        return (f"{self.batches:,} batches, {self.records:,} records: {parts} (collector {self.collecting * 1000:,.0f}"
                f" ms of them); CPU {self.cpu * 1000:,.0f} ms")


@dataclass
class CellRuntime:
    """What a service keeps for one cell it owns."""

    cell: str
    partition: int
    replica: Replica
    store: ProjectionStore
    producer: EventProducer
    replay_until: int = 0  # events below this offset were decided before: their output is in the log
    heartbeat_offset: int = OFFSET_BEGINNING  # next side-topic record to read
    saved_at: float = 0.0  # when the store was last saved (monotonic seconds)
    unsaved: bool = False  # records folded since then
    written_to: int = 0  # offset after the last batch whose decisions were committed
    #: job -> traceparent of its latest traced record: its next decisions join that trace. Saved with the state
    #: (one row per job, the changed ones each save), so a restarted service goes on in the same traces.
    traces: dict[str, str] = field(default_factory=dict)
    traces_changed: set[str] = field(default_factory=set)
    retired_seen: int = 0  # how many of the state's retired jobs have had their trace contexts dropped


class ServiceShell:
    """Runs one decider on Kafka for whichever cells the consumer group gives this replica."""

    def __init__(self, decider: Decider, bootstrap_servers: str, topics: TopicNames, cells: Sequence[str],
                 data_dir: Path, policy: Policy, batch_size: int = 500, name_prefix: str = "",
                 tracer: Tracer | None = None) -> None:
        self.decider, self.policy = decider, policy
        self.principal = service_principal(decider.name)
        self.tracer = tracer or Tracer(decider.name)
        self.bootstrap, self.topics, self.cells = bootstrap_servers, topics, tuple(cells)
        self.data_dir, self.batch_size = Path(data_dir), batch_size
        self.runtimes: dict[int, CellRuntime] = {}
        self.timings = Timings()
        self.codec = EventCodec()
        self.name_prefix = name_prefix  # isolates group and transactional ids like the topic prefix does
        self.group: tuple[str, str] = ("", "")  # the consumer's group state and join state, as it last reported
        self.unsettled_since: float | None = None  # since when the consumer has not been steady in its group
        self.unowned_since: float | None = time.monotonic()  # since when this replica has owned no cell
        self.decoded_before = 0.0  # decode time of consumers replaced
        self._closing: threading.Thread | None = None  # a replaced consumer leaving its group
        self._join_wanted = False  # an assignment came without its committed offsets: join again after the poll
        self.consumer = self._join()
        self.cluster_id = self.consumer.cluster_id()

    def _join(self) -> EventConsumer:
        """A consumer in the service's group; only the latest one's callbacks count (a replaced one may still
        serve an assignment or a revocation while it closes)."""
        generation = object()
        self._generation = generation

        def current(call):
            return lambda *args: call(*args) if self._generation is generation else None

        consumer = EventConsumer(self.bootstrap, f"{self.name_prefix}gangway-{self.decider.name}", self.topics,
                                 self.cells, principal=self.principal,
                                 **{"statistics.interval.ms": GROUP_STATS_MS, "stats_cb": current(self._on_stats)})
        wanted = [self.topics.events] + ([self.topics.heartbeats] if self.decider.side_input else [])
        consumer.subscribe(wanted, current(self._on_assign), current(self._on_revoke))
        return consumer

    def _on_stats(self, stats: str) -> None:
        group = json.loads(stats).get("cgrp") or {}
        was, self.group = self.group, (group.get("state", ""), group.get("join_state", ""))
        if was != self.group:
            # said on each change, so a replica stuck out of step shows in its log (state "up", join state "steady": in step)
            log.info("%s's consumer: group state %s, join state %s, %s partitions assigned", self.decider.name,
                     *self.group, group.get("assignment_size"))
        if self.group == ("up", "steady"):
            self.unsettled_since = None
        elif self.unsettled_since is None:
            self.unsettled_since = time.monotonic()

    def _rejoin_if_stuck(self) -> None:
        """A replica owning no cell whose consumer has stayed out of step with its group: a new consumer joins it
        (the old one leaves on a thread of its own: leaving can wait for a coordinator that does not answer)."""
        now = time.monotonic()
        if self.runtimes:
            return
        if self.unowned_since is not None and now - self.unowned_since >= UNSETTLED_S:
            log.info("%s has owned no cell for %.0f s; its consumer's group state %s, join state %s",
                     self.decider.name, now - self.unowned_since, *self.group)
            self.unowned_since = None  # said once a spell
        if self.unsettled_since is None or now - self.unsettled_since < UNSETTLED_S:
            return
        if self._closing is not None and self._closing.is_alive():
            return  # the consumer replaced last has not left yet: one at a time
        log.warning("%s owns no cell and its consumer has been out of step with its group for %.0f s (state %s, "
                    "join state %s): joining again with a new consumer", self.decider.name, now - self.unsettled_since,
                    *self.group)
        self._replace_consumer()
        self.unsettled_since = None

    def _replace_consumer(self) -> None:
        """A new consumer joins the group; the old one leaves on a thread of its own (leaving can wait for a
        coordinator that does not answer)."""
        stuck, self.consumer = self.consumer, self._join()
        self.decoded_before += stuck.decode_seconds
        self._closing = threading.Thread(target=stuck.close, name="stuck-consumer-close", daemon=True)
        self._closing.start()

    # --- cells coming and going -------------------------------------------------------------

    def _on_assign(self, consumer, partitions: list[TopicPartition]) -> None:
        """Opens each cell assigned, to be read from its store's offset. A cell whose committed offset the group
        does not say (asked once, briefly: the callback holds the poll) is not opened; the replica joins its group
        again once the poll returns (`_join_again`), as a reopen without the offset does."""
        starts, unknown = [], set()
        for p in sorted(partitions, key=lambda p: (p.topic != self.topics.events, p.partition)):
            if p.topic != self.topics.events:
                if p.partition in unknown:
                    continue
                runtime = self.runtimes.get(p.partition)
                start = runtime.heartbeat_offset if runtime is not None else OFFSET_BEGINNING
                starts.append(TopicPartition(p.topic, p.partition, start))
                continue
            committed = self._committed(p.partition)
            if committed is None:
                unknown.add(p.partition)
                self._join_wanted = True
                continue
            runtime = self._open(p.partition)
            runtime.replay_until = self._decided_to(runtime, committed)
            starts.append(TopicPartition(p.topic, p.partition, runtime.replica.offset + 1))
            log.info("%s owns %s from offset %d (committed %d)", self.decider.name, runtime.cell,
                     runtime.replica.offset + 1, committed)
        self.unowned_since = None if self.runtimes else time.monotonic()
        consumer.assign(starts)

    def _on_revoke(self, consumer, partitions: list[TopicPartition]) -> None:
        self.consumer.forget(partitions)
        for p in partitions:
            runtime = self.runtimes.pop(p.partition, None) if p.topic == self.topics.events else None
            if runtime is not None:
                self._give_up(runtime)
        if not self.runtimes and self.unowned_since is None:
            self.unowned_since = time.monotonic()

    def _give_up(self, runtime: CellRuntime) -> None:
        """The cell's state saved and its store closed: another replica, or a later assignment, goes on from there."""
        self._save(runtime)
        runtime.store.close()
        log.info("%s gave up %s", self.decider.name, runtime.cell)

    def _open(self, partition: int) -> CellRuntime:
        cell = self.cells[partition]
        store = ProjectionStore(self.data_dir / self.decider.name / cell)
        store.bind(f"{self.cluster_id}/{self.topics.events}/{partition}")  # raises on another log's store
        try:
            state = store.load()
        except OutdatedSnapshot as why:
            log.warning("%s: the projection of %s was saved by an older Gangway (%s): folding the log again",
                        self.decider.name, cell, why)
            store.clear()
            state = None
        state = state or CellState(cell=cell)
        replica = Replica(self.decider, self.policy, state)
        replica.assumed = {d.envelope.event_id: d for d in map(self.codec.decode, _blobs(store.extra("assumed")))}
        side = json.loads(store.extra("side") or b"{}")
        replica.heartbeats = dict(side.get("heartbeats", {}))
        replica.pending_heartbeats = [tuple(p) for p in side.get("pending", [])]
        producer = EventProducer(self.bootstrap, f"{self.name_prefix}gangway-{self.decider.name}-{cell}",
                                 self.topics, self.cells, principal=self.principal, by_turns=True)
        runtime = CellRuntime(cell, partition, replica, store, producer,
                              heartbeat_offset=side.get("offset", OFFSET_BEGINNING),
                              traces={job.removeprefix(TRACE_ROW): parent.decode()
                                      for job, parent in store.extras(TRACE_ROW).items()},
                              retired_seen=len(state.retired_order))
        self.runtimes[partition] = runtime
        if self.decider.side_input:
            self._catch_up_side_input(runtime)
        return runtime

    def _decided_to(self, runtime: CellRuntime, committed: int) -> int:
        """The offset before which every record of the cell has been decided, its decisions in the log: after the
        basis of the replica's latest decision there, or the group's committed offset if later. A decision's
        transaction carries no consumed offsets; its basis says as much. Called once the cell's producer has fenced
        the ids' earlier owners, so no decision of theirs can still come."""
        committed = max(committed, 0)
        return max(committed, self._latest_basis(runtime, max(committed, runtime.replica.offset + 1)) + 1)

    def _latest_basis(self, runtime: CellRuntime, start: int) -> int:
        """The basis offset of the replica's latest decision at or after offset `start` of the cell's log, or -1.
        A service's transactions commit one after another, so its latest decision on the log is the one with the
        latest basis: it is looked for from the log's end back, SCAN_CHUNK records first, then twice as many at a
        time, no further back than `start`."""
        replica = runtime.replica
        with LogReader([runtime.cell], self.bootstrap, start, self.cells, self.topics,
                       principal=self.principal) as reader:
            high, chunk = reader.end_offsets()[runtime.cell], SCAN_CHUNK
            while high > start:
                low = max(start, high - chunk)
                reader.rewind(low)
                bases = [basis for record in reader.read(high - 1) if (basis := _basis(record, replica)) is not None]
                if bases:
                    return max(bases)
                high, chunk = low, chunk * 2
        return -1

    def _catch_up_side_input(self, runtime: CellRuntime) -> None:
        """Reads the cell's heartbeats from where the store left off to the topic's end, before its main log."""
        reader = LogReader([runtime.cell], self.bootstrap, max(runtime.heartbeat_offset, 0), self.cells,
                           self.topics, topic=self.topics.heartbeats, principal=self.principal)
        with reader:
            for record in reader.read():
                if record.event is not None:
                    runtime.replica.observe(record.event)
                runtime.heartbeat_offset = record.offset + 1
        log.info("%s read %s's heartbeats to offset %d", self.decider.name, runtime.cell, runtime.heartbeat_offset)

    # --- the loop ---------------------------------------------------------------------------

    def run(self, max_batches: int | None = None, stop: StopRequest | None = None) -> None:
        """Polls and decides until stopped (SIGTERM / SIGINT, or `stop` if the caller listens already) or
        `max_batches` polls."""
        stop = stop or StopRequest.listen()
        polls = 0
        collector, cpu = BetweenBatches(), time.process_time()
        try:
            while not stop.asked and (max_batches is None or polls < max_batches):
                collector.after_poll(self.poll_once())
                polls += 1
        finally:
            self.timings.collecting, self.timings.cpu = collector.seconds, time.process_time() - cpu
            collector.close()
            self.consumer.close()
            for runtime in self.runtimes.values():
                self._save(runtime)
                runtime.store.close()
            self.tracer.shutdown()
            log.info("%s timings: %s", self.decider.name, self.timings.summary())

    def poll_once(self, timeout: float = 0.5) -> int:
        try:
            records = self.consumer.poll(self.batch_size, timeout)
        except KafkaException as error:
            if not transient(error):
                raise
            self._read_again(error)
            return 0
        if self._join_wanted or self._commits_fail():
            self._join_wanted = False
            self._join_again()
            return 0
        if not records:
            self.consumer.flush_commits()  # quiet: the group's offsets catch up with what was consumed
            self._rejoin_if_stuck()
        self.timings.seconds["decode"] = self.decoded_before + self.consumer.decode_seconds
        if records:
            self.timings.batches += 1
            self.timings.records += len(records)
        by_cell: dict[int, list[LogRecord]] = {}
        side: dict[int, list[LogRecord]] = {}
        for record in records:
            target = by_cell if record.topic == self.topics.events else side
            target.setdefault(record.partition, []).append(record)
        for partition in sorted(set(by_cell) | set(side)):
            runtime = self.runtimes.get(partition)
            if runtime is None:
                continue
            try:
                self.process(runtime, by_cell.get(partition, []), side.get(partition, []))
            except (KafkaException, ProducerFenced) as error:
                # The batch could not be committed: the group moved on while a broker failed over (the consumer
                # rejoins only when polled), or the producer was fenced (by a failover's epoch bump, or by a
                # replica the group gave the cell to: then a revoke follows). Nothing of the batch is in Kafka
                # or the store: back to the store, and read it again while the cell is still ours.
                log.warning("%s: %s batch not committed (%s); reading it again", self.decider.name, runtime.cell,
                            error)
                self._reopen(runtime)
        for runtime in self.runtimes.values():
            if time.monotonic() - runtime.saved_at >= save_every_s(runtime.replica):
                clock = time.perf_counter()
                self._save(runtime)
                self._lap("store", clock)
        return len(records)

    def _read_again(self, error: KafkaException) -> None:
        """After a poll that failed on an error a failover explains, each cell is read again from just after the
        last record its replica folded (and its heartbeats from the next one unread): what the client fetched
        past that is not relied on (`EventConsumer.poll` delivers a batch's records before its error)."""
        log.warning("%s: reading failed (%s); each cell is read again from where its replica stands",
                    self.decider.name, error)
        for runtime in self.runtimes.values():
            self.consumer.seek_to(runtime.partition, runtime.replica.offset + 1)
            if self.decider.side_input:
                self.consumer.seek_to(runtime.partition, runtime.heartbeat_offset, self.topics.heartbeats)
        time.sleep(0.5)

    def _save(self, runtime: CellRuntime) -> None:
        """The state as the log folded in order (decisions in flight lifted off), its offset and the extras, in
        one write batch."""
        if not runtime.unsaved:
            return
        runtime.replica.settle()
        runtime.store.save(runtime.replica.state, extra=self._extra(runtime))
        runtime.saved_at, runtime.unsaved = time.monotonic(), False

    def _committed(self, partition: int) -> int | None:
        """The cell's input offset committed with the latest transaction that went through (-1 when none did), or
        None when the group does not say within COMMITTED_WAIT_S."""
        try:
            tp = TopicPartition(self.topics.events, partition)
            return self.consumer.raw.committed([tp], timeout=COMMITTED_WAIT_S)[0].offset
        except KafkaException as error:
            log.warning("%s: the committed offset of partition %d is unknown (%s)", self.decider.name, partition, error)
            return None

    def _reopen(self, runtime: CellRuntime) -> None:
        """Back to what the store holds (the last committed batch), and the consumer back to just after it."""
        runtime.store.close()
        del self.runtimes[runtime.partition]
        fresh = self._open(runtime.partition)
        # What was committed since the store was saved is in the log: read again, it is folded, not re-decided. So
        # is the batch that failed here if its commit went through after all (a commit whose answer a failover lost
        # comes back fenced or timed out): its decisions on the log tell (`_decided_to`).
        committed = self._committed(runtime.partition)
        if committed is None:
            self._join_again()
            return
        fresh.replay_until = max(runtime.replay_until, runtime.written_to, self._decided_to(fresh, committed))
        self.consumer.seek_to(runtime.partition, fresh.replica.offset + 1)
        if self.decider.side_input:
            self.consumer.seek_to(runtime.partition, fresh.heartbeat_offset, self.topics.heartbeats)

    def _commits_fail(self) -> bool:
        """Whether the replica owns cells while its consumer's commits have failed for COMMITS_FAILING_S."""
        since = self.consumer.commits_failing_since
        if not self.runtimes or since is None or time.monotonic() - since < COMMITS_FAILING_S:
            return False
        log.warning("%s: its consumer's offset commits have failed for %.0f s (group state %s, join state %s)",
                    self.decider.name, time.monotonic() - since, *self.group)
        return True

    def _join_again(self) -> None:
        """The replica gives up its cells, as a revoke would, and a new consumer joins the group, whose assignment
        reads the offsets afresh: when a failed batch cannot be told decided or not without the committed offset
        (after all brokers restarted, a consumer's `committed` was seen timing out call after call for minutes), or
        when the consumer's commits keep failing."""
        log.warning("%s gives up its cells and joins its group again with a new consumer", self.decider.name)
        for runtime in self.runtimes.values():
            self._give_up(runtime)
        self.runtimes.clear()
        self.unowned_since = time.monotonic()
        self._replace_consumer()

    def process(self, runtime: CellRuntime, records: list[LogRecord], side: list[LogRecord]) -> None:
        replica = runtime.replica
        for record in side:
            if record.offset >= runtime.heartbeat_offset:
                if record.event is not None:
                    replica.observe(record.event)
                runtime.heartbeat_offset = record.offset + 1
        clock = time.perf_counter()
        output: list[Decision] = []
        letters = []
        headers: dict[str, list[tuple[str, str]]] = {}
        for record in records:
            if record.offset <= replica.offset:
                continue  # re-delivered: already folded
            fresh = record.offset >= runtime.replay_until
            if record.event is None:
                replica.state.offset = record.offset
                if fresh and self.decider.answers_refusals:  # one letter per record, from the gate
                    log.error("%s: %s offset %d does not decode: %s", self.decider.name, record.topic,
                              record.offset, record.error)
                    letters.append(record.dead_letter(self.decider.name, replica.state.now))
                continue
            decisions = replica.consume(record.offset, record.event)
            if self.tracer.on:
                self._remember_trace(runtime, record)
            if fresh:
                output.extend(decisions)
                for decision in decisions:
                    if isinstance(decision, m.RecordRefused) and decision.envelope.reason == Reason.NOT_ITS_WRITER:
                        log.error("%s: %s offset %d refused: %s", self.decider.name, record.topic, record.offset,
                                  decision.detail)
                        letters.append(record.dead_letter(self.decider.name, replica.state.now,
                                                          reason=f"{Reason.NOT_ITS_WRITER}: {decision.detail}"))
                if decisions and self.tracer.on:
                    self._trace(runtime, record, decisions, headers)
        consumed = records + side
        clock = self._lap("decide", clock)
        if output or letters:
            # A service gives up on a batch sooner than a launcher would: polling again is what lets its consumer
            # rejoin the group after a failover, and the batch is then read again. The decisions' bases say how far
            # the cell is decided (`_decided_to`); dead letters say nothing on the log, so their offsets go with them.
            runtime.producer.write(output, letters=letters, consumer=self.consumer if letters else None,
                                   consumed=consumed if letters else (), give_up_after_s=10.0, recover_fenced=False,
                                   headers=lambda d: headers.get(d.envelope.event_id))
            if records:
                runtime.written_to = max(runtime.written_to, records[-1].offset + 1)
        if consumed and not letters:
            # The projection below and the decisions' bases are what a restart resumes from, so the group's offsets
            # only need to follow now and then (for lag, and where a replica without a store starts looking).
            self.consumer.commit_later(consumed)
        self._lap("commit", clock)
        runtime.unsaved = runtime.unsaved or bool(consumed)

    def _remember_trace(self, runtime: CellRuntime, record: LogRecord) -> None:
        """The latest traceparent seen on a record about a job the state holds: later decisions about it join that
        trace (a refused request, or a job that has left, leaves no row behind)."""
        job = m.field_of(record.event, "job_id")
        parent = record.header("traceparent") if job in runtime.replica.state.jobs else None
        if parent is not None and len(parent) == TRACEPARENT_LENGTH:  # nothing else is saved as the job's row
            _set_trace(runtime, job, parent)

    def _trace(self, runtime: CellRuntime, record: LogRecord, decisions: list[Decision],
               headers: dict[str, list[tuple[str, str]]]) -> None:
        """One span per decision, in its job's trace (else the trigger's), linked to the triggering record."""
        replica = runtime.replica
        trigger = record.header("traceparent")
        for decision in decisions:
            job = m.field_of(decision, "job_id")
            parent = runtime.traces.get(job) if job is not None else None
            parent = parent or trigger
            if parent is None:
                continue  # nothing traced set it off
            envelope = decision.envelope
            known = replica.state.jobs.get(job) if job is not None else None
            with self.tracer.span(f"{self.decider.name} {decision.event_type}", parent=parent,
                                  links=[trigger] if trigger else (),
                                  attributes={"job": job, "team": known.team if known else None,
                                              "reason": str(envelope.reason), "basis_offset": envelope.basis_offset,
                                              "policy_version": envelope.policy_version,
                                              "trigger": f"{record.event.event_type}@{record.offset}",
                                              "event_id": envelope.event_id}) as span:
                headers[envelope.event_id] = [("traceparent", span.traceparent)]
            if job in replica.state.jobs:
                _set_trace(runtime, job, span.traceparent)

    def _extra(self, runtime: CellRuntime) -> dict[str, bytes | None]:
        """What the replica keeps besides its state, saved in the same write batch: its decisions in flight, the
        trace contexts that changed (None deletes a job's row) and, for side input, its view and the side
        topic's position."""
        replica = runtime.replica
        extra: dict[str, bytes | None] = {
            "assumed": _blob_list([self.codec.encode(d) for d in replica.assumed.values()])}
        retired = replica.state.retired_order
        for job in retired[runtime.retired_seen:]:  # jobs that left the state: no decision about them follows
            if runtime.traces.pop(job, None) is not None:
                runtime.traces_changed.add(job)
        runtime.retired_seen = len(retired)
        for job in sorted(runtime.traces_changed):
            parent = runtime.traces.get(job)
            extra[TRACE_ROW + job] = parent.encode() if parent is not None else None
        runtime.traces_changed.clear()
        if self.decider.side_input:
            extra["side"] = json.dumps({"heartbeats": replica.heartbeats, "pending": replica.pending_heartbeats,
                                        "offset": runtime.heartbeat_offset}, sort_keys=True).encode()
        return extra

    def _lap(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self.timings.seconds[phase] += now - since
        return now


def _basis(record: LogRecord, replica: Replica) -> int | None:
    """The basis offset of one of the replica's own decisions, read back; None for any other record, and for a basis
    not before the record itself (no decision is based on a record after it: such a basis would stop the replica
    deciding for good)."""
    event = record.event
    if event is None or not replica.own(event):
        return None
    basis = event.envelope.basis_offset
    return basis if basis is not None and 0 <= basis < record.offset else None


def _set_trace(runtime: CellRuntime, job: str, parent: str) -> None:
    """Makes `parent` the job's latest trace context, forgetting the least recently traced job beyond the bound."""
    traces = runtime.traces
    traces.pop(job, None)
    traces[job] = parent
    runtime.traces_changed.add(job)
    if len(traces) > TRACED_JOBS:
        oldest = next(iter(traces))
        del traces[oldest]
        runtime.traces_changed.add(oldest)


def _blob_list(blobs: list[bytes]) -> bytes:
    return json.dumps([b.hex() for b in blobs]).encode()


def _blobs(stored: bytes | None) -> list[bytes]:
    return [bytes.fromhex(h) for h in json.loads(stored or b"[]")]
