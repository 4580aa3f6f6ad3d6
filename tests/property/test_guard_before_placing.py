"""A quiet admission cycle refuses a gang that its team's head keeps waiting, even at its smallest, before it looks
for the gang's room (services/admitter/decide.py `GUARD_BEFORE_PLACING`): the gang waits and holds nothing either
way, unless it may reserve nodes. The same inputs give the same decision log with that shortcut and without it."""

import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.evolve import evolve
from replay.scenario.play import parse, run, run_file
from services.admitter import decide as admitter
from services.core.decider import Context
from services.policies import resolve
from services.policy import DEFAULT_POLICY
from tests.builders import job, node, priority, quota, team, tick, topology
from tests.property.streams import MINUTE, Chooser, DataChooser, RandomChooser, stream
from tests.property.test_consolidation import fragmented

# compares the core with a reference walk by patching its source (tests/conftest.py)
pytestmark = pytest.mark.pure

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decisions(play, first: bool, patch: pytest.MonkeyPatch) -> list[m.Event]:
    patch.setattr(admitter, "GUARD_BEFORE_PLACING", first)
    return [e for e in play().cell.log if e.is_decision]


def rooms_looked_for(play, first: bool, patch: pytest.MonkeyPatch) -> int:
    """How many times the admitter's cycles looked for a gang's room."""
    calls = [0]
    place = admitter.place_gang

    def counted(*args, **kwargs):
        calls[0] += 1
        return place(*args, **kwargs)
    patch.setattr(admitter, "GUARD_BEFORE_PLACING", first)
    patch.setattr(admitter, "place_gang", counted)
    play()
    return calls[0]


def busy_team(c: Chooser):
    """Two teams on a full 4-node cell: each submits small gangs, some with time limits, and whole-node gangs that
    head its queue while the small ones wait behind them; few or no reservations, taken soon or late; Ticks often
    or seldom (between them every cycle is quiet)."""
    inputs = []
    for i in range(c.int(12, 24)):
        big = c.int(0, 4) == 0
        inputs.append({"at": c.int(0, 30) * MINUTE, "submit": {
            "job": f"{'g' if big else 's'}{i}", "team": c.one(["a", "b"]),
            "workers": c.one([1, 2]) if big else 1, "gpus_per_worker": 8 if big else c.one([1, 2, 4]),
            "runs_for": c.int(5, 60) * MINUTE, "time_limit": None if big else c.one([None, 20 * MINUTE, 90 * MINUTE])}})
    return parse({
        "name": "busy-team",
        "cell": {"topology": ["block", "rack"], "nodes": [{"generate": {
            "count": 4, "gpus": 8, "gpu_type": "H100", "nodes_per_rack": 2, "racks_per_block": 2}}]},
        "cohorts": [{"name": "co"}],
        "teams": [{"name": "a", "cohort": "co", "quota": {"H100": 16}},
                  {"name": "b", "cohort": "co", "quota": {"H100": 16}}],
        "policy": {"admission": {"max_reservations": c.one([0, 1, 4]),
                                 "reservation_after": c.one(["0s", "10m", "2h"])}},
        "tick": c.one(["1m", "20m"]), "until": "120m", "inputs": sorted(inputs, key=lambda i: i["at"]),
    }, "busy team")


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_decides_the_same_with_the_guard_asked_first(path, monkeypatch):
    play = lambda: run_file(path)  # noqa: E731
    assert decisions(play, True, monkeypatch) == decisions(play, False, monkeypatch)


@pytest.mark.parametrize("build", [lambda c: stream(c, steps=40), busy_team, fragmented],
                         ids=["random-streams", "busy-teams", "fragmented-cells"])
@SETTINGS
@given(data=st.data())
def test_generated_cells_decide_the_same_with_the_guard_asked_first(build, data):
    scenario = build(DataChooser(data))
    with pytest.MonkeyPatch.context() as patch:
        assert decisions(lambda: run(scenario), True, patch) == decisions(lambda: run(scenario), False, patch)


def test_seeded_busy_teams_decide_the_same_and_look_for_less_room(monkeypatch):
    """The comparisons above are not empty: on these cells the shortcut spares one look for room in fifty or more
    (69 of 1,639 when written)."""
    looked, spared = 0, 0
    for seed in range(30):
        scenario = busy_team(RandomChooser(random.Random(seed)))
        assert decisions(lambda: run(scenario), True, monkeypatch) == \
            decisions(lambda: run(scenario), False, monkeypatch), seed
        without = rooms_looked_for(lambda: run(scenario), False, monkeypatch)
        looked += without
        spared += without - rooms_looked_for(lambda: run(scenario), True, monkeypatch)
    assert spared * 50 >= looked, (spared, looked)


def _decided(envelope_reason: Reason, at: int, job_id: str) -> m.Envelope:
    return m.Envelope(event_id=f"admitter-{job_id}-{envelope_reason.value}", cell="test-cell", at=at,
                      producer="admitter", reason=envelope_reason, correlation_id=job_id)


