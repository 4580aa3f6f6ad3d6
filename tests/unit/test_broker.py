"""LocalKafka without a broker: config rendering, port layout, state checks and every one-line error path."""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import stat
from pathlib import Path

import pytest

from events import broker_cli
from events.broker import (
    BrokerStartFailed,
    ClusterMismatch,
    JarDownloadFailed,
    JavaNotFound,
    LocalKafka,
    MavenNotFound,
    PortInUse,
    find_free_base_port,
    find_java,
    kafka_version,
    log_tail,
    new_cluster_id,
    render_log4j2,
    render_server_properties,
)
from replay.cli import main as gangway


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def no_java_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)


def test_one_node_config_has_rf_1_internal_topics_and_no_rebalance_delay(tmp_path: Path) -> None:
    kafka = LocalKafka(data_dir=tmp_path, port=19500)
    conf = props(render_server_properties(kafka.nodes[0], kafka.nodes))
    assert conf["process.roles"] == "broker,controller"
    assert conf["controller.quorum.voters"] == "1@127.0.0.1:19501"
    assert conf["listeners"] == "PLAINTEXT://127.0.0.1:19500,CONTROLLER://127.0.0.1:19501"
    assert conf["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19500"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr", "default.replication.factor", "min.insync.replicas"):
        assert conf[key] == "1", key
    assert conf["group.initial.rebalance.delay.ms"] == "0"
    assert "transaction.max.timeout.ms" not in conf  # Kafka's default on purpose
    assert conf["log.dirs"] == str(tmp_path / "node-1" / "data")
    assert kafka.bootstrap_servers == "127.0.0.1:19500"


@pytest.mark.parametrize(("cores", "network", "io"), [(1, 1, 2), (2, 1, 2), (4, 2, 4), (16, 8, 16)])
def test_a_local_broker_serves_requests_with_threads_sized_to_the_machine(tmp_path: Path, monkeypatch, cores: int,
                                                                          network: int, io: int) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    kafka = LocalKafka(data_dir=tmp_path, port=19500)
    conf = props(render_server_properties(kafka.nodes[0], kafka.nodes))
    assert (conf["num.network.threads"], conf["num.io.threads"]) == (str(network), str(io))


def test_three_node_config_replicates_three_ways_with_min_isr_2(tmp_path: Path) -> None:
    kafka = LocalKafka(data_dir=tmp_path, nodes=3, port=19600)
    assert [(n.node_id, n.port, n.controller_port) for n in kafka.nodes] == [
        (1, 19600, 19601), (2, 19602, 19603), (3, 19604, 19605)]
    assert kafka.bootstrap_servers == "127.0.0.1:19600,127.0.0.1:19602,127.0.0.1:19604"
    for node in kafka.nodes:
        conf = props(render_server_properties(node, kafka.nodes))
        assert conf["node.id"] == str(node.node_id)
        assert conf["controller.quorum.voters"] == "1@127.0.0.1:19601,2@127.0.0.1:19603,3@127.0.0.1:19605"
        assert conf["default.replication.factor"] == "3"
        assert conf["offsets.topic.replication.factor"] == "3"
        assert conf["transaction.state.log.replication.factor"] == "3"
        assert conf["min.insync.replicas"] == "2"
        assert conf["transaction.state.log.min.isr"] == "2"


def test_log4j2_config_writes_info_to_the_node_log_file(tmp_path: Path) -> None:
    node = LocalKafka(data_dir=tmp_path).nodes[0]
    text = render_log4j2(node)
    assert f"appender.file.fileName = {node.log_file}" in text
    assert "rootLogger.level = INFO" in text


def test_cluster_ids_are_kafka_uuids_that_never_look_like_options() -> None:
    for _ in range(200):
        cid = new_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_kafka_version_comes_from_the_pom() -> None:
    assert kafka_version() == "4.1.1"


def test_java_missing_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_java_home: None) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFound) as caught:
        find_java()
    assert "java not found" in str(caught.value) and "\n" not in str(caught.value)


