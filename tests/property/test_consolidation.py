"""Consolidation over random fragmented cells: small jobs of two teams scattered over 8-GPU nodes, then whole-node
gangs that fit the free GPUs only in number. Every invariant of the core holds after every event (a move is a
preemption under the law; no GPU is double-booked; the moving index follows the state), and a moved job is never
left waiting behind the gangs it made room for: it is admitted again before any gang that came after it, except one
admitted on capacity held for it, or while capacity is held for the moved job (what is held for a gang is its own: a
team reclaiming its nominal quota from borrowers is admitted on it while a borrower that moved waits for room in the
cohort, and a moved job that reclaims its own team's quota waits for its victims, who may start again elsewhere)."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import models as m
from replay.scenario.play import parse, run
from services.core.decider import Context
from services.preemptor.consolidation import _delays_its_head, moves_for
from tests.property.invariants import Invariants
from tests.property.streams import MINUTE, Chooser, DataChooser, RandomChooser, stream

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fragmented(c: Chooser, limits: tuple = (None, 120 * MINUTE), enforce_time_limits: bool = True,
               movers_in_plan_order: bool = True, quota_held_reserves_free_nodes: bool = False):
    """A 4-node cell (two racks) of 8-GPU nodes; 10-16 small jobs of teams a and b, then 2-4 gangs of whole nodes.
    The small jobs' time limits are one of `limits`; without `enforce_time_limits` a job may run past its own;
    without `movers_in_plan_order`, moved jobs are admitted again in queue order (gangway-6); with
    `quota_held_reserves_free_nodes`, a gang its quota holds back reserves nodes already free (gangway-8)."""
    admission = {"movers_in_plan_order": movers_in_plan_order,
                 "quota_held_reserves_free_nodes": quota_held_reserves_free_nodes}
    inputs = []
    for i in range(c.int(10, 16)):
        inputs.append({"at": c.int(0, 4) * MINUTE, "submit": {
            "job": f"s{i}", "team": c.one(["a", "b"]), "gpus_per_worker": c.one([1, 2, 2, 4, 6]),
            "runs_for": c.int(5, 90) * MINUTE, "time_limit": c.one(list(limits))}})
    for i in range(c.int(2, 4)):
        inputs.append({"at": c.int(5, 40) * MINUTE, "submit": {
            "job": f"g{i}", "team": c.one(["a", "b"]), "workers": c.one([1, 1, 2]), "gpus_per_worker": 8,
            "runs_for": c.int(10, 60) * MINUTE}})
    return parse({
        "name": "fragmented-cell",
        "cell": {"topology": ["block", "rack"], "nodes": [{"generate": {
            "count": 4, "gpus": 8, "gpu_type": "H100", "nodes_per_rack": 2, "racks_per_block": 2}}]},
        "cohorts": [{"name": "co"}],
        "teams": [{"name": "a", "cohort": "co", "quota": {"H100": c.one([8, 16, 24])}},
                  {"name": "b", "cohort": "co", "quota": {"H100": 16}}],
        "policy": {"preemption": {"consolidate": True, "min_runtime": c.one(["0s", "2m"]),
                                  "checkpoint_grace": c.one(["0s", "1m"])},
                   "recovery": {"enforce_time_limits": enforce_time_limits},
                   "admission": admission},
        "agents": {"checkpoint_every": c.one(["5m", None]), "checkpoint_delay": "20s"},
        "tick": "30s", "until": "150m", "inputs": sorted(inputs, key=lambda i: i["at"]),
    }, "fragmented cell")


#: The reasons a gang waits for quota, not room.
QUOTA_WAITS = frozenset({m.Reason.QUOTA_EXHAUSTED, m.Reason.BORROWING_LIMIT, m.Reason.COHORT_EXHAUSTED})


def moves_and_overtakes(log: list[m.Event], past_quota: bool = True) -> tuple[int, list[str]]:
    """(moves, gangs admitted, on a state where a moved job submitted before them already waited, ahead of it, with
    no capacity held for either). Without `past_quota`, a gang that passed a moved job last said to wait for quota
    is not counted (see `test_a_smaller_gang_passes_a_moved_job_its_quota_holds_back`)."""
    said: dict[str, m.Reason] = {}  # each job's last stated reason for waiting
    moves, submitted, overtakes = 0, {}, []
    held: set[str] = set()  # gangs with capacity held for them
    waiting: dict[str, int] = {}  # moved job -> the offset from which it waits
    moving: set[str] = set()
    for offset, e in enumerate(log):
        if isinstance(e, m.JobSubmitted):
            submitted[e.job_id] = e.envelope.at
        elif isinstance(e, m.PreemptionRequested):
            moves += e.envelope.reason is m.Reason.CONSOLIDATED
            (moving.add if e.envelope.reason is m.Reason.CONSOLIDATED else moving.discard)(e.job_id)
        elif isinstance(e, m.JobPreempted) and e.job_id in moving:
            waiting[e.job_id] = offset
        elif isinstance(e, m.JobQueued):
            said[e.job_id] = e.envelope.reason
        elif isinstance(e, m.CapacityHeld):
            held.add(e.job_id)
        elif isinstance(e, m.CapacityReleased):
            held.discard(e.job_id)
        elif isinstance(e, m.JobAdmitted):
            moving.discard(e.job_id)
            hold = e.job_id in held
            held.discard(e.job_id)
            if waiting.pop(e.job_id, None) is not None:
                continue  # moving gangs go first, in an order of their own
            overtakes += [f"{e.job_id} before moved {w}" for w, since in sorted(waiting.items())
                          if since <= e.envelope.basis_offset and submitted[w] <= submitted[e.job_id]
                          and e.job_id not in _beneficiaries(log, w) and not hold and w not in held
                          and (past_quota or said.get(w) not in QUOTA_WAITS)]
    return moves, overtakes


def _beneficiaries(log: list[m.Event], victim: str) -> set[str]:
    return {e.for_job_id for e in log if isinstance(e, m.PreemptionRequested) and e.job_id == victim}


@SETTINGS
@given(st.data())
def test_moves_keep_every_invariant_and_moved_jobs_go_first(data):
    checks = Invariants()
    log = run(fragmented(DataChooser(data)), observers=[checks]).cell.log
    assert checks.events == len(log)
    _, overtakes = moves_and_overtakes(log, past_quota=False)  # the known gap below aside
    assert not overtakes


#: A case hypothesis found in CI (stop 57; the code of stop 56 decides it alike). s6 (team a, 4 GPUs, borrowing)
#: moved for s3's consolidation and waits, its cohort's pool used up. At 301 s, s0 ends: the pool frees less than
#: s6 needs, and s8 (team a, 1 GPU, submitted after s6) is admitted; s2 ends the same second and s6 is admitted
#: next. A moved job keeps its turn for room, but a smaller gang of its team may take pool quota before it.
SMALLER_GANG_PASSES_A_MOVED_JOB = [
    11, 0, 'a', 2, 5, None, 1, 'b', 4, 5, None, 0, 'a', 4, 5, None, 4, 'a', 6, 5, None, 0, 'a', 6, 5, None, 0, 'a',
    2, 5, None, 0, 'a', 4, 5, None, 4, 'b', 2, 5, None, 4, 'a', 1, 5, None, 0, 'a', 1, 5, None, 0, 'a', 2, 5, None, 2,
    5, 'a', 1, 10, 5, 'a', 1, 10, 16, '0s', '1m', '5m',
]


def test_a_smaller_gang_passes_a_moved_job_its_quota_holds_back():
    """A known gap, pinned: "moved jobs go first" holds for room, not for pool quota (the random property above
    leaves such passes out). Closing it changes decisions: a new policy version."""
    log = run(fragmented(Replayed(SMALLER_GANG_PASSES_A_MOVED_JOB)), observers=[Invariants()]).cell.log
    assert moves_and_overtakes(log) == (3, ["s8 before moved s6"])
    assert moves_and_overtakes(log, past_quota=False) == (3, [])


class Replayed:
    """The choices of one recorded case, in order."""

    def __init__(self, values: list) -> None:
        self.values = list(values)

    def one(self, options):
        value = self.values.pop(0)
        assert value in list(options)
        return value

    def int(self, low: int, high: int) -> int:
        value = self.values.pop(0)
        assert low <= value <= high
        return value


#: A case hypothesis found in CI. At 690 s, s11 and s6 (team a, 1 GPU each; s6 submitted first) move for gang
#: s14's consolidation on n1. The move's plan found s11 the one free GPU of n0 and s6 room on n3, which s11 may not
#: use (reserved for s8, a gang of its team it does not outrank). Admitted again in queue order, s6 took n0's GPU
#: first, and s11 waited behind the reservations of s7 and s12, submitted after it; in the plan's order (biggest
#: first, then by id) each finds the room the plan found for it.
MOVED_JOB_BEHIND_RESERVATIONS = [
    15, 0, 'b', 6, 13, None, 2, 'a', 1, 5, None, 2, 'b', 2, 9, None, 0, 'b', 6, 12, None, 0, 'a', 4, 12, 7200000, 0,
    'b', 1, 5, None, 1, 'a', 1, 11, None, 3, 'b', 4, 5, None, 1, 'a', 6, 5, None, 1, 'b', 2, 9, None, 1, 'b', 1, 5,
    None, 2, 'a', 1, 10, None, 3, 'b', 1, 5, None, 0, 'a', 1, 11, None, 3, 'a', 2, 5, None, 2, 5, 'a', 1, 10, 5, 'a',
    1, 10, 8, '0s', '0s', '5m',
]


def test_moved_jobs_are_admitted_again_in_the_order_their_move_planned():
    """The case's reservations are held by gangs their quota holds back, on nodes already free (gangway-8's rule)."""
    log = run(fragmented(Replayed(MOVED_JOB_BEHIND_RESERVATIONS), quota_held_reserves_free_nodes=True),
              observers=[Invariants()]).cell.log
    assert moves_and_overtakes(log) == (2, [])
    admitted = [e.job_id for e in log if isinstance(e, m.JobAdmitted) and e.job_id in ("s6", "s11")]
    assert admitted[-2:] == ["s11", "s6"]


def test_in_queue_order_an_earlier_mover_takes_the_room_planned_for_another():
    """gangway-6, which admitted moved jobs in queue order, on the same case."""
    log = run(fragmented(Replayed(MOVED_JOB_BEHIND_RESERVATIONS), movers_in_plan_order=False,
                         quota_held_reserves_free_nodes=True)).cell.log
    assert moves_and_overtakes(log) == (2, ["s7 before moved s11", "s12 before moved s11"])


def test_fragmented_cells_do_move_jobs():
    """The cells above are fragmented enough that consolidation moves jobs in most of them (else the property
    would hold vacuously)."""
    moves = [moves_and_overtakes(run(fragmented(RandomChooser(random.Random(seed)))).cell.log)[0] for seed in range(20)]
    assert sum(1 for n in moves if n) >= 6, moves


class MovesAgreeWithOneMemoPerGang:
    """After every event: whether each waiting gang delays its team's head, and the moves found for it, with one
    memo shared by all of them (as one Tick shares it: heads, what delays them, releases, movers, quota fits) are
    those found with a memo of its own."""

    def __init__(self) -> None:
        self.found = 0
        self.delays = {True: 0, False: 0}

    def __call__(self, cell, event, offset) -> None:
        state = cell.state
        ctx = Context("preemptor", event, offset, cell.policy, at=state.now)
        shared: dict = {}
        for job_id in sorted(state.queued):
            job = state.jobs[job_id]
            delays = _delays_its_head(state, job, cell.policy, state.now, {})
            assert _delays_its_head(state, job, cell.policy, state.now, shared) == delays, job_id
            self.delays[delays] += 1
        shared = {}
        for job_id in sorted(state.queued):
            job = state.jobs[job_id]
            alone = _moves(moves_for(state, job, ctx, {}, []))
            assert _moves(moves_for(state, job, ctx, shared, [])) == alone, job_id
            self.found += alone is not None


def _moves(found):
    """The victims and the gang's placement, comparable (a placement works out its GPUs when read)."""
    if found is None:
        return None
    victims, placement = found
    return [v.job_id for v in victims], placement.workers, placement.domain, placement.assignments


