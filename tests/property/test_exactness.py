"""Shortcuts of the deciders give exactly the answer of the slow path they stand in for, on the
states random streams reach."""

import copy
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import models as m
from events.models import Reason
from projections.jobs import JobState
from projections.reservations import expected_end
from replay.scenario.play import run
from services.admitter.decide import Admitter, _ends_no_sooner
from services.core.decider import Context
from services.core.heads import EVENTUALLY, releases
from services.core.placement import CapacityView, Placement, off_limits, place_gang
from services.core.queue import WaitingGangs
from services.core.quota import quota_fit
from services.policies import resolve
from services.policy import DEFAULT_POLICY
from services.preemptor.eviction import AfterEviction
from services.preemptor.victims import candidates
from tests import builders as b
from tests.property.streams import MINUTE, DataChooser, stream, time_shared, time_shared_cell
from tests.property.test_guard_before_placing import _running, quiet_cycle


def admissible_after(state, job, victims, ctx) -> bool:
    """The definition: the admitter's quota check and a real placement, with the victims' usage and GPUs given back
    (quota and GPUs held for other gangs stay theirs)."""
    usage = dict(state.tenancy.committed(job))
    view = CapacityView(state.cluster)
    for victim in victims:
        key = (victim.team, victim.gpu_type)
        usage[key] = usage.get(key, 0) - victim.held_gpus
        view.release(victim)
    most, fit = quota_fit(state.tenancy, job, ctx.policy.admission.borrowing, usage)
    if not fit.fits:
        return False
    excluded = off_limits(state, job, ctx.now, frozenset(v.job_id for v in victims),
                          ctx.policy.admission.earliest_deadline_first, ctx.policy.admission.priority_passes_reservations)
    return isinstance(place_gang(view, job, most, ctx.policy.placement, excluded), Placement)


class EvictionCountAgreesWithPlacement:
    """After every event, for each waiting gang: the preemptor's incremental what-if, as the running gangs
    are evicted one more at a time and then kept again, agrees with the definition at every step."""

    def __call__(self, cell, event, offset) -> None:
        state = cell.state
        ctx = Context("check", event, offset, cell.policy)
        running = sorted((j for j in state.jobs.values() if j.state in (JobState.RUNNING, JobState.PLACED)),
                         key=lambda j: j.job_id)
        for job_id in sorted(state.queued):
            job = state.jobs[job_id]
            if job.has_hold:
                continue  # the preemptor looks for no victims for a gang it holds capacity for
            victims = [v for v in running if v.gpu_type == job.gpu_type]
            after = AfterEviction(state, job, ctx)
            assert after.admissible() == admissible_after(state, job, [], ctx), (job_id, [])
            for k, victim in enumerate(victims, 1):
                after.evict(victim)
                assert after.admissible() == admissible_after(state, job, victims[:k], ctx), (job_id, k)
            for k, victim in enumerate(victims):  # keep the first ones again: the rest stay evicted
                after.keep(victim)
                assert after.admissible() == admissible_after(state, job, victims[k + 1:], ctx), (job_id, -k)
            for k in range(len(victims) + 1):  # all of a prefix at once, none evicted before or after
                assert after.admissible_without(victims[:k]) == admissible_after(state, job, victims[:k], ctx), \
                    (job_id, "all", k)
                assert not after.victims and not any(after.freed.values()), (job_id, "left evicted", k)
            assert after.admissible() == admissible_after(state, job, [], ctx), (job_id, "after all")


class CandidatesAlikeAgreeWithEachGang:
    """After every event: the victims `candidates` finds for each waiting gang with one memo shared by all of them
    (as one Tick shares it) are those it finds for the gang alone."""

    def __call__(self, cell, event, offset) -> None:
        state, policy = cell.state, cell.policy.preemption
        memo: dict = {}
        for job_id in sorted(state.queued):
            job = state.jobs[job_id]
            usage = dict(state.tenancy.committed(job))
            alone = candidates(state, job, policy, state.now, usage)
            assert candidates(state, job, policy, state.now, usage, memo) == alone, job_id


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_preemptor_what_if_equals_a_placement_after_the_evictions(data):
    run(stream(DataChooser(data), steps=40), observers=[EvictionCountAgreesWithPlacement()])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_victims_shared_by_gangs_alike_equal_each_gangs_own(data):
    run(stream(DataChooser(data), steps=40), observers=[CandidatesAlikeAgreeWithEachGang()])


