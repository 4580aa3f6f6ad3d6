"""The intake takes in input topics created at any moment, on the real broker: also one created while its consumer
group rebalances for another new topic, which librdkafka's pattern subscription can miss for good (librdkafka#3008;
it left a test cell's node agents unregistered)."""

from __future__ import annotations

import time

import pytest

from events import models as m
from events.log import ensure_input_topic
from services import intake as intake_module
from services.intake import Intake
from tests.integration.control_plane import read_log
from tests.integration.test_intake_replicas import submit

pytestmark = [pytest.mark.kafka]


def test_topics_created_while_the_intake_rebalances_are_taken_in(kafka_bootstrap, gangway_topics, topic_prefix):
    topics = gangway_topics
    intake = Intake(kafka_bootstrap, topics, ["cell-a"], name_prefix=topic_prefix)
    teams = [f"t{i}" for i in range(6)]
    try:
        for first, second in zip(teams[::2], teams[1::2], strict=True):
            ensure_input_topic(kafka_bootstrap, None, topics.team_input(first))
            deadline = time.monotonic() + 30
            while topics.team_input(first) not in intake.inputs:  # the intake re-subscribes: its group rebalances
                assert time.monotonic() < deadline, f"the intake never subscribed to {first}'s topic"
                intake.poll_once(0.05)
            ensure_input_topic(kafka_bootstrap, None, topics.team_input(second))  # during that rebalance
            for team in (first, second):
                submit(kafka_bootstrap, None, topics.team_input(team), team, [f"{team}-job"])
        deadline = time.monotonic() + 60
        while intake.taken < len(teams):
            assert time.monotonic() < deadline, f"taken in {intake.taken} of {len(teams)}; subscribed {intake.inputs}"
            intake.poll_once(0.2)
    finally:
        intake.close()
    logged = read_log(kafka_bootstrap, topics, until=lambda events: len(events) >= len(teams), timeout=30)
    assert sorted(e.job_id for _, e in logged if isinstance(e, m.JobSubmitted)) == sorted(f"{t}-job" for t in teams)
    assert intake.inputs == sorted(topics.team_input(t) for t in teams)


def test_a_topic_the_group_left_unassigned_is_assigned_at_the_next_checks(kafka_bootstrap, gangway_topics,
                                                                          topic_prefix, monkeypatch):
    monkeypatch.setattr(intake_module, "CHECK_EVERY_S", 1.0)
    topics = gangway_topics
    for team in ("nlp", "vision"):
        ensure_input_topic(kafka_bootstrap, None, topics.team_input(team))
    intake = Intake(kafka_bootstrap, topics, ["cell-a"], name_prefix=topic_prefix)
    try:
        assert intake.inputs == [topics.team_input("nlp"), topics.team_input("vision")]
        # The group's assignment misses vision's topic, as librdkafka's can after a rebalance.
        intake.consumer.subscribe([topics.team_input("nlp")], lambda c, ps: c.assign(ps), lambda c, ps: None)
        for team in ("nlp", "vision"):
            submit(kafka_bootstrap, None, topics.team_input(team), team, [f"{team}-job"])
        deadline = time.monotonic() + 60
        while intake.taken < 2:
            assert time.monotonic() < deadline, f"taken in {intake.taken} of 2"
            intake.poll_once(0.2)
    finally:
        intake.close()
