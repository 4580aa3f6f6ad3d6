"""A writer by turns (events/log.py `by_turns`: two transactional ids, one transaction under each in turn) on the real
broker: a new writer of the same id fences both of the old one's, and the consumed offsets the group keeps are
those of the last transaction, whichever of the two ids wrote it."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import TopicPartition

from events.log import EventConsumer, EventProducer, ProducerFenced
from tests.builders import tick

pytestmark = [pytest.mark.kafka]

CELLS = ["cell-a"]


def clock_tick(at: int):
    """A Tick as the clock stamps it, in the log's cell."""
    event = tick(at)
    return event.model_copy(update={"envelope": event.envelope.model_copy(update={"cell": "cell-a"})})


def test_a_new_writer_fences_both_ids_of_the_old_one(kafka_bootstrap, gangway_topics):
    name = f"test-turns-{uuid.uuid4().hex[:8]}"
    under_first = EventProducer(kafka_bootstrap, name, gangway_topics, CELLS, by_turns=True)
    under_second = EventProducer(kafka_bootstrap, f"{name}-b", gangway_topics, CELLS, by_turns=True)
    under_second.write([clock_tick(1_000)])  # its next transaction goes under its second id
    EventProducer(kafka_bootstrap, name, gangway_topics, CELLS, by_turns=True)
    EventProducer(kafka_bootstrap, f"{name}-b", gangway_topics, CELLS, by_turns=True)
    for old in (under_first, under_second):
        with pytest.raises(ProducerFenced):
            old.write([clock_tick(2_000)], recover_fenced=False, give_up_after_s=5)


def test_the_group_keeps_the_offsets_of_the_last_transaction(kafka_bootstrap, gangway_topics):
    feeder = EventProducer(kafka_bootstrap, f"test-feeder-{uuid.uuid4().hex[:8]}", gangway_topics, CELLS)
    feeder.write([clock_tick(at) for at in range(1_000, 1_020)])
    writer = EventProducer(kafka_bootstrap, f"test-turns-{uuid.uuid4().hex[:8]}", gangway_topics, CELLS, by_turns=True)
    consumer = EventConsumer(kafka_bootstrap, f"test-{uuid.uuid4().hex[:8]}", gangway_topics, CELLS, assign=CELLS)
    try:
        last = -1
        while last < 19:
            for record in consumer.poll(100, 1.0):  # one transaction per record, under each id in turn
                writer.write([clock_tick(5_000 + record.offset)], consumer=consumer, consumed=[record])
                last = record.offset
        committed = consumer.raw.committed([TopicPartition(gangway_topics.events, 0)], timeout=30)
    finally:
        consumer.close()
    assert committed[0].offset == last + 1


def test_offsets_held_back_never_take_the_group_behind_a_transaction(kafka_bootstrap, gangway_topics):
    """A batch that wrote nothing commits its offsets later (`commit_later`); a transaction that commits later
    offsets meanwhile drops them, so the commit held back cannot take the group's offset behind the transaction's
    (a service restarted from there would decide that batch again and write its decisions twice)."""
    feeder = EventProducer(kafka_bootstrap, f"test-feeder-{uuid.uuid4().hex[:8]}", gangway_topics, CELLS)
    feeder.write([clock_tick(at) for at in range(1_000, 1_003)])
    writer = EventProducer(kafka_bootstrap, f"test-turns-{uuid.uuid4().hex[:8]}", gangway_topics, CELLS, by_turns=True)
    consumer = EventConsumer(kafka_bootstrap, f"test-{uuid.uuid4().hex[:8]}", gangway_topics, CELLS, assign=CELLS)
    partition = [TopicPartition(gangway_topics.events, 0)]
    committed = None
    try:
        records = []
        while len(records) < 3:
            records += consumer.poll(100, 1.0)
        consumer.commit_later(records[:1])  # the first commit goes at once
        consumer.commit_later(records[1:2])  # within 5 s of it: held back
        writer.write([clock_tick(5_000)], consumer=consumer, consumed=records[2:])
        consumer.flush_commits()  # as a service does when its log falls quiet
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # an asynchronous commit lands within a poll or two
            consumer.poll(1, 0.2)
            committed = consumer.raw.committed(partition, timeout=30)[0].offset
    finally:
        consumer.close()
    assert committed == 3
