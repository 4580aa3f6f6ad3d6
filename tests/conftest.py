"""Shared fixtures: one real Kafka per test session (env, Docker, or the local jars) and per-test isolated topics."""

from __future__ import annotations

import atexit
import os
import re
import socket
import uuid
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from events.auth import ADMIN, SIGNING_KEY_ENV, WRITER_KEYS_ENV, WRITER_KEYS_FILE, client_config, load_store
from events.broker import KafkaSetupError, LocalKafka, PortInUse, cluster_node_ids, find_free_base_port, quiet_logger
from events.topics import TopicNames, cells_from_env, ensure_topics, topic_names

KAFKA_IMAGE = "apache/kafka:4.1.1"


def docker_answers(timeout: float = 1.0) -> bool:
    """True if a Docker daemon answers `GET /_ping` within `timeout` (a raw request: no client, no long waits)."""
    url = urlparse(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
    try:
        if url.scheme == "unix":
            if not os.path.exists(url.path):
                return False
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(url.path)
        elif url.scheme == "tcp" and url.hostname:
            sock = socket.create_connection((url.hostname, url.port or 2375), timeout=timeout)
        else:
            return False
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(256)
    except OSError:
        return False


def _docker_kafka() -> Iterator[str]:
    """A single-node apache/kafka container; the host port is fixed up front because Kafka must advertise it."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.docker_client import DockerClient
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    port = find_free_base_port(1)
    host = DockerClient().host()
    container = (
        DockerContainer(KAFKA_IMAGE)
        .with_bind_ports(port, port)
        .with_envs(
            KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
            KAFKA_LISTENERS=f"PLAINTEXT://:{port},CONTROLLER://:9093",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://{host}:{port}",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
        )
        .waiting_for(LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(180))
    )
    container.start()
    try:
        yield f"{host}:{port}"
    finally:
        container.stop()


def use_admin_of(kafka: LocalKafka, env=None) -> None:
    """Every Gangway client of this process (and the processes it starts) authenticates as the cluster's admin,
    a super user (events/auth.py); a plaintext cluster needs nothing."""
    credentials = kafka.admin_credentials
    if credentials is None:
        return
    store = load_store(kafka.data_dir)
    settings = {"GANGWAY_KAFKA_USER": credentials.user, "GANGWAY_KAFKA_PASSWORD": credentials.password}
    if store.get("signing"):  # and signs what it writes on the log as the admin; readers check the writers' keys
        settings[SIGNING_KEY_ENV] = f"{ADMIN}:{store['principals'][ADMIN]['signing_key']}"
        settings[WRITER_KEYS_ENV] = str(kafka.data_dir / WRITER_KEYS_FILE)
    for name, value in settings.items():
        if env is None:  # the session's broker: for the whole session
            os.environ[name] = value
        else:  # a test's own broker: a pytest MonkeyPatch, undone after the test
            env.setenv(name, value)


def _local_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 1-node cluster from the Maven Central jars, fresh data dir, free ports in 19000-19999; stopped at session end.
    SASL/SCRAM and ACLs are on, as `gangway kafka start` has them; the tests' clients are the admin (use_admin_of),
    tests of tenancy take narrower principals."""
    data_dir = tmp_path_factory.mktemp("kafka")
    for attempt in range(3):  # a free port can be taken between the check and the JVM's bind
        kafka = LocalKafka(data_dir=data_dir, nodes=1, port=find_free_base_port(2))
        atexit.register(kafka.stop)  # belt and braces: the finally below is skipped if pytest is killed hard
        try:
            kafka.start(timeout=120)
            break
        except PortInUse:
            if attempt == 2:
                raise
    use_admin_of(kafka)
    os.environ["GANGWAY_TEST_KAFKA_DATA"] = str(data_dir)  # where the tenancy tests find the principal store
    try:
        yield kafka.bootstrap_servers
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of a real Kafka: $KAFKA_BOOTSTRAP_SERVERS, else Docker (testcontainers), else the local jars.
    `GANGWAY_TEST_KAFKA=local` skips the Docker probe. Never skips: a broker that cannot start fails the tests."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    elif os.environ.get("GANGWAY_TEST_KAFKA") != "local" and docker_answers():
        yield from _docker_kafka()
    else:
        try:
            yield from _local_kafka(tmp_path_factory)
        except KafkaSetupError as error:
            pytest.fail(f"could not start the local Kafka for the kafka tests: {error}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_replication_factor(kafka_bootstrap: str) -> int:
    """3 on a cluster of 3+ brokers, else 1: what Gangway's topics use there."""
    brokers = cluster_node_ids(kafka_bootstrap, timeout=10)
    assert brokers, f"Kafka at {kafka_bootstrap} does not answer"
    return 3 if len(brokers) >= 3 else 1


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str):  # -> confluent_kafka.admin.AdminClient
    from confluent_kafka.admin import AdminClient

    return AdminClient({**client_config(kafka_bootstrap), "logger": quiet_logger()})


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kafka_admin) -> Iterator[str]:
    """A unique topic-name prefix for this test, also set as $GANGWAY_TOPIC_PREFIX; its topics are deleted afterwards."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-")
    prefix = f"t.{slug}.{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("GANGWAY_TOPIC_PREFIX", prefix)
    yield prefix
    # Best effort: on a shared (env) cluster, leave no test topics behind.
    leftovers = [name for name in kafka_admin.list_topics(timeout=10).topics if name.startswith(prefix)]
    if leftovers:
        for future in kafka_admin.delete_topics(leftovers, request_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception:  # noqa: BLE001 - cleanup must not fail a test
                pass


@pytest.fixture
def gangway_topics(topic_prefix: str, kafka_admin, kafka_replication_factor: int) -> TopicNames:
    """Fresh Gangway topics (events, heartbeats, dead letters) under this test's prefix, one partition per cell
    of $GANGWAY_CELLS (default cell-a); returns their names."""
    ensure_topics(kafka_admin, cells_from_env(), kafka_replication_factor, prefix=topic_prefix)
    return topic_names(topic_prefix)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `pure` patch the core's source to compare it with a reference walk; a compiled core does not see
    such patches (events/compiled.py), so where it runs they are skipped here and run in compose/test.sh's second
    pass, with GANGWAY_PURE=1."""
    from events import compiled

    both = [item.nodeid for item in items if "pure" in item.keywords and "kafka" in item.keywords]
    if both:  # a broker test must run in the main pass, never be skipped for the pure one
        raise pytest.UsageError(f"tests marked both pure and kafka: {', '.join(both)}")
    if compiled.install() != "compiled":
        return
    skip = pytest.mark.skip(reason="patches the core's source: runs in compose/test.sh's pass with GANGWAY_PURE=1")
    for item in items:
        if "pure" in item.keywords:
            item.add_marker(skip)