def _running(job_id: str, team_name: str, *where: tuple[str, list[int]]) -> m.JobAdmitted:
    """The gang admitted onto these (node, GPUs), a worker on each."""
    return m.JobAdmitted(envelope=_decided(Reason.WITHIN_NOMINAL_QUOTA, 0, job_id), job_id=job_id, team=team_name,
                         gpu_type="H100", gpus=sum(len(gpus) for _, gpus in where), borrowed=0, domain=None,
                         assignments=[m.WorkerAssignment(worker=i, node=name, gpus=gpus)
                                      for i, (name, gpus) in enumerate(where)])


def _whole(*names: str) -> list[tuple[str, list[int]]]:
    return [(name, list(range(8))) for name in names]


def _reserved(job_id: str, team_name: str, node_name: str, at: int) -> m.JobQueued:
    return m.JobQueued(envelope=_decided(Reason.HOLDS_RESERVATION, at, job_id), job_id=job_id, team=team_name,
                       reserved_nodes=[node_name], detail="drain")


ONE_RESERVATION = replace(DEFAULT_POLICY, admission=replace(DEFAULT_POLICY.admission, max_reservations=1))


def quiet_cycle(events: list[m.Event], first: bool, patch: pytest.MonkeyPatch,
                policy=ONE_RESERVATION) -> list[tuple]:
    """A quiet admission cycle (as after a job ends) on the state the events fold to, at the last one (a Tick)."""
    state = CellState()
    for offset, event in enumerate(events, start=1):
        assert evolve(state, event, offset) is None, event
    ctx = Context(producer="admitter", cause=events[-1], basis_offset=len(events), policy=policy, at=state.now)
    patch.setattr(admitter, "GUARD_BEFORE_PLACING", first)
    return [(type(d).__name__, d.job_id, d.envelope.reason.value, tuple(getattr(d, "reserved_nodes", ()) or ()))
            for d in admitter.admission_cycle(state, ctx, refresh=False)]


def same_either_way(events: list[m.Event], patch: pytest.MonkeyPatch, policy=ONE_RESERVATION) -> list[tuple]:
    without = quiet_cycle(events, False, patch, policy)
    assert quiet_cycle(events, True, patch, policy) == without
    return without


def test_a_head_start_asked_early_is_computed_again_once_a_reservation_is_released(monkeypatch):
    """Team a's head h waits for n2 (busy 60 minutes); j and j2 wait behind it. r, of team b, holds n1 and is
    admitted in the cycle, which frees what n1 keeps: h could then start now, so j2 may not pass it. Asked before
    r's admission (for j), h's start must not be read after it as it was."""
    events = [node("n1"), node("n2"), team("a"), team("b"), team("c"), quota("a", 64), quota("b", 64), quota("c", 64),
              job("f", gpus=8, team="c", time_limit_ms=60 * MINUTE), _running("f", "c", *_whole("n2")),
              job("h", gpus=4, team="a", at=1000), job("j", gpus=8, team="a", at=2000),
              job("r", gpus=4, team="b", at=3000), job("j2", workers=2, gpus=2, team="a", at=4000, time_limit_ms=10 * MINUTE),
              _reserved("r", "b", "n1", 5000), tick(6000)]
    assert [d[:2] for d in same_either_way(events, monkeypatch)] == [("JobAdmitted", "r"), ("JobPlaced", "r")]


def test_a_group_is_refused_early_only_where_both_refusals_take_all_of_it(monkeypatch):
    """j (120-minute limit) and o (10-minute limit) need the same; team a's head h waits. Had j found no room,
    o would have been refused with it; refused for delaying h, o would not (it ends sooner), and once r's
    reservation frees n1 it could be admitted. So j is not refused before its placement."""
    events = [node("n1"), node("n2"), *(team(t) for t in "abcd"), *(quota(t, 64) for t in "abcd"),
              job("f1", gpus=2, team="c", time_limit_ms=60 * MINUTE), job("f2", gpus=6, team="d"),
              _running("f1", "c", ("n2", [0, 1])), _running("f2", "d", ("n2", [2, 3, 4, 5, 6, 7])),
              job("h", gpus=8, team="a", at=1000), job("j", gpus=4, team="a", at=2000, time_limit_ms=120 * MINUTE),
              job("r", gpus=2, team="b", at=3000), job("o", gpus=4, team="a", at=4000, time_limit_ms=10 * MINUTE),
              _reserved("r", "b", "n1", 5000), tick(6000)]
    assert [d[:2] for d in same_either_way(events, monkeypatch)] == [("JobAdmitted", "r"), ("JobPlaced", "r")]


