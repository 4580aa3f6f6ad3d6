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
import time
from collections.abc import Sequence

from confluent_kafka import KafkaException

from events import models as m
from events.auth import service_principal
from events.codec import EventCodec
from events.log import EventConsumer, EventProducer, LogRecord, ProducerFenced
from events.topics import TopicNames
from events.tracing import Tracer
from projections.validate import not_its_writer
from services.stop import StopRequest

log = logging.getLogger("gangway.intake")

NAME = "intake"
REPLICA_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
#: Fenced twice within this many seconds, an intake stops: another one runs under its name.
REFENCED_WITHIN_S = 60.0


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


class Intake:
    """One intake replica. Replicas share the input topics through their consumer group, so when one stops
    another takes over what it read. Each has a transactional id of its own (`gangway-intake`, or
    `gangway-intake-<replica>`): the same replica restarted fences what it left open, and one the group has
    moved on from is fenced by the group's generation when it commits (KIP-447), so nothing is taken in twice."""

    def __init__(self, bootstrap: str, topics: TopicNames, cells: Sequence[str], name_prefix: str = "",
                 batch_size: int = 500, tracer: Tracer | None = None, replica: str = "") -> None:
        if replica and not REPLICA_NAME.fullmatch(replica):
            raise ValueError(f"intake replica name {replica[:40]!r}: use 1-32 of a-z, 0-9 and '-'")
        self.topics, self.cells = topics, tuple(cells)
        self.batch_size = batch_size
        self.codec = EventCodec()
        self.tracer = tracer or Tracer(NAME)
        principal = service_principal(NAME)
        # New input topics (a new team or node) are found within a second. Each has one partition: round robin
        # deals them out among the replicas (the range assignor would give every partition 0 to one of them).
        self.consumer = EventConsumer(bootstrap, f"{name_prefix}gangway-{NAME}", topics, cells, principal=principal,
                                      **{"topic.metadata.refresh.interval.ms": 1000,
                                         "partition.assignment.strategy": "roundrobin"})
        self.consumer.subscribe([f"^{re.escape(topics.inputs)}.*"], lambda c, ps: c.assign(ps),
                                lambda c, ps: None)
        self.transactional_id = f"{name_prefix}gangway-{NAME}" + (f"-{replica}" if replica else "")
        self._producer = lambda: EventProducer(bootstrap, self.transactional_id, topics, cells, principal=principal)
        self.producer = self._producer()
        self.fenced_at = -REFENCED_WITHIN_S
        self.taken = self.refused = 0

    def run(self, max_polls: int | None = None, stop: StopRequest | None = None) -> int:
        """Takes input in until stopped (SIGTERM / SIGINT, or `stop` if the caller listens already) or
        `max_polls` polls: 0. Fenced for good (another intake runs under this one's name): 1."""
        stop = stop or StopRequest.listen()
        polls = 0
        try:
            while not stop.asked and (max_polls is None or polls < max_polls):
                try:
                    self.poll_once()
                except ProducerFenced as error:
                    # A coordinator's failover can fence a producer once: a new one takes the id back. Fenced
                    # again soon after, another intake runs under this one's name and the two would take turns.
                    if time.monotonic() - self.fenced_at < REFENCED_WITHIN_S:
                        log.error("another intake runs as %s and fenced this one (%s): stopping; give each intake "
                                  "its own --replica name", self.transactional_id, error)
                        return 1
                    log.warning("intake fenced (%s); taking its transactional id back", error)
                    self.fenced_at = time.monotonic()
                    self.producer = self._producer()
                    self._rewind()
                except KafkaException as error:
                    log.warning("intake batch not committed (%s); reading it again", error)
                    self._rewind()
                polls += 1
            return 0
        finally:
            self.consumer.close()
            self.producer.flush()
            self.tracer.shutdown()

    def _rewind(self) -> None:
        """Back to the committed input offsets: nothing of the failed batch reached Kafka."""
        raw = self.consumer.raw
        assigned = raw.assignment()
        if assigned:
            for tp in self.consumer.committed(assigned):
                raw.seek(tp if tp.offset >= 0 else type(tp)(tp.topic, tp.partition, 0))
        time.sleep(0.5)

    def poll_once(self, timeout: float = 0.5) -> int:
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
