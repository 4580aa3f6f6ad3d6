"""`verify` replays each service as the replica its Kafka shell runs, and must notice tampering.

The in-memory runner runs the same replicas on one ordered log, so on its logs every service
reproduces every decision it wrote, and nothing else."""

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
    log, _, _ = logged(path)
    for name, decider in sorted(DECIDERS.items()):
        verdict = verify(log, decider())  # each decision under the policy it records
        assert verdict.ok, verdict
        assert verdict.reproduced == sum(1 for _, e in log if e.is_decision and e.envelope.producer == name)


def test_a_tampered_placement_is_reported_as_different():
    log, policy, _ = logged(next(p for p in SCENARIOS if p.stem == "demo"))
    i, placed = next((i, e) for i, e in log if isinstance(e, m.JobPlaced))
    moved = placed.model_copy(update={"assignments": [a.model_copy(update={"gpus": [7 - g for g in a.gpus]})
                                                      for a in placed.assignments]})
    log[i] = (i, moved)
    verdict = verify(log, DECIDERS[placed.envelope.producer](), policy)
    assert verdict.different == [placed.envelope.event_id]


def test_a_decision_nobody_made_is_reported_as_missing():
    log, policy, _ = logged(next(p for p in SCENARIOS if p.stem == "demo"))
    forged = m.JobRejected(envelope=m.Envelope(event_id="admitter-999999-1", cell="demo", at=0, producer="admitter",
                                               basis_offset=999999), job_id="nobody", detail="forged")
    verdict = verify([*log, (len(log), forged)], DECIDERS["admitter"](), policy)
    assert verdict.missing == ["admitter-999999-1"]
