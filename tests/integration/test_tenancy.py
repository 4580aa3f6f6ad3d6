"""Tenancy on the log, on the real broker with SASL/SCRAM and ACLs (events/auth.py): a team's launcher writes
only its team's requests, an agent only its node's facts, nobody but services the cell's log; a rogue producer
with a service's transactional id and a rogue member of a service's group are refused by the broker; a forged
record is dead-lettered with its reason and never folded. And one submission is one connected trace."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from events import models as m
from events.auth import Credentials, agent_principal, client_config, service_principal, team_principal
from events.broker import quiet_logger
from events.codec import EventCodec
from events.launcher.spec import parse_document
from events.log import EventConsumer, ensure_input_topic
from events.reader import LogReader
from events.submission import job_submitted
from events.topics import TopicNames
from events.tracing import job_traces, read_spans
from services.launcher import Client
from tests.integration.control_plane import ControlPlane, Operator, read_log, service_signer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def refused_write(bootstrap: str, who: Credentials | str, topic: str, value: bytes = b"x",
                  headers: list | None = None) -> KafkaError | None:
    """Produces one record as `who`; the broker's error for it, or None when it was written."""
    errors: list[KafkaError | None] = []
    producer = Producer({**client_config(bootstrap, who), "logger": quiet_logger(), "message.timeout.ms": 15_000})
    producer.produce(topic, value=value, partition=0, headers=headers,
                     on_delivery=lambda error, _: errors.append(error))
    producer.flush(30)
    assert errors, "no delivery report"
    return errors[0]


def letters(bootstrap: str, topics: TopicNames, expected: int, timeout: float = 60.0) -> list[m.DeadLetter]:
    reader = EventConsumer(bootstrap, f"dlq-{uuid.uuid4().hex}", TopicNames(topics.deadletter, "", ""), ["cell-a"],
                           assign=["cell-a"])
    found: list[m.DeadLetter] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < expected and time.monotonic() < deadline:
            found += [r.event for r in reader.poll(100, 0.5) if isinstance(r.event, m.DeadLetter)]
    finally:
        reader.close()
    return found


def test_the_broker_lets_each_principal_write_only_its_own(kafka_bootstrap, gangway_topics, principals,
                                                           topic_prefix):
    topics = gangway_topics
    who = principals(team_principal("nlp"), team_principal("vision"), agent_principal("n1"), agent_principal("n2"),
                     "reader")
    nlp, n1, reader = who["team.nlp"], who["agent.n1"], who["reader"]
    for principal in (p for name, p in who.items() if name != "reader"):  # each makes its own input topic
        owned = topics.team_input(principal.user[5:]) if principal.user.startswith("team.") \
            else topics.node_input(principal.user[6:])
        ensure_input_topic(kafka_bootstrap, principal, owned)

    assert refused_write(kafka_bootstrap, nlp, topics.team_input("nlp")) is None  # its own requests: fine
    assert refused_write(kafka_bootstrap, n1, topics.node_input("n1")) is None
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A team's launcher: not another team's requests, not the cell's log (no decision), not a node's facts.
    assert refused_write(kafka_bootstrap, nlp, topics.team_input("vision")).code() == denied
    assert refused_write(kafka_bootstrap, nlp, topics.events).code() == denied
    assert refused_write(kafka_bootstrap, nlp, topics.node_input("n1")).code() == denied
    assert refused_write(kafka_bootstrap, nlp, topics.operator_input).code() == denied
    # An agent: not another node's facts, not the cell's log, not the heartbeat topic directly.
    assert refused_write(kafka_bootstrap, n1, topics.node_input("n2")).code() == denied
    assert refused_write(kafka_bootstrap, n1, topics.events).code() == denied
    assert refused_write(kafka_bootstrap, n1, topics.heartbeats).code() == denied
    # A reader reads and writes nothing.
    assert refused_write(kafka_bootstrap, reader, topics.events).code() == denied
    assert refused_write(kafka_bootstrap, reader, topics.team_input("nlp")).code() == denied
    # Nor may either make another's input topic.
    with pytest.raises(KafkaException) as made:
        ensure_input_topic(kafka_bootstrap, nlp, topics.team_input("ops"))
    assert made.value.args[0].code() == denied


