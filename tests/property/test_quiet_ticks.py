"""A Tick whose cycle the admitter or the preemptor skips (nothing folded since a Tick that decided nothing, and no
time it compared with has come: services/admitter/decide.py `tick_cycle`, services/preemptor/decide.py `tick`)
would have decided nothing: the same inputs give the same decision log with the skip and without it."""

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import models as m
from events.models import Reason
from projections.cell import CellState
from projections.evolve import evolve
from replay.scenario.play import run, run_file
from services.admitter import decide as admitter
from services.core import quiet
from services.preemptor import decide as preemptor
from tests.builders import env, job, node, quota, team
from tests.property.streams import MINUTE, DataChooser, RandomChooser, stream, time_shared
from tests.property.test_consolidation import fragmented

# compares the core with a reference walk by patching its source (tests/conftest.py)
pytestmark = pytest.mark.pure

SCENARIOS_DIR = Path(__file__).resolve().parents[1] / "scenarios"
SCENARIOS = sorted(SCENARIOS_DIR.glob("*.yaml"))
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decisions(play, skip: bool, monkeypatch) -> list[m.Event]:
    monkeypatch.setattr(quiet, "SKIP_QUIET_TICKS", skip)
    return [e for e in play().cell.log if e.is_decision]


def ticks_skipped(play, monkeypatch) -> tuple[int, int, int]:
    """(Ticks, Ticks the admitter skipped, Ticks the preemptor skipped): only a Tick's admission cycle is told what
    it `compared`, and only a Tick the preemptor does not skip looks for gangs that may have victims."""
    cycle, looks = admitter.admission_cycle, preemptor._may_preempt
    calls = {"cycles": 0, "looks": 0}

    def counted_cycle(state, ctx, **kwargs):
        calls["cycles"] += kwargs.get("compared") is not None
        return cycle(state, ctx, **kwargs)

    def counted_looks(*args):
        calls["looks"] += 1
        return looks(*args)
    monkeypatch.setattr(admitter, "admission_cycle", counted_cycle)
    monkeypatch.setattr(preemptor, "_may_preempt", counted_looks)
    ticks = sum(isinstance(e, m.Tick) for e in play().cell.log)
    return ticks, ticks - calls["cycles"], ticks - calls["looks"]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_decides_the_same_with_quiet_ticks_skipped(path, monkeypatch):
    play = lambda: run_file(path)  # noqa: E731
    assert decisions(play, True, monkeypatch) == decisions(play, False, monkeypatch)


@SETTINGS
@given(st.data())
def test_random_streams_decide_the_same_with_quiet_ticks_skipped(data):
    scenario = stream(DataChooser(data), steps=40)
    with pytest.MonkeyPatch.context() as patch:
        assert decisions(lambda: run(scenario), True, patch) == decisions(lambda: run(scenario), False, patch)


def fragmented_cell(chooser, overrun: bool):
    """A fragmented cell (tests/property/test_consolidation.py); `overrun`: its small jobs may run past time limits
    that are not enforced, so the heads' expected starts move with time alone as each release they counted on
    passes."""
    if overrun:
        return fragmented(chooser, (20 * MINUTE, 30 * MINUTE, None), enforce_time_limits=False)
    return fragmented(chooser)


@SETTINGS
@given(st.data())
def test_fragmented_cells_decide_the_same_with_quiet_ticks_skipped(data):
    """Where consolidation looks for moves and finds a team's head in the way (services/core/heads.py
    `head_compared`), with time limits that give the heads known starts and reservations shadow times."""
    scenario = fragmented_cell(DataChooser(data), overrun=data.draw(st.booleans()))
    with pytest.MonkeyPatch.context() as patch:
        assert decisions(lambda: run(scenario), True, patch) == decisions(lambda: run(scenario), False, patch)


def test_seeded_fragmented_cells_decide_the_same_with_quiet_ticks_skipped(monkeypatch):
    for seed in range(30):
        scenario = fragmented_cell(RandomChooser(random.Random(seed)), overrun=seed % 2 == 1)
        assert decisions(lambda: run(scenario), True, monkeypatch) == \
            decisions(lambda: run(scenario), False, monkeypatch), seed


def test_the_comparisons_are_not_empty(monkeypatch):
    """Quiet Ticks are skipped where the comparisons above run: more than a third of a seeded stream's by the
    admitter, and by the preemptor more than half of the Ticks while a gang waits for a band to be reached."""
    ticks, by_admitter, _ = ticks_skipped(lambda: run(stream(RandomChooser(random.Random(7)), 60)), monkeypatch)
    assert by_admitter > ticks // 3, (ticks, by_admitter)
    ticks, _, by_preemptor = ticks_skipped(lambda: run_file(SCENARIOS_DIR / "time_share_once_a_band_is_reached.yaml"),
                                           monkeypatch)
    assert by_preemptor > ticks // 2, (ticks, by_preemptor)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), max_size=8), st.none() | st.integers(0, 120),
       st.integers(0, 200))
