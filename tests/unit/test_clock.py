"""The clock misses a Tick it cannot write for a passing reason (a topic its fresh producer does not know yet, as
right after the brokers come back up) and writes the next round's; anything else stops it (events/clock.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from events import clock as clock_module
from events.clock import VirtualClock, run_clock
from events.topics import topic_names


class FlakyProducer:
    """Refuses its first `failures` records with `code`, then keeps what it is given."""

    failures = 0
    code = KafkaError._UNKNOWN_TOPIC

    def __init__(self, config: dict) -> None:
        self.kept: list[bytes] = []
        self.refused = 0
        FlakyProducer.made = self

    def produce(self, topic: str, key: bytes, value: bytes, partition: int, headers=None) -> None:
        if self.refused < self.failures:
            self.refused += 1
            raise KafkaException(KafkaError(self.code, "Unable to produce message"))
        self.kept.append(value)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


@pytest.fixture
def flaky(monkeypatch):
    monkeypatch.setattr(clock_module, "Producer", FlakyProducer)
    monkeypatch.setattr(clock_module, "signer", lambda *args: None)
    return FlakyProducer


def test_a_tick_the_broker_cannot_take_yet_is_skipped_and_the_clock_goes_on(flaky, monkeypatch) -> None:
    monkeypatch.setattr(flaky, "failures", 2)
    rounds = run_clock("127.0.0.1:1", topic_names(""), ["cell-a"], 0.0, VirtualClock.starting_now(), max_ticks=4)
    assert rounds == 4
    assert flaky.made.refused == 2 and len(flaky.made.kept) == 2  # two rounds missed, the next two written


def test_an_error_that_will_not_pass_stops_the_clock(flaky, monkeypatch) -> None:
    monkeypatch.setattr(flaky, "failures", 1)
    monkeypatch.setattr(flaky, "code", KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        run_clock("127.0.0.1:1", topic_names(""), ["cell-a"], 0.0, VirtualClock.starting_now(), max_ticks=4)