def test_a_rogue_transactional_producer_and_group_member_are_refused(kafka_bootstrap, gangway_topics, principals,
                                                                     topic_prefix):
    nlp = principals(team_principal("nlp"))["team.nlp"]
    # The admitter's transactional id: a team may not take it (and so cannot fence the admitter).
    rogue = Producer({**client_config(kafka_bootstrap, nlp), "transactional.id": f"{topic_prefix}gangway-admitter-cell-a",
                      "logger": quiet_logger()})
    with pytest.raises(KafkaException) as fenced:
        rogue.init_transactions(30)
    assert fenced.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # The admitter's consumer group: a team may not join it (and so cannot sit on its cells).
    member = Consumer({**client_config(kafka_bootstrap, nlp), "group.id": f"{topic_prefix}gangway-admitter",
                       "logger": quiet_logger()})
    try:
        member.subscribe([gangway_topics.events])
        deadline, error = time.monotonic() + 30, None
        while error is None and time.monotonic() < deadline:
            message = member.poll(1.0)
            if message is not None and message.error() is not None:
                error = message.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        member.close()
    # And a service principal may not take another service's transactional id either.
    placer = principals("service.placer")["service.placer"]
    rogue = Producer({**client_config(kafka_bootstrap, placer),
                      "transactional.id": f"{topic_prefix}gangway-admitter-cell-a", "logger": quiet_logger()})
    with pytest.raises(KafkaException) as fenced:
        rogue.init_transactions(30)
    assert fenced.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_forged_records_are_dead_lettered_with_their_reason_and_never_folded(kafka_bootstrap, gangway_topics,
                                                                             principals, tmp_path: Path):
    topics = gangway_topics
    who = principals(team_principal("nlp"), team_principal("vision"), agent_principal("cell-a-n0"))
    plane = ControlPlane(kafka_bootstrap, tmp_path)
    plane.start("admitter")
    plane.start("placer")
    plane.start("intake")
    operator = Operator(kafka_bootstrap, topics)
    codec = EventCodec()
    try:
        operator.cell(nodes=2, racks=1)
        operator.write(m.TeamDefined(envelope=operator.envelope(), team="vision"),
                       m.QuotaSet(envelope=operator.envelope(), team="vision", gpu_type="H100", nominal=8))

        def request(who_: Credentials, topic: str, event: m.Event) -> None:
            ensure_input_topic(kafka_bootstrap, who_, topic)
            assert refused_write(kafka_bootstrap, who_, topic, codec.encode(event)) is None

        # vision's own job, through its input topic: taken in and placed.
        e = operator.envelope(producer="launcher")
        request(who["team.vision"], topics.team_input("vision"),
                job_submitted("vision-job", "vision", 1, 8, "H100", cell="cell-a", at=e.at, event_id=e.event_id))
        logged = read_log(kafka_bootstrap, topics, until=lambda es: any(
            isinstance(x, m.JobPlaced) and x.job_id == "vision-job" for x in es))
        taken = next(x for _, x in logged if isinstance(x, m.JobSubmitted))
        assert (taken.envelope.origin, taken.envelope.origin_offset) == ("team/vision", 0)
        # Each writer signed what it wrote with its own key, and every reader took it.
        with LogReader(["cell-a"], kafka_bootstrap, all_cells=["cell-a"], topics=topics) as reader:
            signers = {(r.event.event_type, r.header("gw-signer")) for r in reader.read() if r.event is not None}
        assert {("JobSubmitted", "intake"), ("JobAdmitted", "admitter"), ("JobPlaced", "admitter")} <= signers

        # 1. nlp writes, on its own topic, a submission for vision: the intake dead-letters it.
        e = operator.envelope(producer="launcher")
        request(who["team.nlp"], topics.team_input("nlp"),
                job_submitted("posing", "vision", 1, 8, "H100", cell="cell-a", at=e.at, event_id=e.event_id))
        # 2. nlp cancels vision's job: taken in (its topic, its team's name on it) but refused by the fold.
        e = operator.envelope(producer="launcher")
        request(who["team.nlp"], topics.team_input("nlp"),
                m.JobCancelRequested(envelope=e, job_id="vision-job", team="nlp"))
        # 3. node n0's agent reports about another node: dead-lettered by the intake.
        request(who["agent.cell-a-n0"], topics.node_input("cell-a-n0"),
                m.NodeHealthCheckPassed(envelope=operator.envelope(producer="agent"), node="cell-a-n1"))
        # 4. a decision on the cell's log from no service (written with the admin's rights): refused by the fold.
        forged = m.JobAdmitted(envelope=operator.envelope(producer="mallory").model_copy(
            update={"reason": m.Reason.WITHIN_NOMINAL_QUOTA, "basis_offset": 0}), job_id="posing", team="vision",
            gpu_type="H100", gpus=8, assignments=[m.WorkerAssignment(worker=0, node="cell-a-n1", gpus=[0] * 8)])
        operator.write(forged)
        # 5. the placer's principal (it may write the cell's log) writes an admission in the admitter's name,
        # signed with its own key, and 6. one not signed at all: its signature does not vouch for either.
        as_admitter = lambda job: codec.encode(m.JobAdmitted(  # noqa: E731
            envelope=operator.envelope(producer="admitter").model_copy(
                update={"reason": m.Reason.WITHIN_NOMINAL_QUOTA, "basis_offset": 0}),
            job_id=job, team="vision", gpu_type="H100", gpus=8,
            assignments=[m.WorkerAssignment(worker=0, node="cell-a-n1", gpus=list(range(8)))]))
        placer = service_signer("placer")
        assert placer is not None, "the suite's broker signs its logs"
        value = as_admitter("vision-job")
        assert refused_write(kafka_bootstrap, service_principal("placer"), topics.events, value,
                             placer.sign(topics.events, 0, [value])[0]) is None
        assert refused_write(kafka_bootstrap, service_principal("placer"), topics.events, as_admitter("posing")) is None

        found = letters(kafka_bootstrap, topics, expected=6)
        reasons = sorted(letter.error for letter in found)
        assert len(reasons) == 6, reasons
        assert any("claiming 'admitter' is signed by 'placer', which may not write it" in r for r in reasons), reasons
        assert any("claiming 'admitter' is not signed by any writer of the log" in r for r in reasons), reasons
        assert any("JobSubmitted for team 'vision' from team nlp's input" in r for r in reasons), reasons
        assert any("about node 'cell-a-n1' from node cell-a-n0's input" in r for r in reasons), reasons
        assert any(r.startswith("NOT_ITS_WRITER") and "may not cancel vision-job" in r for r in reasons), reasons
        assert any(r.startswith("NOT_ITS_WRITER") and "from 'mallory'" in r for r in reasons), reasons
        assert {(x.source_topic, x.source_offset) for x in found if "input" in x.error} == {
            (topics.team_input("nlp"), 0), (topics.node_input("cell-a-n0"), 0)}

        logged = read_log(kafka_bootstrap, topics, until=lambda es: sum(isinstance(x, m.RecordRefused) for x in es) >= 4)
        refused = sorted((x.refused_type, x.envelope.reason) for _, x in logged if isinstance(x, m.RecordRefused))
        assert refused == [*[("JobAdmitted", m.Reason.NOT_ITS_WRITER)] * 3,
                           ("JobCancelRequested", m.Reason.NOT_ITS_WRITER)]
        assert sum(isinstance(x, m.JobAdmitted) and x.job_id == "vision-job" for _, x in logged) == 2  # 1 + forged
        # Never folded: the posing job is not on the log, vision's job still runs, nothing was cancelled.
        assert not any(isinstance(x, m.JobSubmitted) and x.job_id == "posing" for _, x in logged)
        assert not any(isinstance(x, m.JobCancelled) for _, x in logged)
        with Client(kafka_bootstrap) as client:
            assert client.get("vision-job").state == "placed"
            assert [j.job_id for j in client.list()] == ["vision-job"]
    finally:
        codes = plane.stop_all()
    assert all(code == 0 for code in codes.values()), (codes, plane.tails())


