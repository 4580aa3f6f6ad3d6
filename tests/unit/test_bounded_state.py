"""A cell's state holds live work: an ended job leaves it at the next Tick, its id kept so it is never reused;
the log, the read models and the virtual cell's archive still have the job."""

from __future__ import annotations

from events import models as m
from projections.evolve import RETIRED_PER_ROW, evolve
from projections.store import ProjectionStore
from replay.runner import VirtualCell
from tests.builders import cancel, job, node, quota, team, tick, topology


def a_job_that_ran(cell_log: VirtualCell, job_id: str, at: int) -> None:
    """Submits `job_id` and plays its worker's start and clean exit, as its agent reports them."""
    cell_log.append(job(job_id, at=at))
    placed = next(e for e in reversed(cell_log.log) if isinstance(e, m.JobPlaced) and e.job_id == job_id)
    for kind, extra in ((m.WorkerStarted, {}), (m.WorkerExited, {"exit_code": 0})):
        cell_log.append(kind(envelope=cell_log.envelope(at, "agent"), job_id=job_id, attempt=placed.attempt,
                             worker=0, node=placed.assignments[0].node, **extra))


def small_cell() -> VirtualCell:
    cell = VirtualCell(cell="test-cell")
    for event in (topology("rack"), node("n1"), team("nlp"), quota("nlp", 8)):
        cell.append(event)
    return cell


def test_an_ended_job_leaves_the_state_at_the_next_tick_and_its_id_is_kept():
    cell = small_cell()
    a_job_that_ran(cell, "done", at=1_000)
    assert cell.state.jobs["done"].state.value == "succeeded"  # until time passes, the job is still there
    cell.append(tick(2_000))
    assert "done" not in cell.state.jobs
    assert cell.state.retired == {"done"} and cell.state.knows("done")
    assert cell.job("done").state.value == "succeeded"  # the virtual cell's archive keeps it for its readers


def test_a_retired_id_is_refused_when_used_again_and_cannot_be_cancelled():
    cell = small_cell()
    a_job_that_ran(cell, "done", at=1_000)
    cell.append(tick(2_000))
    cell.append(job("done", at=3_000))
    cell.append(cancel("done", at=3_000))
    rejected = next(e for e in cell.log if isinstance(e, m.JobRejected))
    assert rejected.envelope.reason is m.Reason.DUPLICATE_JOB and "ids are never reused" in rejected.detail
    refused = next(e for e in cell.log if isinstance(e, m.RequestRejected))
    assert "job already ended" in refused.detail
    assert "done" not in cell.state.jobs  # nothing came back


def test_a_late_report_about_a_retired_job_is_stale_not_refused():
    cell = small_cell()
    a_job_that_ran(cell, "done", at=1_000)
    cell.append(tick(2_000))
    cell.append(m.WorkerExited(envelope=cell.envelope(3_000, "agent"), job_id="done", attempt=1, worker=0,
                               node="n1", exit_code=0))
    assert not any(isinstance(e, m.RecordRefused) for e in cell.log)


def test_the_store_keeps_the_retired_ids_in_rows_of_a_thousand(tmp_path):
    cell = small_cell()
    state = cell.state
    for i in range(2 * RETIRED_PER_ROW + 5):  # ended jobs folded straight from the log, as a replay would
        for event in (job(f"j{i}", at=10 * i), m.JobCancelled(envelope=cell.envelope(10 * i, "admitter"),
                                                              job_id=f"j{i}")):
            evolve(state, event, state.offset + 1)
    evolve(state, tick(10**6), state.offset + 1)
    assert not state.jobs and len(state.retired) == 2 * RETIRED_PER_ROW + 5
    store = ProjectionStore(tmp_path / "store")
    store.save(state, everything=True)
    retired_rows = [k for k in store._db.keys() if k.startswith(b"retired/")]
    assert len(retired_rows) == 3
    restored = store.load()
    assert restored.retired_order == state.retired_order and restored.knows("j2004")
