"""Decisions that finish what they start, on random streams (invariants.py checks on every request that the victims
are the beneficiary team's to take and that no other team is left below its nominal quota):

- every PreemptionRequested is followed, by its checkpoint deadline plus one cycle, by its gang's admission or by a
  decision that says why the gang no longer needs it (the hold released, or the gang ended); no job is preempted
  twice for the same gang;
- a gang at the head of its team's queue never has its expected start (services/core/heads.py) pushed later by
  the admission of lower-ranked work of its team.
"""

from dataclasses import dataclass

import yaml
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from events import models as m
from projections.evolve import SUPERSEDED
from projections.jobs import JobState
from replay.scenario.play import run
from services.core.heads import head_start, may_drain, team_head
from services.core.queue import least_attained_service
from tests.property.invariants import Invariants
from tests.property.streams import DataChooser, stream


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
    is no later."""

    def __init__(self) -> None:
        self.heads: dict[str, _Head] = {}
        self.checked = 0

    def __call__(self, cell, event: m.Event, offset: int) -> None:
        state, policy = cell.state, cell.policy
        if not (policy.admission.protect_queue_heads and policy.admission.backfill):
            return
        if isinstance(event, m.JobAdmitted) and _took_effect(cell, event, offset):
            job = state.jobs[event.job_id]
            before = self.heads.get(job.team)
            if (before is not None and before.now == state.now and before.job_id != job.job_id
                    and job.job_id not in before.held and before.start is not None):
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
            head = team_head(state, team, las=least_attained_service(state, policy.admission))
            if head is not None and not head.has_hold and may_drain(state, head, policy.admission.max_drain_share):
                self.heads[team] = _Head(state.now, head.job_id, head_start(state, head, state.now, policy).start,
                                         held)


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
