"""Queue position and estimated start (services/core/forecast.py) on cells stated with the test builders."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from replay.scenario.play import load, parse, run
from services.core.forecast import Basis, forecast, runtimes
from services.policies import FIFO, resolve
from services.policy import DEFAULT_POLICY, Policy
from tests.builders import fold, job, node, priority, quota, team, tick, topology

HOUR = 3_600_000
MIN = 60_000


def cell(*events: m.Event, nodes: int = 2, policy: Policy = DEFAULT_POLICY):
    """`nodes` 8-GPU nodes in one rack, team nlp (quota 64) and team cv (quota 64) in one cohort, then `events`."""
    setup = [topology("rack"), *[node(f"n{i}", rack="r0") for i in range(nodes)],
             team("nlp", cohort="all"), quota("nlp", 64), team("cv", cohort="all"), quota("cv", 64)]
    return fold(*setup, *events, policy=policy).state


def test_a_queued_gang_starts_when_the_running_work_reaches_its_time_limit():
    state = cell(job("a", workers=2, at=1000, time_limit_ms=HOUR),
                 job("b", at=2000, time_limit_ms=30 * MIN), job("c", at=3000, time_limit_ms=30 * MIN))
    a = state.jobs["a"]
    assert (a.state.value, state.jobs["b"].state.value) == ("placed", "queued")
    estimates = forecast(state, DEFAULT_POLICY)
    assert [estimates[j].cell_position for j in ("b", "c")] == [1, 2]
    assert estimates["b"].start == a.admitted_at + HOUR
    assert estimates["b"].basis is Basis.TIME_LIMITS and estimates["b"].waits_for == ("a",)
    assert estimates["c"].start == a.admitted_at + HOUR  # a frees 16 GPUs: room for b and c at once
    assert estimates["c"].ahead_gpus == 8
    assert "running work ends (a)" in estimates["b"].detail


def test_a_gang_behind_waits_for_the_one_planned_ahead_of_it():
    state = cell(job("a", workers=2, at=1000, time_limit_ms=HOUR),
                 job("b", at=2000, time_limit_ms=30 * MIN), job("c", workers=2, at=3000, time_limit_ms=HOUR))
    estimates = forecast(state, DEFAULT_POLICY)
    end_of_a = state.jobs["a"].admitted_at + HOUR
    assert estimates["c"].start == end_of_a + 30 * MIN  # b takes 8 of the 16 first
    assert estimates["c"].waits_for == ("b",)
    assert "planned ahead of it" in estimates["c"].detail


def test_work_without_a_time_limit_leaves_the_start_unknown():
    state = cell(job("a", workers=2, at=1000), job("b", at=2000, time_limit_ms=HOUR))
    estimate = forecast(state, DEFAULT_POLICY)["b"]
    assert estimate.start is None and estimate.basis is Basis.UNKNOWN_END
    assert estimate.waits_for == ("a",)


def test_a_gang_its_quota_can_never_admit_has_no_start():
    setup = [topology("rack"), *[node(f"n{i}", rack="r0") for i in range(4)], team("solo"), quota("solo", 8)]
    state = fold(*setup, job("big", workers=2, team="solo", at=1000)).state
    estimate = forecast(state, DEFAULT_POLICY)["big"]
    assert estimate.basis is Basis.TOO_LARGE and estimate.start is None
    assert "quota" in estimate.detail


def test_positions_follow_priority_then_submit_order_per_team_and_cell():
    state = cell(priority("high", 100),
                 job("fill", workers=2, at=1000, time_limit_ms=HOUR),
                 job("nlp-1", at=2000, time_limit_ms=HOUR), job("cv-1", team="cv", at=3000, time_limit_ms=HOUR),
                 job("nlp-2", at=4000, time_limit_ms=HOUR),
                 job("cv-urgent", team="cv", at=5000, priority_class="high", time_limit_ms=HOUR))
    estimates = forecast(state, DEFAULT_POLICY)
    by_cell = sorted(estimates.values(), key=lambda e: e.cell_position)
    assert [e.job_id for e in by_cell][0] == "cv-urgent"
    assert (estimates["nlp-1"].team_position, estimates["nlp-2"].team_position) == (1, 2)
    assert (estimates["cv-urgent"].team_position, estimates["cv-1"].team_position) == (1, 2)
    assert {e.team_waiting for e in estimates.values() if e.job_id.startswith("cv")} == {2}
    assert {e.cell_waiting for e in estimates.values()} == {4}


def test_strict_fifo_behind_a_head_without_a_start():
    events = [topology("rack"), *[node(f"n{i}", rack="r0") for i in range(2)], team("nlp"), quota("nlp", 64),
              job("a", workers=2, at=1000), job("head", at=2000), job("next", at=3000, time_limit_ms=HOUR)]
    state = fold(*events).state
    estimates = forecast(state, FIFO)
    assert estimates["head"].basis is Basis.UNKNOWN_END
    assert estimates["next"].basis is Basis.BEHIND_UNKNOWN and estimates["next"].waits_for == ("head",)
    # With backfill the same gang is not held behind the head; it still waits for a, which has no limit.
    assert forecast(state, DEFAULT_POLICY)["next"].basis is Basis.UNKNOWN_END


def test_a_reservation_starts_at_its_shadow_time_and_short_work_backfills_before_it():
    draining = resolve("gangway-2+admission.max_drain_share=1.0")  # big needs the whole cell
    state = cell(job("a", at=1000, time_limit_ms=HOUR), job("b", at=1000, time_limit_ms=2 * HOUR),
                 job("big", workers=2, at=2000, time_limit_ms=HOUR), tick(10 * MIN),
                 job("short", at=11 * MIN, time_limit_ms=30 * MIN), policy=draining)
    assert "big" in state.reservations
    estimates = forecast(state, draining)
    b_end = state.jobs["b"].admitted_at + 2 * HOUR
    assert estimates["big"].basis is Basis.RESERVATION and estimates["big"].start == b_end
    assert estimates["short"].start == state.jobs["a"].admitted_at + HOUR  # ends before the shadow time


def test_behind_the_horizon_gangs_start_when_the_gpu_time_ahead_of_them_has_run():
    state = cell(job("a", workers=2, at=1000, time_limit_ms=HOUR),
                 *[job(f"q{i}", at=2000 + i, time_limit_ms=HOUR) for i in range(5)])
    estimates = forecast(state, DEFAULT_POLICY, horizon=2)
    assert [estimates[f"q{i}"].cell_position for i in range(5)] == [1, 2, 3, 4, 5]
    assert [estimates[f"q{i}"].basis for i in range(5)] == [Basis.TIME_LIMITS] * 2 + [Basis.QUEUE_DRAIN] * 3
    end_of_a = state.jobs["a"].admitted_at + HOUR
    # q0 and q1 take the 16 GPUs a gives back, for an hour; behind them 8-GPU hours drain through 16 GPUs.
    assert [estimates[f"q{i}"].start - end_of_a for i in range(5)] == [0, 0, HOUR, 3 * HOUR // 2, 2 * HOUR]
    # At the earliest, the gangs ahead found room elsewhere: only a's GPUs stand in the way of each.
    assert [estimates[f"q{i}"].earliest - end_of_a for i in range(2, 5)] == [0, 0, 0]
    assert (estimates["q2"].earliest, estimates["q2"].latest) == (end_of_a, end_of_a + HOUR)
    assert "16 GPU-hours held at the last of their starts" in estimates["q2"].detail
    assert "queued ahead of it (1 gangs)" in estimates["q3"].detail


def test_behind_the_horizon_a_gang_without_a_time_limit_leaves_those_behind_it_without_a_start():
    # q2 has no time limit either: by deadline (gangway-10) a limit would put it before endless
    state = cell(job("a", workers=2, at=1000, time_limit_ms=HOUR), job("q0", at=2000, time_limit_ms=HOUR),
                 job("endless", at=2001), job("q2", at=2002))
    estimates = forecast(state, DEFAULT_POLICY, horizon=1)
    assert [estimates[j].basis for j in ("q0", "endless", "q2")] == [Basis.TIME_LIMITS, Basis.QUEUE_DRAIN,
                                                                      Basis.BEYOND_HORIZON]
    assert estimates["q2"].start is None and estimates["q2"].waits_for == ("endless",)


SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_waiting_gang_gets_a_place_and_no_start_in_the_past(path: Path):
    """At every step of every scenario: positions are 1..n in the cell and in each team, and a start is never
    before the log's time nor before the job's back-off."""
    state = CellState()
    for offset, event in enumerate(run(load(path)).cell.log):
        evolve(state, event, offset)
        if not state.queued or not isinstance(event, (m.JobQueued, m.JobSubmitted, m.Tick, m.JobPreempted)):
            continue
        estimates = forecast(state, DEFAULT_POLICY)
        assert sorted(estimates) == sorted(state.queued)
        assert sorted(e.cell_position for e in estimates.values()) == list(range(1, len(estimates) + 1))
        for team_name in {state.jobs[j].team for j in estimates}:
            mine = [e for j, e in estimates.items() if state.jobs[j].team == team_name]
            assert sorted(e.team_position for e in mine) == list(range(1, len(mine) + 1))
        for job_id, e in estimates.items():
            assert e.start is None or e.start >= max(state.now, state.jobs[job_id].not_before), (job_id, e)
            assert (e.start is None) == (e.basis in {Basis.UNKNOWN_END, Basis.BEHIND_UNKNOWN, Basis.TOO_LARGE,
                                                     Basis.BEYOND_HORIZON}), e


# --- the cell's runtime history and the estimate's interval -------------------------------------------------------


def played(inputs: list[dict], until: str, nodes: int = 2) -> CellState:
    """A scenario on `nodes` 8-GPU nodes in one rack, team nlp (quota 64), with simulated agents."""
    scenario = parse({"name": "history", "cell": {"topology": ["rack"], "nodes": [
        {"generate": {"count": nodes, "gpus": 8, "gpu_type": "H100", "nodes_per_rack": nodes}}]},
        "teams": [{"name": "nlp", "quota": {"H100": 64}}], "agents": {"checkpoint_every": None},
        "tick": "10s", "until": until, "inputs": inputs})
    return run(scenario).cell.state


def submit(at: str, job_id: str, runs_for: str, limit: str = "4h", workers: int = 1) -> dict:
    return {"at": at, "submit": {"job": job_id, "team": "nlp", "workers": workers, "gpus_per_worker": 8,
                                 "runs_for": runs_for, "time_limit": limit}}


def test_jobs_that_used_a_quarter_of_their_limit_make_the_expected_start_earlier_than_the_limits():
    history = [submit(f"{i}m", f"done-{i}", "1h") for i in range(4)]  # 1 h of a 4 h limit each
    state = played([*history, submit("5h", "running", "3h", workers=2), submit("5h1m", "waiting", "1h")], "5h2m")
    assert runtimes(state).fractions == (0.25, 0.25, 0.25, 0.25)
    e = forecast(state, DEFAULT_POLICY)["waiting"]
    began = state.jobs["running"].running_since
    assert e.latest == began + 4 * HOUR  # the running gang may use its whole limit
    assert e.start == began + HOUR  # the cell's jobs run a quarter of theirs
    assert e.earliest <= e.start <= e.latest
    assert "the median of the cell's last 4 finished jobs" in e.detail


def test_work_that_outlived_the_typical_runtime_is_expected_to_run_to_its_limit():
    history = [submit(f"{i}m", f"done-{i}", "1h") for i in range(4)]
    state = played([*history, submit("5h", "running", "3h", workers=2), submit("7h", "waiting", "1h")], "7h1m")
    e = forecast(state, DEFAULT_POLICY)["waiting"]
    assert e.start == e.latest == state.jobs["running"].running_since + 4 * HOUR  # 2 h in: past every runtime seen


def test_without_history_the_estimate_is_the_time_limit_plan_and_the_earliest_ignores_the_gangs_ahead():
    state = cell(job("a", workers=2, at=1000, time_limit_ms=HOUR),
                 job("b", workers=2, at=2000, time_limit_ms=HOUR), job("c", at=3000, time_limit_ms=HOUR))
    assert runtimes(state).fractions == ()
    e = forecast(state, DEFAULT_POLICY)
    end_of_a = state.jobs["a"].admitted_at + HOUR
    assert (e["c"].start, e["c"].latest) == (end_of_a + HOUR, end_of_a + HOUR)  # behind b
    assert e["c"].earliest == end_of_a  # if b waited for room elsewhere


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_the_estimate_lies_inside_its_interval(path: Path):
    state = CellState()
    for offset, event in enumerate(run(load(path)).cell.log):
        evolve(state, event, offset)
        if state.queued and isinstance(event, (m.JobSubmitted, m.JobAdmitted, m.JobSucceeded)):
            for e in forecast(state, DEFAULT_POLICY).values():
                assert (e.start is None) == (e.earliest is None) == (e.latest is None), e
                assert e.start is None or state.now <= e.earliest <= e.start <= e.latest, e
