"""What must hold after every event a cell folds, checked by an observer of the virtual cell."""

from __future__ import annotations

import copy

from events import models as m
from projections.cell import CellState
from projections.evolve import SUPERSEDED
from projections.jobs import HOLDING, JobState, service_band
from projections.overlay import lay
from projections.reservations import ends_before, outranks, shadow_time
from projections.validate import refusal
from services.core.decider import Context


def _took_effect(job, offset: int) -> bool:
    """Whether the decision folded at `offset` is the job's latest and was not superseded."""
    last = job.history[-1]
    return last[0] == offset and last[3] not in (SUPERSEDED, m.Reason.PLACEMENT_SUPERSEDED.value)


def check_bindings(state: CellState) -> None:
    """No GPU is bound to two jobs, and a job holding GPUs holds its whole admitted gang: admitted_workers
    (all workers, or with min_workers at least that many) x gpus_per_worker."""
    bound: dict[tuple[str, int], str] = {}
    for job_id in sorted(state.jobs):
        job = state.jobs[job_id]
        if not job.assignments:
            assert job.state not in (JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING), f"{job_id} {job.state} holds nothing"
            continue
        assert job.holds_capacity, f"{job_id} is {job.state.value} but holds GPUs"
        assert job.min_count <= job.admitted_workers <= job.workers, f"{job_id} admitted {job.admitted_workers} workers"
        assert sorted(w for w, _, _ in job.assignments) == list(range(job.admitted_workers)), f"{job_id} is not a whole gang"
        for _, node, gpus in job.assignments:
            assert len(set(gpus)) == len(gpus) == job.gpus_per_worker, f"{job_id} worker on {node} has {gpus}"
            for g in gpus:
                assert (node, g) not in bound, f"GPU {node}/{g} bound to {bound.get((node, g))} and {job_id}"
                bound[(node, g)] = job_id
                assert state.cluster.nodes[node].holder.get(g) == job_id, f"{node}/{g} holder disagrees with {job_id}"
    held = {(n.name, g): j for n in state.cluster.nodes.values() for g, j in n.holder.items()}
    assert held == bound, "node holders name GPUs that no job's assignment has"


def check_nodes(state: CellState) -> None:
    """A spare holds work only once activated; a reserved node is held back for a queued gang that knows it; a
    GPU held for a gang is one its hold names, and the quota held is the sum of the holds."""
    for node in state.cluster.nodes.values():
        assert not node.holder or not node.spare or node.activated, f"inactive spare {node.name} holds GPUs"
        if node.reserved_for is not None:
            holder = state.jobs.get(node.reserved_for)
            assert holder is not None and holder.state is JobState.QUEUED and node.name in holder.reserved_nodes, (
                f"{node.name} is reserved for {node.reserved_for}, which does not hold it")
        for g, job_id in node.claimed.items():
            job = state.jobs.get(job_id)
            assert job is not None and job.has_hold and any(n == node.name and g in gpus for _, n, gpus in job.held), (
                f"GPU {node.name}/{g} is held for {job_id}, whose hold does not name it")
    for gpu_type in state.cluster.gpu_types():  # the capacity the index keeps is what the nodes add up to
        assert state.cluster.capacity(gpu_type) == sum(n.healthy_gpus for n in state.cluster.of_type(gpu_type)
                                                       if n.schedulable), f"{gpu_type} capacity index is stale"
    for key, histogram in state.cluster.histogram.items():  # free GPUs per domain: the histogram's total
        assert state.cluster.free_in.get(key, 0) == sum(f * c for f, c in enumerate(histogram)), f"free in {key} is stale"
    odd: dict[str, set[str]] = {}
    for n in state.cluster.nodes.values():
        if n.holder and (not n.schedulable or n.retired or n.claimed):
            odd.setdefault(n.gpu_type, set()).add(n.name)
    assert odd == {t: names for t, names in state.cluster.odd_holders.items() if names}, "odd holding nodes are stale"
    held: dict[tuple[str, str], int] = {}
    for job_id in sorted(state.holds):
        job = state.jobs[job_id]
        assert job.has_hold and not job.ended, f"{job_id} is listed with a hold it does not have"
        held[(job.team, job.gpu_type)] = held.get((job.team, job.gpu_type), 0) + job.held_quota
    assert held == {k: v for k, v in state.tenancy.held.items() if v}, f"held quota {state.tenancy.held} != {held}"
    assert state.holds == {j for j, job in state.jobs.items() if job.has_hold}


