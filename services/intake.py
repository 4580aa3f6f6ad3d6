"""The intake: takes the input topics (one per team, one per node, one for operators; events/topics.py) into
the cells' ordered logs, in one transaction per batch with the input offsets it consumed.

Kafka authorizes per topic, so the topic a record came from is the one identity a reader can trust
(events/auth.py): only team T's launchers can write `gangway.in.team.T`, only node N's agent
`gangway.in.node.N`. The intake checks each record against its topic (`not_its_writer`: a team writes only its
own submissions and cancels, an agent only its own node's facts, operators only configuration and cordons; no
input is a decision) and copies it to its cell's partition with `envelope.origin` ('team/T', 'node/N',
'operator') and `envelope.origin_offset` stamped, so the log says where each input came from and replay needs
nothing but the log. Heartbeats go to the heartbeat topic the same way. What may not be taken in (undecodable,
another team's or node's record, a decision, an unknown cell) goes to the dead-letter topic with its reason
and never reaches a cell. The fold checks the origin again (projections/validate.py), and refuses a cancel of
another team's job, which only the state can tell.

Record headers (the W3C traceparent) travel with the record; the intake adds a span of its own.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from events import models as m
from events.auth import admin_client, service_principal
from events.codec import EventCodec
from events.log import EventConsumer, EventProducer, LogRecord, ProducerFenced
from events.topics import TopicNames
from events.tracing import Tracer
from projections.validate import not_its_writer
from services.stop import StopRequest

log = logging.getLogger("gangway.intake")

NAME = "intake"
REPLICA_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
#: How long an intake waits for a member of its name to leave the group before refusing to start: longer than
#: the consumer's session timeout (events/log.py), so a predecessor killed with -9 is gone by then.
NAME_WAIT_S = 10.0
#: How often an intake looks for new input topics (a new team's or node's), on a thread of its own: a look is a
#: round trip to the broker, and on the intake's loop it held up the batch behind it (the latency benchmark's p99).
FOLLOW_EVERY_S = 1.0
#: How often it checks that the group has assigned every input topic to one of the intakes.
CHECK_EVERY_S = 5.0
#: How long a rewind waits for the group to say its committed offsets before joining the group anew.
REWIND_WAIT_S = 5.0
#: How long the intake waits for its transaction coordinator when it takes its transactional id back after a failed
#: batch; a coordinator that does not answer sooner is asked again after the next batch.
RENEW_WAIT_S = 10.0


def take_in(topics: TopicNames, cells: Sequence[str], record: LogRecord) -> tuple[m.Event | None, str]:
    """The event to write for an input record, with its origin stamped, or None and why it may not be taken in.
    Pure: a function of the record and the topic it came from."""
    source = topics.source_of(record.topic)
    if source is None:
        return None, f"{record.topic} is not an input topic"
    if record.event is None:
        return None, f"does not decode: {record.error}"
    kind, name = source
    origin = f"{kind}/{name}" if name else kind
    event = record.event
    why = not_its_writer(event, origin)
    if why:
        return None, why
    if event.envelope.cell not in cells:
        return None, f"names cell {event.envelope.cell[:40]!r}; cells are {', '.join(cells)}"
    envelope = event.envelope.model_copy(update={"origin": origin, "origin_offset": record.offset})
    return event.model_copy(update={"envelope": envelope}), ""


class IntakeNameTaken(RuntimeError):
    """Another intake of the same name is in the group: the two would fence each other's transactions in turn."""


