"""Decisions that finish what they start, on random streams (invariants.py checks on every request that the victims
are the beneficiary team's to take and that no other team is left below its nominal quota):

- every PreemptionRequested is followed, by its checkpoint deadline plus one cycle, by its gang's admission or by a
  decision that says why the gang no longer needs it (the hold released, or the gang ended); no job is preempted
  twice for the same gang;
- a gang at the head of its team's queue never has its expected start (services/core/heads.py) pushed later by
  the admission of lower-ranked work of its team, if the admitter saw it head the queue, protected, when it decided
  (the log through the decision's basis, and the admitter's own decisions in flight).
"""

from dataclasses import dataclass
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from events import models as m
from projections.evolve import SUPERSEDED
from projections.jobs import JobState
from replay.scenario.play import load, run
from replay.scenario.spec import Input, WorkerExit
from services.core.heads import head_start, may_drain, team_head
from services.core.queue import least_attained_service
from tests.property.invariants import Invariants
from tests.property.streams import DataChooser, stream

SPARE_JOINS = Path(__file__).resolve().parents[1] / "scenarios" / "backfill_decided_before_the_spare_joins.yaml"


def _note_inputs(scenario) -> None:
    """On failure, hypothesis prints the whole scenario as YAML, ready to save as a scenario file and replay."""
    note(yaml.safe_dump(scenario.model_dump(mode="json", exclude_none=True, warnings=False), sort_keys=False))


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Decisions after which a gang no longer needs what was preempted for it.
_ANSWERS = (m.JobAdmitted, m.CapacityReleased, m.JobCancelled, m.JobRejected, m.JobFailed, m.JobSucceeded)


def _took_effect(cell, event: m.Event, offset: int) -> bool:
    """Whether the decision folded at `offset` changed the job it names (it is in the job's history, not superseded)."""
    job = cell.job(event.job_id)  # ended jobs leave the state; the virtual cell keeps them
    return job is not None and any(o == offset and reason not in (SUPERSEDED, m.Reason.PLACEMENT_SUPERSEDED.value)
                                   for o, _, _, reason in job.history)


def check_preemptions_finish(cell, tick: int, until: int) -> None:
    log = cell.log
    preempted: dict[tuple[str, str], int] = {}
    for offset, event in enumerate(log):
        if isinstance(event, m.JobPreempted) and _took_effect(cell, event, offset):
            pair = (event.job_id, event.for_job_id)
            preempted[pair] = preempted.get(pair, 0) + 1
            assert preempted[pair] == 1, f"{event.job_id} preempted twice for {event.for_job_id}"
        if not isinstance(event, m.PreemptionRequested) or not _took_effect(cell, event, offset):
            continue
        due = event.checkpoint_deadline + tick
        if due > until:
            continue  # the run ends before the gang is due
        answer = next(((o, e) for o, e in enumerate(log[offset + 1:], offset + 1)
                       if isinstance(e, _ANSWERS) and e.job_id == event.for_job_id and _took_effect(cell, e, o)), None)
        assert answer is not None and answer[1].at <= due, (
            f"{event.job_id} preempted for {event.for_job_id} at {event.at} (deadline {event.checkpoint_deadline}), "
            f"answered {'never' if answer is None else f'by {answer[1].event_type} at {answer[1].at}'}")


@dataclass
class _Head:
    now: int
    job_id: str
    start: int | None
    held: frozenset[str]


