"""The Kafka log for typed events: a transactional producer and a read_committed consumer.

A service reads a batch, decides, and writes its decisions together with the consumed offsets
in one transaction (`EventProducer.transaction`), so a crash aborts both and the restarted
service re-reads the same events. Records that do not decode come back as `LogRecord`s with an
`error`, for the caller to dead-letter inside the same transaction.
"""

from __future__ import annotations

import hashlib
import logging
import operator
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from events.auth import WRITER_KEYS_ENV, WRITER_KEYS_FILE, AuthError, Credentials, client_config, signer, writer_keys
from events.broker import quiet_logger
from events.codec import EventCodec, UndecodableEvent
from events.models import DeadLetter, Envelope, Event
from events.signing import SIGNATURE_HEADERS, SIGNER, Unvouched, Verifier, may_write, vouched
from events.topics import TopicNames, cell_partition

log = logging.getLogger("gangway.log")

#: How much of an undecodable record a dead letter keeps.
KEPT_BYTES = 64 * 1024


class LogRecord(NamedTuple):
    """One consumed record: the decoded event, or the error that kept it from decoding. A named tuple: a log read
    makes one per record, at a fifth of a frozen dataclass's cost."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    event: Event | None
    error: UndecodableEvent | None = None
    timestamp_ms: int = 0  # when its producer made it (Kafka's CreateTime): for latency accounting only
    headers: tuple[tuple[str, bytes], ...] = ()

    def header(self, name: str) -> str | None:
        """A record header's value as text (the last one of that name), or None."""
        for key, value in reversed(self.headers):
            if key == name and value is not None:
                return value.decode(errors="replace")
        return None

    def dead_letter(self, producer: str, at: int, reason: str | None = None) -> DeadLetter:
        """The dead-letter event that keeps these bytes and why they could not be read (or, with `reason`, why
        they may not be taken in). Key and value are cut to their first KEPT_BYTES (with the whole value's size
        and SHA-256), so a letter always fits the topic whatever arrived."""
        assert self.error is not None or reason is not None
        value = self.value or b""
        return DeadLetter(
            envelope=Envelope(event_id=f"{producer}-deadletter-{self.partition}-{self.offset}", cell="-", at=at,
                              producer=producer),
            source_topic=self.topic, source_partition=self.partition, source_offset=self.offset,
            key=None if self.key is None else self.key[:KEPT_BYTES],
            value=None if self.value is None else value[:KEPT_BYTES], error=(reason or str(self.error))[:4096],
            value_size=len(value), value_sha256=hashlib.sha256(value).hexdigest(),
        )


#: A LogRecord from its fields in one tuple, without the keyword handling of LogRecord(...): one per record read.
_new_record = tuple.__new__
#: What a record's signature is checked on: its topic, partition, value and headers.
_SIGNED_FIELDS = operator.itemgetter(*(LogRecord._fields.index(f) for f in ("topic", "partition", "value", "headers")))


def retrying(call, attempts: int = 20, pause_s: float = 0.5):
    """Retries a call while the broker answers with a retriable error (a group coordinator still loading)."""
    for attempt in range(attempts):
        try:
            return call()
        except KafkaException as error:
            if not transient(error) or attempt == attempts - 1:
                raise
            time.sleep(pause_s)
    raise AssertionError("unreachable")


_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE)
_LEADER_MOVING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE)
#: What a call may meet while brokers fail over, besides errors the client marks retriable: the coordinator moving,
#: a partition's leader moving or not yet elected, or a new leader whose high watermark has not caught up (a topic
#: just created, a failover; librdkafka does not mark these retriable on a watermark query), a broker handle dropped from the metadata as its broker left, no broker answering, a
#: client not yet told of a topic's partitions (one made while the brokers were coming back up).
_TRANSIENT = (*_COORDINATOR_MOVING, *_LEADER_MOVING, KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT,
              KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._UNKNOWN_PARTITION,
              KafkaError._UNKNOWN_TOPIC)


def transient(error: KafkaException) -> bool:
    """Whether the same call may succeed once the brokers settle (see _TRANSIENT)."""
    return bool(error.args) and (error.args[0].retriable() or error.args[0].code() in _TRANSIENT)


