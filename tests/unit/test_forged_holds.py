"""A capacity hold that cannot be the gang's (no GPUs, negative, more than the gang asks for, another team's
pool) is superseded as it is folded: nothing is claimed, no quota is held."""

from __future__ import annotations

import pytest

from events import models as m
from replay.runner import VirtualCell
from tests.builders import job, node, quota, team, tick, topology


@pytest.mark.parametrize(("gpus", "pool_team"), [(0, "nlp"), (-1, "nlp"), (10**9, "nlp"), (17, "nlp"), (16, "cv")])
def test_a_hold_that_cannot_be_the_gangs_changes_nothing(gpus, pool_team):
    cell = VirtualCell(cell="test-cell")
    for event in (topology("rack"), node("n1"), node("n2"), team("nlp"), quota("nlp", 8), team("cv"), quota("cv", 8), tick(0),
                  job("wait", workers=2, gpus=8, team="nlp", at=1)):
        cell.append(event)
    assert cell.state.jobs["wait"].state.value == "queued"
    cell.append(m.CapacityHeld(envelope=cell.envelope(2, "preemptor"), job_id="wait", team=pool_team,
                               gpu_type="H100", gpus=gpus,
                               assignments=[m.WorkerAssignment(worker=0, node="n1", gpus=list(range(8)))],
                               until=10**6))
    job_state = cell.state.jobs["wait"]
    assert not job_state.has_hold and not cell.state.holds
    assert not any(cell.state.tenancy.held.values())
    assert not cell.state.cluster.nodes["n1"].claimed
