"""Avro single-object encoding of events: `C3 01`, the writer schema's CRC-64-AVRO, then the body.

Decoding resolves the fingerprint to the writer's schema among every released version and
reads it into the current schema, so a record written years ago still decodes today.
Anything that cannot be decoded raises `UndecodableEvent` saying why.
"""

from __future__ import annotations

import io
from enum import StrEnum

from fastavro import schemaless_reader, schemaless_writer
from pydantic import ValidationError

from events.decoder import Damaged, reader_for
from events.encoder import Writer, writer_for
from events.models import EVENT_TYPES_BY_NAME, Event
from events.schema_catalogue import SchemaCatalogue, SchemaVersion, default_catalogue

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8


class Undecodable(StrEnum):
    """The ways bytes fail to be an event; carried to the dead-letter topic."""

    NOT_SINGLE_OBJECT = "NOT_SINGLE_OBJECT"
    UNKNOWN_FINGERPRINT = "UNKNOWN_FINGERPRINT"
    UNKNOWN_EVENT_TYPE = "UNKNOWN_EVENT_TYPE"
    CORRUPT_BODY = "CORRUPT_BODY"
    SCHEMA_VIOLATION = "SCHEMA_VIOLATION"


class UndecodableEvent(ValueError):
    """Bytes that are not a Gangway event; `why` classifies the failure, the message explains it."""

    def __init__(self, why: Undecodable, message: str) -> None:
        super().__init__(f"{why.value}: {message}")
        self.why = why


class EventCodec:
    """Encodes events with the current schemas and decodes any released version."""

    def __init__(self, catalogue: SchemaCatalogue | None = None) -> None:
        self.catalogue = catalogue or default_catalogue()
        missing = sorted(set(EVENT_TYPES_BY_NAME) - set(self.catalogue.current))
        if missing:
            raise RuntimeError(f"schemas/ lacks a schema for {', '.join(missing)}: run `gangway schemas write`")
        #: the header (magic and fingerprint) of each of today's schemas -> its version: most records of a log
        #: are read straight by its generated reader, with no lookup by number
        self._current = {MAGIC + version.fingerprint_bytes: version for version in self.catalogue.current.values()
                         if version.name in EVENT_TYPES_BY_NAME}
        self._writers: dict[type, Writer] = {}  # each event type's generated writer (events/encoder.py), once used

    def encode(self, event: Event) -> bytes:
        writer = self._writers.get(type(event))
        if writer is None:
            version = self.catalogue.current[type(event).__name__]
            try:
                writer = writer_for(version, MAGIC + version.fingerprint_bytes)
            except TypeError:  # a schema with a type the generated writers do not write: fastavro writes it
                writer = self._by_fastavro
            self._writers[type(event)] = writer
        try:
            return writer(event)
        except Exception:  # a value of a type a validated model never holds (events/encoder.py): as fastavro has it
            return self._by_fastavro(event)

    def _by_fastavro(self, event: Event) -> bytes:
        version = self.catalogue.current[type(event).__name__]
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(version.fingerprint_bytes)
        schemaless_writer(out, version.parsed, event.model_dump())
        return out.getvalue()

    def decode(self, data: bytes | None) -> Event:
        current = self._current.get(data[:HEADER_SIZE]) if data is not None else None
        if current is not None:
            return _read_current(current, data)
        if data is None or len(data) < HEADER_SIZE or data[:2] != MAGIC:
            raise UndecodableEvent(
                Undecodable.NOT_SINGLE_OBJECT,
                f"expected Avro single-object encoding (C3 01 + 8-byte fingerprint), got {_preview(data)}",
            )
        fingerprint = int.from_bytes(data[2:HEADER_SIZE], "little")
        writer = self.catalogue.writer(fingerprint)
        if writer is None:
            raise UndecodableEvent(
                Undecodable.UNKNOWN_FINGERPRINT,
                f"no released schema has fingerprint {fingerprint:016x}; was it written by a newer Gangway?",
            )
        model = EVENT_TYPES_BY_NAME.get(writer.name)
        reader = self.catalogue.current.get(writer.name)
        if model is None or reader is None:
            raise UndecodableEvent(Undecodable.UNKNOWN_EVENT_TYPE, f"{writer.name} is no longer an event type")
        if writer.fingerprint == reader.fingerprint:
            return _read_current(writer, data)
        body = io.BytesIO(data[HEADER_SIZE:])
        try:
            record = schemaless_reader(body, writer.parsed, reader.parsed)
        except Exception as error:  # fastavro raises many types for truncated or garbled bodies
            raise UndecodableEvent(
                Undecodable.CORRUPT_BODY, f"{writer.name} v{writer.version} body unreadable: {error!r}"
            ) from error
        if body.tell() != len(data) - HEADER_SIZE:
            raise UndecodableEvent(
                Undecodable.CORRUPT_BODY,
                f"{writer.name} v{writer.version} body has {len(data) - HEADER_SIZE - body.tell()} trailing bytes",
            )
        try:
            return model.model_validate(record)
        except ValidationError as error:
            raise UndecodableEvent(Undecodable.SCHEMA_VIOLATION, f"{writer.name}: {error}") from error


def _read_current(writer: SchemaVersion, data: bytes) -> Event:
    """A record of today's schema, read by its type's generated reader (events/decoder.py)."""
    try:
        event, end = reader_for(writer)(data, HEADER_SIZE, len(data))
    except (Damaged, IndexError, UnicodeDecodeError) as error:
        raise UndecodableEvent(Undecodable.CORRUPT_BODY,
                               f"{writer.name} v{writer.version} body unreadable: {error}") from None
    if end != len(data):
        raise UndecodableEvent(Undecodable.CORRUPT_BODY,
                               f"{writer.name} v{writer.version} body has {len(data) - end} trailing bytes")
    return event


def _preview(data: bytes | None) -> str:
    if data is None:
        return "no value (null record)"
    return f"{len(data)} bytes starting {data[:8].hex(' ')}"