def check_placement(state: CellState, placed: m.JobPlaced, offset: int) -> None:
    """A placement that took effect binds schedulable nodes of the job's type and healthy GPUs."""
    job = state.jobs[placed.job_id]
    if job.state is not JobState.PLACED or not _took_effect(job, offset):
        return  # superseded
    for _, name, gpus in job.assignments:
        node = state.cluster.nodes[name]
        assert node.schedulable and node.gpu_type == job.gpu_type, f"{job.job_id} placed on {name}"
        assert not set(gpus) & node.retired, f"{job.job_id} placed on retired GPUs of {name}"


def check_quota_usage(state: CellState) -> None:
    """Each team's usage is the sum of the admitted gangs it holds; the state indexes match the job states."""
    expected: dict[tuple[str, str], int] = {}
    for job in state.jobs.values():
        if job.state in HOLDING:
            expected[(job.team, job.gpu_type)] = expected.get((job.team, job.gpu_type), 0) + job.held_gpus
        else:
            assert job.admitted_workers == 0, f"{job.job_id} is {job.state.value} but keeps admitted workers"
    actual = {k: v for k, v in state.tenancy.usage.items() if v != 0}
    assert actual == expected, f"usage {actual} != holding jobs {expected}"
    assert state.holding == {j for j, job in state.jobs.items() if job.state in HOLDING}
    assert state.queued == {j for j, job in state.jobs.items() if job.state is JobState.QUEUED}
    assert state.moving == {j for j in state.queued if state.jobs[j].moving}, "the index of moving gangs is stale"
    reasons: dict[tuple, dict[object, int]] = {}
    limits: dict[tuple, dict[int | None, int]] = {}
    for job_id in state.queued:
        job = state.jobs[job_id]
        for counts, value in ((reasons, job.reason), (limits, job.time_limit_ms)):
            group = counts.setdefault(job.needs(), {})
            group[value] = group.get(value, 0) + 1
    assert state.queued_reasons == reasons, "the count of queued gangs' stated reasons is stale"
    assert state.queued_limits == limits, "the count of queued gangs' time limits is stale"
    queued = [state.jobs[j] for j in state.queued]
    assert state.queued_limit_values == sorted(j.time_limit_ms for j in queued if j.time_limit_ms is not None), (
        "the sorted time limits of the queued gangs are stale")
    assert state.queued_returns == sorted(j.not_before for j in queued), "the queued gangs' sorted returns are stale"
    assert state.queued_since == sorted(max(j.submitted_at, j.not_before) for j in queued), (
        "the sorted times the queued gangs wait from are stale")
    by_team: dict[str, set[tuple]] = {}
    for needs in state.queued_by_needs:
        by_team.setdefault(needs[0], set()).add(needs)
    assert state.needs_by_team == by_team, "the index of each team's queued groups is stale"
    assert state.queued_by_deadline == {needs: sorted((state.jobs[j].deadline_rank(), j) for _, j in members)
                                        for needs, members in state.queued_by_needs.items()}, (
        "the deadline order of the queued groups is stale")


def check_admission(state: CellState, admitted: m.JobAdmitted, offset: int) -> None:
    """An admission that took effect keeps the borrowing limit and the cohort pool (Kueue: what the team keeps of its
    nominal and does not use, plus the pool's headroom, which may be negative)."""
    job = state.jobs[admitted.job_id]
    if job.state is not JobState.ADMITTED or not _took_effect(job, offset):
        return  # superseded
    tenancy, key = state.tenancy, (job.team, job.gpu_type)
    quota = tenancy.quota(*key)
    borrowed = max(0, tenancy.used(*key) - quota.nominal)
    assert quota.borrowing_limit is None or borrowed <= quota.borrowing_limit, f"{job.job_id} borrows {borrowed}"
    # A team's unlent part is its own even in a pool overdrawn (a lending limit or nominal lowered under
    # borrowers): an admission within it may leave the overdraft, no bigger than what the team leaves unused of it.
    unused_kept = max(0, quota.guaranteed - tenancy.used(*key))
    assert tenancy.pool_used(*key) - unused_kept <= tenancy.pool_size(*key), (
        f"{job.job_id}: pool of {job.team} uses {tenancy.pool_used(*key)} of {tenancy.pool_size(*key)}, "
        f"{unused_kept} of its kept part unused")