def test_a_head_start_is_not_asked_early_where_admissions_would_move_it(monkeypatch):
    """h (8 GPUs on one node) cannot start although 4 + 4 are free; j cannot be placed in one rack. a (team b, 10
    minutes) is admitted next: computed after it, h's first chance is a's end, which k (30 minutes) would delay.
    A start computed at j and carried past a's admission would keep h's later start and let k pass. (h and j ask
    for 20 minutes: by deadline they go before k, as in submit order.)"""
    events = [topology("rack"), node("n1", rack="r1"), node("n2", rack="r2"),
              *(node(n, rack="r3") for n in ("n3", "n4", "n5", "n6")),
              *(e for t in "abz" for e in (team(t), quota(t, 64))),
              job("p1", gpus=4, team="z", time_limit_ms=60 * MINUTE), _running("p1", "z", ("n1", [0, 1, 2, 3])),
              job("p2", gpus=4, team="z", time_limit_ms=60 * MINUTE), _running("p2", "z", ("n2", [0, 1, 2, 3])),
              job("p3", workers=4, gpus=8, team="z", time_limit_ms=120 * MINUTE),
              _running("p3", "z", *_whole("n3", "n4", "n5", "n6")),
              job("h", gpus=8, team="a", at=MINUTE, time_limit_ms=20 * MINUTE),
              job("j", workers=2, gpus=4, team="a", at=MINUTE + 1, topology_required="rack", time_limit_ms=20 * MINUTE),
              job("a", gpus=4, team="b", at=MINUTE + 2, time_limit_ms=10 * MINUTE),
              job("k", gpus=4, team="a", at=MINUTE + 3, time_limit_ms=30 * MINUTE), tick(2 * MINUTE)]
    assert [d[:2] for d in same_either_way(events, monkeypatch)] == [("JobAdmitted", "a"), ("JobPlaced", "a")]


def test_a_head_start_is_not_asked_early_where_a_hold_would_be_given_back(monkeypatch):
    """x has n1 held for it; the head h needs 24 of team a's 30. Computed while x's hold still counts, h's start
    is none; the cycle computes it first for x's own admission, with the hold given back to x, and x backfills."""
    hold = _decided(Reason.CONSOLIDATED, 2 * MINUTE, "x").model_copy(update={"producer": "preemptor"})
    events = [*(node(n) for n in ("n1", "n2", "n3", "n4", "n5", "n6")), team("a"), team("z"), quota("a", 30),
              quota("z", 64), job("p2", gpus=8, team="z", time_limit_ms=60 * MINUTE), _running("p2", "z", *_whole("n2")),
              job("p3", workers=4, gpus=8, team="z", time_limit_ms=120 * MINUTE),
              _running("p3", "z", *_whole("n3", "n4", "n5", "n6")),
              job("h", workers=3, gpus=8, team="a", at=MINUTE), job("j", gpus=8, team="a", at=MINUTE + 1),
              job("x", gpus=8, team="a", at=MINUTE + 2),
              m.CapacityHeld(envelope=hold, job_id="x", team="a", gpu_type="H100", gpus=8,
                             assignments=[m.WorkerAssignment(worker=0, node="n1", gpus=list(range(8)))], until=30 * MINUTE),
              tick(3 * MINUTE)]
    assert same_either_way(events, monkeypatch)[0][:3] == ("JobAdmitted", "x", "BACKFILLED")


def test_a_gang_refused_early_still_notes_that_its_size_finds_no_room(monkeypatch):
    """a takes 4 of n1's 8 free GPUs; j0 fits the other 4 but would delay its head h (12 GPUs), whose start the
    cycle so computes; j (8 GPUs) is then refused early. A failed placement would have noted that no 8-GPU worker
    finds room this cycle, so gangway-7's quiet cycle looks no further at l (8 GPUs, long waiting): noted early too,
    l reserves no nodes. From gangway-8 a quiet cycle asks l whether it may reserve all the same: it
    reserves, either way."""
    events = [*(node(n) for n in ("n1", "n2", "n3", "n4", "n5", "n6")), priority("high", 10),
              *(e for t in "abcz" for e in (team(t), quota(t, 64))),
              job("p2", gpus=8, team="z", time_limit_ms=60 * MINUTE), _running("p2", "z", *_whole("n2")),
              job("p3", workers=4, gpus=8, team="z", time_limit_ms=120 * MINUTE),
              _running("p3", "z", *_whole("n3", "n4", "n5", "n6")),
              job("l", gpus=8, team="c"), job("a", gpus=4, team="b", at=8 * MINUTE, priority_class="high"),
              job("h", workers=3, gpus=4, team="a", at=9 * MINUTE, priority_class="high"),
              job("j0", gpus=4, team="a", at=9 * MINUTE + 1, priority_class="high"),
              job("j", gpus=8, team="a", at=9 * MINUTE + 2, priority_class="high"), tick(10 * MINUTE)]
    assert [d[:2] for d in same_either_way(events, monkeypatch, resolve("gangway-7"))] == [("JobAdmitted", "a"),
                                                                                        ("JobPlaced", "a")]
    assert [d[:3] for d in same_either_way(events, monkeypatch, DEFAULT_POLICY)] == [
        ("JobAdmitted", "a", "WITHIN_NOMINAL_QUOTA"), ("JobPlaced", "a", "PLACED"), ("JobQueued", "l", "HOLDS_RESERVATION")]
