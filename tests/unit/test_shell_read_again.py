"""A service whose poll fails on an error a failover explains reads each cell again from just after the last record
its replica folded, rather than polling on past records that poll took from the client and never returned
(services/shell.py); any other error still stops it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from services import shell as shell_module
from services.shell import ServiceShell


class FailingConsumer:
    def __init__(self, error: KafkaError) -> None:
        self.error, self.sought = error, []

    def poll(self, max_records: int, timeout: float) -> list:
        raise KafkaException(self.error)

    def seek_to(self, partition: int, offset: int, topic: str | None = None) -> None:
        self.sought.append((topic or "log", partition, offset))


def shell_with(error: KafkaError, side_input: bool, monkeypatch) -> ServiceShell:
    monkeypatch.setattr(shell_module.time, "sleep", lambda s: None)
    shell = object.__new__(ServiceShell)  # no broker: only the handling of a failed poll is under test
    shell.decider = SimpleNamespace(name="recovery", side_input=frozenset({"NodeHeartbeat"}) if side_input else None)
    shell.topics = SimpleNamespace(heartbeats="heartbeats")
    shell.batch_size = 500
    shell.consumer = FailingConsumer(error)
    shell.runtimes = {
        0: SimpleNamespace(partition=0, replica=SimpleNamespace(offset=41), heartbeat_offset=7),
        2: SimpleNamespace(partition=2, replica=SimpleNamespace(offset=-1), heartbeat_offset=-2),
    }
    return shell


def test_each_cell_is_read_again_from_just_after_what_its_replica_folded(monkeypatch) -> None:
    shell = shell_with(KafkaError(KafkaError._TRANSPORT, "broker gone"), side_input=False, monkeypatch=monkeypatch)
    assert shell.poll_once() == 0
    assert shell.consumer.sought == [("log", 0, 42), ("log", 2, 0)]


def test_heartbeats_are_read_again_from_the_next_one_unread(monkeypatch) -> None:
    shell = shell_with(KafkaError(KafkaError._ALL_BROKERS_DOWN, "all down"), side_input=True, monkeypatch=monkeypatch)
    shell.poll_once()
    assert shell.consumer.sought == [("log", 0, 42), ("heartbeats", 0, 7), ("log", 2, 0), ("heartbeats", 2, -2)]


def test_an_error_no_failover_explains_stops_the_service(monkeypatch) -> None:
    shell = shell_with(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed"), side_input=False,
                       monkeypatch=monkeypatch)
    with pytest.raises(KafkaException):
        shell.poll_once()
    assert shell.consumer.sought == []