def _debugging() -> dict:
    """librdkafka's debug contexts named by `GANGWAY_KAFKA_DEBUG`, for the consumers and producers alike (e.g. `cgrp`:
    the consumer group's joins and assignments; `eos,msg,protocol`: a producer's transactions, batches and their
    answers), logged by `gangway.kafka.debug`."""
    contexts = os.environ.get("GANGWAY_KAFKA_DEBUG")
    if not contexts:
        return {}
    logger = logging.getLogger("gangway.kafka.debug")
    logger.setLevel(logging.DEBUG)
    if not logger.hasHandlers():  # a command that configures no logging (gangway load) still shows them, on stderr
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        logger.addHandler(handler)
    return {"debug": contexts, "logger": logger}


#: What a commit reports when records of its transaction were never delivered (timed out in the producer).
_UNDELIVERED = (KafkaError._INCONSISTENT, KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT)


def undelivered(error: KafkaError) -> bool:
    """Whether a transaction failed because the brokers never took some of its records. After all three brokers
    were stopped and started again, a producer left so kept failing every later transaction the same way for
    minutes (its records to one partition timing out) while new producers wrote at once: it is made anew."""
    return error.txn_requires_abort() and error.code() in _UNDELIVERED


class ProducerFenced(RuntimeError):
    """Another process took this producer's transactional id: it owns the cell now, and this one must stop."""


#: A send_offsets_to_transaction call's timeout, and how long past it the call is waited for before it is
#: abandoned. It takes milliseconds, and a coordinator's move a few seconds; once stuck (librdkafka#5456) it
#: never returns, and everything the writer takes in waits this long (compose/KAFKA.md).
SEND_OFFSETS_TIMEOUT_S = 8.0
SEND_OFFSETS_GRACE_S = 2.0
#: How many such calls this process gave up on: librdkafka may wait for them for ever, also while the interpreter
#: finalizes (services/run_cli.py `leave`).
_abandoned_calls = 0


def abandoned_calls() -> int:
    """How many librdkafka calls this process gave up on (`EventProducer._send_offsets`)."""
    return _abandoned_calls

_FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


Headers = Sequence[tuple[str, bytes | str]]


#: The suffix of a writer's second transactional id (`EventProducer(by_turns=True)`). A transaction begun right after
#: a commit under the same id meets CONCURRENT_TRANSACTIONS until the broker has written that commit's markers:
#: with three brokers that wait was most of a transaction (docs/benchmarks.md). '~' is in no cell, service or replica
#: name, so no writer's first id is another's second.
SECOND_ID = "~2"


