"""The simulated node agents start and run only what the cell took: a placement or a worker start the fold did not
take (superseded, stale, from a node the job is not on) starts and runs nothing."""

from events import models as m
from projections.jobs import JobState
from services.agent.simulated import SimulatedAgents
from tests import builders as b


def placed_cell():
    cell = b.fold(b.topology("block", "rack"), *[b.node(f"n{i}", block="b0", rack="r0") for i in range(2)],
                  b.team("nlp"), b.quota("nlp", 16), b.job("llm", workers=1, gpus=8, team="nlp"))
    job = cell.state.jobs["llm"]
    assert job.state is JobState.PLACED and job.assignments[0][1] == "n0"
    return cell, job


def started(job, node: str) -> m.WorkerStarted:
    return m.WorkerStarted(envelope=b.env(1000, f"agent/{node}"), job_id=job.job_id, attempt=job.attempt, worker=0,
                           node=node)


def scheduled_by(cell, act) -> list[m.Event]:
    """What `act` scheduled on the cell."""
    before = {id(e) for _, _, e in cell._pending}
    act()
    return [e for _, _, e in sorted(cell._pending, key=lambda p: p[:2]) if id(e) not in before]


def placed(job, node: str) -> m.JobPlaced:
    return m.JobPlaced(envelope=b.env(1000, "placer"), job_id=job.job_id, attempt=job.attempt,
                       assignments=[m.WorkerAssignment(worker=0, node=node, gpus=list(range(8)))], domain=node)


def test_a_start_on_the_node_the_job_is_placed_on_runs_it():
    cell, job = placed_cell()
    agents = SimulatedAgents()
    assert [type(e) for e in scheduled_by(cell, lambda: agents(cell, started(job, "n0"), 0))] == [
        m.CheckpointCompleted, m.WorkerExited]


def test_a_start_from_another_node_runs_nothing():
    cell, job = placed_cell()
    agents = SimulatedAgents()
    assert scheduled_by(cell, lambda: agents(cell, started(job, "n1"), 0)) == []
    assert agents.progress(job.job_id, job.attempt, 10_000) is None


def test_a_placement_the_cell_did_not_take_starts_no_worker():
    cell, job = placed_cell()
    agents = SimulatedAgents()
    assert scheduled_by(cell, lambda: agents(cell, placed(job, "n1"), 0)) == []  # superseded: the job holds n0
    assert [(type(e), e.node) for e in scheduled_by(cell, lambda: agents(cell, placed(job, "n0"), 0))] == [
        (m.WorkerStarted, "n0")]
