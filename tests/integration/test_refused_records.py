"""Records that once stopped the control plane, written to a real broker and read by the four services as
real processes (RocksDB stores, the Avro codec, transactional producers): each is refused and answered, every
service goes on, a well-behaved job runs, and the log still verifies."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from events import models as m
from events.auth import client_config, signer
from events.broker import quiet_logger
from events.codec import EventCodec
from events.log import KEPT_BYTES, EventConsumer
from events.submission import job_submitted
from events.topics import TopicNames, ensure_topics, topic_names
from projections.store import ProjectionStore
from replay.rebuild import differences
from tests.integration.control_plane import ControlPlane, Operator, count, fold, read_log, wait_until_caught_up
from tests.integration.test_control_plane import assert_every_decision_reproduced, placed_all

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
DAY_MS = 86_400_000


def test_each_poison_record_is_refused_and_the_services_go_on(kafka_bootstrap, topic_prefix, kafka_admin,
                                                               kafka_replication_factor, tmp_path: Path):
    cells = ("cell-a", "cell-b")
    ensure_topics(kafka_admin, cells, kafka_replication_factor, prefix=topic_prefix)
    topics = topic_names(topic_prefix)
    plane = ControlPlane(kafka_bootstrap, tmp_path, cells)
    plane.start_all()
    operator = Operator(kafka_bootstrap, topics, cells)
    codec = EventCodec()
    raw = Producer({**client_config(kafka_bootstrap), "logger": quiet_logger()})

    admin = signer(None, kafka_bootstrap)  # the admin may write anything: each record is refused for what it is

    def write_raw(event: m.Event | bytes) -> None:
        value = event if isinstance(event, bytes) else codec.encode(event)
        headers = admin.sign(topics.events, 0, [value])[0] if admin is not None else None
        raw.produce(topics.events, key=b"cell-a", value=value, partition=0, headers=headers)
        raw.flush(30)

    def submit(job_id: str, **fields) -> None:
        e = operator.envelope(producer="launcher")
        shape = {"workers": 1, "gpus_per_worker": 8, **fields}
        operator.write(job_submitted(job_id, "nlp", shape.pop("workers"), shape.pop("gpus_per_worker"), "H100",
                                     cell="cell-a", at=e.at, event_id=e.event_id, **shape))

    try:
        operator.cell(nodes=4, racks=1)
        clock = operator.envelope().at
        operator.write(m.Tick(envelope=operator.envelope(producer="clock")))
        submit("runs")
        submit("hog")
        submit("wide", workers=3, topology_required="rack")  # 2 nodes of the rack are free: waits
        logged = read_log(kafka_bootstrap, topics, cells=cells, until=placed_all(["runs", "hog"]))
        placed = next(e for _, e in logged if isinstance(e, m.JobPlaced) and e.job_id == "runs")
        node = placed.assignments[0].node

        submit("zero", gpus_per_worker=0)
        operator.write(m.Tick(envelope=operator.envelope(producer="clock")))  # once divided by zero
        operator.write(m.NodeRegistered(envelope=operator.envelope(producer="agent/huge"), node="huge",
                                        gpu_type="H100", gpus=10**9))
        operator.write(m.JobCancelRequested(envelope=operator.envelope(producer="launcher").model_copy(
            update={"at": 2**63 - 1000}), job_id="runs"))
        write_raw(m.JobCancelRequested(envelope=operator.envelope(producer="launcher"), job_id="j" * 600_000))
        write_raw(m.JobCancelRequested(envelope=operator.envelope(producer="launcher").model_copy(
            update={"cell": "nowhere"}), job_id="runs"))
        write_raw(m.JobCancelRequested(envelope=operator.envelope("cell-b", "launcher"), job_id="runs"))
        write_raw(b"\x00" * 900_000)
        operator.write(m.WorkerExited(envelope=operator.envelope(producer=f"agent/{node}"), job_id="runs",
                                      attempt=1, worker=3, node=node, exit_code=0))
        elsewhere = next(f"cell-a-n{i}" for i in range(4) if f"cell-a-n{i}" != node)
        operator.write(m.WorkerExited(envelope=operator.envelope(producer=f"agent/{elsewhere}"), job_id="runs",
                                      attempt=1, worker=0, node=elsewhere, exit_code=0))
        operator.write(m.NodeRegistered(envelope=operator.envelope(producer=f"agent/{node}"), node=node,
                                        gpu_type="A100", gpus=2, labels={"rack": "r0"}))
        operator.write(m.CheckpointCompleted(envelope=operator.envelope(producer="agent/x"), job_id="wide", attempt=1,
                                             checkpoint_id="forged", progress_ms=10**6))
        operator.write(m.Tick(envelope=operator.envelope(producer="clock").model_copy(update={"at": clock + DAY_MS})))
        submit("million", workers=10**6, min_workers=1)
        submit("restarts", max_restarts=-1)
        operator.write(m.CellConfigured(envelope=operator.envelope(), topology_levels=[]))
        submit("after")
        logged = read_log(kafka_bootstrap, topics, cells=cells, until=placed_all(["after"]), timeout=90)
        wait_until_caught_up(kafka_bootstrap, topics, logged[-1][0] + 1, cells=cells)
        running = {name: p.poll() is None for name, p in plane.processes.items()}
        letters = EventConsumer(kafka_bootstrap, "dlq-reader", TopicNames(topics.deadletter, "", ""), ["cell-a"],
                                assign=["cell-a"])
        found = []
        for _ in range(20):
            found += [r.event for r in letters.poll(100, 0.5) if r.event is not None]
            if found:
                break
        letters.close()
    finally:
        exits = plane.stop_all()
    assert running == dict.fromkeys(running, True), f"every service still running: {running}"
    assert exits == dict.fromkeys(exits, 0)
    refused = sorted((e.refused_type, e.envelope.reason.value) for _, e in logged if isinstance(e, m.RecordRefused))
    assert refused == sorted([
        ("NodeRegistered", "OVERSIZED"), ("JobCancelRequested", "TIME_OUT_OF_RANGE"),
        ("JobCancelRequested", "OVERSIZED"), ("JobCancelRequested", "WRONG_CELL"), ("JobCancelRequested", "WRONG_CELL"),
        ("WorkerExited", "CONTRADICTS_STATE"), ("WorkerExited", "CONTRADICTS_STATE"),
        ("NodeRegistered", "NODE_IN_USE"), ("CheckpointCompleted", "CONTRADICTS_STATE"), ("Tick", "TIME_OUT_OF_RANGE"),
    ])
    rejected = {e.job_id: e.envelope.reason.value for _, e in logged if isinstance(e, m.JobRejected)}
    assert rejected == {"zero": "NO_GPUS_REQUESTED", "million": "LARGER_THAN_CELL", "restarts": "INVALID_REQUEST",
                        "wide": "UNKNOWN_TOPOLOGY_LEVEL"}
    assert count(logged, m.JobCancelled) == 0 and count(logged, m.JobSucceeded) == 0, "no forged fact took effect"
    assert [(len(d.value), d.value_size, d.envelope.producer) for d in found] == [(KEPT_BYTES, 900_000, "admitter")]
    for service in ("admitter", "placer", "preemptor", "recovery"):
        stored = ProjectionStore(tmp_path / "main" / service / "cell-a").load()
        assert differences(stored, fold([(o, e) for o, e in logged if o <= stored.offset])) == [], service
    assert_every_decision_reproduced(logged, tmp_path)