def check_backfill(state: CellState, admitted: m.JobAdmitted, offset: int, claimed: dict,
                   by_deadline: bool = False, across_teams: bool = False) -> None:
    """A job admitted onto another gang's reserved node ends, by its time limit, before that reservation's shadow
    time, unless it outranks the holder in their team's queue (`by_deadline`: in deadline order), or, `across_teams`,
    is of another team and a higher priority, or the GPUs there were held for it (`claimed`, as they were before
    the admission was folded)."""
    job = state.jobs[admitted.job_id]
    if job.state is not JobState.ADMITTED or not _took_effect(job, offset):
        return  # superseded
    for _, name, gpus in job.assignments:
        holder = state.cluster.nodes[name].reserved_for
        if (all(claimed.get((name, g)) == job.job_id for g in gpus)
                or outranks(job, state.jobs.get(holder), by_deadline, across_teams)):
            continue
        if holder is not None and holder != job.job_id:
            shadow = shadow_time(state, state.reservations[holder], admitted.at, frozenset({job.job_id}))
            assert ends_before(job, admitted.at, shadow), (
                f"{job.job_id} (time limit {job.time_limit_ms}) admitted onto {name}, reserved for {holder} "
                f"until {shadow}")


def check_preemption(state: CellState, request: m.PreemptionRequested, policy) -> None:
    """The victim may be preempted for the job it makes room for under the job's team's rules (Kueue's within-team,
    reclaim and borrow-within-cohort), judged on the state the decision saw."""
    victim, beneficiary = state.jobs[request.job_id], state.jobs[request.for_job_id]
    tenancy = state.tenancy
    usage = tenancy.committed(beneficiary)
    assert victim.preemptible and victim.gpu_type == beneficiary.gpu_type
    assert beneficiary.job_id not in victim.yielded_to, f"{victim.job_id} preempted twice for {beneficiary.job_id}"
    if request.envelope.reason is m.Reason.TIME_SHARED:  # least attained service: it has received more GPU-time
        assert policy.time_share == "Any" or (policy.time_share == "WithinTeam" and victim.team == beneficiary.team)
        assert victim.priority <= beneficiary.priority
        band = service_band(victim.attained(request.envelope.at))
        assert band > beneficiary.service_band, f"{victim.job_id} time-shared for {beneficiary.job_id} without more GPU-time"
        return
    if request.envelope.reason is m.Reason.CONSOLIDATED:  # a smaller job moves; the gang's quota admits it as it is
        assert policy.consolidate and victim.held_gpus < beneficiary.min_gpus, f"{victim.job_id} moved for a gang no bigger"
        assert request.envelope.at - victim.running_since >= policy.min_runtime_ms, f"{victim.job_id} moved too early"
        return
    team = tenancy.teams[beneficiary.team].preemption
    within_team = team.within_team or policy.within_team
    reclaim = team.reclaim_within_cohort or policy.reclaim_within_cohort
    borrow = team.borrow_within_cohort or policy.borrow_within_cohort
    threshold = team.max_priority_threshold if team.max_priority_threshold is not None else policy.max_priority_threshold
    lower = victim.priority < beneficiary.priority
    what = (f"{victim.job_id} ({victim.team}, priority {victim.priority}) preempted for {beneficiary.job_id} "
            f"({beneficiary.team}, priority {beneficiary.priority})")
    if victim.team == beneficiary.team:
        newer = victim.priority == beneficiary.priority and victim.rank_key() > beneficiary.rank_key()
        assert (within_team == "LowerPriority" and lower) or (within_team == "LowerOrNewerEqualPriority"
                                                              and (lower or newer)), f"{what} under {within_team}"
        return
    key = (victim.team, victim.gpu_type)
    assert victim.team in tenancy.pool_members(beneficiary.team), what
    assert usage.get(key, 0) > tenancy.quota(*key).nominal, f"{what}: its team does not borrow"
    assert reclaim == "Any" or (reclaim == "LowerPriority" and lower), f"{what} under reclaim {reclaim}"
    own = (beneficiary.team, beneficiary.gpu_type)
    if usage.get(own, 0) + beneficiary.min_gpus > tenancy.quota(*own).nominal:  # it must borrow
        assert borrow == "LowerPriority" and lower and (threshold is None or victim.priority <= threshold), (
            f"{what} while borrowing, under {borrow} (threshold {threshold})")


