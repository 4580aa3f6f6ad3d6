"""A job moved to make room (consolidation) keeps its turn: the fold marks it moving from the request until it is
admitted again, and the admitter takes it first and past the queue-head guard that would stop a gang that was
waiting all along."""

from pathlib import Path

from events import models as m
from replay.scenario.play import parse, run, run_file
from services.admitter.decide import Admitter
from services.core.decider import Context
from services.core.queue import order_key
from services.policy import DEFAULT_POLICY
from tests.builders import tick

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_a_moved_job_is_moving_from_its_preemption_until_it_is_admitted_again():
    seen = []
    run_file(SCENARIOS / "consolidate_fragmented_gang.yaml",
             observers=[lambda cell, event, offset: seen.append((type(event).__name__, event.envelope.reason,
                                                                  "q" in cell.state.moving, cell.state.jobs["q"].moving
                                                                  if "q" in cell.state.jobs else None))])
    requested = next(i for i, s in enumerate(seen) if s[0] == "PreemptionRequested")
    preempted = next(i for i, s in enumerate(seen) if s[0] == "JobPreempted")
    admitted = next(i for i, s in enumerate(seen) if s[0] == "JobAdmitted" and i > preempted and s[2] is False)
    assert seen[requested][1] is m.Reason.CONSOLIDATED and seen[requested][3] is True  # running, not yet queued
    assert seen[preempted][2:] == (True, True)  # queued and moving: in the index
    assert seen[admitted][2:] == (False, False)
    assert not any(s[2] for s in seen[:preempted] + seen[admitted:])


def _waiting_behind_a_head():
    """h (19 x 1 GPU, high priority, may drain the cell) heads the queue: it starts at 2 h, when a and b have ended
    by their limits. v's 2 GPUs for 4 h would leave it 18 then: v waits for it."""
    small = [("a", "1h"), ("b", "2h"), ("c", "4h"), ("d", "4h")]
    return run(parse({
        "name": "behind-a-head", "cell": {"nodes": [{"generate": {"count": 4, "gpus": 8, "gpu_type": "H100"}}]},
        "teams": [{"name": "nlp", "quota": {"H100": 100}}], "priority_classes": [{"name": "high", "value": 1000}],
        "policy": {"admission": {"max_drain_share": 1.0}}, "tick": "30s", "until": "2m",
        "inputs": [*({"at": 0, "submit": {"job": j, "team": "nlp", "gpus_per_worker": 6, "time_limit": limit}}
                     for j, limit in small),
                   {"at": 1000, "submit": {"job": "h", "team": "nlp", "workers": 19, "gpus_per_worker": 1,
                                           "priority_class": "high", "time_limit": "2h"}},
                   {"at": 60000, "submit": {"job": "v", "team": "nlp", "gpus_per_worker": 2, "time_limit": "4h"}}],
    }, "behind a head")).cell


def test_a_waiting_gang_that_would_delay_its_head_waits_but_a_moving_one_is_admitted():
    cell = _waiting_behind_a_head()
    assert cell.state.jobs["v"].reason is m.Reason.WOULD_DELAY_QUEUE_HEAD
    state = cell.state
    state.jobs["v"].moving = True
    state.set_state(state.jobs["v"], state.jobs["v"].state)  # as the fold of its consolidation would index it
    state.changes += 1  # a changed state: the Tick's cycle runs
    event = tick(150_000)
    decisions = Admitter().decide(state, event, Context("admitter", event, len(cell.log), cell.policy))
    assert [(type(d).__name__, d.job_id) for d in decisions if isinstance(d, m.JobAdmitted)] == [("JobAdmitted", "v")]


def test_a_moving_gang_comes_first_in_the_admission_order():
    state = _waiting_behind_a_head().state
    key = order_key(state, DEFAULT_POLICY.admission)
    assert key(state.jobs["h"]) < key(state.jobs["v"])
    state.jobs["v"].moving = True
    assert key(state.jobs["v"]) < key(state.jobs["h"])
