"""Real brokers: Gangway's topics on the session broker, a 3-node cluster with acks=all, persistence, port clashes."""

from __future__ import annotations

import contextlib
import socket
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from events.auth import client_config
from events.broker import LocalKafka, PortInUse, find_free_base_port, port_is_free, quiet_logger
from events.topics import TopicError, TopicNames, cell_partition, cells_from_env, describe_topics, ensure_topics
from tests.conftest import use_admin_of

pytestmark = pytest.mark.kafka


def produce_one(bootstrap: str, topic: str, partition: int, value: bytes, **config: object) -> Message:
    delivered: list[tuple[KafkaError | None, Message]] = []
    producer = Producer({**client_config(bootstrap), "logger": quiet_logger(), **config})
    producer.produce(topic, value=value, key=b"k", partition=partition, on_delivery=lambda e, m: delivered.append((e, m)))
    assert producer.flush(30) == 0, "record not delivered within 30 s"
    (error, message), = delivered
    assert error is None, error
    return message


def read_all(bootstrap: str, topic: str, partition: int, expected: int, timeout: float = 30.0) -> list[bytes]:
    consumer = Consumer({**client_config(bootstrap), "group.id": f"g-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "logger": quiet_logger()})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    try:
        for message in iter(lambda: consumer.poll(timeout), None):  # stops on the first empty poll
            assert message.error() is None, message.error()
            values.append(message.value())
            if len(values) >= expected:
                break
    finally:
        consumer.close()
    return values


def test_fixture_broker_gets_gangway_topics_idempotently(kafka_admin: AdminClient, kafka_replication_factor: int,
                                                         topic_prefix: str) -> None:
    cells = ("cell-a", "cell-b", "cell-c")
    first = ensure_topics(kafka_admin, cells, kafka_replication_factor)
    second = ensure_topics(kafka_admin, cells, kafka_replication_factor)  # already there: no error, same catalogue
    assert first == second
    assert all(spec.name.startswith(topic_prefix) for spec in first)
    events, heartbeats, deadletter = describe_topics(kafka_admin, first)
    assert (events.partitions, heartbeats.partitions, deadletter.partitions) == (3, 3, 1)
    assert {s.replication_factor for s in (events, heartbeats, deadletter)} == {kafka_replication_factor}
    assert events.config == {"retention.ms": "-1", "cleanup.policy": "delete",
                             "min.insync.replicas": str(min(2, kafka_replication_factor)),
                             "unclean.leader.election.enable": "false"}
    assert heartbeats.config["retention.ms"] == "3600000"
    assert deadletter.config["retention.ms"] == "2592000000"
    with pytest.raises(TopicError, match="has 3 partitions but needs 4"):
        ensure_topics(kafka_admin, (*cells, "cell-d"), kafka_replication_factor)


def test_transactions_commit_on_the_fixture_broker(kafka_bootstrap: str, gangway_topics: TopicNames) -> None:
    # A 1-node broker needs RF-1 transaction state: if that were wrong, init_transactions would time out here.
    partition = cell_partition(cells_from_env(), "cell-a")
    producer = Producer({**client_config(kafka_bootstrap), "transactional.id": f"test-{uuid.uuid4().hex}",
                         "transaction.timeout.ms": 10_000, "logger": quiet_logger()})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(gangway_topics.events, key=b"cell-a", value=b"committed", partition=partition)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(gangway_topics.events, key=b"cell-a", value=b"aborted", partition=partition)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(gangway_topics.events, key=b"cell-a", value=b"after", partition=partition)
    producer.commit_transaction(30)
    # read up to the record written after the aborted one: had the aborted one been visible, it would come between
    assert read_all(kafka_bootstrap, gangway_topics.events, partition, expected=2) == [b"committed", b"after"]


def test_three_node_cluster_takes_acks_all_writes_with_min_isr_2(tmp_path: Path, monkeypatch) -> None:
    # The one 3-node test: its own cluster on free ports next to the session broker (3 x -Xmx512m).
    kafka = LocalKafka(data_dir=tmp_path / "kafka3", nodes=3, port=find_free_base_port(6))
    try:
        bootstrap = kafka.start(timeout=150)
        assert kafka.status().up
        use_admin_of(kafka, monkeypatch)
        admin = AdminClient({**client_config(bootstrap), "logger": quiet_logger()})
        specs = ensure_topics(admin, ["cell-a"], replication_factor=3, prefix="rf3.")
        events = describe_topics(admin, specs)[0]
        assert (events.replication_factor, events.config["min.insync.replicas"]) == (3, "2")
        message = produce_one(bootstrap, events.name, 0, b"replicated", acks="all", **{"enable.idempotence": True})
        assert message.offset() == 0
        assert read_all(bootstrap, events.name, 0, expected=1) == [b"replicated"]
    finally:
        kafka.stop()
    assert not kafka.status().nodes[0].alive
    assert all(port_is_free(n.port) for n in kafka.nodes)


def test_data_persists_across_stop_and_start(tmp_path: Path, monkeypatch) -> None:
    data_dir, port = tmp_path / "kafka1", find_free_base_port(2)
    kafka = again = LocalKafka(data_dir=data_dir, port=port)
    try:
        bootstrap = kafka.start(timeout=150)
        use_admin_of(kafka, monkeypatch)
        admin = AdminClient({**client_config(bootstrap), "logger": quiet_logger()})
        events = ensure_topics(admin, ["cell-a"], 1, prefix="persist.")[0]
        produce_one(bootstrap, events.name, 0, b"survives a restart", acks="all")
        cluster_id = kafka.cluster_id
        kafka.stop()
        assert not kafka.status().up

        again = LocalKafka(data_dir=data_dir)  # port and cluster id come from the state file
        assert (again.bootstrap_servers, again.cluster_id) == (bootstrap, cluster_id)
        again.start(timeout=150)
        assert again.start(timeout=10) == bootstrap  # already running: idempotent
        assert read_all(bootstrap, events.name, 0, expected=1) == [b"survives a restart"]
    finally:
        kafka.stop()
        again.stop()


def test_start_reports_a_taken_port(kafka_bootstrap: str, tmp_path: Path) -> None:
    host, _, port = kafka_bootstrap.split(",")[0].rpartition(":")
    with contextlib.ExitStack() as stack:
        if host in ("127.0.0.1", "localhost") and not port_is_free(int(port)):
            taken = int(port)  # the session broker itself holds it
        else:  # a broker elsewhere (env, Docker VM): hold a port ourselves
            taken = find_free_base_port(2)
            squatter = stack.enter_context(socket.socket())
            squatter.bind(("127.0.0.1", taken))
            squatter.listen()
        with pytest.raises(PortInUse) as caught:
            LocalKafka(data_dir=tmp_path / "clash", port=taken).start()
    assert f"port {taken} on 127.0.0.1 is already in use" in str(caught.value)
    assert "\n" not in str(caught.value)
