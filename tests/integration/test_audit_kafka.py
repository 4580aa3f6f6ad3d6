"""The audit commands give the same answers from a live cell on Kafka (`--cell`) and from its exported log
(`--log`): the four services run as real processes on a real broker, a lender reclaims what a borrower holds,
and explain, why, replay state, whatif, report and verify are asked both ways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events import models as m
from events.logfile import read_log_file
from events.submission import job_submitted
from replay import cli
from replay.source import read_cell
from tests.integration.control_plane import ControlPlane, Operator, read_log

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

T0 = 1_700_000_000_000
MIN = 60_000


class Cell:
    """Writes a cell's inputs with chosen event times."""

    def __init__(self, operator: Operator) -> None:
        self.operator, self.seq = operator, 0

    def envelope(self, at: int, producer: str = "operator") -> m.Envelope:
        self.seq += 1
        return m.Envelope(event_id=f"{producer}-{self.seq}", cell="cell-a", at=T0 + at, producer=producer)

    def write(self, *events: m.Event) -> None:
        self.operator.write(*events)

    def submit(self, job: str, team: str, workers: int, at: int) -> None:
        self.write(job_submitted(job, team, workers, 8, "H100", cell="cell-a", at=T0 + at, event_id=f"submit-{job}",
                                 time_limit_ms=120 * MIN))

    def workers(self, placed: m.JobPlaced, kind: type, at: int, **fields) -> None:
        self.write(*[kind(envelope=self.envelope(at, f"agent/{a.node}"), job_id=placed.job_id, attempt=placed.attempt,
                          worker=a.worker, node=a.node, **fields) for a in placed.assignments])


def placed(logged, job: str) -> m.JobPlaced | None:
    return next((e for _, e in reversed(logged) if isinstance(e, m.JobPlaced) and e.job_id == job), None)


def test_every_audit_answers_alike_from_the_live_cell_and_its_exported_log(kafka_bootstrap, gangway_topics,
                                                                           tmp_path: Path, capsys):
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.start_all()
    cell = Cell(Operator(kafka_bootstrap, gangway_topics))
    try:
        e = cell.envelope
        cell.write(m.CellConfigured(envelope=e(0), topology_levels=["rack"]),
                   *[m.NodeRegistered(envelope=e(0), node=f"n{i}", gpu_type="H100", gpus=8,
                                      labels={"rack": f"r{i // 2}"}) for i in range(4)],
                   m.CohortDefined(envelope=e(0), cohort="lab"),
                   m.TeamDefined(envelope=e(0), team="nlp", cohort="lab"),
                   m.QuotaSet(envelope=e(0), team="nlp", gpu_type="H100", nominal=0),
                   m.TeamDefined(envelope=e(0), team="vision", cohort="lab"),
                   m.QuotaSet(envelope=e(0), team="vision", gpu_type="H100", nominal=32))
        # 24 GPUs, all borrowed from vision: a reclaim never leaves a team below its nominal, so with nominal 0 the
        # borrower's whole gang can be taken back
        cell.submit("borrower", "nlp", 3, at=1000)
        logged = read_log(kafka_bootstrap, gangway_topics, until=lambda events: placed(
            [(0, x) for x in events], "borrower") is not None)
        cell.workers(placed(logged, "borrower"), m.WorkerStarted, at=2000)
        cell.write(m.Tick(envelope=e(20 * MIN, "clock")))  # past the borrower's protected first minutes
        cell.submit("lender", "vision", 2, at=20 * MIN + 1000)  # within its nominal: reclaims
        cell.submit("waiting", "nlp", 1, at=20 * MIN + 2000)
        logged = read_log(kafka_bootstrap, gangway_topics, until=lambda events: any(
            isinstance(x, m.PreemptionRequested) for x in events))
        cell.write(m.CheckpointCompleted(envelope=e(20 * MIN + 30_000, "agent/n0"), job_id="borrower", attempt=1,
                                         checkpoint_id="borrower/1", progress_ms=20 * MIN))
        logged = read_log(kafka_bootstrap, gangway_topics, until=lambda events: placed(
            [(0, x) for x in events], "lender") is not None)
        cell.workers(placed(logged, "lender"), m.WorkerStarted, at=20 * MIN + 32_000)
        cell.write(m.Tick(envelope=e(21 * MIN, "clock")))
        end = len(read_log(kafka_bootstrap, gangway_topics, timeout=10))
    finally:
        assert set(plane.stop_all().values()) == {0}, plane.tails()

    exported = tmp_path / "cell-a.avro"
    common = ["--bootstrap-servers", kafka_bootstrap]
    assert cli.main(["log", "export", "--cell", "cell-a", "--out", str(exported), *common]) == 0
    assert capsys.readouterr().out.startswith("wrote ")
    assert len(read_log_file(exported).records) >= end - 1
    kinds = {type(x) for _, x in read_log_file(exported).records}
    assert {m.PreemptionRequested, m.JobPreempted, m.JobAdmitted, m.JobPlaced} <= kinds

    def both(*argv: str) -> tuple[str, str]:
        assert cli.main([*argv, "--cell", "cell-a", *common]) in (0, 1)
        live = capsys.readouterr().out
        assert cli.main([*argv, "--log", str(exported)]) in (0, 1)
        return live, capsys.readouterr().out

    for argv in (["explain", "borrower"], ["explain", "lender", "--why"], ["explain", "waiting", "--why", "-o", "json"],
                 ["replay", "state", "--at", "20", "-o", "json"], ["replay", "state", "--at", "2023-11-14T22:33:21Z"],
                 ["whatif", "--policy", "static", "-o", "json"], ["report", "-o", "json"]):
        live, filed = both(*argv)
        assert live == filed and live.strip(), argv
    # The state at an early offset reads the live cell only that far; an offset beyond the log is refused either way.
    early = read_cell("cell-a", kafka_bootstrap, to=20)
    assert early.last_offset == 20 and max(offset for offset, _ in early.records) <= 20
    beyond = str(len(read_log_file(exported).records) + 1_000)
    for source in (["--cell", "cell-a", *common], ["--log", str(exported)]):
        assert cli.main(["replay", "state", "--at", beyond, *source]) == 1
        assert f"offset {beyond} is beyond the log of" in capsys.readouterr().err
    borrower = json.loads(both("explain", "borrower", "-o", "json")[0])
    events = [line["event"] for line in borrower["lines"]]
    assert events[:4] == ["JobSubmitted", "JobAdmitted", "JobPlaced", "WorkerStarted"]
    assert {"PreemptionRequested", "CheckpointCompleted", "JobPreempted"} <= set(events)
    live, filed = both("verify")
    assert live.splitlines()[:4] == filed.splitlines()[:4] and "every decision reproduced" in live + filed
