"""A transaction whose send_offsets_to_transaction never returns (librdkafka#5456, #5511: the group coordinator's
broker was killed) is given up on instead of holding its service forever; the stuck producer is not touched
again, and `write` makes a new one under the same transactional id."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException

from events import log as event_log
from events.log import EventProducer


class StuckProducer:
    """A transactional producer whose send_offsets_to_transaction blocks until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, offsets, group, timeout) -> None:
        self.calls.append("send_offsets")
        self.release.wait(60)

    def commit_transaction(self, timeout) -> None:
        self.calls.append("commit")

    def abort_transaction(self, timeout) -> None:
        self.calls.append("abort")
        self.release.wait(60)  # a busy transaction API would block here too


class OffsetsOf:
    """What `transaction` asks of a consumer."""

    def next_offsets(self, consumed):
        return []

    def group_metadata(self):
        return object()

    def committed_in_transaction(self, consumed):
        pass


def stuck_producer() -> tuple[EventProducer, StuckProducer]:
    producer = object.__new__(EventProducer)  # no broker: only the transaction logic is under test
    fake = StuckProducer()
    producer._producer, producer._abandoned, producer._signer, producer._unsigned = fake, False, None, None
    producer._broken = False
    producer._spare = None
    return producer, fake


def test_a_send_offsets_that_never_returns_is_given_up_on(monkeypatch):
    monkeypatch.setattr(event_log, "SEND_OFFSETS_TIMEOUT_S", 0.2)
    monkeypatch.setattr(event_log, "SEND_OFFSETS_GRACE_S", 0.3)
    producer, fake = stuck_producer()
    began = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        with producer.transaction(OffsetsOf(), consumed=[object()]):
            pass
    assert time.monotonic() - began < 5
    assert raised.value.args[0].fatal(), "fatal: write() replaces the producer"
    assert fake.calls == ["begin", "send_offsets"], "the stuck producer is neither committed nor aborted"
    fake.release.set()


def test_a_send_offsets_that_returns_commits(monkeypatch):
    producer, fake = stuck_producer()
    fake.release.set()
    with producer.transaction(OffsetsOf(), consumed=[object()]):
        pass
    assert fake.calls == ["begin", "send_offsets", "commit"]
