"""The four services as real processes on a real broker: submissions to completion, exactly once
under kill -9 and with the group's offsets lost, poison records dead-lettered while the services go on."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition

from events import models as m
from events.auth import client_config
from events.broker import quiet_logger
from events.log import EventConsumer
from events.topics import TopicNames, ensure_topics, topic_names
from projections.jobs import JobState
from projections.snapshot import dump
from projections.store import ProjectionStore
from replay.cli import main
from replay.rebuild import differences
from replay.verify import verify
from services.deciders import DECIDERS
from services.policy import DEFAULT_POLICY
from tests.integration.control_plane import ControlPlane, Operator, count, fold, read_log, wait_until_caught_up

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def placed_all(jobs: list[str]):
    return lambda events: all(any(isinstance(e, m.JobPlaced) and e.job_id == j for e in events) for j in jobs)


def decisions(logged) -> list[m.Event]:
    return [e for _, e in logged if e.is_decision]


def test_submissions_run_to_completion_exactly_once(kafka_bootstrap, gangway_topics, tmp_path: Path):
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.start_all()
    operator = Operator(kafka_bootstrap, gangway_topics)
    try:
        operator.cell(nodes=4)
        first = [operator.submit(f"job-{i}", workers=w, gpus=g).job_id
                 for i, (w, g) in enumerate([(2, 8), (1, 8), (1, 4), (1, 4)])]
        logged = read_log(kafka_bootstrap, gangway_topics, until=placed_all(first))
        assert all(count(logged, m.JobPlaced, j) == 1 for j in first), "every gang placed exactly once"
        # The node agents' part: workers start and exit 0; recovery ends the jobs, freeing their GPUs.
        for _, e in logged:
            if isinstance(e, m.JobPlaced):
                operator.write(*[m.WorkerStarted(envelope=operator.envelope(producer=f"agent/{a.node}"),
                                                 job_id=e.job_id, attempt=e.attempt, worker=a.worker, node=a.node)
                                 for a in e.assignments])
                operator.write(*[m.WorkerExited(envelope=operator.envelope(producer=f"agent/{a.node}"),
                                                job_id=e.job_id, attempt=e.attempt, worker=a.worker, node=a.node,
                                                exit_code=0) for a in e.assignments])
        second = [operator.submit("after-0", workers=4, gpus=8).job_id]  # needs the whole cell: only after release
        logged = read_log(kafka_bootstrap, gangway_topics, until=placed_all(first + second))
    finally:
        exits = plane.stop_all()
    assert exits == {"admitter": 0, "placer": 0, "preemptor": 0, "recovery": 0, "intake": 0}
    assert all(count(logged, m.JobSucceeded, j) == 1 for j in first)
    assert count(logged, m.JobPlaced, "after-0") == 1
    ids = [e.envelope.event_id for e in decisions(logged)]
    assert len(ids) == len(set(ids)), "no decision written twice"
    rebuilt = fold(logged)
    assert dump(rebuilt) == dump(fold(logged)), "the same log folds to the same state"
    assert rebuilt.jobs["after-0"].state is JobState.PLACED
    for service in ("admitter", "placer", "preemptor", "recovery"):
        stored = ProjectionStore(tmp_path / "main" / service / "cell-a").load()
        as_far = fold([(o, e) for o, e in logged if o <= stored.offset])  # the log as far as it had read
        assert differences(stored, as_far) == [], service
    # `gangway projection rebuild` from offset 0 gives the state the log folds to, and `compare` says so: a
    # service's store is exactly the log folded in order, to the offset it reached.
    rebuilt_db, placer_db = tmp_path / "rebuilt", tmp_path / "main" / "placer" / "cell-a"
    assert main(["projection", "rebuild", "--db", str(rebuilt_db), "--bootstrap-servers", kafka_bootstrap]) == 0
    assert dump(ProjectionStore(rebuilt_db).load()) == dump(rebuilt)
    placer_offset = ProjectionStore(placer_db).load().offset
    assert main(["projection", "rebuild", "--db", str(tmp_path / "to-placer"), "--to-offset", str(placer_offset),
                 "--bootstrap-servers", kafka_bootstrap]) == 0
    assert main(["projection", "compare", str(tmp_path / "to-placer"), str(placer_db)]) == 0
    reproduced = assert_every_decision_reproduced(logged, tmp_path)
    assert reproduced["admitter"] >= 10 and reproduced["recovery"] >= 4, reproduced  # the admitter binds its plans


def test_kill_9_loses_and_duplicates_no_decision(kafka_bootstrap, gangway_topics, tmp_path: Path):
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.start_all()
    operator = Operator(kafka_bootstrap, gangway_topics)
    rng = random.Random(7)
    jobs = []
    try:
        operator.cell(nodes=16, racks=4)
        for i in range(40):
            jobs.append(operator.submit(f"job-{i}", workers=rng.choice([1, 1, 2]), gpus=rng.choice([1, 2, 4])).job_id)
            victim = {6: "admitter", 14: "placer", 22: "recovery", 30: "preemptor"}.get(i)
            if victim is not None:
                plane.kill(victim)
                time.sleep(rng.uniform(0.0, 1.0))
                plane.start(victim)
            time.sleep(0.05)
        logged = read_log(kafka_bootstrap, gangway_topics, until=placed_all(jobs), timeout=120)
        wait_until_caught_up(kafka_bootstrap, gangway_topics, logged[-1][0] + 1)
    finally:
        plane.stop_all()
    assert [count(logged, m.JobAdmitted, j) for j in jobs] == [1] * len(jobs)
    assert [count(logged, m.JobPlaced, j) for j in jobs] == [1] * len(jobs)
    ids = [e.envelope.event_id for e in decisions(logged)]
    assert len(ids) == len(set(ids))
    for service in ("admitter", "placer", "preemptor", "recovery"):
        stored = ProjectionStore(tmp_path / "main" / service / "cell-a").load()
        as_far = fold([(o, e) for o, e in logged if o <= stored.offset])  # the log as far as it had read
        assert differences(stored, as_far) == [], service
    assert_every_decision_reproduced(logged, tmp_path)


def test_a_service_restarted_without_store_or_group_offset_decides_nothing_twice(kafka_bootstrap, gangway_topics,
                                                                                  kafka_admin, tmp_path: Path):
    """A decision's transaction carries no consumed offsets: its basis on the log says how far its service decided.
    With its store gone and its group's offset set back to 0 (it died before either followed its decisions), a
    restarted admitter folds what it had decided without deciding it again, and decides what came since."""
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.start_all()
    operator = Operator(kafka_bootstrap, gangway_topics)
    try:
        operator.cell(nodes=4)
        first = [operator.submit(f"job-{i}", workers=1, gpus=4).job_id for i in range(3)]
        read_log(kafka_bootstrap, gangway_topics, until=placed_all(first))
        assert plane.stop("admitter") == 0
        shutil.rmtree(tmp_path / "main" / "admitter")
        group = gangway_topics.events.removesuffix("gangway.events") + "gangway-admitter"
        rewound = ConsumerGroupTopicPartitions(group, [TopicPartition(gangway_topics.events, 0, 0)])
        for future in kafka_admin.alter_consumer_group_offsets([rewound]).values():
            future.result(timeout=30)
        plane.start("admitter")
        later = operator.submit("later", workers=1, gpus=4).job_id
        logged = read_log(kafka_bootstrap, gangway_topics, until=placed_all([*first, later]))
        wait_until_caught_up(kafka_bootstrap, gangway_topics, logged[-1][0] + 1)
    finally:
        plane.stop_all()
    assert [count(logged, m.JobAdmitted, j) for j in [*first, later]] == [1] * 4
    ids = [e.envelope.event_id for e in decisions(logged)]
    assert len(ids) == len(set(ids))
    assert_every_decision_reproduced(logged, tmp_path)


def assert_every_decision_reproduced(logged, state_dir: Path) -> dict[str, int]:
    """Replaying each service over the log gives back exactly the decisions it wrote, kills included;
    returns how many each reproduced."""
    reproduced = {}
    for name, decider in sorted(DECIDERS.items()):
        upto = ProjectionStore(state_dir / "main" / name / "cell-a").load().offset
        verdict = verify(logged, decider(), DEFAULT_POLICY, upto=upto)
        assert verdict.ok, verdict
        reproduced[name] = verdict.reproduced
    return reproduced


def test_a_poison_record_is_dead_lettered_and_the_service_goes_on(kafka_bootstrap, gangway_topics, tmp_path: Path):
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.start("admitter")
    plane.start("placer")
    operator = Operator(kafka_bootstrap, gangway_topics)
    try:
        operator.cell(nodes=2)
        raw = Producer({**client_config(kafka_bootstrap), "logger": quiet_logger()})
        raw.produce(gangway_topics.events, key=b"cell-a", value=b'{"not": "avro"}', partition=0)
        raw.flush(30)
        job = operator.submit("after-poison").job_id
        logged = read_log(kafka_bootstrap, gangway_topics, until=placed_all([job]))
        assert count(logged, m.JobPlaced, job) == 1
        letters = EventConsumer(kafka_bootstrap, "dlq-reader", TopicNames(gangway_topics.deadletter, "", ""),
                                ["cell-a"], assign=["cell-a"])
        found = []
        for _ in range(20):
            found += [r.event for r in letters.poll(100, 0.5) if r.event is not None]
            if found:
                break
        letters.close()
    finally:
        plane.stop_all()
    assert [(d.value, d.error.split(":")[0], d.envelope.producer) for d in found] == [
        (b'{"not": "avro"}', "NOT_SINGLE_OBJECT", "admitter")], "one letter per record, from the admitter"


def test_two_cells_two_replicas_one_owner_each_and_takeover(kafka_bootstrap, topic_prefix, kafka_admin,
                                                            kafka_replication_factor, tmp_path: Path):
    cells = ("cell-a", "cell-b")
    ensure_topics(kafka_admin, cells, kafka_replication_factor, prefix=topic_prefix)
    topics = topic_names(topic_prefix)
    plane = ControlPlane(kafka_bootstrap, tmp_path, cells)
    for replica in ("1", "2"):
        for service in ("admitter", "placer"):
            plane.start(service, replica)
    operator = Operator(kafka_bootstrap, topics, cells)
    try:
        for cell in cells:
            operator.cell(cell, nodes=8)
        before = {cell: [operator.submit(f"{cell}-early-{i}", workers=1, gpus=2, cell=cell).job_id
                         for i in range(6)] for cell in cells}
        for cell in cells:
            read_log(kafka_bootstrap, topics, cell, cells, until=placed_all(before[cell]))
        deadline = time.monotonic() + 30
        while len(set((owners := _owners(tmp_path, "admitter")).values())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # the second replica may join the group a little later
        assert sorted(owners) == ["cell-a", "cell-b"] and len(set(owners.values())) == 2, owners
        survivor_log = tmp_path / f"admitter{owners['cell-b']}.log"
        seen_before_kill = len(survivor_log.read_text())
        plane.kill(f"admitter{owners['cell-a']}")  # the other replica must take cell-a over
        after = {cell: [operator.submit(f"{cell}-late-{i}", workers=1, gpus=2, cell=cell).job_id
                        for i in range(6)] for cell in cells}
        logs = {cell: read_log(kafka_bootstrap, topics, cell, cells, until=placed_all(before[cell] + after[cell]),
                               timeout=90) for cell in cells}
    finally:
        plane.stop_all()
    assert " owns cell-a " in survivor_log.read_text()[seen_before_kill:], "the survivor took cell-a over"
    for cell in cells:
        jobs = before[cell] + after[cell]
        assert [count(logs[cell], m.JobAdmitted, j) for j in jobs] == [1] * len(jobs), cell
        assert [count(logs[cell], m.JobPlaced, j) for j in jobs] == [1] * len(jobs), cell
        assert all(e.envelope.cell == cell for _, e in logs[cell])
        ids = [e.envelope.event_id for e in decisions(logs[cell])]
        assert len(ids) == len(set(ids)), f"{cell}: one decider at a time"


def _owned_by(state_dir: Path, process: str) -> set[str]:
    """The cells a replica owns now, replaying the 'owns' / 'gave up' lines of its log."""
    owned: set[str] = set()
    for line in (state_dir / f"{process}.log").read_text().splitlines():
        if " owns " in line:
            owned.add(line.split(" owns ")[1].split()[0])
        elif " gave up " in line:
            owned.discard(line.split(" gave up ")[1].split()[0])
    return owned


def _owners(state_dir: Path, service: str) -> dict[str, str]:
    """cell -> the replica that owns it now."""
    return {cell: replica for replica in ("1", "2") for cell in _owned_by(state_dir, f"{service}{replica}")}


def test_a_store_refuses_to_resume_on_another_log(kafka_bootstrap, gangway_topics, topic_prefix, kafka_admin,
                                                   kafka_replication_factor, tmp_path: Path, monkeypatch):
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.start("admitter")
    operator = Operator(kafka_bootstrap, gangway_topics)
    try:
        operator.cell(nodes=1)
        operator.submit("first")
        read_log(kafka_bootstrap, gangway_topics, until=lambda events: any(isinstance(e, m.JobAdmitted) for e in events))
    finally:
        plane.stop_all()
    other = f"{topic_prefix}other."  # fresh topics: offsets there mean nothing to the store folded above
    ensure_topics(kafka_admin, ["cell-a"], kafka_replication_factor, prefix=other)
    monkeypatch.setenv("GANGWAY_TOPIC_PREFIX", other)
    plane.start("admitter")
    assert plane.processes["admitter"].wait(60) == 1
    assert "was folded from" in (tmp_path / "admitter.log").read_text()
