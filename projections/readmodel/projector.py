"""The read-model projector: follows cells' committed logs (events/reader.py) and folds each batch into the
read model, the batch's rows and the cell's offset in one RocksDB write batch; a restart resumes after the
stored offset. It also knows how far behind the log it is, per cell, for /healthz and /metrics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from events.log import LogRecord, transient
from events.reader import LogReader
from events.topics import TopicNames
from projections.cell import CellState
from projections.readmodel.store import ReadModelStore

log = logging.getLogger("gangway.readmodel")

#: How long a lag measure waits for a cell's end offset, asked once.
LAG_QUERY_S = 5.0

#: Called after each written batch with the cell, its new offset and the batch's stream items.
BatchListener = Callable[[str, int, list[dict[str, Any]]], None]


@dataclass
class Lag:
    """How far a cell's read model is behind its log, as last measured."""

    offset: int = -1  # last folded
    end: int = 0  # the log's end (last stable offset) when last asked
    behind: int = 0  # records between the projector's position and that end
    caught_up_at: float = 0.0  # monotonic time the projector last stood at the end

    def seconds(self, now: float) -> float:
        return 0.0 if self.behind == 0 else max(0.0, now - self.caught_up_at)


class Projector:
    """Folds some cells' logs into one read-model store."""

    def __init__(self, store: ReadModelStore, cells: Sequence[str], bootstrap: str | None = None,
                 all_cells: Sequence[str] | None = None, topics: TopicNames | None = None,
                 on_batch: BatchListener | None = None) -> None:
        self.store, self.cells = store, tuple(cells)
        self.bootstrap, self.all_cells, self.topics = bootstrap, tuple(all_cells or cells), topics
        self.on_batch = on_batch
        self.folds = {cell: store.load(cell) for cell in self.cells}
        self.lock = threading.RLock()  # held while a batch is folded; readers of the in-memory state take it too
        self.lag = {cell: Lag(offset=self.folds[cell].state.offset, caught_up_at=time.monotonic())
                    for cell in self.cells}
        self.folded_events = 0
        for cell, fold in self.folds.items():
            if store.offset(cell) is None:
                store.apply(fold.initial_rows())

    @contextmanager
    def state(self, cell: str) -> Iterator[CellState]:
        """The cell's folded state, held still while the caller reads it."""
        with self.lock:
            yield self.folds[cell].state

    def fold(self, cell: str, records: Sequence[tuple[int, Any]]) -> None:
        """Folds one cell's records (offset, event or None) and writes the batch."""
        with self.lock:
            fold = self.folds[cell]
            changes = fold.fold(records)
            self.store.apply(changes)
            offset = fold.state.offset
        self.folded_events += len(records)
        self.lag[cell].offset = offset
        if self.on_batch is not None:
            self.on_batch(cell, offset, changes.stream)

    def _fold_records(self, reader: LogReader, records: list[LogRecord]) -> None:
        by_cell: dict[str, list[tuple[int, Any]]] = {}
        for record in records:
            by_cell.setdefault(reader.cell_of(record), []).append((record.offset, record.event))
        for cell, batch in sorted(by_cell.items()):
            self.fold(cell, batch)

    def _reader(self) -> LogReader:
        starts = {cell: fold.state.offset + 1 for cell, fold in self.folds.items()}
        return LogReader(self.cells, self.bootstrap, starts, self.all_cells, self.topics)

    def catch_up(self) -> None:
        """Folds every cell's log to its end as it stands now."""
        with self._reader() as reader:
            batch: list[LogRecord] = []
            for record in reader.read():
                batch.append(record)
                if len(batch) >= 2000:
                    self._fold_records(reader, batch)
                    batch = []
            if batch:
                self._fold_records(reader, batch)

    def follow(self, stop: threading.Event, lag_every_s: float = 0.5) -> None:
        """Folds what arrives until `stop` is set, measuring the lag every `lag_every_s` seconds. While the brokers
        do not answer (a failover, all of them restarting) it waits and carries on, with a new reader from what it
        has folded; meanwhile no cell counts as caught up, so the lag grows from the last moment one was. An error
        no failover explains is raised."""
        while not stop.is_set():
            with self._reader() as reader:  # from the offsets folded so far
                outage = self._follow(reader, stop, lag_every_s)
            if outage is None:
                return
            log.warning("read model: the brokers do not answer (%s); following again in 1 s", outage)
            for lag in self.lag.values():
                lag.behind = max(lag.behind, 1)
            stop.wait(1.0)

    def _follow(self, reader: LogReader, stop: threading.Event, lag_every_s: float) -> KafkaException | None:
        """Folds what `reader` reads until `stop` is set (None) or an error a failover explains (returned). The
        poll that met such an error may have taken records from the client that it never returned: reading goes on
        with a new reader, from what was folded, so none is skipped."""
        measured = 0.0
        while not stop.is_set():
            try:
                records = reader.poll(0.1)
                if records:
                    self._fold_records(reader, records)
                if time.monotonic() - measured >= lag_every_s:
                    measured = time.monotonic()
                    self._measure(reader)
            except KafkaException as error:
                if not transient(error):
                    raise
                return error
        return None

    def _measure(self, reader: LogReader) -> None:
        now = time.monotonic()
        # Asked once, briefly: retried for minutes, as a one-off read does, it would hold up the folding of what
        # keeps arriving; a measure that fails counts as the outage it is (`follow`).
        for cell, end in reader.end_offsets(timeout=LAG_QUERY_S, attempts=1).items():
            lag = self.lag[cell]
            lag.end = end
            lag.behind = max(0, end - reader.position(cell))
            if lag.behind == 0:
                lag.caught_up_at = now


def rebuild(store: ReadModelStore, cells: Sequence[str], bootstrap: str | None = None,
            all_cells: Sequence[str] | None = None, topics: TopicNames | None = None) -> Projector:
    """Folds the cells' logs from offset 0 into `store` (which should be empty)."""
    projector = Projector(store, cells, bootstrap, all_cells, topics)
    projector.catch_up()
    return projector