class GroupedAdmissionAgreesWithOneByOne:
    """After every event: the admitter walking groups of equal needs admits, reserves and rejects exactly
    what it does when every waiting gang is a group of its own (the walk the grouping shortcuts). Why the
    others wait is left out: a group's members are told together with its first, so a reservation taken
    later in the same cycle by another gang is not yet in their reason (the next cycle states it)."""

    def __call__(self, cell, event, offset) -> None:
        state = cell.state
        if all(len(members) < 2 for members in state.queued_by_needs.values()):
            return
        ctx = lambda: Context("admitter", event, offset, cell.policy)  # noqa: E731
        with patch.object(WaitingGangs, "of", one_gang_per_group):
            expected = _unordered(Admitter().decide(copy.deepcopy(state), event, ctx()))
        got = _unordered(Admitter().decide(copy.deepcopy(state), event, ctx()))
        assert got == expected, (type(event).__name__, [d for d in got if d not in expected],
                                 [d for d in expected if d not in got])


def one_gang_per_group(state, now, key, keep=lambda job: True, by_deadline=False) -> WaitingGangs:
    """Every waiting gang as a group of its own (`keep` spares reservation and hold holders, as `WaitingGangs.of`
    does; alone, a gang's order within its group does not matter)."""
    return WaitingGangs(state, now, key, [[(None, job_id)] for job_id in sorted(state.queued)
                                          if job_id in state.reservations or job_id in state.holds
                                          or keep(state.jobs[job_id])])


def _unordered(decisions) -> list[str]:
    """The decisions but the restated reasons of waiting gangs, in a canonical order (event ids left out)."""
    return sorted(f"{type(d).__name__} {d.model_dump(exclude={'envelope': {'event_id'}})}" for d in decisions
                  if not isinstance(d, m.JobQueued) or d.envelope.reason is Reason.HOLDS_RESERVATION)


@pytest.mark.pure  # patches the core's source (tests/conftest.py)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_admission_by_groups_of_equal_needs_equals_one_gang_at_a_time(data):
    run(stream(DataChooser(data), steps=40), observers=[GroupedAdmissionAgreesWithOneByOne()])


@pytest.mark.pure  # patches the core's source (tests/conftest.py)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_admission_by_groups_equals_one_gang_at_a_time_under_least_attained_service(data):
    """Groups of equal needs split by band (Job.needs): gangs that yielded wait in a group of their own."""
    run(time_shared(DataChooser(data)), observers=[GroupedAdmissionAgreesWithOneByOne()])


#: (at, job, team, GPUs, runs for) of a time-shared cell where the two walks part (found by the test above)
_PARTING = [
    (0, 'long0', 'a', 4, 10500000),
    (0, 'long1', 'b', 4, 8100000),
    (300000, 'short6', 'a', 2, 180000),
    (300000, 'short10', 'a', 2, 180000),
    (300000, 'short12', 'a', 2, 180000),
    (360000, 'long2', 'a', 8, 8760000),
    (540000, 'long3', 'b', 8, 4260000),
    (1020000, 'short7', 'a', 2, 840000),
    (1500000, 'short4', 'a', 2, 1080000),
    (2580000, 'short5', 'a', 2, 780000),
    (3074000, 'short11', 'a', 2, 180000),
    (3414000, 'short2', 'a', 8, 1680000),
    (3480000, 'short9', 'a', 8, 180000),
    (3600000, 'short8', 'a', 2, 180000),
    (4114000, 'short3', 'a', 2, 1320000),
    (4417000, 'short1', 'a', 8, 1140000),
    (5023000, 'short0', 'a', 2, 1740000),
]