class HeadsNotDelayed:
    """Observer: before every event, each team's head and its expected start; after a JobAdmitted that took effect
    for a lower-ranked gang of the head's team (not admitted on capacity held for it), the head's expected start
    is no later, if the admitter saw that head when it decided.

    A decision is made on the log folded through its basis offset with the service's own decisions in flight laid
    over it (services/core/replica.py), and other services' decisions can land between the basis and the decision:
    recovery answers a node's loss with JobInterrupted, JobRequeued and SpareActivated, and the admitter's answer to
    JobRequeued lands after SpareActivated. When such decisions landed in between, only a head that already headed
    its team's queue, protected, at the basis is held against the admission; a head they made a head, or made
    protected (the spare's GPUs raise the capacity its drain share is measured against, may_drain), is one the
    admitter could not see (tests/scenarios/backfill_decided_before_the_spare_joins.yaml)."""

    def __init__(self) -> None:
        self.heads: dict[str, _Head] = {}
        self.seen: dict[int, dict[str, _Head]] = {}  # offset -> the heads after it, for the offsets of `now`
        self.now: int | None = None
        self.checked = 0

    def __call__(self, cell, event: m.Event, offset: int) -> None:
        state, policy = cell.state, cell.policy
        if not (policy.admission.protect_queue_heads and policy.admission.backfill):
            return
        if isinstance(event, m.JobAdmitted) and _took_effect(cell, event, offset):
            job = state.jobs[event.job_id]
            before = self.heads.get(job.team)
            if (before is not None and before.now == state.now and before.job_id != job.job_id
                    and job.job_id not in before.held and before.start is not None
                    and self._seen(cell, event, offset, job.team, before)):
                head = state.jobs[before.job_id]
                if head.state is JobState.QUEUED and not head.has_hold:
                    after = head_start(state, head, state.now, policy).start
                    self.checked += 1
                    assert after is not None and after <= before.start, (
                        f"admitting {job.job_id} moved the start of {head.job_id}, the head of {job.team}'s queue, "
                        f"from {before.start} to {after}")
        self.heads = {}
        held = frozenset(state.holds)
        for team in sorted({state.jobs[j].team for j in state.queued}):
            head = team_head(state, team, las=least_attained_service(state, policy.admission),
                             by_deadline=policy.admission.earliest_deadline_first)
            if head is not None and not head.has_hold and may_drain(state, head, policy.admission.max_drain_share):
                self.heads[team] = _Head(state.now, head.job_id, head_start(state, head, state.now, policy).start,
                                         held)
        if state.now != self.now:
            self.seen, self.now = {}, state.now
        self.seen[offset] = self.heads

    def _seen(self, cell, event: m.JobAdmitted, offset: int, team: str, head: _Head) -> bool:
        """Whether the admitter saw `head` as its team's protected head when it made the admission: it decided on
        the log folded through the basis with its own decisions in flight laid over it, so either all that landed
        since is its own, or the head already headed the team's queue, protected, at the basis."""
        basis, first = event.envelope.basis_offset, cell.first_offset
        if all(e.envelope.producer == event.envelope.producer for e in cell.log[basis + 1 - first:offset - first]):
            return True
        seen = self.seen.get(basis, {}).get(team)
        return seen is not None and seen.job_id == head.job_id and seen.start is not None


@SETTINGS
@given(st.data())
def test_every_preemption_is_answered_in_time_and_no_job_is_preempted_twice_for_one_gang(data):
    scenario = stream(DataChooser(data), steps=40)
    _note_inputs(scenario)
    outcome = run(scenario, observers=[Invariants()])
    check_preemptions_finish(outcome.cell, scenario.tick, scenario.until)


@SETTINGS
@given(st.data())
def test_no_head_of_a_team_queue_is_delayed_by_lower_ranked_work(data):
    scenario = stream(DataChooser(data), steps=40)
    _note_inputs(scenario)
    run(scenario, observers=[HeadsNotDelayed()])


def _first(log: list[m.Event], kind: type, job_id: str | None = None) -> int:
    return next(o for o, e in enumerate(log) if isinstance(e, kind) and getattr(e, "job_id", None) == job_id)


def test_a_backfill_decided_before_a_spare_joins_is_not_held_against_the_head_the_spare_made():
    """small is admitted on big's JobRequeued, when big (4 of 6 GPUs) is too big to drain; SpareActivated lands
    between that basis and the admission and makes big a protected head (4 of 8): the admitter could not see it."""
    scenario = load(SPARE_JOINS)
    outcome = run(scenario, observers=[HeadsNotDelayed()])
    assert not outcome.unmet
    log = outcome.cell.log
    admitted, spare = _first(log, m.JobAdmitted, "small"), _first(log, m.SpareActivated)
    assert log[admitted].envelope.basis_offset == _first(log, m.JobRequeued, "big") < spare < admitted


def test_a_head_the_admitter_sees_is_not_passed_by_that_backfill():
    """The same requeue after a worker's failure instead (no node is lost, the cell keeps 10 GPUs): big is a
    protected head when the admitter looks at small, and small waits for it."""
    scenario = load(SPARE_JOINS)
    inputs = [item if item.node_failed is None else Input(at=item.at, worker_exited=WorkerExit(job="big"))
              for item in scenario.inputs]
    observer = HeadsNotDelayed()
    log = run(scenario.model_copy(update={"inputs": inputs, "expect": []}), observers=[observer]).cell.log
    refused = log[_first(log, m.JobRequeued, "big") + 1:_first(log, m.JobAdmitted, "small")]
    assert any(isinstance(e, m.JobQueued) and e.job_id == "small" and e.envelope.reason is m.Reason.WOULD_DELAY_QUEUE_HEAD
               for e in refused)
    assert _first(log, m.JobAdmitted, "big") < _first(log, m.JobAdmitted, "small")
