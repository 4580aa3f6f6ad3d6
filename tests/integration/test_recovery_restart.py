"""Recovery down for longer than the heartbeat timeout, at real-time speed: when it comes back it sees the
heartbeats it would have seen running (it reads the heartbeat topic from where its store left off), so the
live nodes are not failed; the node that really died meanwhile is, and its job is interrupted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from events import models as m
from events.reader import read_log as whole_log
from events.submission import job_submitted
from tests.integration.control_plane import ControlPlane, Operator, read_log

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
POLICY = "gangway-2+recovery.heartbeat_timeout_ms=6000"  # a short timeout keeps the test short
NODES = [f"cell-a-b0-r0-n{i}" for i in range(4)]


def test_a_restarted_recovery_fails_only_the_node_that_died(kafka_bootstrap, gangway_topics, tmp_path: Path):
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    epoch = repr(time.time())
    try:
        plane.command("intake", "run", "intake")  # takes the fleet's facts into the cell's log
        for service in ("admitter", "placer", "preemptor", "recovery"):
            plane.command(service, "run", service, "--state-dir", str(tmp_path / "main"), "--policy", POLICY, "-v")
        plane.command("clock", "run", "clock", "--tick-interval", "0.5", "--epoch", epoch)
        plane.command("fleet", "fleet", "--nodes", "4", "--nodes-per-rack", "4", "--heartbeat-every", "1s",
                      "--epoch", epoch, "--fail-node", NODES[3], "--fail-at", "6")
        operator = Operator(kafka_bootstrap, gangway_topics)
        operator.write(m.TeamDefined(envelope=operator.envelope(), team="nlp"),
                       m.QuotaSet(envelope=operator.envelope(), team="nlp", gpu_type="H100", nominal=1000))
        read_log(kafka_bootstrap, gangway_topics, timeout=120, or_fail=lambda: plane.tails(20),
                 until=lambda events: sum(isinstance(e, m.NodeRegistered) for e in events) == 4)
        # One worker per node, so the lost node holds part of it; stamped now, as the clock ticks by the wall clock
        # (a stamp an hour before the cell's clock is refused, and the clock may tick before it lands).
        operator.write(job_submitted("wide", "nlp", 4, 8, "H100", cell="cell-a", at=int(time.time() * 1000),
                                     producer="launcher", event_id="launcher-wide"))
        read_log(kafka_bootstrap, gangway_topics, timeout=120, or_fail=lambda: plane.tails(20), until=lambda events: any(
            isinstance(e, m.WorkerStarted) and e.job_id == "wide" for e in events))
        plane.kill("recovery")  # down for 15 s: over twice the timeout; the node dies 6 s after the job starts
        time.sleep(15)
        plane.command("recovery", "run", "recovery", "--state-dir", str(tmp_path / "main"), "--policy", POLICY, "-v")
        read_log(kafka_bootstrap, gangway_topics, timeout=120, or_fail=lambda: plane.tails(20), until=lambda events: any(
            isinstance(e, m.JobInterrupted) and e.job_id == "wide" for e in events))
        time.sleep(8)  # longer than the timeout again, with recovery running
        whole = whole_log("cell-a", kafka_bootstrap, all_cells=["cell-a"], topics=gangway_topics)  # as it stands
        logged = [(r.offset, r.event) for r in whole if r.event is not None]
    finally:
        plane.stop_all()
    failed = [e.node for _, e in logged if isinstance(e, m.NodeFailed)]
    assert failed == [NODES[3]], f"only the node that died is failed:\n{plane.tails()}"
    interrupted = [e for _, e in logged if isinstance(e, m.JobInterrupted)]
    assert [(e.job_id, e.node) for e in interrupted] == [("wide", NODES[3])]
