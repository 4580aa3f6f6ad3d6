"""A writer that makes an input topic produces to it only once its own client knows the topic's partition
(events/log.py `EventProducer._await_known`): the first record of a transaction to a topic made just before was
seen lost while the transaction committed."""

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from events.log import EventProducer


class MetadataAnswers:
    """A client whose metadata answers come from a script: a topic unknown, then without a leader, then known."""

    def __init__(self, *answers) -> None:
        self.answers, self.asked = list(answers), 0

    def list_topics(self, topic, timeout):
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, KafkaException):
            raise answer
        topics = {} if answer is None else {topic: SimpleNamespace(
            error=answer.get("error"), partitions={0: SimpleNamespace(leader=answer["leader"])} if "leader" in answer
            else {})}
        return SimpleNamespace(topics=topics)


def writer(client) -> SimpleNamespace:
    return SimpleNamespace(_producer=client)


def test_a_writer_waits_until_its_client_knows_the_new_topics_partition_and_its_leader():
    client = MetadataAnswers(None, KafkaException(KafkaError(KafkaError._TRANSPORT)), {"error": "unknown"}, {},
                             {"leader": -1}, {"leader": 1})
    EventProducer._await_known(writer(client), ["in.team.nlp"], timeout=10)
    assert client.asked == 6


def test_a_topic_never_known_is_a_clear_error_after_the_timeout():
    with pytest.raises(KafkaException, match="in.team.nlp is not known"):
        EventProducer._await_known(writer(MetadataAnswers(None)), ["in.team.nlp"], timeout=0.3)
