"""Typed events through real Kafka transactions: committed ones decode equal, aborted ones are never
seen, consumed offsets commit with the output, undecodable bytes reach the dead-letter topic."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from events.auth import client_config
from events.broker import quiet_logger
from events.log import EventConsumer, EventProducer, LogRecord
from events.models import DeadLetter, Envelope, JobPlaced, JobSubmitted, Tick, WorkerAssignment
from events.reader import LogReader
from events.topics import TopicNames, cell_partition, ensure_topics, topic_names

pytestmark = pytest.mark.kafka
CELLS = ("cell-a", "cell-b")


@pytest.fixture
def gangway_topics(topic_prefix, kafka_admin, kafka_replication_factor) -> TopicNames:
    """This module's topics: two cells, so two partitions of the main topic."""
    ensure_topics(kafka_admin, CELLS, kafka_replication_factor, prefix=topic_prefix)
    return topic_names(topic_prefix)


def envelope(n: int, cell: str = "cell-a") -> Envelope:
    return Envelope(event_id=f"e-{n}", cell=cell, at=1_700_000_000_000 + n, producer="test")


def submitted(n: int, cell: str = "cell-a") -> JobSubmitted:
    return JobSubmitted(envelope=envelope(n, cell), job_id=f"job-{n}", team="nlp", workers=2, gpus_per_worker=8,
                        gpu_type="H100", labels={"n": str(n)})


def poll_until(consumer: EventConsumer, expected: int, timeout: float = 60.0) -> list[LogRecord]:
    """Polls until `expected` records arrived or `timeout` seconds passed (a fresh consumer on a loaded broker can
    take many seconds to fetch its first batch); what arrived, for the caller to check."""
    records: list[LogRecord] = []
    deadline = time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        records += consumer.poll(timeout=1.0)
    return records


def read(bootstrap: str, topics: TopicNames, expected: int, cell: str = "cell-a",
         group: str | None = None) -> list[LogRecord]:
    consumer = EventConsumer(bootstrap, group or f"g-{uuid.uuid4().hex}", topics, CELLS, assign=[cell])
    try:
        return poll_until(consumer, expected)
    finally:
        consumer.close()


def producer(bootstrap: str, topics: TopicNames, name: str = "") -> EventProducer:
    return EventProducer(bootstrap, name or f"txn-{uuid.uuid4().hex}", topics, CELLS)


def test_committed_events_decode_back_equal_and_aborted_ones_are_never_seen(kafka_bootstrap, gangway_topics):
    placed = JobPlaced(envelope=envelope(3), job_id="job-1", attempt=1, domain="b1/r2",
                       assignments=[WorkerAssignment(worker=0, node="n1", gpus=[0, 1, 2, 3])])
    log = producer(kafka_bootstrap, gangway_topics)
    with log.transaction():
        log.produce(submitted(1))
        log.produce(placed)
    with pytest.raises(RuntimeError), log.transaction():
        log.produce(submitted(2))
        raise RuntimeError("the service crashed mid-batch")
    with log.transaction():
        log.produce(Tick(envelope=envelope(4)))
    records = read(kafka_bootstrap, gangway_topics, expected=3)
    assert [r.event for r in records] == [submitted(1), placed, Tick(envelope=envelope(4))]
    assert all(r.error is None for r in records)


def test_events_go_to_their_cells_partition(kafka_bootstrap, gangway_topics):
    log = producer(kafka_bootstrap, gangway_topics)
    with log.transaction():
        log.produce(submitted(1, "cell-b"))
        log.produce(submitted(2, "cell-a"))
    (b,) = read(kafka_bootstrap, gangway_topics, expected=1, cell="cell-b")
    assert (b.partition, b.key, b.event) == (cell_partition(CELLS, "cell-b"), b"cell-b", submitted(1, "cell-b"))


def test_consumed_offsets_commit_in_the_same_transaction_as_the_output(kafka_bootstrap, gangway_topics):
    log = producer(kafka_bootstrap, gangway_topics)
    with log.transaction():
        for n in range(3):
            log.produce(submitted(n))
    group = f"service-{uuid.uuid4().hex}"
    first = read(kafka_bootstrap, gangway_topics, expected=3, group=group)
    assert len(first) == 3
    consumer = EventConsumer(kafka_bootstrap, group, gangway_topics, CELLS, assign=["cell-a"])
    batch = poll_until(consumer, 2)[:2]
    assert len(batch) == 2, batch
    service = producer(kafka_bootstrap, gangway_topics, name=f"admitter-{uuid.uuid4().hex}")
    with pytest.raises(RuntimeError), service.transaction(consumer, batch):
        service.produce(Tick(envelope=envelope(10)))
        raise RuntimeError("crash before commit: neither output nor offsets land")
    with service.transaction(consumer, batch):
        service.produce(Tick(envelope=envelope(11)))
    consumer.close()
    # A restarted replica of the same group resumes right after the two events whose output committed.
    resumed = read(kafka_bootstrap, gangway_topics, expected=2, group=group)
    assert [r.event for r in resumed] == [submitted(2), Tick(envelope=envelope(11))]


def test_a_log_reader_rewound_reads_again_from_there_up_to_where_it_is_told(kafka_bootstrap, gangway_topics):
    log = producer(kafka_bootstrap, gangway_topics)
    for batch in range(3):
        with log.transaction():
            for n in range(3):
                log.produce(submitted(3 * batch + n))
    with LogReader(["cell-a"], kafka_bootstrap, all_cells=CELLS, topics=gangway_topics) as reader:
        whole = [(r.offset, r.event) for r in reader.read()]
        offsets = [offset for offset, _ in whole]
        assert [e for _, e in whole] == [submitted(n) for n in range(9)]
        reader.rewind(offsets[4])  # back, after reading to the end
        assert [(r.offset, r.event) for r in reader.read(offsets[6])] == whole[4:7]
        reader.rewind(offsets[1])  # further back still
        assert [(r.offset, r.event) for r in reader.read(offsets[3])] == whole[1:4]


def test_undecodable_bytes_are_kept_in_the_dead_letter_topic(kafka_bootstrap, gangway_topics):
    raw = Producer({**client_config(kafka_bootstrap), "logger": quiet_logger()})
    raw.produce(gangway_topics.events, key=b"cell-a", value=b"\x00 not avro", partition=0)
    raw.flush(30)
    (poison,) = read(kafka_bootstrap, gangway_topics, expected=1)
    assert poison.event is None and poison.error is not None
    log = producer(kafka_bootstrap, gangway_topics)
    with log.transaction():
        log.produce_dead_letter(poison.dead_letter("admitter", at=1))
    consumer = EventConsumer(kafka_bootstrap, f"g-{uuid.uuid4().hex}",
                             TopicNames(gangway_topics.deadletter, "", ""), ["cell-a"], assign=["cell-a"])
    letters = poll_until(consumer, 1)
    consumer.close()
    assert letters, "no dead letter within 60 s"
    letter = letters[0].event
    assert isinstance(letter, DeadLetter)
    assert (letter.value, letter.source_offset, letter.error.split(":")[0]) == (b"\x00 not avro", poison.offset,
                                                                               "NOT_SINGLE_OBJECT")
