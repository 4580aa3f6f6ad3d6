"""A writer that makes an input topic writes to it only once its partition has a leader (events/log.py
`ensure_input_topics`, through events/topics.py `wait_for_leaders`, as the catalogue topics do): the first record
of a transaction to a topic made just before was once seen lost while the transaction committed."""

from types import SimpleNamespace

import pytest

from events.topics import TopicError, wait_for_leaders


class MetadataAnswers:
    """An admin client whose metadata answers come from a script, one a call, the last repeated."""

    def __init__(self, *answers) -> None:
        self.answers, self.asked = list(answers), 0

    def list_topics(self, timeout):
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return SimpleNamespace(topics={} if answer is None else {"in.team.nlp": SimpleNamespace(
            error=answer.get("error"), partitions={i: SimpleNamespace(leader=leader)
                                                   for i, leader in enumerate(answer.get("leaders", ()))})})


def test_waits_until_the_new_topics_partition_has_a_leader(monkeypatch):
    monkeypatch.setattr("events.topics.time.sleep", lambda s: None)
    admin = MetadataAnswers(None, {"error": "unknown"}, {"leaders": [-1]}, {"leaders": [1]})
    wait_for_leaders(admin, {"in.team.nlp": 1}, timeout=10)
    assert admin.asked == 4


def test_a_topic_never_led_is_a_clear_error_after_the_timeout():
    with pytest.raises(TopicError, match="have no leader after"):
        wait_for_leaders(MetadataAnswers({"leaders": [-1]}), {"in.team.nlp": 1}, timeout=0.3)


def test_a_topic_with_too_few_partitions_is_refused():
    with pytest.raises(TopicError, match="has 1 partitions but needs 2"):
        wait_for_leaders(MetadataAnswers({"leaders": [1]}), {"in.team.nlp": 2}, timeout=1)
