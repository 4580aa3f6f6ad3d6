"""The whole system on a real broker: the four services, the clock, a simulated fleet and a trace
load as processes at 10x event time. Trace jobs run to success; a node lost under a job is found
silent by recovery, and the job is interrupted, requeued from its checkpoint and placed again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from events import models as m
from events.models import Reason
from services.policy import DEFAULT_POLICY
from tests.integration.control_plane import ControlPlane, count, read_log

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SPEEDUP = "10"
LOST = "cell-a-b0-r0-n0"
# A tiny ITP-format slice: two whole-node jobs fill the two nodes, a small one waits for room.
TRACE = """job_id,submission_time,duration,num_gpu
a,1000,60,8
b,1002,60,8
c,1004,20,4
"""
JOBS = ("cluster99-0", "cluster99-1", "cluster99-2")


def succeeded(events: list[m.Event]) -> bool:
    return {e.job_id for e in events if isinstance(e, m.JobSucceeded)} >= set(JOBS)


def timeline(events: list[m.Event]) -> str:
    """The log without ticks, one line per event (event seconds since the first), for failure messages."""
    origin = events[0].at if events else 0
    return "\n".join(f"{(e.at - origin) / 1000:7.1f} {type(e).__name__} {getattr(e, 'job_id', getattr(e, 'node', ''))} "
                     f"{e.envelope.reason.value}" for e in events if not isinstance(e, m.Tick))


def test_trace_jobs_run_on_the_fleet_and_survive_a_lost_node(kafka_bootstrap, gangway_topics, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "cluster99.csv").write_text(TRACE)
    monkeypatch.setenv("GANGWAY_EPOCH", repr(time.time()))  # one event-time origin for clock, fleet and load
    # 120 s of silence (12 s of wall clock at 10x, not the default's 3 s) before a node fails: a loaded machine's
    # stall of the fleet's heartbeats must not fail the healthy node too (once the lost node is failed, the healthy
    # one is the only node heard from, and its silence alone would fail it)
    plane = ControlPlane(kafka_bootstrap, tmp_path,
                         policy=f"{DEFAULT_POLICY.version}+recovery.heartbeat_timeout_ms=120000")
    plane.start_all()
    plane.command("clock", "run", "clock", "--tick-interval", "0.2", "--speedup", SPEEDUP)
    plane.command("fleet", "fleet", "--nodes", "2", "--nodes-per-rack", "2", "--speedup", SPEEDUP,
                  "--heartbeat-every", "5s", "--checkpoint-every", "10s", "--repair-time", "10m",
                  "--fail-node", LOST, "--fail-at", "15", "-v")
    try:
        # The load comes once the nodes are there: a gang larger than a cell without nodes is rejected.
        read_log(kafka_bootstrap, gangway_topics, timeout=120, or_fail=lambda: plane.tails(20),
                 until=lambda events: sum(isinstance(e, m.NodeRegistered) for e in events) == 2)
        plane.command("load", "load", "--trace", str(tmp_path / "cluster99.csv"), "--speedup", SPEEDUP,
                      "--define-teams", "--gpus", "16")
        logged = read_log(kafka_bootstrap, gangway_topics, until=succeeded, timeout=120)
    finally:
        exits = plane.stop_all()
    assert exits == dict.fromkeys(exits, 0), exits
    events = [e for _, e in logged]
    assert succeeded(events), f"{timeline(events)}\n{plane.tails(20)}"
    assert sorted(e.node for e in events if isinstance(e, m.NodeRegistered)) == [LOST, "cell-a-b0-r0-n1"]
    submitted = {e.job_id: e for e in events if isinstance(e, m.JobSubmitted)}
    assert submitted["cluster99-0"].team == "cluster99" and submitted["cluster99-0"].labels == {"duration_ms": "60000"}

    # The lost node: silent past the threshold, so recovery declares it failed.
    failed = [e for e in events if isinstance(e, m.NodeFailed)]
    assert [(f.node, f.envelope.reason) for f in failed] == [(LOST, Reason.HEARTBEAT_MISSED)]
    victim = next(e.job_id for e in events if isinstance(e, m.JobPlaced) and e.assignments[0].node == LOST)
    interrupted = [e for e in events if isinstance(e, m.JobInterrupted)]
    assert [(e.job_id, e.attempt, e.node) for e in interrupted] == [(victim, 1, LOST)]
    requeued, = [e for e in events if isinstance(e, m.JobRequeued)]
    assert (requeued.job_id, requeued.attempt) == (victim, 2)
    assert requeued.resume_checkpoint_id is not None and requeued.resume_checkpoint_id.startswith(f"{victim}/a1/")
    again = [e for e in events if isinstance(e, m.JobPlaced) and e.job_id == victim and e.attempt == 2]
    assert again and {a.node for a in again[0].assignments} == {"cell-a-b0-r0-n1"}
    exits_of_victim = [e.attempt for e in events if isinstance(e, m.WorkerExited) and e.job_id == victim]
    assert exits_of_victim == [2], "the attempt on the lost node never reports"

    # Everyone else: submitted -> placed -> running -> succeeded, once.
    for job in JOBS:
        assert count(logged, m.JobSubmitted, job) == 1 and count(logged, m.JobSucceeded, job) == 1
        assert count(logged, m.JobPlaced, job) == (2 if job == victim else 1)
        assert count(logged, m.WorkerStarted, job) >= 1
    ids = [e.envelope.event_id for e in events]
    assert len(ids) == len(set(ids)), "no event written twice"