class EventProducer:
    """Writes events to their cell's partition, inside Kafka transactions. With `inputs`, a writer from outside
    the control plane (launcher, agent, fleet): every event goes to its input topic instead (events/topics.py;
    an agent's all to its node's), for the intake to take into the cell's log. `principal` names the Kafka identity (events/auth.py)."""

    def __init__(self, bootstrap_servers: str, transactional_id: str, topics: TopicNames, cells: Sequence[str],
                 codec: EventCodec | None = None, transaction_timeout_ms: int = 10_000,
                 principal: str | Credentials | None = None, inputs: bool | Callable[[Event], str] = False,
                 by_turns: bool = False) -> None:
        self.topics, self.cells = topics, tuple(cells)
        self.codec = codec or EventCodec()
        self.inputs = inputs  # True: each event's input topic (TopicNames.input_topic); or a function choosing it
        self.bootstrap, self.principal = bootstrap_servers, principal
        self._made: set[str] = set()  # input topics known to exist
        self._signer = signer(principal, bootstrap_servers)  # a writer of the cell logs signs what it writes
        self._unsigned: list[tuple[str, int, bytes | None, bytes, Headers | None]] | None = None
        self._config = {
            **client_config(bootstrap_servers, principal),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": transaction_timeout_ms,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 1,
            # A transaction begun right after the last commit meets CONCURRENT_TRANSACTIONS while the broker
            # writes that commit's markers; librdkafka retries after retry.backoff.ms (100 ms by default, growing
            # to at most 1 s). 5 ms took a small transaction from 109 ms to 16 ms (median) on one local broker.
            "retry.backoff.ms": 5,
            "logger": quiet_logger(),
            **_debugging(),
        }
        if inputs:
            # One request in flight, so a request the broker refused is written again before any later one is sent.
            # A writer's transactional id is new to its input topic (a launcher's always; an agent's on its node's
            # first start, right after making the topic), and the broker takes any first sequence number from a
            # producer it does not know. With requests pipelined, the first refused (the topic just made, its
            # leader not yet serving it: NOT_LEADER_OR_FOLLOWER) and the next taken, librdkafka counts the refused
            # records as delivered ("implicitly acked by subsequent batch success") and the transaction commits
            # without them (librdkafka 2.16's debug log of `gangway demo`). tests/integration/test_input_writes.py
            # lost 1 to 4 records of 7 in 6 and in 2 of 64 transactions with 5 in flight, none with 1.
            self._config["max.in.flight.requests.per.connection"] = 1
        self._spare: tuple[Producer, dict] | None = None  # with `by_turns`: the other producer and its config
        self._renewing: Producer | None = None  # made to replace the current one, its transactions not yet begun
        self._producer = self._started(self._config)
        self._abandoned = self._broken = False
        if by_turns:
            spare = {**self._config, "transactional.id": transactional_id + SECOND_ID}
            self._spare = (self._started(spare), spare)

    def renew(self, within_s: float) -> None:
        """Makes the producer anew under the same transactional id, which fences the old one and aborts the
        transaction it left open. Waits at most `within_s` for the transaction coordinator, and raises its error
        when it does not answer in time: the producer stays unusable, and the next call waits again on the same
        new one (a write's deadline bounds it, where a new writer waits up to 30 min for its brokers)."""
        if self._renewing is None:
            self._renewing = Producer(self._config)
        try:
            self._renewing.init_transactions(max(within_s, 0.1))
        except KafkaException as failure:
            if not transient(failure):
                self._renewing = None  # past saving: the next call makes another
            raise
        self._producer, self._renewing = self._renewing, None
        self._abandoned = self._broken = False

    @property
    def broken(self) -> bool:
        """Whether the producer can no longer be used (the next `write` makes it anew): a transaction it left
        open stays open until then, or until the broker times it out."""
        return self._broken

    @staticmethod
    def _started(config: dict) -> Producer:
        producer = Producer(config)
        # Fences any earlier producer with this id and aborts its open transaction at once.
        retrying(lambda: producer.init_transactions(30), attempts=60)
        return producer

    def _take_turns(self) -> None:
        """After a commit, the next transaction goes to the other producer (`by_turns`), whose last commit's markers
        were written long ago. The order of the log holds: a transaction begins only once the one before has
        committed, so its records and its consumed offsets are written after that one's (the group keeps the
        offsets written last, whichever commit's markers land first)."""
        if self._spare is not None:
            (self._producer, self._config), self._spare = self._spare, (self._producer, self._config)

    def write(self, events: Sequence[Event] = (), heartbeats: Sequence[Event] = (),
              letters: Sequence[DeadLetter] = (), consumer: EventConsumer | None = None,
              consumed: Sequence[LogRecord] = (), give_up_after_s: float = 120.0, recover_fenced: bool = True,
              headers: Callable[[Event], Headers | None] | None = None) -> None:
        """Writes events, heartbeats and dead letters, with the offsets after `consumed`, in one transaction, and
        sees it through a broker's failover: a commit that times out is retried, a transaction the broker
        aborted is written again, a producer the broker can no longer use (or fenced once, as a failover can do)
        is made anew under the same transactional id (before the next transaction: this write's, or the next
        write's if this one gives up). Raises ProducerFenced when fenced again (another process has the id) or,
        with `recover_fenced` False, at once; else the last error after `give_up_after_s`."""
        deadline = time.monotonic() + give_up_after_s
        pause = 0.2
        fenced = False
        while True:
            try:
                if self._broken:
                    self.renew(deadline - time.monotonic())
                with self.transaction(consumer, consumed):
                    for event in events:
                        self.produce(event, headers(event) if headers else None)
                    for event in heartbeats:
                        self.produce_heartbeat(event, headers(event) if headers else None)
                    for letter in letters:
                        self.produce_dead_letter(letter)
                return
            except KafkaException as failure:
                error = failure.args[0] if failure.args else None
                if error is not None and error.code() in _FENCED:
                    # A coordinator that failed over may have aborted our transaction and bumped the epoch, which
                    # fences us too: re-initialise once. Fenced again, another process has the id.
                    if fenced or not recover_fenced:
                        raise ProducerFenced(str(error)) from failure
                    fenced = True
                if error is not None and (error.fatal() or error.code() == KafkaError._CONFLICT or undelivered(error)):
                    # The old producer is unusable (or stuck in an abort that never returns, so every call
                    # conflicts with it, or left unable to deliver to a partition): a new one resumes the
                    # transactional id and fences it. Were it kept after giving up, every later transaction would
                    # meet the one left open, or fail the same way.
                    self._broken = True
                if error is None or time.monotonic() > deadline:
                    raise
                log.warning("transaction of %s failed (%s), writing it again", self._config["transactional.id"], error)
                if not (self._broken or transient(failure) or error.txn_requires_abort()):
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    def produce(self, event: Event, headers: Headers | None = None) -> None:
        cell = event.envelope.cell
        if self.inputs:
            self._produce_input(event, headers)
            return
        self._send(self.topics.events, cell_partition(self.cells, cell), cell.encode(), self.codec.encode(event),
                   headers)

    def produce_heartbeat(self, event: Event, headers: Headers | None = None) -> None:
        """Heartbeats go to the short-retention heartbeat topic, same cell partition as the main log."""
        cell = event.envelope.cell
        if self.inputs:
            self._produce_input(event, headers)
            return
        self._send(self.topics.heartbeats, cell_partition(self.cells, cell), cell.encode(), self.codec.encode(event),
                   headers)

    def produce_to(self, topic: str, partition: int, value: bytes, key: bytes | None = None,
                   headers: Headers | None = None) -> None:
        """Raw bytes to a topic's partition (the intake copies a record's value as it came)."""
        self._send(topic, partition, key, value, headers)

    def make_inputs(self, topics: Sequence[str]) -> None:
        """Creates the input topics this writer will write that it has not made yet, in one request."""
        missing = [t for t in topics if t not in self._made]
        if missing:
            ensure_input_topics(self.bootstrap, self.principal, missing)
            self._made.update(missing)

    def _produce_input(self, event: Event, headers: Headers | None) -> None:
        topic = self.inputs(event) if callable(self.inputs) else self.topics.input_topic(event)
        if topic not in self._made:
            self.make_inputs([topic])
        self._send(topic, 0, event.envelope.cell.encode(), self.codec.encode(event), headers)

    def produce_dead_letter(self, letter: DeadLetter) -> None:
        self._send(self.topics.deadletter, 0, letter.key, self.codec.encode(letter), None)

    def _send(self, topic: str, partition: int, key: bytes | None, value: bytes, headers: Headers | None) -> None:
        """Produces a record; a signing writer holds its transaction's records back until they are signed."""
        if self._unsigned is not None:
            self._unsigned.append((topic, partition, key, value, headers))
        elif self._signer is not None:
            raise RuntimeError("a signing writer produces only inside a transaction (EventProducer.transaction)")
        else:
            self._producer.produce(topic, key=key, value=value, partition=partition, headers=headers)

    def _produce_signed(self) -> None:
        """The held-back records, each partition's signed as one batch (events/signing.py), in the order made."""
        held, self._unsigned = self._unsigned or [], None
        by_partition: dict[tuple[str, int], list[int]] = {}
        for i, (topic, partition, *_rest) in enumerate(held):
            by_partition.setdefault((topic, partition), []).append(i)
        signatures: dict[int, list[tuple[str, bytes]]] = {}
        for (topic, partition), indices in sorted(by_partition.items()):
            for i, headers in zip(indices, self._signer.sign(topic, partition, [held[i][3] for i in indices])):
                signatures[i] = headers
        for i, (topic, partition, key, value, headers) in enumerate(held):
            kept = [h for h in headers or () if h[0] not in SIGNATURE_HEADERS]  # a copied record's are not ours
            self._producer.produce(topic, key=key, value=value, partition=partition, headers=[*kept, *signatures[i]])

    @contextmanager
    def transaction(self, consumer: EventConsumer | None = None,
                    consumed: Sequence[LogRecord] = ()) -> Iterator[EventProducer]:
        """Everything produced in the block, plus the offsets after `consumed`, commits or aborts as one; once
        committed, the consumer drops the offsets it held back that the transaction passed."""
        self._producer.begin_transaction()
        self._unsigned = [] if self._signer is not None else None
        try:
            yield self
            if self._signer is not None:
                self._produce_signed()
            if consumer is not None and consumed:
                self._send_offsets(consumer.next_offsets(consumed), consumer.group_metadata())
            self._commit()
        except BaseException:
            self._unsigned = None
            self._abort()
            raise
        if consumer is not None and consumed:
            consumer.committed_in_transaction(consumed)
        self._take_turns()

    def _send_offsets(self, offsets: list[TopicPartition], group: object) -> None:
        """send_offsets_to_transaction, given up on when it overstays its timeout: librdkafka can block in it for
        good once the group coordinator's broker is gone (confluentinc/librdkafka#5456, #5511; seen here when a
        broker was killed). The call runs on a thread of its own; abandoned, it raises a fatal error, so the
        producer is made anew under the same transactional id, which fences the stuck one and aborts its
        transaction: nothing of it is committed, and the batch is written again."""
        timeout = SEND_OFFSETS_TIMEOUT_S
        outcome: list[BaseException | None] = []

        def call() -> None:
            try:
                self._producer.send_offsets_to_transaction(offsets, group, timeout)
                outcome.append(None)
            except BaseException as error:  # handed to the caller's thread
                outcome.append(error)

        worker = threading.Thread(target=call, name="send-offsets", daemon=True)
        worker.start()
        worker.join(timeout + SEND_OFFSETS_GRACE_S)
        if not outcome:
            global _abandoned_calls
            _abandoned_calls += 1
            self._abandoned = True  # its transaction API is busy for good: no abort, a new producer replaces it
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"send_offsets_to_transaction did not return "
                                            f"within {timeout + SEND_OFFSETS_GRACE_S:.0f} s", fatal=True))
        if outcome[0] is not None:
            raise outcome[0]

    def _commit(self, attempts: int = 6) -> None:
        """Commits, calling again while the broker says a retry may succeed (a coordinator moving, a timeout)."""
        for attempt in range(attempts):
            try:
                self._producer.commit_transaction(30)
                return
            except KafkaException as failure:
                error = failure.args[0] if failure.args else None
                if error is None or not error.retriable() or attempt == attempts - 1:
                    raise
                time.sleep(0.5)

    def _abort(self) -> None:
        """Aborts the open transaction if the producer still can; a producer past saving is replaced by `write`."""
        if self._abandoned:
            return
        try:
            self._producer.abort_transaction(30)
        except KafkaException as failure:
            error = failure.args[0] if failure.args else None
            if error is not None and (error.code() == KafkaError._STATE or error.fatal() or error.retriable()):
                return
            raise

    def flush(self, timeout: float = 30) -> None:
        self._producer.flush(timeout)
        if self._spare is not None:
            self._spare[0].flush(timeout)


