"""A preemptor's Tick looks at the first few waiting gangs in queue order that may have victims; it reads at most that
many of each group of equal needs (plus every moving gang), since a group's members come in its rank order
(services/preemptor/decide.py `_may_preempt`). Reading every member instead decides the same. And what its looks
share while only stated reasons change (`_shared`) decides the same as looking afresh each time."""

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import models as m
from projections.evolve import evolve
from projections.jobs import JobState
from replay.scenario.play import parse, run, run_file
from services.core.decider import Context
from services.core.queue import queue_order
from services.preemptor import decide as preemptor
from tests.builders import env
from tests.property.streams import DataChooser, stream

# compares the core with a reference walk by patching its source (tests/conftest.py)
pytestmark = pytest.mark.pure

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


def decisions(play, every_member: bool, monkeypatch, afresh: bool = False) -> list[m.Event]:
    if every_member:
        looks = preemptor._may_preempt
        monkeypatch.setattr(preemptor, "_may_preempt", lambda state, ctx, first, memo: looks(state, ctx, 10**9, memo))
    if afresh:
        monkeypatch.setattr(preemptor, "_shared", lambda state, ctx: {})
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


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_decides_the_same_looking_afresh(path, monkeypatch):
    with pytest.MonkeyPatch.context() as shared:
        assert (decisions(lambda: run_file(path), False, shared)
                == decisions(lambda: run_file(path), False, monkeypatch, afresh=True))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_streams_decide_the_same_looking_afresh(data):
    scenario = stream(DataChooser(data), steps=40)
    with pytest.MonkeyPatch.context() as shared, pytest.MonkeyPatch.context() as afresh:
        assert decisions(lambda: run(scenario), False, shared) == decisions(lambda: run(scenario), False, afresh, True)


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
    every = preemptor._may_preempt(state, ctx, 10**9, {})
    assert len(every) >= 10
    first = preemptor._may_preempt(state, ctx, 3, {})
    ordered = [j.job_id for j in queue_order(state, every, cell.policy.admission)]
    assert sorted(j.job_id for j in first) == ordered[:3]
    last = state.jobs[ordered[-1]]
    last.moving = True
    state.set_state(last, last.state)  # as the fold of its consolidation would index it
    assert sorted(j.job_id for j in preemptor._may_preempt(state, ctx, 3, {})) == sorted([*ordered[:3], last.job_id])


def test_looks_share_across_restated_reasons_only():
    """`_shared` keeps one memo while folds only restate why a gang waits, and starts a new one on any other fold
    (an admission, a completed checkpoint, a reservation), at another time, or under another policy."""
    cell = _twelve_alike_behind_low_priority_work()
    state, now = cell.state, cell.state.now
    offset = [state.offset]

    def folded(event: m.Event) -> None:
        offset[0] += 1
        assert evolve(state, event, offset[0]) is None

    def ctx(at: int = now, policy=cell.policy) -> Context:
        return Context("preemptor", m.Tick(envelope=env(at, "clock")), state.offset, policy, at=at)

    def stamped(producer: str, event_id: str, **update) -> m.Envelope:
        return env(now, producer, event_id).model_copy(update={"cell": state.cell, **update})

    def queued(job_id: str, reason: m.Reason, **fields) -> m.JobQueued:
        return m.JobQueued(envelope=stamped("admitter", f"q-{job_id}-{reason}", reason=reason), job_id=job_id,
                           team="hi", **fields)

    shared = preemptor._shared(state, ctx())
    assert preemptor._shared(state, ctx()) is shared
    folded(queued("hi05", m.Reason.WAITING_FOR_QUEUE_HEAD))
    assert preemptor._shared(state, ctx()) is shared  # only a reason changed
    assert preemptor._shared(state, ctx(now + 1)) is not shared
    other = replace(cell.policy, preemption=replace(cell.policy.preemption, min_runtime_ms=1))
    assert preemptor._shared(state, ctx(policy=other)) is not shared
    shared = preemptor._shared(state, ctx())
    running = next(j for j in state.jobs.values() if j.state is JobState.RUNNING)
    folded(m.CheckpointCompleted(envelope=stamped("agent", "ckpt-1"), job_id=running.job_id, attempt=running.attempt,
                                 checkpoint_id="c1", progress_ms=1))
    assert preemptor._shared(state, ctx()) is not shared  # work lost to a preemption counts from it
    shared = preemptor._shared(state, ctx())
    folded(queued("hi06", m.Reason.HOLDS_RESERVATION, reserved_nodes=[sorted(state.cluster.nodes)[0]]))
    assert preemptor._shared(state, ctx()) is not shared  # a reservation is read
    shared = preemptor._shared(state, ctx())
    folded(queued("hi06", m.Reason.WAITING_FOR_QUEUE_HEAD))  # drops that reservation
    assert preemptor._shared(state, ctx()) is not shared
