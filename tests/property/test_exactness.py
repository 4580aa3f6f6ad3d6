"""Shortcuts of the deciders give exactly the answer of the slow path they stand in for, on the
states random streams reach."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.jobs import JobState
from services.admitter.decide import quota_fit
from services.decider import Context
from services.placement import CapacityView, Placement, off_limits, place_gang
from services.preemptor.decide import _AfterEviction
from services.simulation.scenario import run
from tests.property.streams import DataChooser, stream


def admissible_after(state, job, victims, ctx) -> bool:
    """The definition: the admitter's quota check and a real placement, with the victims' usage and GPUs given back."""
    usage = dict(state.tenancy.usage)
    view = CapacityView(state.cluster)
    for victim in victims:
        key = (victim.team, victim.gpu_type)
        usage[key] = usage.get(key, 0) - victim.held_gpus
        view.release(victim)
    most, fit = quota_fit(state.tenancy, job, ctx.policy.admission.borrowing, usage)
    if not fit.fits:
        return False
    excluded = off_limits(state, job, ctx.now, frozenset(v.job_id for v in victims))
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
            victims = [v for v in running if v.gpu_type == job.gpu_type]
            after = _AfterEviction(state, job, ctx)
            assert after.admissible() == admissible_after(state, job, [], ctx), (job_id, [])
            for k, victim in enumerate(victims, 1):
                after.evict(victim)
                assert after.admissible() == admissible_after(state, job, victims[:k], ctx), (job_id, k)
            for k, victim in enumerate(victims):  # keep the first ones again: the rest stay evicted
                after.keep(victim)
                assert after.admissible() == admissible_after(state, job, victims[k + 1:], ctx), (job_id, -k)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_preemptor_what_if_equals_a_placement_after_the_evictions(data):
    run(stream(DataChooser(data), steps=40), observers=[EvictionCountAgreesWithPlacement()])
