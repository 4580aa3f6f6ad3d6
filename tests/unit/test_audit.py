"""`gangway replay state`, `report` and `whatif` on golden logs: the cell at a point, the fair-share ledger, and
another policy re-driven over the recorded inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import ENDED, JobState
from replay import cli
from replay.audit import ledger, whatif
from replay.audit.policy import recorded
from replay.source import read_file
from replay.verify import verify
from services.deciders import DECIDERS
from services.policies import FIFO, GANGWAY, STATIC

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def golden(name: str):
    return read_file(GOLDEN / f"{name}.avro")


def run_json(capsys, *argv: str) -> dict:
    assert cli.main([*argv, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


# --- replay state ------------------------------------------------------------------------------------------------


def test_state_at_an_offset_is_the_log_folded_to_it(capsys):
    log = golden("demo")
    at = log.records[len(log.records) // 2][0]
    view = run_json(capsys, "replay", "state", "--at", str(at), "--log", str(GOLDEN / "demo.avro"))
    state = CellState()
    for offset, event in log.records[:at + 1]:
        evolve(state, event, offset)
    assert view["offset"] == at
    assert {n["node"]: (n["used"], n["free"]) for n in view["nodes"]} == {
        n.name: (len(n.holder), n.free) for n in state.cluster.nodes.values()}
    live = [j for j in state.jobs.values() if not j.ended]
    ended = {s.value for s in JobState if s in ENDED}
    assert {s: len(ids) for s, ids in view["jobs"].items() if s not in ended} == {
        s.value: sum(j.state is s for j in live) for s in {j.state for j in live}}
    # ended jobs leave the state at the next Tick: the view still counts them, by their final state
    assert sum(len(ids) for s, ids in view["jobs"].items() if s in ended) == len(state.retired) + sum(
        j.ended for j in state.jobs.values())
    used = {(q["team"], q["gpu_type"]): q["used"] for q in view["quotas"]}
    assert all(used[key] == state.tenancy.used(*key) for key in state.tenancy.quotas)


def test_state_at_a_time_is_the_last_record_at_or_before_it(capsys):
    log = golden("reclaim_within_cohort")
    offset, event = log.records[300]
    later = next(o for o, e in log.records if e.envelope.at > event.envelope.at) - 1
    by_time = run_json(capsys, "replay", "state", "--at", _iso(event.envelope.at),
                       "--log", str(GOLDEN / "reclaim_within_cohort.avro"))
    assert by_time["offset"] == later >= offset


def _iso(ms: int) -> str:
    from datetime import datetime, timezone
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


# --- report ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["demo", "reclaim_within_cohort", "preempt_checkpoint_deadline"])
def test_the_ledger_balances(name):
    """What some teams borrowed others lent; every preemption suffered was caused by someone; GPU-hours used are
    the GPUs each admission held until it was released, summed job by job."""
    log = golden(name)
    book = ledger.fold(log.records)
    teams = book.teams.values()
    assert sum(t.gpu_hours_lent for t in teams) == pytest.approx(sum(t.gpu_hours_borrowed for t in teams))
    preempted = sum(1 for _, e in log.records if isinstance(e, m.JobPreempted))
    assert sum(t.preemptions_suffered for t in teams) == sum(t.preemptions_caused for t in teams) == preempted
    assert {t.team: round(t.gpu_hours_used, 6) for t in teams} == pytest.approx(held_gpu_hours(log.records))


def held_gpu_hours(records) -> dict[str, float]:
    """GPU-hours per team from admission to release, job by job (the state only says who holds what)."""
    state = CellState()
    held: dict[str, tuple[int, int]] = {}  # job -> (since, GPUs)
    out: dict[str, float] = {}
    end = max(e.envelope.at for _, e in records)
    for offset, event in records:
        evolve(state, event, offset)
        for job in state.jobs.values():
            out.setdefault(job.team, 0.0)
        for job_id in list(held):
            if not state.jobs[job_id].holds_capacity:
                since, gpus = held.pop(job_id)
                out[state.jobs[job_id].team] += gpus * (event.envelope.at - since) / 3_600_000
        for job_id in state.holding:
            if job_id not in held:
                held[job_id] = (event.envelope.at, state.jobs[job_id].held_gpus)
    for job_id, (since, gpus) in held.items():
        out[state.jobs[job_id].team] += gpus * (end - since) / 3_600_000
    return {team: round(hours, 6) for team, hours in out.items()}


def test_report_for_one_team_over_a_window(capsys):
    path = str(GOLDEN / "reclaim_within_cohort.avro")  # vision submits at 15 min and reclaims from nlp at once
    data = run_json(capsys, "report", "--team", "vision", "--from", "1970-01-01T00:14:00Z", "--log", path)
    assert list(data["teams"]) == ["vision"]
    vision = data["teams"]["vision"]
    assert (vision["jobs_submitted"], vision["jobs_started"], vision["preemptions_caused"]) == (1, 1, 1)
    later = run_json(capsys, "report", "--team", "vision", "--from", "1970-01-01T00:20:00Z", "--log", path)
    assert (later["teams"]["vision"]["jobs_submitted"], later["teams"]["vision"]["preemptions_caused"]) == (0, 0)
    assert later["teams"]["vision"]["gpu_hours_used"] < vision["gpu_hours_used"]


# --- whatif ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["demo", "reclaim_within_cohort", "backfill_reservation"])
def test_the_recorded_policy_re_driven_gives_what_happened(name):
    log = golden(name)
    policy = recorded(log.records)
    for cut in (-1, log.records[len(log.records) // 3][0]):
        comparison = whatif.compare(log.records, log.cell, policy, cut)
        assert comparison.whatif == comparison.recorded and comparison.movers == [], cut


def test_another_policy_changes_the_outcome_and_decides_by_itself():
    log = golden("reclaim_within_cohort")
    comparison = whatif.compare(log.records, log.cell, STATIC)
    assert comparison.recorded["preemptions"] == 1 and comparison.whatif["preemptions"] == 0
    assert "borrower" in {row["job"] for row in comparison.movers}
    run = whatif.redrive(log.records, log.cell, STATIC, -1, {}, comparison.until)
    decisions = [e for e in run.log if e.is_decision]
    assert decisions and {e.envelope.policy_version for e in decisions} == {STATIC.version}
    for decider in DECIDERS.values():  # P's log is a log like any other: its decisions reproduce
        assert verify(list(enumerate(run.log)), decider()).ok


def test_whatif_prints_both_sides(capsys):
    assert cli.main(["whatif", "--policy", "fifo", "--log", str(GOLDEN / "demo.avro")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == ["METRIC", "RECORDED", FIFO.version]
    assert any(line.split()[0] == "avg_jct_s" for line in out.splitlines()[2:])
    assert GANGWAY.version in out.splitlines()[0]
