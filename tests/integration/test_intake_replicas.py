"""Two intakes share the input topics, each as the intake's principal on the real broker: kill -9 one while teams
submit and the other takes in what it read; every submission reaches the cell's log exactly once."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from events import models as m
from events.auth import Credentials, client_config, service_principal, team_principal
from events.broker import quiet_logger
from events.codec import EventCodec
from events.log import ensure_input_topic
from events.submission import job_submitted
from tests.integration.control_plane import ControlPlane, group_assignments, read_log

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TEAMS = ("nlp", "vision", "speech", "rl")


def submit(bootstrap: str, who: Credentials | None, topic: str, team: str, jobs: list[str], per_second: float = 0) -> None:
    """Team `team` submits `jobs` on its input topic, at `per_second` (0: at once)."""
    codec = EventCodec()
    producer = Producer({**client_config(bootstrap, who), "logger": quiet_logger(), "enable.idempotence": True})
    for job in jobs:
        at = int(time.time() * 1000)
        event = job_submitted(job, team, 1, 1, "H100", cell="cell-a", at=at, event_id=f"launcher/{team}/{job}@{at}")
        producer.produce(topic, value=codec.encode(event), partition=0)
        producer.poll(0)
        if per_second:
            time.sleep(1 / per_second)
    assert producer.flush(30) == 0


def group_assignment(bootstrap: str, group: str) -> list[int]:
    """How many input partitions each member of the group holds."""
    return sorted(len(held) for held in group_assignments(bootstrap, group))


def assigned(bootstrap: str, group: str, expected: list[int], plane: ControlPlane, timeout: float = 120) -> None:
    """Waits until the group's members hold `expected` input partitions each (a rebalance takes a while)."""
    deadline = time.monotonic() + timeout
    while (seen := group_assignment(bootstrap, group)) != expected:
        assert time.monotonic() < deadline, (seen, plane.tails())
        time.sleep(0.5)


def test_a_second_intake_takes_over_and_nothing_is_taken_in_twice(kafka_bootstrap, gangway_topics, topic_prefix,
                                                                  principals, tmp_path: Path, monkeypatch):
    topics = gangway_topics
    who = principals(*map(team_principal, TEAMS), service_principal("intake"))
    for team in TEAMS:
        ensure_input_topic(kafka_bootstrap, who[team_principal(team)], topics.team_input(team))
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    intake = who[service_principal("intake")]
    admin = (os.environ.get("GANGWAY_KAFKA_USER"), os.environ.get("GANGWAY_KAFKA_PASSWORD"))
    monkeypatch.setenv("GANGWAY_KAFKA_USER", intake.user)  # the processes run as the intake, under its ACLs
    monkeypatch.setenv("GANGWAY_KAFKA_PASSWORD", intake.password)
    plane.command("intake", "run", "intake", "-v")
    plane.command("intake-b", "run", "intake", "--replica", "b", "-v")
    for name, value in zip(("GANGWAY_KAFKA_USER", "GANGWAY_KAFKA_PASSWORD"), admin, strict=True):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    group = f"{topic_prefix}gangway-intake"
    try:
        assigned(kafka_bootstrap, group, [2, 2], plane)  # four team topics, two intakes
        first = {team: [f"{team}-{i}" for i in range(10)] for team in TEAMS}
        for team, jobs in first.items():
            submit(kafka_bootstrap, who[team_principal(team)], topics.team_input(team), team, jobs)

        later = {team: [f"{team}-{i}" for i in range(10, 40)] for team in TEAMS}
        writers = [threading.Thread(target=submit, args=(kafka_bootstrap, who[team_principal(team)],
                                                         topics.team_input(team), team, jobs, 10.0))
                   for team, jobs in later.items()]
        for writer in writers:
            writer.start()
        time.sleep(1.0)
        plane.kill("intake")  # mid-stream: whatever it had open is aborted, what it read is read again
        for writer in writers:
            writer.join(60)

        expected = {job for jobs in (*first.values(), *later.values()) for job in jobs}
        logged = read_log(kafka_bootstrap, topics, timeout=90, until=lambda events: expected <= {
            e.job_id for e in events if isinstance(e, m.JobSubmitted)})
        taken = Counter(e.job_id for _, e in logged if isinstance(e, m.JobSubmitted))
        assert set(taken) == expected, (len(set(taken)), len(expected), plane.tails())
        assert set(taken.values()) == {1}, [job for job, n in taken.items() if n > 1]  # none taken in twice
        origins = Counter((e.envelope.origin, e.envelope.origin_offset) for _, e in logged
                          if isinstance(e, m.JobSubmitted))
        assert set(origins.values()) == {1} and len(origins) == len(expected)
        assigned(kafka_bootstrap, group, [4], plane)  # the one left reads every team's topic
        # Each replica commits under its own transactional id: neither fenced the other.
        for name in ("intake", "intake-b"):
            assert "fenced" not in (tmp_path / f"{name}.log").read_text(), plane.tails(30)
        assert plane.processes["intake"].returncode == -9
        plane.command("intake", "run", "intake", "-v")  # restarted under its name: its killed self is let go
        assigned(kafka_bootstrap, group, [2, 2], plane)
    finally:
        codes = plane.stop_all()
    assert codes == {"intake": 0, "intake-b": 0}, (codes, plane.tails())


def test_an_intake_does_not_start_under_the_name_of_one_running(kafka_bootstrap, gangway_topics, topic_prefix,
                                                                 tmp_path: Path):
    """Two intakes of one name would fence each other's transactions in turn: the second refuses to start and
    says why; the first goes on taking every input in once."""
    topics = gangway_topics
    for team in TEAMS:  # an intake joins its group once its pattern matches a topic
        ensure_input_topic(kafka_bootstrap, None, topics.team_input(team))
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.command("intake", "run", "intake", "-v")
    group = f"{topic_prefix}gangway-intake"
    deadline = time.monotonic() + 60
    while not group_assignment(kafka_bootstrap, group):
        assert time.monotonic() < deadline, plane.tails()
        time.sleep(0.5)
    plane.command("intake-again", "run", "intake", "-v")
    jobs = {team: [f"{team}-{i}" for i in range(10)] for team in TEAMS}
    try:
        assert plane.processes["intake-again"].wait(60) == 1
        assert "an intake named" in (tmp_path / "intake-again.log").read_text()
        for team, team_jobs in jobs.items():
            submit(kafka_bootstrap, None, topics.team_input(team), team, team_jobs)
        expected = {job for team_jobs in jobs.values() for job in team_jobs}
        logged = read_log(kafka_bootstrap, topics, timeout=90, until=lambda events: expected <= {
            e.job_id for e in events if isinstance(e, m.JobSubmitted)})
        taken = Counter(e.job_id for _, e in logged if isinstance(e, m.JobSubmitted))
        assert set(taken) == expected and set(taken.values()) == {1}, plane.tails()
    finally:
        codes = plane.stop_all()
    assert codes == {"intake": 0, "intake-again": 1}, (codes, plane.tails())
