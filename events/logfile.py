"""A cell's log as a portable file: an Avro Object Container File of (offset, event) records.

The file's header carries the writer schema, a record `gangway.log.LoggedEvent` of the offset and a union of
every event record (each named type defined once), so any Avro tool reads it (`avro-tools tojson`, fastavro,
Apache Avro's DataFileReader). Gangway's metadata says which cell and part of the log it holds. A file
written by an older Gangway is read into today's models the way the codec reads old records: by schema
resolution against the current union.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro import parse_schema
from fastavro.schema import to_parsing_canonical_form
from pydantic import ValidationError

from events.collector import paused_collections
from events.decoder import Damaged, read_long, reader_for
from events.models import EVENT_TYPES, EVENT_TYPES_BY_NAME, Event
from events.schema_catalogue import default_catalogue

FORMAT = "gangway-log/1"
RECORD = "gangway.log.LoggedEvent"
_META = "gangway."  # prefix of Gangway's keys in the file's metadata


class NotALogFile(ValueError):
    """A file that is not a log exported by Gangway (or is damaged); the message says which and why, in one line."""


@dataclass(frozen=True)
class LogFile:
    """What an exported log holds: its cell, its records in log order, and where it came from."""

    cell: str
    records: list[tuple[int, Event]]
    metadata: dict[str, str] = field(default_factory=dict)


@cache
def log_schema() -> dict[str, Any]:
    """The file's record: the offset, and the event as a union of every current event schema."""
    defined: set[str] = set()
    union = [_define_once(copy.deepcopy(default_catalogue().current[cls.__name__].schema), defined)
             for cls in EVENT_TYPES]
    return {"type": "record", "name": "LoggedEvent", "namespace": "gangway.log",
            "doc": "one record of a cell's log: its offset in the cell's partition and the event",
            "fields": [{"name": "offset", "type": "long"}, {"name": "event", "type": union}]}


