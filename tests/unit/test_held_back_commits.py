"""Offsets a consumer holds back for a later commit (batches that wrote nothing) never take the group's offset back
behind a transaction that committed later offsets, its own or those of the replica the group gave the cell to: a
service restarted from that older offset would decide again, and write twice, what the transaction's batch decided."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from events.log import EventConsumer, LogRecord
from events.topics import topic_names
from services.shell import ServiceShell


class RecordingConsumer:
    """The confluent-kafka consumer's commit, recorded."""

    def __init__(self) -> None:
        self.commits: list[list[tuple[str, int, int]]] = []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits.append([(t.topic, t.partition, t.offset) for t in offsets])


def consumer() -> tuple[EventConsumer, RecordingConsumer]:
    events = object.__new__(EventConsumer)  # no broker: only the held-back commits are under test
    fake = RecordingConsumer()
    events._consumer, events._pending, events._last_commit = fake, {}, float("inf")  # nothing is due yet
    return events, fake


def read(topic: str, partition: int, offset: int) -> LogRecord:
    return LogRecord(topic, partition, offset, None, None, None)


def test_a_transaction_past_the_held_back_offsets_drops_them():
    events, fake = consumer()
    events.commit_later([read("log", 0, 10), read("heartbeats", 0, 4)])  # wrote nothing: held back
    events.committed_in_transaction([read("log", 0, 11)])  # the next batch's decisions, committed with offset 12
    events.flush_commits()
    assert fake.commits == [[("heartbeats", 0, 5)]]  # the log's 11 would have taken the group back from 12


def test_offsets_held_back_after_the_transaction_are_kept():
    events, fake = consumer()
    events.committed_in_transaction([read("log", 0, 11)])
    events.commit_later([read("log", 0, 12)])
    events.flush_commits()
    assert fake.commits == [[("log", 0, 13)]]


def test_offsets_held_back_for_a_cell_given_to_another_replica_are_dropped():
    events, fake = consumer()
    events.commit_later([read("log", 0, 10), read("log", 1, 7)])
    events.forget([TopicPartition("log", 0)])  # its new owner commits past 11 meanwhile
    events.flush_commits()
    assert fake.commits == [[("log", 1, 8)]]


def test_a_service_forgets_what_it_held_back_for_the_cells_it_gives_up():
    events, fake = consumer()
    shell = object.__new__(ServiceShell)  # no broker: only the revocation is under test
    shell.consumer, shell.runtimes, shell.unowned_since = events, {}, None
    shell.topics = topic_names("")
    events.commit_later([read(shell.topics.events, 0, 10)])
    shell._on_revoke(None, [TopicPartition(shell.topics.events, 0)])
    events.flush_commits()
    assert fake.commits == []
