"""An error librdkafka delivers among a batch's records loses none of them: `EventConsumer.poll` delivers the batch
and raises the error on the next call; a reader that follows the log live (`LogReader.follow`: the node agent, the
fleet, the launcher's and the watch's views) reads through an error a failover explains and keeps its place."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from events.codec import EventCodec
from events.log import EventConsumer
from events.reader import LogReader
from tests.builders import job

TRANSPORT = KafkaError(KafkaError._TRANSPORT, "broker 2: connection refused")
DENIED = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorised")


class Message:
    """A record or an error, as confluent-kafka's consume hands them over."""

    def __init__(self, offset: int = 0, value: bytes | None = None, error: KafkaError | None = None) -> None:
        self._offset, self._value, self._error = offset, value, error

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return "gangway.events"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"cell-a"

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


class Batches:
    """A consumer whose `consume` hands over the given batches in turn, then nothing."""

    def __init__(self, *batches: list[Message]) -> None:
        self.batches = list(batches)

    def consume(self, max_records: int, timeout: float) -> list[Message]:
        return self.batches.pop(0) if self.batches else []

    def poll(self, timeout: float) -> None:
        return None


def consumer(*batches: list[Message]) -> EventConsumer:
    events = object.__new__(EventConsumer)  # no broker: only the handling of a batch's errors is under test
    events._consumer, events._missing_ok, events._met = Batches(*batches), False, None
    events.codec, events._signed, events.decode_seconds = EventCodec(), (), 0.0
    return events


def submitted(offset: int) -> Message:
    return Message(offset, EventCodec().encode(job(f"j{offset}")))


def test_the_records_around_an_error_are_delivered_and_the_error_raised_next():
    events = consumer([submitted(10), Message(error=TRANSPORT), submitted(11)], [submitted(12)])
    assert [r.offset for r in events.poll()] == [10, 11]
    with pytest.raises(KafkaException) as raised:
        events.poll()
    assert raised.value.args[0].code() == KafkaError._TRANSPORT
    assert [r.offset for r in events.poll()] == [12]  # nothing was taken while the error was raised


def test_an_error_alone_is_raised_at_once():
    events = consumer([Message(error=DENIED)], [submitted(3)])
    with pytest.raises(KafkaException):
        events.poll()
    assert [r.offset for r in events.poll()] == [3]


def test_the_end_of_a_partition_is_no_error():
    events = consumer([submitted(5), Message(error=KafkaError(KafkaError._PARTITION_EOF))])
    assert [r.offset for r in events.poll()] == [5]
    assert events.poll() == []


def reader(*batches: list[Message]) -> LogReader:
    log_reader = object.__new__(LogReader)  # no broker: its consumer is the one above
    log_reader.cells, log_reader._consumer = ("cell-a",), consumer(*batches)
    return log_reader


def test_a_follower_reads_on_through_an_error_a_failover_explains(caplog):
    follower = reader([submitted(1), Message(error=TRANSPORT)], [Message(error=TRANSPORT)], [submitted(2)])
    offsets = [[r.offset for r in follower.follow()] for _ in range(4)]
    assert offsets == [[1], [], [], [2]]
    assert "once the brokers answer" in caplog.text


def test_a_follower_stops_at_an_error_no_failover_explains():
    follower = reader([submitted(1), Message(error=DENIED)])
    assert [r.offset for r in follower.follow()] == [1]
    with pytest.raises(KafkaException):
        follower.follow()


class StuckClose:
    """A consumer whose close waits on a group coordinator that does not answer (after all brokers restarted)."""

    def __init__(self) -> None:
        self.answered = threading.Event()

    def close(self) -> None:
        self.answered.wait(60)


def test_a_readers_close_that_hangs_is_left_to_the_process_exit(caplog):
    stuck = StuckClose()
    log_reader = object.__new__(LogReader)
    log_reader._consumer = stuck
    began = time.monotonic()
    log_reader.close(timeout=0.2)  # a stopping agent exits instead of waiting on it
    assert time.monotonic() - began < 5
    assert "did not close within" in caplog.text
    stuck.answered.set()
