"""Where an audit command reads a cell's log: a live cell on Kafka (`--cell C`, through the one log reader,
events/reader.py) or a log exported to a file (`--log FILE`, events/logfile.py). Both give the same `Log`,
the cell's records as (offset, event) in log order, so every audit command has one input path and gives the
same answers from either.

Positions (`--at`, `--from`, `--to`) are an offset (digits) or an event time (ISO 8601, UTC unless it says
otherwise: `2024-05-01T10:00`, `2024-05-01 10:00:00+02:00`).
"""

from __future__ import annotations

import argparse
import os
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import itemgetter
from pathlib import Path

from events import models as m
from events.collector import paused_collections, rare_collections
from events.command import guarded
from events.logfile import NotALogFile, offsets_problem, read_log_file
from events.topics import cells_from_env


class AuditError(Exception):
    """Input an audit command cannot work with (no such job, an offset beyond the log, a file that is not an
    exported log, an unknown policy): one line for the user, exit 1."""


@dataclass(frozen=True)
class Log:
    """A cell's log as an audit command reads it."""

    cell: str
    records: list[tuple[int, m.Event]]
    origin: str  # where it was read from, for messages
    read_to: int = -1  # a live cell read only this far: the log goes on past its records

    @property
    def last_offset(self) -> int:
        return max(self.records[-1][0] if self.records else -1, self.read_to)


@dataclass(frozen=True)
class Position:
    """A point in a log: an offset, or an event time (ms since the epoch)."""

    offset: int | None = None
    at: int | None = None

    def __str__(self) -> str:
        return str(self.offset) if self.offset is not None else _time_text(self.at or 0)

    def reached(self, offset: int, event: m.Event) -> bool:
        """Whether the record lies at or before this position."""
        return offset <= self.offset if self.offset is not None else event.envelope.at <= (self.at or 0)


def position(text: str) -> Position:
    """`argparse` type: an offset or an ISO 8601 time."""
    text = text.strip()
    if text.isdigit():
        return Position(offset=int(text))
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither an offset nor an ISO 8601 time "
                                         "(e.g. 1200, 2024-05-01T10:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return Position(at=int(moment.timestamp() * 1000))


def _time_text(at: int) -> str:
    try:
        moment = datetime.fromtimestamp(at / 1000, timezone.utc)
    except (ValueError, OverflowError, OSError):  # beyond the calendar
        return f"{at} ms"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ").replace(".000000Z", "Z")


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """`--cell C` (a live cell, read from Kafka) or `--log FILE` (an exported log)."""
    group = parser.add_argument_group("the log to read (one of)")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--cell", default=None,
                        help="a live cell, read from Kafka (default: the first of $GANGWAY_CELLS)")
    source.add_argument("--log", type=Path, default=None, metavar="FILE",
                        help="a log exported by `gangway log export` or `gangway scenario run --export-log`")
    group.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))


def read_source(args: argparse.Namespace, until: Position | None = None) -> Log:
    """The log `--cell` or `--log` names. With `until` an offset, a live cell is read only that far (the state at an
    early offset of a long log need not wait for the rest of it). Raises AuditError."""
    if getattr(args, "log", None) is not None:
        return read_file(args.log)
    return read_cell(args.cell, args.bootstrap_servers, to=until.offset if until is not None else None)


def read_file(path: str | Path) -> Log:
    try:
        exported = read_log_file(path)
    except NotALogFile as error:
        raise AuditError(str(error)) from None
    problem = offsets_problem(exported.records)
    if problem:
        raise AuditError(f"{path}: {problem}")
    if exported.metadata.get("partial") == "true":
        raise AuditError(f"{path}: holds the log from offset {exported.records[0][0] if exported.records else '-'} "
                         f"only (exported with --from); audits fold a cell's log from its beginning")
    return Log(exported.cell, exported.records, str(path))


def read_cell(cell: str | None, bootstrap: str, cells: Sequence[str] | None = None, to: int | None = None) -> Log:
    """A live cell's committed log from offset 0, as it stands now, or up to offset `to` (undecodable records are
    left out: they never reached a decider either)."""
    from confluent_kafka import KafkaException  # only a live cell needs Kafka: reading a file starts faster

    from events.broker import unreachable
    from events.reader import LogReader

    cells = tuple(cells or cells_from_env())
    cell = cell or cells[0]
    if cell not in cells:
        raise AuditError(f"unknown cell {cell!r}; cells: {', '.join(cells)} ($GANGWAY_CELLS)")
    try:  # each record's bytes and headers are let go as soon as it is read: only its event is kept
        with LogReader([cell], bootstrap, all_cells=cells) as reader, paused_collections():
            problem = unreachable(bootstrap, hint=", or read an exported log with --log FILE", answers=reader.answers)
            if problem:
                raise AuditError(problem)
            short = to is not None and to + 1 < reader.end_offsets()[cell]  # records come after `to`
            records = [(r.offset, r.event) for r in reader.read(to) if r.event is not None]
    except KafkaException as error:
        raise AuditError(f"reading cell {cell}: {error}") from None
    return Log(cell, records, f"cell {cell}", read_to=to if short else -1)


def upto(log: Log, at: Position | None) -> list[tuple[int, m.Event]]:
    """The records at or before `at` (all without it). Raises AuditError for an offset beyond the log."""
    if at is None:
        return log.records
    if at.offset is not None and at.offset > log.last_offset:
        raise AuditError(_beyond(at.offset, log))
    if at.at is not None and log.records and at.at < log.records[0][1].envelope.at:
        raise AuditError(f"{at} is before the log of {log.origin} begins ({_time_text(log.records[0][1].envelope.at)})")
    if at.offset is not None:  # a log's offsets only grow (read_file checks): the records up to one are a prefix
        return log.records[:bisect_right(log.records, at.offset, key=itemgetter(0))]
    return [(offset, event) for offset, event in log.records if at.reached(offset, event)]


def _beyond(offset: int, log: Log) -> str:
    return f"offset {offset} is beyond the log of {log.origin} (its last offset is {log.last_offset})"


def window(log: Log, start: Position | None, end: Position | None) -> list[tuple[int, m.Event]]:
    """The records from `start` to `end`, both included (offsets or times)."""
    records = upto(log, end)
    if start is None:
        return records
    if start.offset is not None and start.offset > log.last_offset:
        raise AuditError(_beyond(start.offset, log))
    kept = [(o, e) for o, e in records if start.offset is not None and o >= start.offset
            or start.at is not None and e.envelope.at >= start.at]
    if not kept:
        raise AuditError(f"no records of {log.origin} from {start} to {end or 'its end'}")
    return kept


def audited(name: str, body: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Runs an audit command: bad input is one line on stderr, prefixed with the command, and exit 1. It reads
    and folds a whole log, so the garbage collector runs rarely meanwhile (events/collector.py)."""
    def paced(args: argparse.Namespace) -> int:
        with rare_collections():
            return body(args)
    return guarded(name, paced, AuditError)