def ensure_input_topic(bootstrap: str, principal: str | Credentials | None, topic: str, timeout: float = 30.0) -> None:
    """Creates an input topic (one partition; inputs are taken into the cells' logs within seconds, so a week
    of retention is plenty) unless it exists; its owner may create it (events/auth.py)."""
    ensure_input_topics(bootstrap, principal, [topic], timeout)


def ensure_input_topics(bootstrap: str, principal: str | Credentials | None, topics: Sequence[str],
                        timeout: float = 30.0) -> None:
    """`ensure_input_topic` for several topics in one request: a writer with many inputs (a fleet's nodes) makes
    them all before its first write, so the intake finds them together instead of rebalancing once per topic."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(bootstrap, principal, logger=quiet_logger()))
    config = {"retention.ms": str(7 * 24 * 3600 * 1000)}
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1, config=config)
                                   for topic in sorted(set(topics))], request_timeout=timeout)
    for future in futures.values():
        try:
            future.result(timeout=timeout)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


class EventConsumer:
    """Reads committed events of some cells' partitions, decoding as it goes."""

    def __init__(self, bootstrap_servers: str, group_id: str, topics: TopicNames, cells: Sequence[str],
                 assign: Sequence[str] | None = None, codec: EventCodec | None = None,
                 principal: str | Credentials | None = None, **config: object) -> None:
        self.topics, self.cells = topics, tuple(cells)
        self.codec = codec or EventCodec()
        self._pending: dict[tuple[str, int], int] = {}
        self._sent: dict[tuple[str, int], int] = {}  # offsets committed asynchronously whose answer has not come
        #: when the first of the offset commits failing since the last that went through failed (None: none fails)
        self.commits_failing_since: float | None = None
        self._missing_ok = False  # whether a subscribed topic that does not exist is no error
        self._met: KafkaException | None = None  # an error met in a batch that had records: the next poll raises it
        self.decode_seconds = 0.0  # time spent decoding, for the service's timings
        self._last_commit = 0.0
        keys = writer_keys(bootstrap_servers)
        self.verifier = Verifier(keys) if keys else None  # the cell logs' records are signed: each is checked
        self._signed = (topics.events, topics.heartbeats)
        self._consumer = Consumer({
            **client_config(bootstrap_servers, principal),
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            # A replica killed with -9 loses its cells to the others after this long.
            "session.timeout.ms": 6_000,
            "heartbeat.interval.ms": 1_500,
            # How long a fetch that finds nothing new waits at the broker (librdkafka's default). A commit wakes
            # it: a decision committed upstream is seen within milliseconds whatever this is, and each wait that
            # ends empty is one more request for the broker to serve (10 ms made the broker's CPU 21% higher
            # under load, with no latency gained: docs/benchmarks.md).
            "fetch.wait.max.ms": 500,
            "on_commit": self._on_commit,
            "logger": quiet_logger(),
            **config,
            **_debugging(),
        })
        if assign is not None:
            self.assign_cells(assign)

    def assign_cells(self, cells: Sequence[str]) -> None:
        """Reads these cells' partitions from their committed offsets (or the start)."""
        partitions = [TopicPartition(self.topics.events, cell_partition(self.cells, c)) for c in cells]
        committed = retrying(lambda: self._consumer.committed(partitions, timeout=30))
        self._consumer.assign([TopicPartition(p.topic, p.partition, p.offset if p.offset >= 0 else 0)
                               for p in committed])

    def subscribe(self, topics: Sequence[str], on_assign: Callable, on_revoke: Callable,
                  missing_ok: bool = False) -> None:
        """Joins the consumer group: partitions (cells) are shared among replicas and move when one dies.
        `on_assign(consumer, partitions)` may set each partition's start offset before reading begins. With
        `missing_ok` (always for a pattern), a topic that does not exist, yet or any more, is no error."""
        self._missing_ok = missing_ok or any(t.startswith("^") for t in topics)
        self._consumer.subscribe(list(topics), on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)

    def cluster_id(self) -> str:
        """The id of the Kafka cluster this consumer reads: part of the identity of a log."""
        return retrying(lambda: self._consumer.list_topics(timeout=30).cluster_id)

    def poll(self, max_records: int = 500, timeout: float = 1.0) -> list[LogRecord]:
        """The records that have arrived, decoded. An error met among them is raised once they are delivered: at
        once when there are none, else by the next call. librdkafka has handed over the whole batch (its position
        is past it), so raising at the error would lose every record of the batch to a caller that polls on."""
        if self._met is not None:
            met, self._met = self._met, None
            raise met
        records = []
        # Take what is already here; wait only when nothing is, and then for the first record alone,
        # so a quiet log costs latency nobody sees and a busy one is read in batches.
        messages = self._consumer.consume(max_records, 0)
        if not messages:
            first = self._consumer.poll(timeout)
            messages = [] if first is None else [first, *self._consumer.consume(max_records - 1, 0)]
        began = time.perf_counter()
        met = None
        signed = []  # the records whose signature says whether and how they are taken
        decode, keep, signed_topics = self.codec.decode, records.append, self._signed
        for message in messages:
            failed = message.error()
            if failed is not None:
                if failed.code() == KafkaError._PARTITION_EOF:
                    continue
                if self._missing_ok and failed.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # a topic not created yet, or deleted
                met = met or KafkaException(failed)
                continue
            topic, value = message.topic(), message.value()
            try:
                event, error = decode(value), None
            except UndecodableEvent as undecodable:
                event, error = None, undecodable
            if event is not None and topic in signed_topics:
                signed.append(len(records))
            headers = message.headers()
            keep(_new_record(LogRecord, (topic, message.partition(), message.offset(), message.key(), value, event,
                                         error, message.timestamp()[1], tuple(headers) if headers else ())))
        if signed:
            self._vouch(records, signed)
        self.decode_seconds += time.perf_counter() - began
        if met is not None:
            if not records:
                raise met
            self._met = met
        return records

    def _vouch(self, records: list[LogRecord], signed: Sequence[int]) -> None:
        """Each of `records[i]` for i in `signed` as its signature vouches for it: on the cell's log marked
        unverified when its signer may not write it (the fold refuses it); a heartbeat so signed is dropped (it is
        side input, never folded). A reader without the writers' keys stops at the first signed record rather than
        fold it unchecked. The signatures of a whole poll are checked together, newest first
        (Verifier.signers_of)."""
        if self.verifier is None:
            for record in (records[i] for i in signed):
                if any(name == SIGNER for name, _ in record.headers):
                    raise AuthError(f"the records of {record.topic} are signed, and this reader has no writers' keys "
                                    f"to check them with: set {WRITER_KEYS_ENV} to the {WRITER_KEYS_FILE} beside the "
                                    f"broker's principal store")
            return
        signers = self.verifier.signers_of(list(map(_SIGNED_FIELDS, map(records.__getitem__, signed))))
        for i, who in zip(signed, signers):
            record = records[i]
            if record.topic == self._signed[0]:
                event = vouched(record.event, who)
                if event is not record.event:
                    records[i] = record._replace(event=event)
            elif not may_write(who, record.event):
                records[i] = record._replace(event=None, error=Unvouched(
                    f"a heartbeat {'signed by ' + who if who else 'not signed'}: not the intake's"))

    def next_offsets(self, consumed: Sequence[LogRecord]) -> list[TopicPartition]:
        """The offsets to commit after `consumed`: last offset + 1 per partition (computed, never position())."""
        last: dict[tuple[str, int], int] = {}
        for record in consumed:
            key = (record.topic, record.partition)
            last[key] = max(last.get(key, -1), record.offset)
        return [TopicPartition(t, p, o + 1) for (t, p), o in sorted(last.items())]

    def commit_later(self, consumed: Sequence[LogRecord], every_s: float = 5.0) -> None:
        """Commits offsets after `consumed` outside any transaction, at most every `every_s` seconds."""
        self._pending.update({(t.topic, t.partition): t.offset for t in self.next_offsets(consumed)})
        if time.monotonic() - self._last_commit >= every_s:
            self.flush_commits()

    def committed_in_transaction(self, consumed: Sequence[LogRecord]) -> None:
        """A transaction committed the offsets after `consumed`: offsets `commit_later` holds back that are not past
        them are dropped, so committing those later cannot take the group's offset back behind the transaction's
        (a restart would then decide again, and write twice, what the transaction's batch decided)."""
        self.commits_failing_since = None  # the group took the transaction's offsets
        for t in self.next_offsets(consumed):
            key = (t.topic, t.partition)
            for held in (self._pending, self._sent):
                if held.get(key, t.offset + 1) <= t.offset:
                    del held[key]

    def forget(self, partitions: Sequence[TopicPartition]) -> None:
        """The group gave these partitions to another member: offsets held back for them are dropped. Their new
        owner commits its own, and ours, committed later, could take the group's offset back behind its."""
        for t in partitions:
            self._pending.pop((t.topic, t.partition), None)
            self._sent.pop((t.topic, t.partition), None)

    def flush_commits(self) -> None:
        """Commits what `commit_later` holds back now: when the log falls quiet, so the group's lag reads 0."""
        if self._pending:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(self._pending.items())],
                                  asynchronous=True)
            self._sent.update(self._pending)
            self._pending.clear()
        self._last_commit = time.monotonic()

    def _on_commit(self, error: KafkaError | None, partitions: Sequence[TopicPartition]) -> None:
        """librdkafka's answer to a commit (served by a poll). An offset `flush_commits` sent that did not commit
        (its coordinator moved or restarted, its generation ended) is held back again, to be sent with the next
        flush, unless a later offset, a transaction or the partition's new owner has taken its place meanwhile:
        else the group's offset would stay behind what was consumed until the next record came."""
        whole = error is not None and error.code() != KafkaError._NO_OFFSET  # _NO_OFFSET: there was nothing to commit
        failed = whole
        for t in partitions:
            lost = whole or t.error is not None
            failed = failed or lost
            key = (t.topic, t.partition)
            if self._sent.get(key) != t.offset:
                continue  # not ours to answer for any more, or a later offset has been sent since
            del self._sent[key]
            if lost:
                self._pending.setdefault(key, t.offset)
        if not failed:
            self.commits_failing_since = None
        elif self.commits_failing_since is None:
            self.commits_failing_since = time.monotonic()

    def group_metadata(self) -> object:
        return self._consumer.consumer_group_metadata()

    def seek_to(self, partition: int, offset: int, topic: str | None = None) -> None:
        self._consumer.seek(TopicPartition(topic or self.topics.events, partition, offset))

    def close(self) -> None:
        self._consumer.close()

    @property
    def raw(self) -> Consumer:
        """The confluent-kafka consumer, for the rebalance callbacks' assign()."""
        return self._consumer


