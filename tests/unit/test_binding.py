"""The binding of a gang's planned placement (JobPlaced right after its JobAdmitted) keeps the plan's GPUs held
rather than letting them go and taking them again: folded either way, the cell ends in the same state, down to
its capacity indexes, whether the plan still holds or went stale in between."""

from __future__ import annotations

import pytest

from events import models as m
from projections import evolve as fold_module
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import JobState
from projections.snapshot import all_keys, rows
from replay.runner import VirtualCell
from tests.builders import job, node, quota, team, topology


def let_go_and_take_again(state: CellState, e: m.JobPlaced, offset: int) -> None:
    """The binding as a plan that is not the job's would be folded: its held GPUs let go, then the new ones taken."""
    job_ = state.jobs.get(e.job_id)
    if job_ is None or job_.state is not JobState.ADMITTED or e.attempt != job_.attempt:
        return fold_module._job_placed(state, e, offset)
    fold_module._unhold(state, job_)
    if not fold_module._assignable(state, job_, e.assignments):
        fold_module._note(job_, e, offset, m.Reason.PLACEMENT_SUPERSEDED.value)
        return None
    fold_module._decided_about(state, e, offset)
    fold_module._note(job_, e, offset)
    fold_module._hold(state, job_, e.assignments, e.domain)
    state.set_state(job_, JobState.PLACED)
    return None


def planned_and_bound(between: list[m.Event]) -> list[m.Event]:
    """A cell's log in which the admitter admits and binds a two-node gang, with `between` folded between its
    admission and its binding."""
    cell = VirtualCell(cell="test-cell")
    for event in (topology("rack"), node("n1"), node("n2"), node("n3"), team("nlp"), quota("nlp", 24),
                  job("small", gpus=4), job("llm", workers=2, gpus=8, at=1)):
        cell.append(event)
    log = list(cell.log)
    at = next(i for i, e in enumerate(log) if isinstance(e, m.JobPlaced) and e.job_id == "llm")
    assert isinstance(log[at - 1], m.JobAdmitted) and log[at - 1].assignments  # the admitter's own binding
    return [*log[:at], *between, *log[at:]]


def folded(log: list[m.Event]) -> CellState:
    state = CellState()
    for offset, event in enumerate(log):
        evolve(state, event, offset)
    return state


def everything(state: CellState) -> tuple:
    cluster = state.cluster
    return (list(rows(state, all_keys(state))), cluster.histogram, cluster.free_in, cluster.by_free, cluster.counted,
            cluster.claimed_on, cluster.odd_holders, state.queued, state.admitted, state.holding)


def envelope(producer: str) -> m.Envelope:
    return m.Envelope(event_id=f"{producer}-between", cell="test-cell", at=1, producer=producer)


@pytest.mark.parametrize("between", [
    [],
    [m.NodeCordoned(envelope=envelope("operator"), node="n2")],
    [m.GpuFaulted(envelope=envelope("recovery"), node="n2", gpu=3, xid=48, action=m.XidAction.RETIRE_GPU)],
    [m.NodeFailed(envelope=envelope("recovery"), node="n1")],
    [m.NodeFailed(envelope=envelope("recovery"), node="n3")],
])
def test_binding_its_own_plan_ends_as_letting_the_gpus_go_and_taking_them_again_would(monkeypatch, between):
    log = planned_and_bound(between)
    kept = folded(log)
    monkeypatch.setitem(fold_module._HANDLERS, m.JobPlaced, let_go_and_take_again)
    again = folded(log)
    assert everything(kept) == everything(again)
    binding = next(e for e in log if isinstance(e, m.JobPlaced) and e.job_id == "llm")
    llm = kept.jobs["llm"]
    if any(e.node in {a.node for a in binding.assignments} for e in between):  # the plan went stale in between
        assert (llm.state, llm.assignments) == (JobState.ADMITTED, ())
        assert llm.history[-1][3] == m.Reason.PLACEMENT_SUPERSEDED.value
    else:
        assert llm.state is JobState.PLACED
        assert all(kept.cluster.nodes[a.node].holder[g] == "llm" for a in binding.assignments for g in a.gpus)


def test_binding_another_plan_than_the_one_held_ends_as_letting_the_gpus_go_and_taking_them_again_would(
        monkeypatch):
    """The placer's binding of a plan other than the one the admission holds (its workers swapped between the
    nodes): the held GPUs are let go and the new ones taken, folded either way alike."""
    log = planned_and_bound([])
    at = next(i for i, e in enumerate(log) if isinstance(e, m.JobPlaced) and e.job_id == "llm")
    own = log[at]
    swapped = [m.WorkerAssignment(worker=1 - a.worker, node=a.node, gpus=a.gpus) for a in own.assignments]
    log[at] = own.model_copy(update={"assignments": swapped, "envelope": own.envelope.model_copy(
        update={"producer": "placer"})})
    kept = folded(log)
    monkeypatch.setitem(fold_module._HANDLERS, m.JobPlaced, let_go_and_take_again)
    assert everything(kept) == everything(folded(log))
    assert kept.jobs["llm"].state is JobState.PLACED
    assert sorted(kept.jobs["llm"].assignments) == sorted((a.worker, a.node, tuple(a.gpus)) for a in swapped)