def test_cli_prints_java_missing_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_java_home: None,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    code = gangway(["kafka", "start", "--data-dir", str(tmp_path / "data"), "--port", str(find_free_base_port(2))])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("gangway: java not found")


def test_mvn_missing_is_reported_when_jars_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          no_java_home: None) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_script(bin_dir / "java", "exit 0\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    kafka = LocalKafka(data_dir=tmp_path / "data", port=find_free_base_port(2), cache_root=tmp_path / "cache")
    with pytest.raises(MavenNotFound, match="mvn not found"):
        kafka.start()


def test_failed_download_names_maven_error_and_leaves_no_partial_cache(tmp_path: Path) -> None:
    from events.broker import ensure_jars

    mvn = write_script(tmp_path / "mvn", 'echo "[ERROR] Failed to execute goal: Could not resolve dependencies"; exit 1\n')
    with pytest.raises(JarDownloadFailed) as caught:
        ensure_jars(tmp_path / "cache", mvn=str(mvn))
    assert "Could not resolve dependencies" in str(caught.value) and "\n" not in str(caught.value)
    assert not list((tmp_path / "cache").glob("kafka-*/libs*"))


def test_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    base = find_free_base_port(2)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base))
        squatter.listen()
        with pytest.raises(PortInUse, match=f"port {base} on 127.0.0.1 is already in use"):
            LocalKafka(data_dir=tmp_path, port=base).start()


def test_broker_that_dies_reports_its_last_error_and_log_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              no_java_home: None) -> None:
    # A fake JVM: StorageTool "formats", kafka.Kafka dies the way a broken classpath does.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_script(bin_dir / "java", """case "$*" in
  *StorageTool*) exit 0 ;;
  *) echo 'Exception in thread "main" java.lang.NoClassDefFoundError: org/apache/logging/log4j/LogManager'; exit 1 ;;
esac
""")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    cache = tmp_path / "cache"
    (cache / f"kafka-{kafka_version()}" / "libs").mkdir(parents=True)
    kafka = LocalKafka(data_dir=tmp_path / "data", port=find_free_base_port(2), cache_root=cache)
    with pytest.raises(BrokerStartFailed) as caught:
        kafka.start(timeout=10)
    message = str(caught.value)
    assert "NoClassDefFoundError" in message and str(kafka.nodes[0].log_file) in message and "\n" not in message


def test_log_tail_prefers_the_last_error(tmp_path: Path) -> None:
    node = LocalKafka(data_dir=tmp_path).nodes[0]
    node.directory.mkdir(parents=True)
    node.log_file.write_text("[t] INFO starting\n[t] ERROR Exiting Kafka due to fatal exception\n[t] INFO shutting down\n")
    assert log_tail(node) == "[t] ERROR Exiting Kafka due to fatal exception"


def test_existing_data_dir_fixes_the_node_count(tmp_path: Path) -> None:
    state = {"kafka_version": "4.1.1", "cluster_id": "x", "base_port": 19700,
             "nodes": [{"node_id": 1, "port": 19700, "controller_port": 19701, "pid": None}]}
    (tmp_path / "gangway-kafka.json").write_text(json.dumps(state))
    with pytest.raises(ClusterMismatch, match="holds a 1-node cluster"):
        LocalKafka(data_dir=tmp_path, nodes=3)
    assert LocalKafka(data_dir=tmp_path).bootstrap_servers == "127.0.0.1:19700"  # remembered port


def test_status_of_a_never_started_cluster_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gangway(["kafka", "status", "--data-dir", str(tmp_path)]) == broker_cli.EXIT_DOWN
    out = capsys.readouterr().out
    assert "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092" in out and "down" in out


def test_cli_parses_its_subcommands() -> None:
    parser = argparse.ArgumentParser()
    broker_cli.add_arguments(parser)
    args = parser.parse_args(["start", "--nodes", "3", "--port", "19092", "--data-dir", "/tmp/x"])
    assert (args.action, args.nodes, args.port, args.data_dir) == ("start", 3, 19092, "/tmp/x")
    with pytest.raises(SystemExit):
        parser.parse_args(["start", "--nodes", "2"])
