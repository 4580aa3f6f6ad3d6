"""The one way to read cells' logs: the committed records of their partitions of the main topic, from an
offset, up to an offset or to the end as it stands, or following it live.

Every command that reads a log (rebuild, verify, watch, the demo, the fleet's catch-up, the audit and
read-model commands) reads it through `LogReader`, so "the log" means the same thing everywhere: records
of committed transactions only, in offset order, each with its offset (undecodable ones included, with
`event` None, for the caller to skip or report).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence

from confluent_kafka import KafkaException, TopicPartition

from events.auth import READER, Credentials
from events.collector import paused_collections
from events.log import EventConsumer, LogRecord, retrying, transient
from events.topics import TopicNames, cell_partition, cells_from_env, topic_names

log = logging.getLogger(__name__)


#: How long `LogReader.close` waits for the consumer to close.
CLOSE_WAIT_S = 5.0
#: How long a read to the end waits in one poll before it asks again whether its position reached the end.
READ_WAIT_S = 0.05
#: How many records a read to the end takes a poll. A poll's records (fetched bytes, headers, claims) die
#: together, so a small batch keeps a long read's working set in the caches (docs/benchmarks.md: 4% faster than 2,000).
READ_BATCH = 500
#: How long librdkafka waits to fetch again once its queue of fetched records is full (its default: 1 s). A read
#: to the end (an audit's --cell, the read model's catch-up) drains a full queue in about a second, and then waited
#: out the rest of that second with nothing to read. The services keep librdkafka's default.
FETCH_QUEUE_BACKOFF_MS = 20


def default_bootstrap() -> str:
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


class LogReader:
    """Reads some cells' logs from given offsets (0 by default), without a consumer group's bookkeeping."""

    def __init__(self, cells: Sequence[str], bootstrap_servers: str | None = None, start: int | Mapping[str, int] = 0,
                 all_cells: Sequence[str] | None = None, topics: TopicNames | None = None,
                 topic: str | None = None, principal: str | Credentials | None = READER) -> None:
        self.all_cells = tuple(all_cells or cells_from_env())
        self.topics = topics or topic_names()
        self.topic = topic or self.topics.events  # the main log; the heartbeat topic for side input
        self.cells = tuple(cells)
        unknown = [c for c in self.cells if c not in self.all_cells]
        if unknown:
            raise ValueError(f"unknown cell {unknown[0]!r}; cells: {', '.join(self.all_cells)}")
        self.partitions = {cell_partition(self.all_cells, c): c for c in self.cells}
        self._consumer = EventConsumer(bootstrap_servers or default_bootstrap(), f"reader-{uuid.uuid4().hex}",
                                       self.topics, self.all_cells, principal=principal,
                                       **{"fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
        self.rewind(start)

    def rewind(self, start: int | Mapping[str, int]) -> None:
        """Reads on from `start` (one offset for every cell, or one per cell; 0 for a cell not named)."""
        self.starts = {c: max(0, start if isinstance(start, int) else start.get(c, 0)) for c in self.cells}
        self._consumer.raw.assign([TopicPartition(self.topic, p, self.starts[c])
                                   for p, c in sorted(self.partitions.items())])

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def answers(self, timeout: float = 5.0) -> bool:
        """Whether a broker answers within `timeout` seconds, asked over this reader's own connection (which its
        reads then use)."""
        try:
            self._consumer.raw.list_topics(self.topic, timeout=timeout)
        except KafkaException:
            return False
        return True

    def cell_of(self, record: LogRecord) -> str:
        return self.partitions[record.partition]

    def end_offsets(self, timeout: float = 30, attempts: int = 20) -> dict[str, int]:
        """Per cell, the offset after the last record a committed reader can see now (the last stable offset),
        asked up to `attempts` times while the brokers fail over, each waiting up to `timeout` seconds."""
        out = {}
        for partition, cell in sorted(self.partitions.items()):
            tp = TopicPartition(self.topic, partition)
            _, out[cell] = retrying(lambda tp=tp: self._consumer.raw.get_watermark_offsets(tp, timeout=timeout),
                                    attempts=attempts)
        return out

    def poll(self, timeout: float = 0.2, max_records: int = 2000) -> list[LogRecord]:
        """What has arrived, waiting up to `timeout` for the first record; raises an error librdkafka met (after
        the records around it: `EventConsumer.poll`). Readers that follow the log live call `follow`."""
        return self._consumer.poll(max_records, timeout)

    def follow(self, timeout: float = 0.2, max_records: int = 2000) -> list[LogRecord]:
        """`poll`, for a reader that follows the log live and must outlast a broker's failover (the node agent, the
        simulated fleet): an error a failover explains reads as nothing new, and the reader keeps its place
        (librdkafka fetches again once a leader answers; `EventConsumer.poll` delivers a batch's records before its
        error). Any other error is raised."""
        try:
            return self.poll(timeout, max_records)
        except KafkaException as error:
            if not transient(error):
                raise
            log.warning("reading %s: %s; reading on once the brokers answer", ", ".join(self.cells), error)
            return []

    def read(self, to: int | None = None) -> Iterator[LogRecord]:
        """Records up to offset `to` (inclusive) or, without it, to the end as it stands when called."""
        ends = self.end_offsets()
        if to is not None:
            ends = {cell: min(end, to + 1) for cell, end in ends.items()}
        done = {cell for cell, end in ends.items() if self.position(cell) >= end}
        partitions = self.partitions  # each record's cell (`cell_of`)
        while len(done) < len(self.cells):
            # Briefly: a log ends with its last transaction's commit marker, which no poll returns, so the poll
            # after the last record would wait its whole timeout although the position passed the marker at once.
            for record in self.follow(READ_WAIT_S, READ_BATCH):
                cell = partitions[record.partition]
                if cell in done:
                    continue
                offset, end = record.offset, ends[cell]
                if offset < end:
                    yield record
                if offset + 1 >= end:
                    done.add(cell)
            # Control records (transaction markers) take offsets no record shows: the position tells.
            done |= {cell for cell, end in ends.items() if self.position(cell) >= end}

    def position(self, cell: str) -> int:
        """The offset the next read of the cell starts at (past transaction markers, unlike the last record's)."""
        partition = cell_partition(self.all_cells, cell)
        position = self._consumer.raw.position([TopicPartition(self.topic, partition)])[0].offset
        return max(position, self.starts[cell])  # before the first fetch the position is not known yet

    def close(self, timeout: float = CLOSE_WAIT_S) -> None:
        """Closes the consumer, waiting at most `timeout` seconds. A reader commits nothing and its group is its own,
        so nothing is lost when the close is left to the process's exit: librdkafka's close can wait on the group's
        coordinator for minutes after the brokers restarted, which kept a stopping agent from exiting (the
        broker-fault test's agent, its stack in consumer.close a minute after SIGTERM)."""
        closing = threading.Thread(target=self._consumer.close, name="reader-close", daemon=True)
        closing.start()
        closing.join(timeout)
        if closing.is_alive():
            log.warning("the log reader's consumer did not close within %.0f s; left to close with the process", timeout)


def read_log(cell: str, bootstrap_servers: str | None = None, start: int = 0, to: int | None = None,
             all_cells: Sequence[str] | None = None, topics: TopicNames | None = None) -> list[LogRecord]:
    """One cell's committed log from `start` up to `to` or its end, as records."""
    with LogReader([cell], bootstrap_servers, start, all_cells, topics) as reader, paused_collections():
        return list(reader.read(to))


def await_on_log(event_ids: Iterable[str], cells: Sequence[str], bootstrap_servers: str | None = None,
                 all_cells: Sequence[str] | None = None, topics: TopicNames | None = None,
                 timeout: float = 30.0) -> set[str]:
    """Follows the cells' logs until every one of `event_ids` is on them (the intake has taken in what a writer
    wrote to its input topics: inputs of different topics are ordered only once there); returns the ids still
    missing when `timeout` seconds have passed (empty when all arrived)."""
    missing = set(event_ids)
    deadline = time.monotonic() + timeout
    with LogReader(cells, bootstrap_servers, 0, all_cells, topics) as reader:
        while missing and time.monotonic() < deadline:
            for record in reader.follow(0.2):
                if record.event is not None:
                    missing.discard(record.event.envelope.event_id)
    return missing