def _define_once(schema: Any, defined: set[str], namespace: str = "gangway") -> Any:
    """The schema with every named type already `defined` replaced by its full name, so the union of
    self-contained event schemas names Envelope, Reason and the rest once."""
    if isinstance(schema, list):
        return [_define_once(s, defined, namespace) for s in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed"):
        space = schema.get("namespace", namespace)
        name = schema["name"] if "." in schema["name"] else f"{space}.{schema['name']}"
        if name in defined:
            return name
        defined.add(name)
        if kind == "record":
            for f in schema["fields"]:
                f["type"] = _define_once(f["type"], defined, space)
        return schema
    if kind == "array":
        schema["items"] = _define_once(schema["items"], defined, namespace)
    elif kind == "map":
        schema["values"] = _define_once(schema["values"], defined, namespace)
    elif isinstance(kind, (dict, list)):
        schema["type"] = _define_once(kind, defined, namespace)
    return schema


@cache
def _parsed() -> Any:
    return parse_schema(log_schema())


def _canonical(schema: dict[str, Any]) -> str:
    return to_parsing_canonical_form(parse_schema(schema, _write_hint=False))


class CannotWriteLog(OSError):
    """The file an exported log was to go to cannot be written; the message names it and why, in one line."""


def write_log_file(path: str | Path, cell: str, records: Iterable[tuple[int, Event]], source: str = "",
                   partial: bool = False) -> int:
    """Writes (offset, event) records to `path` (deflate blocks); returns how many. The sync marker is derived
    from the cell and source, so exporting the same log twice gives the same bytes. `partial`: the records do
    not start at the log's beginning (the audits, which fold from there, refuse such a file)."""
    kept = list(records)
    metadata = {f"{_META}format": FORMAT, f"{_META}cell": cell, f"{_META}source": source,
                f"{_META}records": str(len(kept)),
                f"{_META}first_offset": str(kept[0][0]) if kept else "",
                f"{_META}last_offset": str(kept[-1][0]) if kept else ""}
    if partial:
        metadata[f"{_META}partial"] = "true"
    sync = hashlib.sha256(f"{FORMAT}|{cell}|{source}".encode()).digest()[:16]
    rows = ({"offset": offset, "event": (f"gangway.{event.event_type}", event.model_dump())} for offset, event in kept)
    try:
        with open(path, "wb") as out:
            fastavro.writer(out, _parsed(), rows, codec="deflate", metadata=metadata, sync_marker=sync)
    except OSError as error:
        raise CannotWriteLog(f"cannot write {path}: {error.strerror or error}") from None
    return len(kept)


def read_log_file(path: str | Path) -> LogFile:
    """The records of an exported log, validated into events. Raises NotALogFile, saying why in one line."""
    source = str(path)
    try:
        handle = open(path, "rb")
    except OSError as error:
        raise NotALogFile(f"{source}: cannot read: {error.strerror or error}") from None
    with handle:
        try:
            reader = fastavro.reader(handle, return_record_name=True)
        except Exception as error:  # fastavro raises ValueError or others for bytes that are not Avro
            raise NotALogFile(f"{source} is not an exported Gangway log (not an Avro container file: {error})") \
                from None
        metadata = {k.removeprefix(_META): v.decode() if isinstance(v, bytes) else v
                    for k, v in reader.metadata.items() if k.startswith(_META)}
        if metadata.get("format") != FORMAT:
            raise NotALogFile(f"{source} is an Avro file but not an exported Gangway log (no {FORMAT} metadata)")
        written = json.loads(reader.metadata["avro.schema"])
        if not isinstance(written, dict) or written.get("name") not in (RECORD, "LoggedEvent"):
            raise NotALogFile(f"{source}: its records are not {RECORD}")
        current = _canonical(written) == _canonical(log_schema())
        handle.seek(0)
        try:
            with paused_collections():
                if current:  # today's schema: the generated readers build the events straight from the bytes
                    records = _read_blocks(fastavro.block_reader(handle))
                else:  # written by another Gangway version: resolve each record into today's schema
                    reader = fastavro.reader(handle, reader_schema=_parsed(), return_record_name=True)
                    records = [(row["offset"], _event(*row["event"])) for row in reader]
        except NotALogFile as error:
            raise NotALogFile(f"{source}: {error}") from None
        except Exception as error:
            raise NotALogFile(f"{source}: damaged: {error}") from None
    _whole(source, records, metadata)
    return LogFile(metadata.get("cell", ""), records, metadata)


def _whole(source: str, records: list[tuple[int, Event]], metadata: dict[str, str]) -> None:
    """Refuses a file cut short (or added to) at a block's end, which Avro alone cannot tell: it must hold the
    records its header counts, up to the last offset it names."""
    count, last = metadata.get("records", ""), metadata.get("last_offset", "")
    if count.isdigit() and int(count) != len(records):
        raise NotALogFile(f"{source}: truncated or altered: it holds {len(records):,} records, its header says "
                          f"{int(count):,}")
    if records and last.lstrip("-").isdigit() and records[-1][0] != int(last):
        raise NotALogFile(f"{source}: truncated or altered: its last record is at offset {records[-1][0]}, its "
                          f"header says {last}")


def _read_blocks(blocks: Iterable[Any]) -> list[tuple[int, Event]]:
    """The (offset, event) records of the file's blocks, each decoded by its type's generated reader."""
    current = default_catalogue().current
    # log_schema's union, in its order; each type's reader is made when its first record comes (~2 ms each)
    union: list[Callable | None] = [None] * len(EVENT_TYPES)
    kinds = len(union)
    records: list[tuple[int, Event]] = []
    append = records.append
    for block in blocks:
        buf = block.bytes_.getvalue()
        p, end = 0, len(buf)
        try:
            for _ in range(block.num_records):
                offset, p = read_long(buf, p)
                branch = buf[p]  # the union's index: one byte for the first 64 event types
                p += 1
                if branch >= 0x80 or branch & 1 or branch >> 1 >= kinds:
                    raise Damaged(f"a record of event type {read_long(buf, p - 1)[0]}, of {kinds}")
                read = union[branch >> 1]
                if read is None:
                    read = union[branch >> 1] = reader_for(current[EVENT_TYPES[branch >> 1].__name__])
                event, p = read(buf, p, end)
                append((offset, event))
        except IndexError:
            raise Damaged(f"a record runs past the end of its block ({block.num_records} records)") from None
        except UnicodeDecodeError as error:
            raise Damaged(f"a string that is not UTF-8 ({error.reason} at its byte {error.start})") from None
        if p != end:
            raise Damaged(f"a block has {end - p} bytes after its {block.num_records} records")
    return records


def _event(name: str, body: dict[str, Any]) -> Event:
    validate = _validators().get(name)
    if validate is None:
        raise NotALogFile(f"{name} is not an event type")
    try:
        return validate(body)
    except ValidationError as error:
        raise NotALogFile(f"a {name} record does not validate: {error.errors()[0]['msg']}") from None


@cache
def _validators() -> dict[str, Callable[[dict[str, Any]], Event]]:
    """Each event type's validator by the full name of its record in the file: a read calls it per record, so
    it skips `model_validate`'s lookups (a tenth of a whole read)."""
    return {f"gangway.{name}": model.__pydantic_validator__.validate_python
            for name, model in EVENT_TYPES_BY_NAME.items()}


def offsets_problem(records: Sequence[tuple[int, Event]]) -> str:
    """Why the records cannot be a cell's log in order (an offset repeated or going back), or ''."""
    last = -1
    for i, (offset, _) in enumerate(records):
        if offset <= last:
            return f"record {i} has offset {offset} after offset {last}: the log's order was altered"
        last = offset
    return ""
