"""A gang with GPUs held for it on a node reserved for another gang may use those GPUs there, and no others:
the hold is its own, the rest of the node is the reservation's (found by the property test of backfill)."""

from __future__ import annotations

from events import models as m
from replay.runner import VirtualCell
from tests.builders import cancel, env, job, node, quota, team, tick, topology


def test_a_held_gang_uses_only_its_held_gpus_on_a_node_reserved_for_another_gang():
    cell = VirtualCell(cell="test-cell")
    for event in (topology("rack"), node("n1"), node("n2"), team("nlp"), quota("nlp", 100), tick(0),
                  job("r1", gpus=7, at=1), job("r2", gpus=7, at=2), job("big", workers=2, gpus=8, at=3),
                  job("wait", workers=3, gpus=1, at=4), tick(60_000)):
        cell.append(event)
    jobs = cell.state.jobs
    assert jobs["wait"].state.value == "queued"  # one GPU free per node
    victim_on = jobs["r1"].assignments[0][1]
    other = "n2" if victim_on == "n1" else "n1"
    reserving = env(60_001, "admitter", "reserve-big").model_copy(update={"reason": m.Reason.INSUFFICIENT_FREE_GPUS})
    cell.append(m.JobQueued(envelope=reserving, job_id="big", team="nlp", reserved_nodes=[victim_on]))
    cell.append(m.CapacityHeld(envelope=env(60_002, "preemptor", "hold-wait"), job_id="wait", team="nlp",
                               gpu_type="H100", gpus=3, until=10**7, victims=["r1"],
                               assignments=[m.WorkerAssignment(worker=0, node=victim_on, gpus=[0]),
                                            m.WorkerAssignment(worker=1, node=victim_on, gpus=[7]),
                                            m.WorkerAssignment(worker=2, node=other, gpus=[7])]))
    assert cell.state.cluster.nodes[victim_on].reserved_for == "big" and jobs["wait"].has_hold
    cell.append(cancel("r1", at=60_003))  # the victim leaves its node, reserved for big, all free
    cell.append(tick(120_000))

    admitted = [d for d in cell.log if isinstance(d, m.JobAdmitted) and d.job_id == "wait"]
    assert len(admitted) == 1
    taken = sorted(g for a in admitted[0].assignments if a.node == victim_on for g in a.gpus)
    assert set(taken) <= {0, 7}, f"wait took GPUs {taken} of {victim_on}, reserved for big; 0 and 7 were held for it"