def test_the_first_waiting_moment_is_the_first_after_now_of_every_gangs_moments(gangs, wait, now):
    """`quiet.first_waiting`, bisecting the sorted indexes, equals `first_after` over each waiting gang's return from
    backing off and the end of its wait (no wait: the returns alone), both counted only when not yet past (moments
    at `now` included)."""
    jobs = {f"j{i}": _Waiting(submitted, back) for i, (submitted, back) in enumerate(gangs)}
    state = _Queue(jobs, sorted(jobs))
    moments = []
    for gang in jobs.values():
        moments += [gang.not_before] if gang.not_before >= now else []
        waited = None if wait is None else max(gang.submitted_at, gang.not_before) + wait
        moments += [waited] if waited is not None and waited >= now else []
    assert quiet.first_waiting(state, wait, now) == quiet.first_after(moments, now)


class _Waiting:
    def __init__(self, submitted_at: int, not_before: int) -> None:
        self.submitted_at, self.not_before = submitted_at, not_before


class _Queue:
    """The queue's indexes that `first_waiting` reads, as CellState keeps them."""

    def __init__(self, jobs: dict, queued: list) -> None:
        waiting = [jobs[j] for j in queued]
        self.queued_returns = sorted(job.not_before for job in waiting)
        self.queued_since = sorted(max(job.submitted_at, job.not_before) for job in waiting)


def test_a_tick_after_one_that_only_restated_reasons_is_skipped(monkeypatch):
    """The admitter's Tick that only restated why gangs wait leaves its quiet for the next: once those restatements
    are folded, the same cycle would find every gang stating its reason. Seeded streams have such Ticks skipped (the
    tests above hold every skip to deciding the same)."""
    skipped_after_restating = 0
    cycle = admitter.admission_cycle
    for seed in range(4):
        play = lambda: run(stream(RandomChooser(random.Random(seed)), 60))  # noqa: E731
        ran: set[int] = set()

        def recorded(state, ctx, **kwargs):
            if kwargs.get("compared") is not None:
                ran.add(ctx.basis_offset)
            return cycle(state, ctx, **kwargs)
        monkeypatch.setattr(admitter, "admission_cycle", recorded)
        log = play().cell.log
        restated_only, since = False, []
        for offset, e in enumerate(log):
            if isinstance(e, m.Tick):
                if restated_only and since and offset not in ran:
                    skipped_after_restating += 1
                restated_only = offset in ran
                since = []
            elif e.is_decision and type(log[e.envelope.basis_offset or 0]) is m.Tick:
                since.append(e)
                restated_only = restated_only and type(e) is m.JobQueued and not e.reserved_nodes
    assert skipped_after_restating > 0  # 6 when written


def test_a_restated_reason_counts_as_one_unless_capacity_is_held_for_the_gang():
    """`CellState.restated` counts the folds that only restate why a gang waits, which deciders' quiet Ticks may
    look past; a gang with capacity held for it states what the hold is for (CONSOLIDATED: the admitter keeps its
    movers' room), so its restatement counts as a change."""
    state, offset = CellState(), 1
    for event in (node("n1"), team("nlp"), quota("nlp", 8), job("a", gpus=2), job("b", gpus=2)):
        assert evolve(state, event, offset) is None
        offset += 1

    def restate(job_id: str, reason: Reason) -> int:
        nonlocal offset
        before = state.restated
        envelope = env(0, "admitter", f"restate-{offset}").model_copy(update={"reason": reason})
        assert evolve(state, m.JobQueued(envelope=envelope, job_id=job_id, team="nlp"), offset) is None
        offset += 1
        return state.restated - before
    assert restate("a", Reason.INSUFFICIENT_FREE_GPUS) == 1
    hold = env(0, "preemptor", "hold-b").model_copy(update={"reason": Reason.CONSOLIDATED})
    assert evolve(state, m.CapacityHeld(envelope=hold, job_id="b", team="nlp", gpu_type="H100", gpus=2,
                                        until=10**7), offset) is None
    offset += 1
    assert state.jobs["b"].has_hold
    assert restate("b", Reason.WAITING_FOR_QUEUE_HEAD) == 0


@SETTINGS
@given(st.data())
def test_least_attained_service_cells_decide_the_same_with_quiet_ticks_skipped(data):
    """Under Tiresias' order with time-sharing, where a running job reaching its next band is a time the preemptor
    compares `now` with (Job.next_band_at)."""
    scenario = time_shared(DataChooser(data))
    with pytest.MonkeyPatch.context() as patch:
        assert decisions(lambda: run(scenario), True, patch) == decisions(lambda: run(scenario), False, patch)


def test_time_shared_cells_do_time_share():
    """The cells above move gangs between bands and make them yield (else the properties on them would hold
    vacuously): time-sharing preemptions in most seeded cells."""
    shared = [sum(isinstance(e, m.PreemptionRequested) and e.envelope.reason is Reason.TIME_SHARED
                  for e in run(time_shared(RandomChooser(random.Random(seed)))).cell.log) for seed in range(10)]
    assert sum(1 for n in shared if n) >= 6, shared
