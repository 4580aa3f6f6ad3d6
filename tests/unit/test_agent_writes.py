"""The node agents' writes through a broker's outage (the real agent's and the simulated fleet's): what the brokers
do not take goes back to the agent and is written with the next events, in order, so a worker's exit or checkpoint
is never dropped; being fenced by another agent of the same node ends it."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from events.log import ProducerFenced
from services.agent import fleet_cli
from services.agent.agent_cli import _write
from services.agent.fleet import Fleet, FleetSpec
from services.agent.real import AgentConfig, NodeAgent
from tests.builders import tick


class FlakyProducer:
    """EventProducer.write that fails the first `failures` times with `error`, then records what it wrote."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error = failures, error
        self.written: list[tuple[list[str], list[str]]] = []

    def write(self, events, heartbeats, give_up_after_s: float) -> None:
        if self.failures:
            self.failures -= 1
            raise self.error
        self.written.append(([e.envelope.event_id for e in events], [e.envelope.event_id for e in heartbeats]))


def agent(tmp_path: Path) -> NodeAgent:
    return NodeAgent(AgentConfig("n1", 4, "H100", "r1", "b1", tmp_path), "test-cell")


def ids(*events) -> list[str]:
    return [e.envelope.event_id for e in events]


def test_events_the_brokers_did_not_take_are_written_with_the_next(tmp_path: Path):
    node = agent(tmp_path)
    producer = FlakyProducer(1, KafkaException(KafkaError(KafkaError._TIMED_OUT, "no broker")))
    node.outbox += [(tick(1), False), (tick(2), True)]  # a fact and a heartbeat
    assert not _write(producer, node)
    node.outbox += [(tick(3), False)]
    assert _write(producer, node)
    assert producer.written == [(ids(tick(1), tick(3)), ids(tick(2)))]
    assert node.outbox == []


def test_an_agent_fenced_by_another_of_its_node_stops(tmp_path: Path):
    node = agent(tmp_path)
    node.outbox += [(tick(1), False)]
    with pytest.raises(ProducerFenced):
        _write(FlakyProducer(1, ProducerFenced("another agent of n1 took over")), node)


def test_the_fleet_keeps_what_the_brokers_did_not_take(tmp_path: Path):
    fleet = Fleet(["cell-a"], FleetSpec(nodes=1))
    fleet.register(1_000)
    registered = [e for e, _ in fleet.cells["cell-a"].outbox]
    producer = FlakyProducer(1, KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "no broker")))
    fleet_cli._write(fleet, {"cell-a": producer})
    assert producer.written == []
    fleet_cli._write(fleet, {"cell-a": producer})
    assert producer.written == [(ids(*registered), [])]
