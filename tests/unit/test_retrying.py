"""`retrying` waits out what a broker answers while leadership or coordination moves, and gives up at once on
anything else: a watermark query on a topic just created met NOT_LEADER_FOR_PARTITION, which librdkafka does not
mark retriable."""
import pytest
from confluent_kafka import KafkaError, KafkaException

from events.log import retrying


def failing(times: int, code: int):
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= times:
            raise KafkaException(KafkaError(code))
        return "answered"
    return call, calls


@pytest.mark.parametrize("code", [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                                  KafkaError.NOT_COORDINATOR, KafkaError._TRANSPORT,
                                  # a client made while the brokers come back up does not know the partitions yet
                                  KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC])
def test_a_moving_leader_or_coordinator_is_waited_out(code):
    call, calls = failing(2, code)
    assert retrying(call, pause_s=0) == "answered"
    assert len(calls) == 3


def test_an_error_that_will_not_pass_is_raised_at_once():
    call, calls = failing(5, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        retrying(call, pause_s=0)
    assert len(calls) == 1


def test_it_gives_up_after_its_attempts():
    call, calls = failing(10, KafkaError.NOT_LEADER_FOR_PARTITION)
    with pytest.raises(KafkaException):
        retrying(call, attempts=3, pause_s=0)
    assert len(calls) == 3
