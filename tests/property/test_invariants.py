"""Random streams of submits, cancels, failures, Xid errors, exits, quota changes and ticks over a
small cell keep every invariant of the core after every event."""

import yaml
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from replay.scenario.play import run
from tests.property.invariants import Invariants
from tests.property.streams import DataChooser, stream, time_shared

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


@settings(SETTINGS, max_examples=15)
@given(st.data())
def test_decide_is_pure_and_repeatable(data):
    scenario = stream(DataChooser(data), steps=25)
    _note_inputs(scenario)
    run(scenario, observers=[Invariants(purity=True)])


def _note_inputs(scenario):
    """On failure, hypothesis prints the inputs as scenario YAML, ready to paste into a scenario file."""
    note(yaml.safe_dump({"inputs": [i.model_dump(exclude_none=True, exclude_defaults=True) | {"at": i.at}
                                    for i in scenario.inputs]}, sort_keys=False))