@pytest.mark.pure  # patches the core's source (tests/conftest.py)
def test_a_group_refused_before_a_reservation_is_released_mid_cycle_is_not_looked_at_again():
    """short8, holding n1 with capacity held for it, is admitted in a quiet cycle, which releases n1's reservation.
    The grouped walk had refused short9's group (short9, short1: 8 GPUs, band 0) before that, so nothing of 8 GPUs
    was noted to find no room, and long2 (8 GPUs, band 1) then reserves n1. One by one, short1 is looked at after
    the release, finds no room, and gangway-7's quiet cycle refused long2 unseen with it. From gangway-8 the quiet
    cycle asks long2 whether it may reserve all the same, and both walks reserve n1 for it."""
    inputs = [{"at": at, "submit": {"job": job, "team": team, "gpus_per_worker": gpus, "runs_for": runs}}
              for at, job, team, gpus, runs in _PARTING]
    scenario = time_shared_cell(inputs, quota_a=16, time_share="WithinTeam", min_runtime="0s", checkpoint_grace="0s",
                                consolidate=False, checkpoint_every="5m")
    run(scenario, observers=[GroupedAdmissionAgreesWithOneByOne()])



@pytest.mark.pure  # patches the core's source (tests/conftest.py)
def test_a_gang_after_a_quota_refusal_of_its_team_may_still_reserve_in_a_quiet_cycle(monkeypatch):
    """Team a (nominal 8, cohort co) borrows for d, admitted first (high priority). The grouped walk refuses aa's
    group (aa, bb: 8 GPUs, high) at aa (8 GPUs free, none whole), before d; one by one, bb is looked at after d and its team's quota refuses
    it (the cohort has nothing left to lend), which gangway-7's quiet cycle then held against c (8 GPUs, waiting
    long): the grouped walk reserved n1 for c, the walk one by one did not. From gangway-8 c is asked whether it
    may reserve all the same, and both walks reserve n1 for it."""
    events = [b.node("n1"), b.node("n2"), b.node("n3"), b.priority("high", 10),
              b.team("a", cohort="co"), b.team("b", cohort="co"), b.team("z"), b.quota("a", 8), b.quota("b", 8), b.quota("z", 64),
              b.job("z1", gpus=4, team="z", time_limit_ms=60 * MINUTE), _running("z1", "z", ("n1", [0, 1, 2, 3])),
              b.job("z2", gpus=4, team="z", time_limit_ms=60 * MINUTE), _running("z2", "z", ("n2", [0, 1, 2, 3])),
              b.job("z3", gpus=2, team="z"), _running("z3", "z", ("n3", [6, 7])),
              b.job("r", gpus=6, team="a"), _running("r", "a", ("n3", [0, 1, 2, 3, 4, 5])),
              b.job("c", workers=2, gpus=4, team="a", at=MINUTE),
              b.job("aa", gpus=8, team="a", at=9 * MINUTE, priority_class="high"),
              b.job("d", gpus=4, team="a", at=9 * MINUTE + 1, priority_class="high", time_limit_ms=10 * MINUTE),
              b.job("bb", gpus=8, team="a", at=9 * MINUTE + 2, priority_class="high"), b.tick(10 * MINUTE)]
    admitted = [("JobAdmitted", "d", "BORROWED_FROM_COHORT", ()), ("JobPlaced", "d", "PLACED", ())]
    reserved = ("JobQueued", "c", "HOLDS_RESERVATION", ("n1",))

    def walks(policy) -> tuple[list[tuple], list[tuple]]:
        """The quiet cycle's decisions by groups of equal needs, and one gang at a time."""
        grouped = quiet_cycle(events, True, monkeypatch, policy)
        with patch.object(WaitingGangs, "of", one_gang_per_group):
            return grouped, quiet_cycle(events, True, monkeypatch, policy)
    assert walks(DEFAULT_POLICY) == ([*admitted, reserved], [*admitted, reserved])
    assert walks(resolve("gangway-7")) == ([*admitted, reserved], admitted)


