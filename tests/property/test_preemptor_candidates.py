"""A preemptor's Tick looks at the first few waiting gangs in queue order that may have victims; it reads at most that
many of each group of equal needs (plus every moving gang), since a group's members come in its rank order
(services/preemptor/decide.py `_may_preempt`). Reading every member instead decides the same."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import models as m
from replay.scenario.play import parse, run, run_file
from services.core.decider import Context
from services.core.queue import queue_order
from services.preemptor import decide as preemptor
from tests.property.streams import DataChooser, stream

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


def decisions(play, every_member: bool, monkeypatch) -> list[m.Event]:
    if every_member:
        looks = preemptor._may_preempt
        monkeypatch.setattr(preemptor, "_may_preempt", lambda state, ctx, first: looks(state, ctx, 10**9))
    return [e for e in play().cell.log if e.is_decision]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_decides_the_same_reading_every_member(path, monkeypatch):
    with pytest.MonkeyPatch.context() as cut:
        assert decisions(lambda: run_file(path), False, cut) == decisions(lambda: run_file(path), True, monkeypatch)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_streams_decide_the_same_reading_every_member(data):
    scenario = stream(DataChooser(data), steps=40)
    with pytest.MonkeyPatch.context() as cut, pytest.MonkeyPatch.context() as every:
        assert decisions(lambda: run(scenario), False, cut) == decisions(lambda: run(scenario), True, every)


def _twelve_alike_behind_low_priority_work():
    """Team hi submits twelve alike 8-GPU gangs at high priority while team lo's two 8-GPU jobs fill the cell:
    all twelve may have victims."""
    return run(parse({
        "name": "twelve-alike", "cell": {"nodes": [{"generate": {"count": 2, "gpus": 8, "gpu_type": "H100"}}]},
        "teams": [{"name": "lo", "quota": {"H100": 16}}, {"name": "hi", "quota": {"H100": 16}}],
        "priority_classes": [{"name": "high", "value": 1000}], "tick": "30s", "until": "1m",
        "policy": {"preemption": {"min_runtime": "0s"}},
        "inputs": [*({"at": 0, "submit": {"job": f"lo{i}", "team": "lo", "gpus_per_worker": 8}} for i in range(2)),
                   *({"at": 1000 + i, "submit": {"job": f"hi{i:02}", "team": "hi", "gpus_per_worker": 8,
                                                  "priority_class": "high"}} for i in range(12))],
    }, "twelve alike")).cell


def test_a_tick_reads_the_first_of_a_group_and_every_moving_gang():
    cell = _twelve_alike_behind_low_priority_work()
    state = cell.state
    ctx = Context("preemptor", m.Tick(envelope=cell.log[-1].envelope), state.offset, cell.policy, at=state.now)
    every = preemptor._may_preempt(state, ctx, 10**9)
    assert len(every) >= 10
    first = preemptor._may_preempt(state, ctx, 3)
    ordered = [j.job_id for j in queue_order(state, every, cell.policy.admission)]
    assert sorted(j.job_id for j in first) == ordered[:3]
    last = state.jobs[ordered[-1]]
    last.moving = True
    state.set_state(last, last.state)  # as the fold of its consolidation would index it
    assert sorted(j.job_id for j in preemptor._may_preempt(state, ctx, 3)) == sorted([*ordered[:3], last.job_id])