def traced_plane(bootstrap: str, tmp_path: Path, monkeypatch, nodes: int) -> ControlPlane:
    """Admitter, placer and intake as processes tracing to a file of the test's own, and a fleet of `nodes` nodes."""
    monkeypatch.setenv("GANGWAY_TRACE_FILE", str(tmp_path / "traces.jsonl"))
    plane = ControlPlane(bootstrap, tmp_path)
    for service in ("admitter", "placer", "intake"):
        plane.start(service)
    # -v: its log says when it is up, should the nodes not show
    plane.command("fleet", "fleet", "--nodes", str(nodes), "--nodes-per-rack", "2", "--heartbeat-every", "1h", "-v")
    return plane


def wait_for_nodes(client: Client, nodes: int, plane: ControlPlane) -> None:
    deadline = time.monotonic() + 60
    while len(client.nodes()) < nodes:
        assert time.monotonic() < deadline, plane.tails()
        time.sleep(0.3)


def roots_of(spans: list[dict]) -> list[str]:
    """The names of the spans whose parent is not among `spans`."""
    ids = {s["span_id"] for s in spans}
    return [s["name"] for s in spans if s["parent_id"] not in ids]


def connected_trace(tmp_path: Path, job: str, complete) -> list[dict]:
    """The spans of `job`'s one trace once `complete(spans)` holds and every span's parent has arrived. Each process
    sends its spans in batches of its own, so a child can reach the file before its parent."""
    deadline, traces = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        traces = job_traces(job, read_spans(tmp_path / "traces.jsonl"))
        if len(traces) == 1:
            spans = next(iter(traces.values()))
            if complete(spans) and len(roots_of(spans)) == 1:
                return spans
        time.sleep(0.5)
    assert len(traces) == 1, traces  # one trace
    return next(iter(traces.values()))