class Intake:
    """One intake replica. Replicas share the input topics through their consumer group, so when one stops
    another takes over what it read. Each has transactional ids of its own (`gangway-intake`, or
    `gangway-intake-<replica>`, and the same with `~2`: it commits under each in turn, events/log.py `by_turns`):
    the same replica restarted fences what it left open, and one the group has
    moved on from is fenced by the group's generation when it commits (KIP-447), so nothing is taken in twice.
    An intake does not start while one of its name is in the group (IntakeNameTaken); two started at the same
    moment would take turns fencing each other, still taking each input in once."""

    def __init__(self, bootstrap: str, topics: TopicNames, cells: Sequence[str], name_prefix: str = "",
                 batch_size: int = 500, tracer: Tracer | None = None, replica: str = "") -> None:
        if replica and not REPLICA_NAME.fullmatch(replica):
            raise ValueError(f"intake replica name {replica[:40]!r}: use 1-32 of a-z, 0-9 and '-'")
        self.topics, self.cells = topics, tuple(cells)
        self.batch_size = batch_size
        self.codec = EventCodec()
        self.tracer = tracer or Tracer(NAME)
        principal = service_principal(NAME)
        self.transactional_id = f"{name_prefix}gangway-{NAME}" + (f"-{replica}" if replica else "")
        group = f"{name_prefix}gangway-{NAME}"
        self.group, self._admin = group, admin_client(bootstrap, principal)
        _wait_for_name(self._admin, group, self.transactional_id)
        # Each input topic has one partition: round robin deals them out among the replicas (the range assignor
        # would give every partition 0 to one of them).
        self._consumer = lambda: EventConsumer(bootstrap, group, topics, cells, principal=principal,
                                               **{"topic.metadata.refresh.interval.ms": 1000,
                                                  "partition.assignment.strategy": "roundrobin",
                                                  "client.id": self.transactional_id})
        self.consumer = self._consumer()
        self.inputs: list[str] = []  # the input topics subscribed to
        self._next_check = 0.0
        self._unassigned: set[str] = set()  # subscribed topics the group had assigned to no member at the last check
        # What the follower thread found last, for the loop to act on: the input topics listed, and the subscribed
        # ones the group assigned to no member (with the subscription that check was made against).
        self._listed: list[str] | None = None
        self._checked: tuple[list[str], set[str]] | None = None
        self._stopping = threading.Event()
        self.look()
        self.follow_inputs()
        self._follower = threading.Thread(target=self._follow, name="intake-follower", daemon=True)
        self._follower.start()
        self.producer = EventProducer(bootstrap, self.transactional_id, topics, cells, principal=principal,
                                      by_turns=True)
        self.taken = self.refused = 0

    def run(self, max_polls: int | None = None, stop: StopRequest | None = None) -> None:
        """Takes input in until stopped (SIGTERM / SIGINT, or `stop` if the caller listens already) or
        `max_polls` polls."""
        stop = stop or StopRequest.listen()
        polls = 0
        try:
            while not stop.asked and (max_polls is None or polls < max_polls):
                try:
                    self.poll_once()
                except ProducerFenced as error:
                    # A coordinator's failover (or a transaction it timed out) fences the producer: a new one
                    # takes the transactional id back, and the batch is read again.
                    log.warning("intake fenced (%s); taking its transactional id back", error)
                    self._renew_producer()
                    self._rewind()
                except KafkaException as error:
                    log.warning("intake batch not committed (%s); reading it again", error)
                    if self.producer.broken:
                        self._renew_producer()
                    self._rewind()
                polls += 1
        finally:
            self.close()

    def close(self) -> None:
        """Stops following the input topics, leaves the group and flushes what was produced."""
        self._stopping.set()
        self._follower.join(timeout=FOLLOW_EVERY_S * 5 + 1)
        self.consumer.close()
        self.producer.flush()
        self.tracer.shutdown()

    def _renew_producer(self) -> None:
        """A new producer under the same transactional id, before the rewind: it aborts the transaction the old one
        left open, whose pending offsets the group would otherwise make the rewind wait for (a committed offset is
        read only once no transaction holds one back, KIP-447). While the coordinator cannot answer, the old one
        stays, and the next batch comes back here."""
        try:
            self.producer.renew(RENEW_WAIT_S)
        except KafkaException as error:
            log.warning("intake could not take its transactional id back yet (%s)", error)

    def _rewind(self) -> None:
        """Back to the committed input offsets: nothing of the failed batch reached Kafka. When the group does not
        say what they are within REWIND_WAIT_S, a new consumer joins the group in this one's place and reads from
        them: after all brokers restarted, a consumer's `committed` could time out for minutes on end, call after
        call, with the intake deaf to SIGTERM meanwhile."""
        raw = self.consumer.raw
        try:
            assigned = raw.assignment()
            if assigned:
                for tp in raw.committed(assigned, timeout=REWIND_WAIT_S):
                    raw.seek(tp if tp.offset >= 0 else type(tp)(tp.topic, tp.partition, 0))
        except KafkaException as error:
            self._rejoin(error)
        time.sleep(0.5)

    def _rejoin(self, why: KafkaException) -> None:
        """A new consumer in the group, subscribed to the same inputs; the old one leaves on a thread of its own
        (leaving can wait for a coordinator that does not answer). Until it has left or its session timed out,
        the group may hold its partitions back from the new one, which then reads them from the committed offsets:
        the failed batch is taken in once, only later."""
        log.warning("intake could not read its committed offsets (%s); joining the group again with a new "
                    "consumer", why)
        old, self.consumer = self.consumer, self._consumer()
        if self.inputs:
            self._subscribe(self.inputs)
        threading.Thread(target=old.close, name="intake-consumer-leaving", daemon=True).start()

    def _follow(self) -> None:
        """The follower thread: looks each FOLLOW_EVERY_S until the intake closes."""
        while not self._stopping.wait(FOLLOW_EVERY_S):
            self.look()

    def look(self) -> None:
        """Lists the input topics the cluster has and, every CHECK_EVERY_S while the subscription is up to date,
        which of them the group has assigned to no intake; `follow_inputs` acts on what was found."""
        try:
            metadata = self._admin.list_topics(timeout=FOLLOW_EVERY_S * 5)
        except KafkaException as error:  # no broker answers: the subscription stays as it is
            log.warning("intake could not list the input topics (%s)", error)
            return
        inputs = sorted(name for name in metadata.topics if name.startswith(self.topics.inputs))
        subscribed = self.inputs
        if inputs == subscribed and subscribed and time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + CHECK_EVERY_S
            self._checked = (subscribed, self._assigned_to_none(subscribed))
        self._listed = inputs

    def follow_inputs(self) -> None:
        """Subscribes to every input topic the follower listed: a new team's or node's topic is taken in within
        about a second. An explicit list rather than a pattern: librdkafka's pattern subscription can miss for good
        a topic created while its group rebalances (librdkafka#3008; seen here as node agents whose registrations
        were never taken in). A topic still assigned to no member one check later was missed by the group's last
        assignment in the same way: joining again makes the group assign it."""
        listed, self._listed = self._listed, None
        if listed and listed != self.inputs:
            self._subscribe(listed)
            return
        checked, self._checked = self._checked, None
        if checked is None or checked[0] != self.inputs:
            return  # no check, or one made against another subscription
        unassigned, self._unassigned = self._unassigned, checked[1]
        if unassigned & self._unassigned:
            log.warning("intake: %s assigned to no intake; joining the group again",
                        ", ".join(sorted(unassigned & self._unassigned)))
            self._subscribe(self.inputs)

    def _subscribe(self, inputs: list[str]) -> None:
        self.consumer.subscribe(inputs, lambda c, ps: c.assign(ps), lambda c, ps: None, missing_ok=True)
        self.inputs, self._unassigned = inputs, set()
        self._next_check = time.monotonic() + CHECK_EVERY_S

    def _assigned_to_none(self, subscribed: list[str]) -> set[str]:
        """The `subscribed` topics no member of the group holds while it is stable (none when it is not, or does
        not answer)."""
        try:
            group = self._admin.describe_consumer_groups([self.group])[self.group].result(timeout=CHECK_EVERY_S)
        except (KafkaException, TimeoutError):
            return set()
        if group.state is not ConsumerGroupState.STABLE:
            return set()
        assigned = {tp.topic for member in group.members if member.assignment is not None
                    for tp in member.assignment.topic_partitions}
        return set(subscribed) - assigned

    def poll_once(self, timeout: float = 0.5) -> int:
        self.follow_inputs()
        records = self.consumer.poll(self.batch_size, timeout)
        if not records:
            return 0
        events, beats, letters, headers = [], [], [], {}
        for record in records:
            event, why = take_in(self.topics, self.cells, record)
            if event is None:
                log.warning("dead-lettered %s offset %d: %s", record.topic, record.offset, why)
                letters.append(record.dead_letter(NAME, int(time.time() * 1000), reason=why))
                self.refused += 1
                continue
            headers[event.envelope.event_id] = self._span(record, event)
            (beats if isinstance(event, m.NodeHeartbeat) else events).append(event)
            self.taken += 1
        self.producer.write(events, beats, letters, consumer=self.consumer, consumed=records, give_up_after_s=10.0,
                            recover_fenced=False, headers=lambda e: headers.get(e.envelope.event_id))
        return len(records)

    def _span(self, record: LogRecord, event: m.Event) -> list[tuple[str, str]] | None:
        """A span for taking a traced input in (heartbeats are not traced); the headers the copy carries."""
        parent = record.header("traceparent")
        if parent is None or isinstance(event, m.NodeHeartbeat):
            return list(record.headers) or None
        job = m.field_of(event, "job_id")
        with self.tracer.span(f"intake {event.event_type}", parent=parent,
                              attributes={"job": job, "team": m.field_of(event, "team"),
                                          "origin": event.envelope.origin,
                                          "origin.offset": record.offset}) as span:
            return [("traceparent", span.traceparent)]


def _wait_for_name(admin: AdminClient, group: str, client_id: str) -> None:
    """Returns once no member of `group` goes by `client_id`; raises IntakeNameTaken if one stays NAME_WAIT_S. A group
    that does not answer is asked again (an intake never starts without knowing)."""
    deadline = time.monotonic() + NAME_WAIT_S
    while True:
        try:
            members = admin.describe_consumer_groups([group])[group].result(timeout=10).members
        except KafkaException:  # no such group yet, or its coordinator is still being found
            members = []
        except TimeoutError:  # no answer yet (its coordinator's broker failing over): ask again, and wait anew
            log.warning("intake %s: group %s did not say who is in it within 10 s; asking again", client_id, group)
            deadline = time.monotonic() + NAME_WAIT_S
            continue
        if not any(member.client_id == client_id for member in members):
            return
        if time.monotonic() > deadline:
            raise IntakeNameTaken(f"an intake named {client_id} is running (a member of group {group}): give "
                                  f"this one another --replica name")
        time.sleep(1.0)
