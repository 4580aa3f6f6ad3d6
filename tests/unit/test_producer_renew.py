"""A writer makes its producer anew under the same transactional id (after the old one became unusable, or was
fenced) within a bound: a write's deadline, or the intake's RENEW_WAIT_S. While the transaction coordinator does not
answer, each try waits on the same new producer, instead of retrying for up to 30 minutes (events/log.py)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from events import log as log_module
from events.log import EventProducer

TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "Transactional API operation timed out")
FATAL = KafkaError(KafkaError._FENCED, "fenced for good", fatal=True)


class Coordinator:
    """Answers `init_transactions` with `answers` in turn (an error, or None: initialised), then initialises."""

    def __init__(self, *answers: KafkaError | None) -> None:
        self.answers, self.made, self.waits = list(answers), [], []


def producers(coordinator: Coordinator, monkeypatch) -> None:
    class Producer:
        def __init__(self, config: dict) -> None:
            coordinator.made.append(self)

        def init_transactions(self, timeout: float) -> None:
            coordinator.waits.append(timeout)
            answer = coordinator.answers.pop(0) if coordinator.answers else None
            if answer is not None:
                time.sleep(min(timeout, 0.05))
                raise KafkaException(answer)

    monkeypatch.setattr(log_module, "Producer", Producer)


def broken_writer() -> EventProducer:
    writer = object.__new__(EventProducer)  # no broker: only the renewal is under test
    writer._config = {"transactional.id": "gangway-intake-0"}
    writer._producer, writer._renewing, writer._spare = object(), None, None
    writer._abandoned = writer._broken = True
    return writer


def test_a_coordinator_that_does_not_answer_in_time_is_asked_again_on_the_same_new_producer(monkeypatch):
    coordinator = Coordinator(TIMED_OUT, TIMED_OUT)
    producers(coordinator, monkeypatch)
    writer = broken_writer()
    for _ in range(2):
        with pytest.raises(KafkaException):
            writer.renew(10.0)
        assert writer.broken
    writer.renew(10.0)
    assert len(coordinator.made) == 1 and writer._producer is coordinator.made[0]
    assert coordinator.waits == [10.0, 10.0, 10.0] and not writer.broken and not writer._abandoned


def test_a_producer_past_saving_is_made_again(monkeypatch):
    coordinator = Coordinator(FATAL)
    producers(coordinator, monkeypatch)
    writer = broken_writer()
    with pytest.raises(KafkaException):
        writer.renew(5.0)
    writer.renew(5.0)
    assert len(coordinator.made) == 2 and writer._producer is coordinator.made[1]


def test_a_write_gives_up_at_its_deadline_while_the_coordinator_does_not_answer(monkeypatch):
    coordinator = Coordinator(*[TIMED_OUT] * 1000)
    producers(coordinator, monkeypatch)
    writer = broken_writer()
    began = time.monotonic()
    with pytest.raises(KafkaException):
        writer.write([], give_up_after_s=1.0)
    assert time.monotonic() - began < 5
    assert len(coordinator.made) == 1 and all(wait <= 1.0 for wait in coordinator.waits)