def check_keeps_nominal(state: CellState, requests: list[m.PreemptionRequested], law: bool = True) -> None:
    """Once every victim asked for one gang is gone, every other team still uses at least its nominal quota
    (unless the policy drops the law)."""
    if not law:
        return
    beneficiary = state.jobs[requests[0].for_job_id]
    usage = dict(state.tenancy.committed(beneficiary))
    for request in requests:
        victim = state.jobs[request.job_id]
        if victim.team != beneficiary.team:
            usage[(victim.team, victim.gpu_type)] -= victim.held_gpus
    for request in requests:
        key = (state.jobs[request.job_id].team, beneficiary.gpu_type)
        if key[0] != beneficiary.team:
            assert usage[key] >= state.tenancy.quota(*key).nominal, (
                f"preempting for {beneficiary.job_id} leaves {key[0]} at {usage[key]} of nominal "
                f"{state.tenancy.quota(*key).nominal}")


class Invariants:
    """Observer: after each event is folded and decided, checks the state and the new decisions;
    with `purity`, also re-runs every decider on a copy to prove `decide` is pure and repeatable."""

    def __init__(self, purity: bool = False) -> None:
        self.purity = purity
        self.seen = 0
        self.events = 0
        self.claimed: dict[tuple[str, int], str] = {}  # GPUs held for gangs before the event being checked

    def __call__(self, cell, event: m.Event, offset: int) -> None:
        state = cell.state
        new = cell.log[max(self.seen, offset + 1):]
        self.seen = len(cell.log)
        self.events += 1
        check_bindings(state)
        check_quota_usage(state)
        check_nodes(state)
        if isinstance(event, m.JobAdmitted):
            check_admission(state, event, offset)
            check_backfill(state, event, offset, self.claimed, cell.policy.admission.earliest_deadline_first,
                           cell.policy.admission.priority_passes_reservations)
        if isinstance(event, m.JobPlaced):
            check_placement(state, event, offset)
        self.check_preemptions(cell, offset, new)
        if self.purity and not isinstance(event, m.NodeHeartbeat):
            self.check_pure(cell, event, offset, new)
        self.claimed = {(name, g): job for name in sorted(state.cluster.claimed_on)
                        for g, job in state.cluster.nodes[name].claimed.items()}

    @staticmethod
    def check_preemptions(cell, offset: int, new: list[m.Event]) -> None:
        """Each preemption is judged on the state its decider saw: the log up to the event it answers, with that
        decider's own earlier decisions still in flight laid over it (a hold it released just before, say)."""
        asked = [d for d in new if isinstance(d, m.PreemptionRequested)]
        for replica in cell.replicas:
            mine = [d for d in asked if d.envelope.producer == replica.decider.name]
            if not mine:
                continue
            overlay = lay(cell.state, [d for d in replica.assumed.values() if d.envelope.basis_offset != offset])
            try:
                requests: dict[str, list[m.PreemptionRequested]] = {}
                for decision in mine:
                    check_preemption(cell.state, decision, cell.policy.preemption)
                    requests.setdefault(decision.for_job_id, []).append(decision)
                for batch in requests.values():
                    check_keeps_nominal(cell.state, batch, cell.policy.preemption.keep_nominal)
            finally:
                overlay.lift()

    @staticmethod
    def check_pure(cell, event: m.Event, offset: int, new: list[m.Event]) -> None:
        """Each replica decides again on a copy of what it decided on (the state with its own decisions then in
        flight laid over it): `decide` leaves its input alone, says the same twice, and says what the log holds;
        and lifting the overlay gives back the state exactly."""
        if refusal(cell.state, event) is not None:  # not folded: answered by the admitter's RecordRefused alone
            assert [type(d) for d in new] == [m.RecordRefused], f"{event.event_type} at {offset} refused, yet {new}"
            return
        before = copy.deepcopy(cell.state)
        again: list[m.Event] = []
        for replica in cell.replicas:
            if type(event) not in replica.decider.triggers:
                continue
            in_flight = [d for d in replica.assumed.values() if d.envelope.basis_offset != offset]
            overlay = lay(cell.state, in_flight)
            laid = copy.deepcopy(cell.state)
            name = replica.decider.name
            context = lambda: Context(name, event, offset, cell.policy, heartbeats=replica.heartbeats)  # noqa: E731
            first = replica.decider.decide(cell.state, event, context())
            assert cell.state == laid, f"{name}.decide changed its input state on {event.event_type}"
            second = replica.decider.decide(cell.state, event, context())
            assert first == second, f"{name}.decide is not repeatable on {event.event_type}"
            overlay.lift()
            assert cell.state == before, f"lifting {name}'s decisions in flight did not restore the state"
            again += first
        assert again == list(new), f"re-deciding {event.event_type} at {offset} gives other decisions than the log"
