"""Random streams of submits, cancels, failures, Xid errors, exits, quota changes and ticks over a
small cell keep every invariant of the core after every event."""

import yaml
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from events import models as m
from replay.scenario.play import run
from tests.property.invariants import Invariants
from tests.property.streams import DataChooser, stream, time_shared, time_shared_cell

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.data())
def test_gpus_gangs_and_quota_hold_after_every_event(data):
    scenario = stream(DataChooser(data), steps=40)
    _note_inputs(scenario)
    checks = Invariants()
    outcome = run(scenario, observers=[checks])
    assert checks.events == len(outcome.cell.log)


@settings(SETTINGS, max_examples=40)
@given(st.data())
def test_every_invariant_holds_under_least_attained_service(data):
    scenario = time_shared(DataChooser(data))
    _note_inputs(scenario)
    checks = Invariants()
    outcome = run(scenario, observers=[checks])
    assert checks.events == len(outcome.cell.log)


#: (at s, job, team, GPUs, runs for min, priority class): at 2,190 s the preemptor answers three holds in a row. It
#: releases short7's and short0's, then asks long0 (team a, time-shared) and long1 (team b, borrowing) to make room
#: for short1. Judged with the two released holds still counted, short1 would have to borrow to run, which allows
#: no preemption of long1; the preemptor judged it with its own releases laid over, as it decides, and reclaimed.
#: Found while only a gang's own team could pass its reservation (gangway-10): when a higher priority passes any
#: team's (gangway-11), short4 takes other nodes and short1 needs long0 alone.
_RELEASED_BEFORE = [(0, "long0", "a", 4, 60, None), (0, "long1", "b", 4, 60, None), (0, "long2", "b", 8, 60, None),
                    (300, "short2", "b", 4, 4, "high"), *[(300, f"short{i}", "a", 2, 3, None) for i in (6, 8, 9, 10, 11)],
                    (302, "short5", "a", 2, 3, None), (786, "short4", "a", 8, 4, "high"), (842, "short3", "a", 2, 15, None),
                    (1321, "short7", "a", 2, 3, None), (1560, "short0", "a", 2, 3, None), (1560, "short1", "a", 4, 3, None)]


def _checked_time_sharing_any(inputs: list[dict], by_deadline: bool = True, passes_reservations: bool = True):
    """The time-shared cell (team a's nominal 8, time-sharing across teams) run with every invariant checked."""
    scenario = time_shared_cell(inputs, quota_a=8, time_share="Any", min_runtime="0s", checkpoint_grace="0s",
                                consolidate=False, checkpoint_every="5m", by_deadline=by_deadline,
                                passes_reservations=passes_reservations)
    checks = Invariants()
    outcome = run(scenario, observers=[checks])
    assert checks.events == len(outcome.cell.log)
    return outcome


def test_a_preemption_is_judged_with_its_deciders_earlier_decisions_in_flight_laid_over():
    outcome = _checked_time_sharing_any([
        {"at": at * 1000, "submit": {"job": job, "team": team, "gpus_per_worker": gpus, "runs_for": runs * 60_000,
                                     **({"priority_class": cls} if cls else {})}}
        for at, job, team, gpus, runs, cls in _RELEASED_BEFORE], passes_reservations=False)
    asked = [(d.job_id, d.envelope.reason) for d in outcome.cell.log
             if isinstance(d, m.PreemptionRequested) and d.for_job_id == "short1"]
    assert asked == [("long0", m.Reason.TIME_SHARED), ("long1", m.Reason.RECLAIM_LENT_QUOTA)]


#: (at s, job, team, GPUs, runs for min, time limit min): at 3,630 s the preemptor decides two holds on one state:
#: short0's (team a, 8 GPUs) and then short4's (team b), whose victims include long1, team a's only running job.
#: With short0's hold counted, team a used 12 of its nominal 8 and borrowed; short0's hold is then released as
#: stale, and asking long1 to go would have left team a at 0 of its nominal 8. Found in submit order (gangway-9): by
#: deadline, long1 (limit 240 min) goes before the short gangs and the case no longer arises.
_LAW_AFTER_A_RELEASE = [(0, "long0", "b", 4, 60, 240), (0, "long2", "a", 4, 60, None), (60, "long3", "b", 8, 60, None),
                        *[(300, f"short{i}", "a", 2, 3, None) for i in (1, 2, 3, 5)], (360, "long1", "a", 4, 60, 240),
                        (540, "short0", "a", 8, 3, None), (541, "short4", "b", 8, 3, None)]


def test_a_hold_whose_victims_would_break_the_law_once_another_hold_is_released_asks_none_of_them():
    outcome = _checked_time_sharing_any([
        {"at": at * 1000, "submit": {"job": job, "team": team, "gpus_per_worker": gpus, "runs_for": runs * 60_000,
                                     **({"time_limit": limit * 60_000} if limit else {})}}
        for at, job, team, gpus, runs, limit in _LAW_AFTER_A_RELEASE], by_deadline=False)
    released = [d.detail for d in outcome.cell.log if isinstance(d, m.CapacityReleased) and d.job_id == "short4"]
    assert "no victim asked: together they would take another team below its nominal quota" in released
    asked_for_short4 = {d.job_id for d in outcome.cell.log
                        if isinstance(d, m.PreemptionRequested) and d.for_job_id == "short4"}
    assert "long1" not in asked_for_short4


@settings(SETTINGS, max_examples=15)
@given(st.data())
def test_decide_is_pure_and_repeatable(data):
    scenario = stream(DataChooser(data), steps=25)
    _note_inputs(scenario)
    run(scenario, observers=[Invariants(purity=True)])


def _note_inputs(scenario):
    """On failure, hypothesis prints the scenario as YAML: the knobs a strategy drew (teams and their quotas, the
    policy, the agents) and the inputs, ready to paste into a scenario file."""
    drawn = scenario.model_dump(mode="json", exclude_defaults=True, exclude={"inputs", "cell", "until", "tick"})
    note(yaml.safe_dump({**drawn, "inputs": [i.model_dump(exclude_none=True, exclude_defaults=True) | {"at": i.at}
                                             for i in scenario.inputs]}, sort_keys=False))
