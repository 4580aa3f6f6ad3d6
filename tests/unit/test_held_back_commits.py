"""Offsets a consumer holds back for a later commit (batches that wrote nothing) never take the group's offset back
behind a transaction that committed later offsets, its own or those of the replica the group gave the cell to: a
service restarted from that older offset would decide again, and write twice, what the transaction's batch decided.
One whose commit failed is sent again, unless such a later offset has taken its place."""

from __future__ import annotations

import time
from types import SimpleNamespace

from confluent_kafka import KafkaError, TopicPartition

from events.log import EventConsumer, LogRecord
from events.topics import topic_names
from services.shell import COMMITS_FAILING_S, ServiceShell


class RecordingConsumer:
    """The confluent-kafka consumer's commit, recorded."""

    def __init__(self) -> None:
        self.commits: list[list[tuple[str, int, int]]] = []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits.append([(t.topic, t.partition, t.offset) for t in offsets])


def consumer() -> tuple[EventConsumer, RecordingConsumer]:
    events = object.__new__(EventConsumer)  # no broker: only the held-back commits are under test
    fake = RecordingConsumer()
    events._consumer, events._pending, events._sent, events._last_commit = fake, {}, {}, float("inf")  # none due yet
    events.commits_failing_since = None
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


def answered(events: EventConsumer, error: KafkaError | None, *offsets: tuple[str, int, int]) -> None:
    """librdkafka's answer to a commit of `offsets`, as a poll serves it."""
    events._on_commit(error, [TopicPartition(t, p, o) for t, p, o in offsets])


LOST = KafkaError(KafkaError.NOT_COORDINATOR)


def test_an_offset_whose_commit_failed_is_sent_again_with_the_next_flush():
    events, fake = consumer()
    events.commit_later([read("log", 0, 10)])
    events.flush_commits()
    answered(events, LOST, ("log", 0, 11))  # the coordinator moved: the group's offset is still behind
    events.flush_commits()
    assert fake.commits == [[("log", 0, 11)], [("log", 0, 11)]]


def test_an_offset_that_committed_is_not_sent_again():
    events, fake = consumer()
    events.commit_later([read("log", 0, 10)])
    events.flush_commits()
    answered(events, None, ("log", 0, 11))
    events.flush_commits()
    assert fake.commits == [[("log", 0, 11)]]


def test_a_failed_commit_that_a_later_offset_or_a_transaction_or_a_new_owner_passed_is_not_sent_again():
    events, fake = consumer()
    events.commit_later([read("log", 0, 10), read("log", 1, 3), read("log", 2, 5)])
    events.flush_commits()
    events.commit_later([read("log", 0, 12)])  # a later offset, held back
    events.committed_in_transaction([read("log", 1, 3)])  # a transaction committed offset 4 meanwhile
    events.forget([TopicPartition("log", 2)])  # the group gave the cell to another replica
    answered(events, LOST, ("log", 0, 11), ("log", 1, 4), ("log", 2, 6))
    events.flush_commits()
    assert fake.commits == [[("log", 0, 11), ("log", 1, 4), ("log", 2, 6)], [("log", 0, 13)]]


def test_a_partition_whose_own_commit_failed_is_sent_again_alone():
    events, fake = consumer()
    events.commit_later([read("log", 0, 10), read("heartbeats", 0, 4)])
    events.flush_commits()
    failed = SimpleNamespace(topic="log", partition=0, offset=11, error=KafkaError(KafkaError.ILLEGAL_GENERATION))
    events._on_commit(None, [failed, TopicPartition("heartbeats", 0, 5)])  # one partition's own error
    events.flush_commits()
    assert fake.commits[-1] == [("log", 0, 11)]


def test_commits_failing_one_after_another_are_timed_from_the_first_until_one_goes_through():
    events, _ = consumer()
    answered(events, KafkaError(KafkaError._NO_OFFSET))  # nothing to commit: no failure
    assert events.commits_failing_since is None
    answered(events, LOST, ("log", 0, 11))
    first = events.commits_failing_since
    answered(events, LOST, ("log", 0, 11))
    assert first is not None and events.commits_failing_since == first
    answered(events, None, ("log", 0, 12))
    assert events.commits_failing_since is None
    answered(events, LOST, ("log", 0, 13))
    events.committed_in_transaction([read("log", 0, 13)])  # a transaction's offsets went through: the group works
    assert events.commits_failing_since is None


def shell_owning(cells: int, failing_for: float | None) -> ServiceShell:
    """A service shell (no broker) whose consumer's commits have failed for `failing_for` seconds."""
    events, _ = consumer()
    events.commits_failing_since = None if failing_for is None else time.monotonic() - failing_for
    shell = object.__new__(ServiceShell)
    shell.consumer, shell.runtimes, shell.group = events, dict.fromkeys(range(cells)), ("up", "steady")
    shell.decider = SimpleNamespace(name="recovery")
    return shell


def test_a_replica_owning_cells_whose_commits_fail_for_long_joins_its_group_again():
    assert shell_owning(1, COMMITS_FAILING_S + 1)._commits_fail()
    assert not shell_owning(1, COMMITS_FAILING_S - 5)._commits_fail()  # a coordinator moving: not yet
    assert not shell_owning(1, None)._commits_fail()
    assert not shell_owning(0, COMMITS_FAILING_S + 1)._commits_fail()  # owns nothing: the group check covers it
