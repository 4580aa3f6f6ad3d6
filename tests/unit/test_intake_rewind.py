"""An intake whose batch failed rewinds to the committed input offsets; when the group does not say them in time
(all brokers just restarted), a new consumer joins the group in the old one's place instead of the intake asking
again for minutes (services/intake.py)."""

from __future__ import annotations

import threading

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from events.log import ProducerFenced
from services import intake as intake_module
from services.intake import Intake
from services.stop import StopRequest

INPUT = "gangway.in.team.nlp"


class RawConsumer:
    """What the rewind asks of librdkafka's consumer: its assignment, the committed offsets, a seek."""

    def __init__(self, committed: dict[int, int] | None) -> None:
        self.committed_offsets = committed  # None: the group does not answer
        self.asked_for: list[float] = []
        self.sought: list[tuple[int, int]] = []

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(INPUT, 0)]

    def committed(self, partitions, timeout: float) -> list[TopicPartition]:
        self.asked_for.append(timeout)
        if self.committed_offsets is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [TopicPartition(p.topic, p.partition, self.committed_offsets.get(p.partition, -1001))
                for p in partitions]

    def seek(self, partition: TopicPartition) -> None:
        self.sought.append((partition.partition, partition.offset))


class FakeConsumer:
    def __init__(self, committed: dict[int, int] | None) -> None:
        self.raw = RawConsumer(committed)
        self.subscribed: list[list[str]] = []
        self.closed = threading.Event()

    def subscribe(self, topics, on_assign, on_revoke, missing_ok=False) -> None:
        self.subscribed.append(list(topics))

    def close(self) -> None:
        self.closed.set()


def intake_with(first: FakeConsumer, monkeypatch) -> tuple[Intake, list[FakeConsumer]]:
    monkeypatch.setattr(intake_module.time, "sleep", lambda s: None)
    intake = object.__new__(Intake)  # no broker: only the rewind is under test
    made: list[FakeConsumer] = []

    def new_consumer() -> FakeConsumer:
        made.append(FakeConsumer({0: 0}))
        return made[-1]

    intake._consumer, intake.consumer, intake.inputs = new_consumer, first, [INPUT]
    return intake, made


def test_a_rewind_seeks_back_to_the_committed_offsets(monkeypatch) -> None:
    first = FakeConsumer({0: 42})
    intake, made = intake_with(first, monkeypatch)
    intake._rewind()
    assert first.raw.sought == [(0, 42)]
    assert made == [] and intake.consumer is first


def test_a_partition_never_committed_is_read_from_its_start(monkeypatch) -> None:
    first = FakeConsumer({})
    intake, _ = intake_with(first, monkeypatch)
    intake._rewind()
    assert first.raw.sought == [(0, 0)]


def test_a_group_that_does_not_say_its_offsets_is_joined_again_with_a_new_consumer(monkeypatch) -> None:
    stuck = FakeConsumer(None)
    intake, made = intake_with(stuck, monkeypatch)
    intake._rewind()
    assert stuck.raw.asked_for == [intake_module.REWIND_WAIT_S]  # asked once, briefly
    assert stuck.raw.sought == []
    assert len(made) == 1 and intake.consumer is made[0]
    assert made[0].subscribed == [[INPUT]]  # the new consumer reads the same inputs from the committed offsets
    assert stuck.closed.wait(5)  # the stuck one leaves the group


def test_a_new_consumer_stuck_in_turn_is_replaced_again(monkeypatch) -> None:
    intake, made = intake_with(FakeConsumer(None), monkeypatch)
    intake._rewind()
    made[0].raw.committed_offsets = None
    intake._rewind()
    assert len(made) == 2 and intake.consumer is made[1]


class Producer:
    def __init__(self, broken: bool) -> None:
        self.broken = broken


def failing_once(intake: Intake, error: Exception, steps: list[str]) -> None:
    """The intake's next batch fails with `error`; what it does about it is noted in `steps`."""
    errors = [error]

    def poll_once() -> int:
        if errors:
            raise errors.pop()
        return 0

    intake.poll_once = poll_once
    intake._renew_producer = lambda: steps.append("renew")
    intake._rewind = lambda: steps.append("rewind")
    intake.close = lambda: None


def test_a_producer_left_unusable_is_replaced_before_the_rewind(monkeypatch) -> None:
    """The new producer aborts the transaction the old one left open; until then the group holds the committed
    offsets the rewind asks for back (KIP-447)."""
    intake, _ = intake_with(FakeConsumer({0: 0}), monkeypatch)
    steps: list[str] = []
    intake.producer = Producer(broken=True)
    failing_once(intake, KafkaException(KafkaError(KafkaError._TIMED_OUT, fatal=True)), steps)
    intake.run(max_polls=2, stop=StopRequest())
    assert steps == ["renew", "rewind"]


def test_a_batch_that_failed_with_the_producer_still_usable_is_only_read_again(monkeypatch) -> None:
    intake, _ = intake_with(FakeConsumer({0: 0}), monkeypatch)
    steps: list[str] = []
    intake.producer = Producer(broken=False)
    failing_once(intake, KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT)), steps)
    intake.run(max_polls=2, stop=StopRequest())
    assert steps == ["rewind"]


def test_a_fenced_intake_takes_its_id_back_before_the_rewind(monkeypatch) -> None:
    intake, _ = intake_with(FakeConsumer({0: 0}), monkeypatch)
    steps: list[str] = []
    intake.producer = Producer(broken=False)
    failing_once(intake, ProducerFenced("fenced"), steps)
    intake.run(max_polls=2, stop=StopRequest())
    assert steps == ["renew", "rewind"]