@SETTINGS
@given(st.data())
def test_moves_with_a_shared_memo_equal_each_gangs_own(data):
    run(fragmented(DataChooser(data)), observers=[MovesAgreeWithOneMemoPerGang()])


@SETTINGS
@given(st.data())
def test_moves_with_a_shared_memo_equal_each_gangs_own_on_random_streams(data):
    """Streams mix gang sizes, time limits and teams, so a team's head is delayed by some gangs and not others."""
    run(stream(DataChooser(data), steps=40), observers=[MovesAgreeWithOneMemoPerGang()])


def test_the_shared_memo_is_compared_where_moves_are_found_and_heads_are_both_delayed_and_not():
    """Seeded cells and streams in which moves are found and gangs both delay their head and do not, so the
    properties above do not hold vacuously."""
    found, delays = 0, {True: 0, False: 0}
    for seed in range(10):
        for scenario in (fragmented(RandomChooser(random.Random(seed))), stream(RandomChooser(random.Random(seed)), 40)):
            check = MovesAgreeWithOneMemoPerGang()
            run(scenario, observers=[check])
            found += check.found
            delays = {k: delays[k] + check.delays[k] for k in delays}
    assert found > 0 and delays[True] > 0 and delays[False] > 0, (found, delays)


class _Leaning:
    """Seeded choices that lean to the first and last options and the ends of ranges, as hypothesis's do."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.p = rng, rng.choice([0.2, 0.4, 0.6])

    def one(self, options):
        options = list(options)
        if self.rng.random() < self.p:
            return options[0]
        return options[-1] if self.rng.random() < self.p / 2 else self.rng.choice(options)

    def int(self, low: int, high: int) -> int:
        r = self.rng.random()
        return low if r < self.p else high if r < self.p * 1.5 else self.rng.randint(low, high)


def test_a_consolidation_hold_is_not_released_as_stale_on_the_room_its_plan_counted():
    """A move's plan lets a mover take the GPUs it leaves that the hold does not claim; the check made once the hold
    is folded (`homeless`) counted those GPUs as still its own, released the hold as stale, and the preemptor made
    the same hold again at the same instant, without end (found by a random stream, seed 527)."""
    def bounded(cell, event, offset):
        assert len(cell.log) < 2_000, "the stream's 40 inputs over 40 minutes made a log without end"
    log = run(stream(_Leaning(random.Random(527)), 40), observers=[bounded]).cell.log
    stale = [e for e in log if isinstance(e, m.CapacityReleased) and e.envelope.reason is m.Reason.HOLD_STALE]
    assert len(stale) <= 3, [(e.envelope.at, e.job_id, e.detail) for e in stale]