class ToldGroupsAgreeWithEveryMember:
    """After every event: the admitter that refuses a group in one step where the state's counts show nothing to
    tell (every member states the reason already, runs at least as long, or has the same time limit) decides exactly
    what it does when it goes through the group member by member, the restated reasons included."""

    def __call__(self, cell, event, offset) -> None:
        state = cell.state
        if all(len(members) < 2 for members in state.queued_by_needs.values()):
            return
        order = WaitingGangs.of(state, state.now, lambda job: (job.job_id,))
        for g, members in enumerate(order.groups):  # the first not backing off is each group's current gang
            rest = [state.jobs[j] for _, j in members[order.cursor[g] + 1:]]
            for reason in {job.reason for job in rest} | {Reason.INSUFFICIENT_FREE_GPUS}:
                if order._all_say(g, reason):
                    assert all(job.reason is reason for job in rest), (reason, [job.reason for job in rest])
            for job in map(state.jobs.get, (j for _, j in members)):
                if _ends_no_sooner(state, job) is None:
                    everyone = ends_no_sooner_member_by_member(state, job)
                    assert all(everyone(other) for other in rest), (job.time_limit_ms, [o.time_limit_ms for o in rest])
        ctx = lambda: Context("admitter", event, offset, cell.policy)  # noqa: E731
        member_by_member = copy.deepcopy(state)
        member_by_member.queued_limits = {}  # no group is known to share one time limit
        with patch.object(WaitingGangs, "_all_say", lambda self, g, reason: False), \
                patch("services.admitter.decide._ends_no_sooner", ends_no_sooner_member_by_member):
            expected = Admitter().decide(member_by_member, event, ctx())
        got = Admitter().decide(copy.deepcopy(state), event, ctx())
        assert _all_of(got) == _all_of(expected), (type(event).__name__, offset)


def ends_no_sooner_member_by_member(state, job):
    """The definition of `_ends_no_sooner`, asked of every member."""
    limit = job.time_limit_ms
    return lambda other: other.time_limit_ms is None or (limit is not None and other.time_limit_ms >= limit)


def _all_of(decisions) -> list[str]:
    return [f"{type(d).__name__} {d.model_dump(exclude={'envelope': {'event_id'}})}" for d in decisions]


@pytest.mark.pure  # patches the core's source (tests/conftest.py)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_groups_refused_in_one_step_tell_what_member_by_member_does(data):
    run(stream(DataChooser(data), steps=40), observers=[ToldGroupsAgreeWithEveryMember()])


def held_one_by_one(state, gpu_type: str) -> list[tuple[int, int, int, str]]:
    """The definition of `heads.releases`: each holding job's release, from every holding job, without the index."""
    odd = {node.name: node for node in state.cluster.of_type(gpu_type)
           if not node.schedulable or node.retired or node.claimed}
    out = []
    for job_id in state.holding:
        job = state.jobs[job_id]
        if job.gpu_type != gpu_type:
            continue
        end = job.preemption_deadline if job.state is JobState.PREEMPTING else expected_end(job)
        gpus = 0
        for _, name, indices in job.assignments:
            node = odd.get(name)
            if node is None:
                gpus += len(indices)
            elif node.schedulable:
                gpus += sum(1 for g in indices if g not in node.retired and g not in node.claimed)
        out.append((EVENTUALLY if end is None else end, gpus, job.held_gpus, job.team))
    return out


class HoldingIndexAgreesWithEveryJob:
    """After every event: the releases the admitter's queue heads read off the index kept between cycles (summed by
    time and team, and kept sorted while no holder moves) are those of every holding job counted one by one, on odd
    nodes too."""

    def __call__(self, cell, event, offset) -> None:
        state = cell.state
        for gpu_type in state.cluster.gpu_types():
            summed: dict[tuple[int, str], list[int]] = {}
            for at, gpus, quota, team in held_one_by_one(state, gpu_type):
                total = summed.setdefault((at, team), [0, 0])
                total[0] += gpus
                total[1] += quota
            assert releases(state, gpu_type) == sorted((at, g, q, team) for (at, team), (g, q) in summed.items()), (
                type(event).__name__, offset)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_holding_index_equals_every_holding_job_counted_again(data):
    run(stream(DataChooser(data), steps=40), observers=[HoldingIndexAgreesWithEveryJob()])
