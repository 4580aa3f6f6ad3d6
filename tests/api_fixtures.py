"""A read model of a real log, for API tests without a broker: the four deciders play a busy cell in virtual
time (tests/builders.py) and the projector folds the log they wrote, batch by batch."""

from __future__ import annotations

from pathlib import Path

from events import models as m
from projections.read_model import ReadModel
from projections.readmodel.projector import Projector
from projections.readmodel.store import ReadModelStore
from replay.api.auth import Tokens
from tests import builders as b

CELL = "test-cell"
OPERATOR_TOKEN = "operator-token-0001"
NLP_TOKEN = "nlp-token-00000001"
CV_TOKEN = "cv-token-000000001"
TOKENS = Tokens.parse({"operator": OPERATOR_TOKEN, "teams": {"nlp": NLP_TOKEN, "cv": [CV_TOKEN]}})


def busy_cell_log(jobs: int = 40) -> list[m.Event]:
    """Two blocks of two racks of two 8-GPU nodes, teams nlp and cv in one cohort, three priorities, `jobs` gangs
    with time limits: some placed, some queued (with estimates), some cancelled, one rejected; a cordoned node."""
    events = [b.topology("block", "rack"),
              *[b.node(f"n{i}", block=f"b{i // 4}", rack=f"r{i // 2 % 2}") for i in range(8)],
              b.team("nlp", cohort="all"), b.quota("nlp", 32), b.team("cv", cohort="all"), b.quota("cv", 32),
              b.priority("high", 10), b.priority("low", -5)]
    for i in range(jobs):
        events.append(b.job(f"j{i:03d}", workers=1 + i % 2, gpus=8, team=("nlp", "cv")[i % 3 == 0], at=1000 * i,
                            priority_class=(None, "high", "low")[i % 3], time_limit_ms=3_600_000 * (1 + i % 3)))
    events += [b.cancel(f"j{i:03d}", at=1000 * jobs + i) for i in range(0, jobs, 7)]
    events.append(b.job("stranger", team="nobody", at=1000 * jobs + 100))
    events.append(m.NodeCordoned(envelope=b.env(1000 * jobs + 200, "operator"), node="n7"))
    return b.fold(*events).log


def projector_over(path: Path, log: list[m.Event], batch: int = 25) -> Projector:
    projector = Projector(ReadModelStore(path), [CELL])
    records = list(enumerate(log))
    for i in range(0, len(records), batch):
        projector.fold(CELL, records[i:i + batch])
    return projector


def every_job(log) -> list:
    """Every job the log made, live and ended (the cell's state lets ended jobs go; a read model keeps them)."""
    model = ReadModel()
    for offset, event in enumerate(log):
        model.fold(offset, event)
    return model.jobs()
