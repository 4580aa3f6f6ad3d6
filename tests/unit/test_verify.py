"""`verify` replays each service as the Kafka shell runs it and must notice tampering.

On the in-memory runner's logs it reproduces every decision but one kind: the runner folds a
service's decisions at their place in the log, so a service can decide again before its own earlier
decision is folded, and that later decision is then superseded when folded. A Kafka service folds
its own decisions at once (the assumed set) and never makes such a decision; `verify` models the
Kafka service, so those, and only those, come out missing."""

from pathlib import Path

import pytest

from events import models as m
from replay.scenario.play import load, run
from replay.verify import verify
from services.run_cli import DECIDERS

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


def logged(path: Path):
    outcome = run(load(path))
    return list(enumerate(outcome.cell.log)), outcome.cell.policy, outcome.cell.state


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_service_reproduces_its_decisions_from_the_log(path):
    log, policy, _ = logged(path)
    by_id = {e.envelope.event_id: (offset, e) for offset, e in log}
    for name, decider in sorted(DECIDERS.items()):
        verdict = verify(log, decider(), policy)
        assert (verdict.different, verdict.extra) == ([], []), verdict
        for event_id in verdict.missing:
            assert decided_with_own_decision_in_flight(log, *by_id[event_id]), (name, event_id)


def decided_with_own_decision_in_flight(log, offset: int, decision: m.Event) -> bool:
    """The service made `decision` (at its basis) while an earlier decision of its own sat unfolded in the log."""
    basis = decision.envelope.basis_offset
    return any(e.envelope.producer == decision.envelope.producer and e.is_decision
               and (e.envelope.basis_offset or 0) < basis < at for at, e in log[:offset])


def test_a_tampered_placement_is_reported_as_different():
    log, policy, _ = logged(next(p for p in SCENARIOS if p.stem == "demo"))
    i, placed = next((i, e) for i, e in log if isinstance(e, m.JobPlaced))
    moved = placed.model_copy(update={"assignments": [a.model_copy(update={"gpus": [7 - g for g in a.gpus]})
                                                      for a in placed.assignments]})
    log[i] = (i, moved)
    verdict = verify(log, DECIDERS["placer"](), policy)
    assert verdict.different == [placed.envelope.event_id]


def test_a_decision_nobody_made_is_reported_as_missing():
    log, policy, _ = logged(next(p for p in SCENARIOS if p.stem == "demo"))
    forged = m.JobRejected(envelope=m.Envelope(event_id="admitter-999999-1", cell="demo", at=0, producer="admitter",
                                               basis_offset=999999), job_id="nobody", detail="forged")
    verdict = verify([*log, (len(log), forged)], DECIDERS["admitter"](), policy)
    assert verdict.missing == ["admitter-999999-1"]
