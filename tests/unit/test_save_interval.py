"""A service saves its store every 2 s, and every 10 s while its own decisions are in flight: each save lifts them
off the state and the next decision lays them all again (services/shell.py)."""

from __future__ import annotations

from projections.cell import CellState
from services.admitter.decide import Admitter
from services.core.replica import Replica
from services.policy import DEFAULT_POLICY
from services.shell import BUSY_SAVE_EVERY_S, SAVE_EVERY_S, save_every_s
from tests.builders import job, node, quota, team, topology


def test_a_replica_with_decisions_in_flight_saves_less_often() -> None:
    replica = Replica(Admitter(), DEFAULT_POLICY, CellState(cell="test-cell"))
    for offset, event in enumerate((topology("rack"), node("n0", rack="r0"), team("nlp"), quota("nlp", 8))):
        replica.consume(offset, event)
    assert save_every_s(replica) == SAVE_EVERY_S == 2.0
    decided = replica.consume(4, job("llm", gpus=8))
    assert decided and save_every_s(replica) == BUSY_SAVE_EVERY_S == 10.0
    for offset, decision in enumerate(decided, 5):  # read back: saved as often as before
        replica.consume(offset, decision)
    assert not replica.assumed and save_every_s(replica) == SAVE_EVERY_S
