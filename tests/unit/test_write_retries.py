"""`EventProducer.write` writes a transaction again when a record meets a passing error, such as a topic its
producer does not know yet (one made just before, or the brokers coming back up), and gives up at once on one that
will not pass (events/log.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from events import log as event_log
from events.codec import EventCodec
from events.log import EventProducer
from events.topics import topic_names
from tests.builders import tick


class RefusingProducer:
    """A transactional producer that refuses its first `failures` records with `code`."""

    def __init__(self, failures: int, code: int) -> None:
        self.failures, self.code = failures, code
        self.calls: list[str] = []
        self.committed: list[bytes] = []
        self._open: list[bytes] = []

    def init_transactions(self, timeout) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")
        self._open = []

    def produce(self, topic, key=None, value=None, partition=0, headers=None) -> None:
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(self.code, "Unable to produce message"))
        self._open.append(value)

    def commit_transaction(self, timeout) -> None:
        self.calls.append("commit")
        self.committed += self._open

    def abort_transaction(self, timeout) -> None:
        self.calls.append("abort")


def producer_over(fake: RefusingProducer) -> EventProducer:
    producer = object.__new__(EventProducer)  # no broker: only the retry rule is under test
    producer._producer, producer._abandoned, producer._signer, producer._unsigned = fake, False, None, None
    producer._broken, producer._renewing = False, None
    producer.topics, producer.cells, producer.codec, producer.inputs = topic_names(""), ("test-cell",), EventCodec(), None
    producer._config, producer._spare = {"transactional.id": "test"}, None
    return producer


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(event_log.time, "sleep", lambda s: None)


def test_a_record_for_a_topic_not_known_yet_is_written_again() -> None:
    fake = RefusingProducer(failures=2, code=KafkaError._UNKNOWN_TOPIC)
    producer_over(fake).write([tick(1_000)])
    assert fake.calls == ["begin", "abort", "begin", "abort", "begin", "commit"]
    assert len(fake.committed) == 1


def test_an_error_that_will_not_pass_is_raised() -> None:
    fake = RefusingProducer(failures=1, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        producer_over(fake).write([tick(1_000)])
    assert fake.calls == ["begin", "abort"]


def test_a_writer_by_turns_commits_under_each_id_in_turn_and_writes_a_failed_transaction_again_under_the_same():
    first, second = RefusingProducer(failures=0, code=0), RefusingProducer(failures=1, code=KafkaError._UNKNOWN_TOPIC)
    producer = producer_over(first)
    producer._spare = (second, {"transactional.id": "test~2"})
    for at in (1_000, 2_000, 3_000):
        producer.write([tick(at)])
    assert first.calls == ["begin", "commit", "begin", "commit"]
    assert second.calls == ["begin", "abort", "begin", "commit"]
    assert producer._config == {"transactional.id": "test~2"}  # the next transaction's producer and id go together


def test_a_producer_a_fatal_error_left_unusable_is_made_anew_before_the_next_write(monkeypatch) -> None:
    """Given up on at its deadline (a send_offsets call abandoned after the brokers restarted, say), a write leaves
    its producer with a transaction open for good: the next write starts from a new producer under the same id,
    instead of meeting that transaction at every begin."""
    stuck = RefusingProducer(failures=1, code=KafkaError._TIMED_OUT)
    stuck.produce = lambda *a, **k: (_ for _ in ()).throw(KafkaException(KafkaError(KafkaError._TIMED_OUT, "stuck",
                                                                                      fatal=True)))
    fresh = RefusingProducer(failures=0, code=0)
    monkeypatch.setattr(event_log, "Producer", lambda config: fresh)
    producer = producer_over(stuck)
    with pytest.raises(KafkaException):
        producer.write([tick(1_000)], give_up_after_s=0)
    producer.write([tick(2_000)])
    assert stuck.calls == ["begin", "abort"]  # never begun again
    assert fresh.calls == ["init", "begin", "commit"]


def test_a_producer_whose_records_were_never_delivered_is_made_anew_before_the_next_transaction(monkeypatch) -> None:
    """A commit that reports records timed out in the producer leaves it unable to write their partition (seen
    after the brokers restarted): the transaction is written again from a new producer under the same id."""
    stuck = RefusingProducer(failures=0, code=0)

    def commit_undelivered(timeout) -> None:
        stuck.calls.append("commit")
        raise KafkaException(KafkaError(KafkaError._INCONSISTENT, "1 message(s) failed delivery",
                                        txn_requires_abort=True))

    stuck.commit_transaction = commit_undelivered
    fresh = RefusingProducer(failures=0, code=0)
    monkeypatch.setattr(event_log, "Producer", lambda config: fresh)
    producer = producer_over(stuck)
    producer.write([tick(1_000)], give_up_after_s=5)
    assert stuck.calls == ["begin", "commit", "abort"]  # never begun again
    assert fresh.calls == ["init", "begin", "commit"] and len(fresh.committed) == 1


def test_a_commit_that_only_timed_out_waiting_keeps_its_producer() -> None:
    """A commit's own timeout (the coordinator slow to answer) is retried on the same producer: nothing failed."""
    slow = RefusingProducer(failures=0, code=0)
    answers = [KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True))]

    def commit(timeout) -> None:
        slow.calls.append("commit")
        if answers:
            raise answers.pop()
        slow.committed += slow._open

    slow.commit_transaction = commit
    producer = producer_over(slow)
    producer.write([tick(1_000)])
    assert slow.calls == ["begin", "commit", "commit"] and not producer.broken
