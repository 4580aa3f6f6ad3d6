"""An intake starts only once its group says no member goes by its name; a group that does not answer in time (its
coordinator's broker failing over) is asked again instead of ending the intake (services/intake.py)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from services import intake


class Group:
    """A consumer group's answers to describe_consumer_groups, one per call: "timeout", or the members' names."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.asked = 0

    def describe_consumer_groups(self, groups):
        self.asked += 1
        answer = self.answers.pop(0)
        future = Future()
        if answer != "timeout":
            future.set_result(SimpleNamespace(members=[SimpleNamespace(client_id=name) for name in answer]))
        return {groups[0]: _Answer(future)}


class _Answer:
    def __init__(self, future: Future) -> None:
        self.future = future

    def result(self, timeout: float):
        if not self.future.done():
            raise TimeoutError()
        return self.future.result()


@pytest.fixture
def group(monkeypatch):
    monkeypatch.setattr(intake.time, "sleep", lambda s: None)
    return Group


def test_a_group_that_does_not_answer_is_asked_again(group) -> None:
    asked = group("timeout", "timeout", [])
    intake._wait_for_name(asked, "gangway-intake", "gangway-intake-a")
    assert asked.asked == 3


def test_a_member_of_its_name_that_leaves_lets_it_start(group) -> None:
    asked = group(["gangway-intake-a"], [])
    intake._wait_for_name(asked, "gangway-intake", "gangway-intake-a")
    assert asked.asked == 2


def test_a_member_of_its_name_that_stays_is_refused(group, monkeypatch) -> None:
    monkeypatch.setattr(intake, "NAME_WAIT_S", -1.0)
    with pytest.raises(intake.IntakeNameTaken):
        intake._wait_for_name(group(["gangway-intake-a"]), "gangway-intake", "gangway-intake-a")
