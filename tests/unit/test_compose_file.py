"""compose/docker-compose.yml stays a consistent 3-node KRaft cluster: ids, voters, listeners, ports and RF settings."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import yaml

from events.broker import kafka_version

COMPOSE = Path(__file__).resolve().parents[2] / "compose" / "docker-compose.yml"
NODES = ("kafka-1", "kafka-2", "kafka-3")


def load() -> dict:
    return yaml.safe_load(COMPOSE.read_text())  # PyYAML resolves the `<<:` merge keys like Compose does


def env(service: dict) -> dict[str, str]:
    return {key: str(value) for key, value in service["environment"].items()}


def listener_ports(spec: str) -> dict[str, int]:
    return {name: int(port) for name, port in re.findall(r"(\w+)://[^:,]*:(\d+)", spec)}


def test_three_kafka_nodes_with_distinct_ids_on_the_pinned_image() -> None:
    services = load()["services"]
    assert set(NODES) <= set(services)
    assert sorted(int(env(services[n])["KAFKA_NODE_ID"]) for n in NODES) == [1, 2, 3]
    assert {services[n]["image"] for n in NODES} == {f"apache/kafka:{kafka_version()}"}
    assert len({env(services[n])["CLUSTER_ID"] for n in NODES}) == 1
    cid = env(services["kafka-1"])["CLUSTER_ID"]
    raw = base64.urlsafe_b64decode(cid + "==")
    assert len(raw) == 16 and base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == cid


def test_voters_name_every_node_at_its_controller_listener() -> None:
    services = load()["services"]
    for name in NODES:
        e = env(services[name])
        assert e["KAFKA_PROCESS_ROLES"] == "broker,controller"
        controller_port = listener_ports(e["KAFKA_LISTENERS"])[e["KAFKA_CONTROLLER_LISTENER_NAMES"]]
        voters = dict(v.split("@") for v in e["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(","))
        assert voters == {str(i): f"{n}:{controller_port}" for i, n in enumerate(NODES, start=1)}
        assert voters[e["KAFKA_NODE_ID"]] == f"{services[name]['hostname']}:{controller_port}"


def test_replication_settings_survive_one_lost_node() -> None:
    for name in NODES:
        e = env(load()["services"][name])
        assert e["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert e["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert e["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert e["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert e["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert e["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"


def test_ports_and_advertised_listeners_agree() -> None:
    services = load()["services"]
    host_ports = []
    for name in NODES:
        service, e = services[name], env(services[name])
        listeners = listener_ports(e["KAFKA_LISTENERS"])
        advertised = dict(re.findall(r"(\w+)://([^,]+)", e["KAFKA_ADVERTISED_LISTENERS"]))
        assert set(listeners) == set(dict(p.split(":") for p in e["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")))
        assert advertised["INTERNAL"] == f"{service['hostname']}:{listeners['INTERNAL']}"
        (mapping,) = service["ports"]
        host_ip, host_port, container_port = mapping.split(":")
        host_port, container_port = int(host_port), int(container_port)
        assert host_ip == "127.0.0.1", "published on loopback only: the Docker stack has no SASL or ACLs"
        assert container_port == listeners["HOST"]
        assert advertised["HOST"] == f"localhost:{host_port}"
        assert e["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        host_ports.append(host_port)
    assert host_ports == [9092, 9094, 9096]  # the layout of `gangway kafka start --nodes 3`


def test_gangway_service_is_optional_and_uses_the_internal_listeners() -> None:
    services = load()["services"]
    gangway = services["gangway"]
    assert gangway["profiles"] == ["app"]
    assert gangway["command"][:3] == ["gangway", "run", "all"]
    assert gangway["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == ",".join(f"{n}:19092" for n in NODES)
    assert set(gangway["depends_on"]) == set(NODES)
    assert (COMPOSE.parent.parent / gangway["build"]["dockerfile"]).is_file()
