"""Requests that cannot be right write nothing: a bad document, an unknown team or priority class, a spec for
another cell, a job id taken by another spec, cancelling an unknown job. Each is one clear line and exit 1
from the `gangway` command; the same submission twice is one job. Real broker, no services needed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from events import models as m
from events.log import ensure_input_topics
from events.reader import LogReader, read_log
from services.launcher import Client, LauncherError
from tests.integration.control_plane import ControlPlane, Operator, group_assignments
from tests.integration.launcher_cell import ROOT, TEAMS

pytestmark = pytest.mark.kafka

JOB = {"kind": "Job", "metadata": {"name": "train", "team": "vision"},
       "spec": {"workers": 2, "gpus_per_worker": 1, "gpu_type": "CPU", "command": ["python", "train.py"]}}


def gangway(*args: str, cwd: Path, bootstrap: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replay.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "KAFKA_BOOTSTRAP_SERVERS": bootstrap}, timeout=60)


def end_offset(client: Client) -> int:
    with LogReader(["cell-a"], client.bootstrap, topics=client.topics) as reader:
        return reader.end_offsets()["cell-a"]


def write(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def variant(**spec) -> dict:
    return {**JOB, "spec": {**JOB["spec"], **spec}}


def assigned_topics(bootstrap: str, group: str) -> set[str]:
    """The topics the group's members hold."""
    return {tp.topic for held in group_assignments(bootstrap, group) for tp in held}


@pytest.fixture
def intake(kafka_bootstrap, gangway_topics, topic_prefix, tmp_path: Path):
    """The intake, which takes the launcher's input topics into the cell's log, holding the operators' and team
    vision's input topics before the test writes to them: the launcher waits only INTAKE_WAIT_S (30 s) for what it
    wrote to be taken in, which an intake still starting (imports, joining its group, finding a new input topic,
    a rebalance) could use up on a loaded machine."""
    inputs = {gangway_topics.operator_input, gangway_topics.team_input("vision")}
    ensure_input_topics(kafka_bootstrap, None, sorted(inputs))
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.start("intake")
    try:
        deadline = time.monotonic() + 120
        while (held := assigned_topics(kafka_bootstrap, f"{topic_prefix}gangway-intake")) != inputs:
            assert time.monotonic() < deadline, (f"the intake did not take {sorted(inputs)} within 120 s (it holds "
                                                 f"{sorted(held)}):\n{plane.tails(30)}")
            time.sleep(0.5)
    except BaseException:
        plane.stop_all()
        raise
    yield plane
    assert plane.stop_all() == {"intake": 0}, plane.tails()


def test_refused_requests_write_nothing(kafka_bootstrap, gangway_topics, intake, tmp_path: Path):
    operator = Operator(kafka_bootstrap, gangway_topics)
    operator.write(m.CellConfigured(envelope=operator.envelope(), topology_levels=["block", "rack"]),
                   m.NodeRegistered(envelope=operator.envelope(), node="n1", gpu_type="CPU", gpus=2,
                                    labels={"block": "b1", "rack": "r1"}))
    client = Client(kafka_bootstrap)
    assert client.apply([TEAMS]) == [("cohort/lab", "configured"), ("priorityclass/research", "configured"),
                                     ("priorityclass/urgent", "configured"), ("team/nlp", "configured"),
                                     ("team/vision", "configured")]
    assert {outcome for _, outcome in client.apply([TEAMS])} == {"unchanged"}
    before = end_offset(client)

    refused = {
        "bad.yaml": (variant(workers=0), "bad.yaml: spec.workers: must be ≥ 1"),
        "team.yaml": ({**JOB, "metadata": {"name": "t", "team": "robotics"}}, "team 'robotics' is not defined"),
        "class.yaml": (variant(priority_class="gold"), "priority class 'gold' is not defined"),
        "cell.yaml": ({**JOB, "metadata": {**JOB["metadata"], "cell": "cell-b"}}, "the spec is for cell cell-b"),
        "gpu.yaml": (variant(gpu_type="B200"), "no 'B200' nodes in cell cell-a"),
        "level.yaml": (variant(topology={"required": "row"}), "topology level 'row' is not one of: block, rack, node"),
    }
    for name, (document, message) in refused.items():
        result = gangway("submit", str(write(tmp_path / name, document)), cwd=tmp_path, bootstrap=kafka_bootstrap)
        assert result.returncode == 1, (name, result.stdout, result.stderr)
        assert message in result.stderr and result.stdout == "", (name, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert gangway("submit", cwd=tmp_path, bootstrap=kafka_bootstrap).returncode == 2, "usage errors exit 2"
    assert gangway("cancel", "nobody", cwd=tmp_path, bootstrap=kafka_bootstrap).returncode == 1
    assert end_offset(client) == before, "nothing was written"

    # The same submission twice is one job; the same id with another spec is refused, naming what differs.
    first = gangway("submit", str(write(tmp_path / "job.yaml", JOB)), cwd=tmp_path, bootstrap=kafka_bootstrap)
    assert (first.returncode, first.stdout) == (0, "job/train submitted\n"), first.stderr
    again = gangway("submit", str(tmp_path / "job.yaml"), cwd=tmp_path, bootstrap=kafka_bootstrap)
    assert (again.returncode, again.stdout) == (0, "job/train unchanged\n"), again.stderr
    written = end_offset(client)
    other = gangway("submit", str(write(tmp_path / "other.yaml", variant(workers=3))), cwd=tmp_path, bootstrap=kafka_bootstrap)
    assert other.returncode == 1 and "job id train is taken by another spec (workers: 2 -> 3)" in other.stderr
    with pytest.raises(LauncherError, match="taken by another spec"):
        client.submit(variant(workers=3))
    assert client.submit(variant(working_dir=str(tmp_path))) == "train", "the same spec, submitted from elsewhere"
    assert end_offset(client) == written
    submissions = [r.event for r in read_log("cell-a", kafka_bootstrap, topics=gangway_topics)
                   if isinstance(r.event, m.JobSubmitted)]
    assert [(s.job_id, s.workers, s.working_dir) for s in submissions] == [("train", 2, str(tmp_path))]

    # A request id names a job idempotently: the id derives from it.
    retried = [client.submit(variant(), request_id="req-7") for _ in range(2)]
    assert retried[0] == retried[1] and retried[0].startswith("train-")
    assert end_offset(client) > written
    client.close()