def test_one_submission_is_one_connected_trace_across_processes(kafka_bootstrap, gangway_topics, tmp_path: Path,
                                                                monkeypatch):
    plane = traced_plane(kafka_bootstrap, tmp_path, monkeypatch, nodes=2)
    try:
        with Client(kafka_bootstrap) as client:
            wait_for_nodes(client, 2, plane)
            client.apply([parse_document({"kind": "Team", "metadata": {"name": "nlp"}, "spec": {"quotas": {"H100": 16}}},
                                         "team")])
            client.submit({"kind": "Job", "metadata": {"name": "traced", "team": "nlp"},
                           "spec": {"workers": 2, "gpus_per_worker": 8, "gpu_type": "H100",
                                    "command": ["true"]}})
            client.wait("traced", until="placed", timeout=60)
        # The fleet's span is written once it has seen the placement.
        spans = connected_trace(tmp_path, "traced", lambda spans: any(s["service"] == "gangway-fleet" for s in spans))
        assert roots_of(spans) == ["submit traced"]  # connected: every other span has its parent here
        processes = {(s["service"], s["pid"]) for s in spans}
        assert {"gangway-launcher", "gangway-intake", "gangway-admitter", "gangway-fleet"} <= {p for p, _ in processes}
        assert len({pid for _, pid in processes}) >= 3
        decisions = [s for s in spans if s["service"] == "gangway-admitter"]
        assert {s["name"] for s in decisions} >= {"admitter JobAdmitted", "admitter JobPlaced"}
        for span in decisions:  # one span per decision, with what explains it
            attrs = span["attributes"]
            assert attrs["job"] == "traced" and attrs["team"] == "nlp" and attrs["policy_version"]
            assert attrs["reason"] and isinstance(attrs["basis_offset"], int)
    finally:
        codes = plane.stop_all()
    assert all(code in (0, -15) for code in codes.values()), (codes, plane.tails())


def test_a_restarted_service_goes_on_in_the_jobs_trace(kafka_bootstrap, gangway_topics, tmp_path: Path, monkeypatch):
    """The trace contexts are saved with the state: a decision made after a restart, set off by a record of
    another trace, still joins the trace of the job it is about."""
    plane = traced_plane(kafka_bootstrap, tmp_path, monkeypatch, nodes=4)
    team = {"kind": "Team", "metadata": {"name": "nlp"}, "spec": {"quotas": {"H100": 16}}}
    gang = {"workers": 2, "gpus_per_worker": 8, "gpu_type": "H100", "command": ["true"]}
    try:
        with Client(kafka_bootstrap) as client:
            wait_for_nodes(client, 4, plane)
            client.apply([parse_document(team, "team")])
            client.submit({"kind": "Job", "metadata": {"name": "first", "team": "nlp"}, "spec": gang})
            client.wait("first", until="placed", timeout=60)
            client.submit({"kind": "Job", "metadata": {"name": "traced", "team": "nlp"}, "spec": gang})
            client.wait("traced", until=lambda j: j.state == "queued", timeout=60)  # over the team's quota
            assert plane.stop("admitter") == 0
            plane.start("admitter")
            team["spec"]["quotas"]["H100"] = 32  # the operator's change lets it in: a record of another trace
            client.apply([parse_document(team, "team")])
            client.wait("traced", until="placed", timeout=60)
        trace = connected_trace(tmp_path, "traced", lambda spans: any(
            s["name"] == "admitter JobAdmitted" and s["attributes"].get("job") == "traced" for s in spans))
        assert roots_of(trace) == ["submit traced"]
        pids = {s["pid"] for s in trace if s["service"] == "gangway-admitter"}
        assert len(pids) == 2  # the admitter before the restart queued it, the one after admitted it
    finally:
        codes = plane.stop_all()
    assert all(code in (0, -15) for code in codes.values()), (codes, plane.tails())
