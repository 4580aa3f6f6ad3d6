"""An input writer's transaction reaches its topic whole, even written straight after the topic was made (as a fleet
makes its nodes' topics and an agent writes its first facts): the real broker, the real writer."""

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, TopicPartition

from events import models as m
from events.auth import SIGNING_KEY_ENV, client_config
from events.broker import quiet_logger
from events.log import EventProducer

pytestmark = pytest.mark.kafka

#: Topics made in the one request with the written one: the broker makes their logs one by one, which keeps the
#: written topic's leader from serving it for a while after the topic is in the metadata.
MADE_AT_ONCE = 200
ROUNDS = 4
WRITERS = 16
RECORDS = 7


def definitions() -> list[m.Event]:
    def envelope(i: int) -> m.Envelope:
        return m.Envelope(event_id=f"operator-{uuid.uuid4().hex}-{i}", cell="cell-a", at=1_000 + i, producer="operator")

    return [m.CohortDefined(envelope=envelope(0), cohort="research"),
            *(m.TeamDefined(envelope=envelope(i), team=f"team-{i}", cohort="research") for i in range(1, RECORDS))]


def known_with_leader(writer: EventProducer, topic: str) -> None:
    """Until the writer's client has the topic's partition 0 with a leader in its metadata: from then on it sends
    what it produces there at once (a writer whose client learned of the topic while the leader was not serving it
    yet, as a fleet's and an agent's do)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = writer._producer.list_topics(topic, timeout=5).topics.get(topic)
        if found is not None and found.error is None and 0 in found.partitions and found.partitions[0].leader >= 0:
            return
        time.sleep(0.01)
    raise AssertionError(f"{topic} has no leader 30 s after it was made")


def committed_records(bootstrap: str, topic: str) -> int:
    """Records in the topic's partition, its transaction's commit marker not counted."""
    consumer = Consumer(client_config(bootstrap, None, **{"group.id": f"count-{uuid.uuid4().hex}",
                                                          "logger": quiet_logger()}))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
    return high - low - 1


def write_definitions(writer: EventProducer, topic: str) -> None:
    known_with_leader(writer, topic)
    with writer.transaction():
        for event in definitions():
            writer.produce(event)
            time.sleep(0.003)  # a writer that takes a moment per record: its records go in several requests


def test_transactions_written_into_topics_just_made_land_whole(kafka_bootstrap, kafka_admin, gangway_topics,
                                                               topic_prefix, monkeypatch):
    # As a launcher's or an agent's: a writer that does not sign sends each record as it is produced (a signing one
    # holds its transaction's records back and sends them together at its commit).
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    lost = []
    for round_ in range(ROUNDS):
        made = [f"{topic_prefix}in.round{round_}.t{i:03d}" for i in range(MADE_AT_ONCE)]
        written = made[-WRITERS:]
        writers = [EventProducer(kafka_bootstrap, f"{topic_prefix}writer-{round_}-{i}", gangway_topics, ["cell-a"],
                                 inputs=lambda event, topic=topic: topic) for i, topic in enumerate(written)]
        assert all(w._signer is None for w in writers), "the suite's broker authenticates by GANGWAY_KAFKA_USER"
        writers[0].make_inputs(made)
        with ThreadPoolExecutor(WRITERS) as pool:  # each writes its first transaction while its topic is new
            list(pool.map(write_definitions, writers, written))
        lost += [(round_, topic[len(topic_prefix):], landed) for topic in written
                 if (landed := committed_records(kafka_bootstrap, topic)) != RECORDS]
        kafka_admin.delete_topics(made)  # not waited for: the broker deletes them while the next round's are made
    assert not lost, f"(round, topic, records that landed of {RECORDS}): {lost}"