def input_principal(topics: TopicNames, event: Event) -> str:
    """The principal that owns an input's topic: team.T, agent.N or operator (events/auth.py)."""
    kind, name = topics.source_of(topics.input_topic(event)) or ("operator", "")
    return {"team": f"team.{name}", "node": f"agent.{name}"}.get(kind, "operator")


class InputWriter:
    """Writes inputs from outside the control plane to their input topics, each as the principal that owns
    it: one transactional producer per principal, made when first needed (the launcher, the trace loader and
    the demo write for several teams and the operators)."""

    def __init__(self, bootstrap: str, topics: TopicNames, cells: Sequence[str], name_prefix: str = "",
                 principal: str | Credentials | None = None) -> None:
        self.bootstrap, self.topics, self.cells, self.name_prefix = bootstrap, topics, tuple(cells), name_prefix
        self.principal = principal  # one fixed identity (the fleet's), else each input's owner
        self._producers: dict[str, EventProducer] = {}

    def producer(self, event: Event) -> EventProducer:
        owner = self.principal if self.principal is not None else input_principal(self.topics, event)
        key = owner.user if isinstance(owner, Credentials) else owner
        if key not in self._producers:
            self._producers[key] = EventProducer(
                self.bootstrap, f"{self.name_prefix}gangway-launcher-{key}-{uuid.uuid4().hex}", self.topics,
                self.cells, principal=owner, inputs=True)
        return self._producers[key]

    def write(self, events: Sequence[Event], headers: Callable[[Event], Headers | None] | None = None) -> None:
        """One transaction per principal, in the order of each one's events."""
        by_producer: dict[int, tuple[EventProducer, list[Event]]] = {}
        for event in events:
            producer = self.producer(event)
            by_producer.setdefault(id(producer), (producer, []))[1].append(event)
        for producer, owned in by_producer.values():
            producer.write(owned, headers=headers)

    def flush(self) -> None:
        for producer in self._producers.values():
            producer.flush()
