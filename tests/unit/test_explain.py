"""`gangway explain`: a job's timeline told from the log, and `--why` with the deciders re-run through their
replicas, on scenarios and on cells stated with the builders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events import models as m
from events.logfile import write_log_file
from replay import cli
from replay.audit.policy import recorded
from replay.audit.timeline import timeline
from replay.audit.why import why
from replay.scenario.play import run_file
from services.admitter.decide import Admitter
from services.core.forecast import forecast
from services.core.replica import Replica
from services.policy import DEFAULT_POLICY
from tests.builders import cancel, fold, job, node, quota, team, tick, topology

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def scenario_log(name: str) -> list[tuple[int, m.Event]]:
    return list(enumerate(run_file(SCENARIOS / f"{name}.yaml").cell.log))


def lines_of(records, job_id: str, event: str):
    story, _ = timeline(records, job_id)
    return [line for line in story.lines if line.event == event]


def test_a_borrower_reclaimed_by_its_lender_is_told_who_asked_by_which_rule_and_what_it_cost():
    records = scenario_log("reclaim_within_cohort")
    story, _ = timeline(records, "borrower")
    admitted = next(line for line in story.lines if line.event == "JobAdmitted")
    assert "borrowed 16 from vision 16" in admitted.message and admitted.reason == "BORROWED_FROM_COHORT"
    asked = next(line for line in story.lines if line.event == "PreemptionRequested")
    request = dict(records)[asked.offset]
    assert asked.reason == "RECLAIM_LENT_QUOTA" and "make room for lender" in asked.message
    assert (asked.basis, asked.policy) == (request.envelope.basis_offset, request.envelope.policy_version)
    preempted = next(line for line in story.lines if line.event == "JobPreempted")
    assert "preempted for lender" in preempted.message
    assert "GPU-seconds since its last checkpoint lost" in preempted.message
    assert [line.offset for line in story.lines] == sorted(line.offset for line in story.lines)
    # The lender's side of the same story.
    lender = [line.message for line in timeline(records, "lender")[0].lines]
    assert any("asked borrower to checkpoint" in text for text in lender)
    assert any("borrower preempted to make room" in text for text in lender)


def test_a_victim_preempted_at_its_deadline_loses_the_gpu_seconds_since_it_started():
    records = scenario_log("preempt_checkpoint_deadline")
    events = dict(records)
    preempted = lines_of(records, "victim", "JobPreempted")[0]
    running = lines_of(records, "victim", "WorkerStarted")[0]  # the whole gang ran from here; no checkpoint since
    gpus = sum(len(a.gpus) for e in events.values() if isinstance(e, m.JobPlaced) and e.job_id == "victim"
               for a in e.assignments)
    lost = (events[preempted.offset].envelope.at - events[running.offset].envelope.at) * gpus // 1000
    assert f"{lost:,} GPU-seconds since its last checkpoint lost" in preempted.message and lost > 0


def test_an_interruption_names_the_node_and_the_xid():
    line = lines_of(scenario_log("xid_cordon_node"), "left", "JobInterrupted")[0]
    assert line.reason == "GPU_XID_NODE" and "on n0" in line.message and "Xid 79" in line.message
    requeued = lines_of(scenario_log("xid_cordon_node"), "left", "JobRequeued")[0]
    assert "requeued as attempt 2" in requeued.message


def blocked_by_topology():
    """Three racks of two 8-GPU nodes full of nlp's 1 x 8 jobs (nominal 64; cv's 16 idle in the cohort); the jobs on
    n1 (rack r0) and n3 (rack r1) are cancelled, then `big` asks 2 x 8 GPUs in one rack: 16 GPUs are free, 8 per
    rack."""
    setup = [topology("rack"), *[node(f"n{i}", rack=f"r{i // 2}") for i in range(6)],
             team("nlp", cohort="all"), quota("nlp", 64), team("cv", cohort="all"), quota("cv", 16)]
    cell = fold(*setup, *[job(f"j{i}", at=1000 + i) for i in range(6)])
    holders = {cell.state.jobs[j].nodes()[0]: j for j in cell.state.holding}
    cell.schedule_all([cancel(holders["n1"], at=5000), cancel(holders["n3"], at=5000),
                       job("big", workers=2, at=60_000, topology_required="rack")])
    cell.run_until(60_000)
    return cell


def test_why_names_the_binding_constraint_with_its_numbers():
    cell = blocked_by_topology()
    records = list(enumerate(cell.log))
    story, state = timeline(records, "big")
    assert story.state == "queued"
    reasons = why(state, "big", recorded(records))
    assert reasons.verdicts[0].startswith("admitter: TOPOLOGY_DOMAIN_TOO_SMALL: no single rack has 2 free slots")
    text = "\n".join(reasons.constraints)
    assert "needs 16 H100 GPUs (2 workers x 8) in one rack" in text
    assert "H100: 16 free of 48 in service on 6 nodes" in text
    assert "the largest free rack has 8" in text
    assert "team nlp uses 32 of nominal 64 H100; cohort all has 48 to lend" in text
    assert "quota aside, no placement now: no single rack has 2 free slots" in text


def test_why_on_a_team_at_its_quota_without_a_cohort():
    setup = [topology("rack"), *[node(f"n{i}", rack="r0") for i in range(3)], team("solo"), quota("solo", 8)]
    cell = fold(*setup, job("first", team="solo", at=1000), job("second", team="solo", at=2000))
    records = list(enumerate(cell.log))
    _, state = timeline(records, "second")
    reasons = why(state, "second", recorded(records), forecast(state, recorded(records))["second"])
    assert reasons.verdicts[0] == ("admitter: QUOTA_EXHAUSTED: team solo uses 8 of nominal 8 H100; 8 more exceed "
                                   "its nominal quota and it may not borrow")
    assert any("it has no cohort to borrow from" in c for c in reasons.constraints)
    assert any(c.startswith("quota aside, 1 workers fit now") for c in reasons.constraints)


def test_why_after_a_quiet_tick_on_the_same_state_still_restates_the_reason():
    """`why` probes the admitter with a Tick after clearing the job's reason; a quiet Tick the admitter remembers
    from an earlier probe of the same state (services/admitter/decide.py `tick_cycle`) must not stand for it."""
    setup = [topology("rack"), *[node(f"n{i}", rack="r0") for i in range(3)], team("solo"), quota("solo", 8)]
    cell = fold(*setup, job("first", team="solo", at=1000), job("second", team="solo", at=2000))
    records = list(enumerate(cell.log))
    _, state = timeline(records, "second")
    quiet = Replica(Admitter(), DEFAULT_POLICY, state).answer(state.offset, tick(state.now))
    assert quiet == []  # the reason it waits is already stated: nothing to say, and remembered as quiet
    assert why(state, "second", recorded(records)).verdicts[0].startswith("admitter: QUOTA_EXHAUSTED")


def test_why_on_a_job_that_ended_and_left_the_state_says_it_ended():
    cell = fold(topology("rack"), node("n0"), team("nlp"), quota("nlp", 8), job("done", at=1000))
    cell.schedule_all([cancel("done", at=5000), tick(70_000)])
    cell.run_until(70_000)
    records = list(enumerate(cell.log))
    story, state = timeline(records, "done")
    assert story.state == "cancelled" and "done" not in state.jobs
    assert why(state, "done", recorded(records)).verdicts == [
        "not waiting: it has ended and left the deciders' state; nothing is decided about it"]


# --- the command -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reclaim_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("logs") / "reclaim.avro"
    write_log_file(path, "reclaim-within-cohort", scenario_log("reclaim_within_cohort"))
    return path


def test_explain_prints_one_line_per_event_and_the_queue(reclaim_file, capsys):
    assert cli.main(["explain", "lender", "--log", str(reclaim_file), "--at", "119", "--why"]) == 0
    out = capsys.readouterr().out
    head = "job lender in cell reclaim-within-cohort: queued (HELD_FOR_PREEMPTION), as of offset 119"
    assert out.splitlines()[0] == head
    assert "CapacityHeld         HELD_FOR_PREEMPTION" in out  # the hold is a decision on its timeline
    assert "queue: position 1 of 1 in its team, 1 of 1 in the cell's admission order" in out
    # The forecast does not read holds yet: it does not see that the held GPUs come free for the lender when the
    # borrower's checkpoint deadline passes (00:20:00), and says the start is unknown.
    assert "estimated start: " in out
    assert "already asked to make room for it: borrower (16 GPUs, checkpoint by 1970-01-01 00:20:00)" in out


def test_explain_json_carries_every_line(reclaim_file, capsys):
    assert cli.main(["explain", "borrower", "--log", str(reclaim_file), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    story, _ = timeline(scenario_log("reclaim_within_cohort"), "borrower")
    assert [line["offset"] for line in data["lines"]] == [line.offset for line in story.lines]
    assert data["state"] == "running" and data["queue"] is None


@pytest.mark.parametrize("args, message", [
    (["explain", "nobody"], "gangway explain: unknown job 'nobody' in "),
    (["explain", "borrower", "--at", "99999"], "gangway explain: offset 99999 is beyond the log of "),
    (["whatif", "--policy", "lifo"], "gangway whatif: unknown policy 'lifo'; known: "),
    (["replay", "state", "--at", "99999"], "gangway replay state: offset 99999 is beyond the log of "),
    (["report", "--team", "nobody"], "gangway report: unknown team 'nobody' in "),
])
def test_bad_input_is_one_clear_line_and_exit_1(reclaim_file, capsys, args, message):
    assert cli.main([*args, "--log", str(reclaim_file)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


@pytest.mark.parametrize("command", [["explain", "x"], ["verify"], ["replay", "state", "--at", "0"],
                                     ["whatif", "--policy", "fifo"], ["report"]])
def test_a_file_that_is_not_an_exported_log_is_one_line_and_exit_1(tmp_path, capsys, command):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a log\n")
    assert cli.main([*command, "--log", str(bogus)]) == 1
    err = capsys.readouterr().err
    assert "is not an exported Gangway log" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["explain"], ["replay", "state"], ["whatif"], ["verify"], ["report"],
                                  ["log", "export"]])
def test_every_audit_command_has_help_with_an_example(argv, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    assert "example: gangway " in capsys.readouterr().out
