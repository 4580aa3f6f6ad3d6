"""Gangs in deadline order (`admission.earliest_deadline_first`): the queue's key, each group's order, and who may
pass a reservation."""

from projections.jobs import NO_LIMIT_DEADLINE_MS
from projections.reservations import outranks
from services.core.queue import order_key
from services.policies import GANGWAY, resolve
from tests.builders import fold, job, node, quota, team, topology

HOUR = 3_600_000


def _waiting():
    """One node, busy with `first`; long, short and nolimit wait, submitted in that order, all of one shape."""
    cell = fold(topology("block", "rack"), node("n0", block="b0", rack="r0"), team("nlp"), quota("nlp", 8),
                job("first", at=0, time_limit_ms=2 * HOUR), job("long", at=60_000, time_limit_ms=10 * HOUR),
                job("short", at=120_000, time_limit_ms=HOUR), job("nolimit", at=180_000))
    return cell.state


def test_the_default_goes_by_deadline_and_gangway_9_by_submission():
    assert GANGWAY.admission.earliest_deadline_first
    assert not resolve("gangway-9").admission.earliest_deadline_first


def test_a_deadline_is_submission_plus_time_limit_or_a_week_without_one():
    state = _waiting()
    assert state.jobs["short"].deadline == 120_000 + HOUR
    assert state.jobs["nolimit"].deadline == 180_000 + NO_LIMIT_DEADLINE_MS == 180_000 + 7 * 24 * HOUR


def test_a_group_is_kept_in_both_orders_and_the_queue_key_follows_the_policy():
    state = _waiting()
    (needs,) = state.queued_by_needs
    assert [j for _, j in state.groups(False)[needs]] == ["long", "short", "nolimit"]
    assert [j for _, j in state.groups(True)[needs]] == ["short", "long", "nolimit"]
    waiting = [state.jobs[j] for j in ("nolimit", "long", "short")]
    assert [j.job_id for j in sorted(waiting, key=order_key(state, GANGWAY.admission))] == ["short", "long", "nolimit"]
    gangway_9 = resolve("gangway-9").admission
    assert [j.job_id for j in sorted(waiting, key=order_key(state, gangway_9))] == ["long", "short", "nolimit"]


def test_a_reservation_is_passed_by_the_gangs_before_its_holder_in_the_policy_order():
    jobs = _waiting().jobs
    long, short, nolimit = jobs["long"], jobs["short"], jobs["nolimit"]
    assert outranks(long, short) and not outranks(long, short, by_deadline=True)  # submitted first, due later
    assert not outranks(short, long) and outranks(short, long, by_deadline=True)  # due first, submitted later
    assert outranks(short, nolimit, by_deadline=True) and outranks(long, nolimit, by_deadline=True)


def test_leaving_the_queue_leaves_both_orders():
    state = _waiting()
    (needs,) = state.queued_by_needs
    state.set_state(state.jobs["short"], state.jobs["first"].state)
    assert [j for _, j in state.groups(True)[needs]] == ["long", "nolimit"]
    assert [j for _, j in state.groups(False)[needs]] == ["long", "nolimit"]
