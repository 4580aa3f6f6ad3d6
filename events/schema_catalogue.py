"""The schemas/ folder as data: each record's current schema and every version ever released.

Layout: `schemas/<Name>.avsc` is the current schema (what readers resolve to) and
`schemas/history/<Name>/v<N>.avsc` keeps every released version, the newest equal to the
current one. Writers' fingerprints map to these versions, so old records stay readable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import to_parsing_canonical_form

SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"

_CRC64_EMPTY = 0xC15D213AA4D7A795


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_CRC64_EMPTY & -(fp & 1))
        table.append(fp)
    return table


_CRC64_TABLE = _crc64_table()


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO (the Rabin fingerprint of the Avro spec) of some bytes."""
    fp = _CRC64_EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _CRC64_TABLE[(fp ^ byte) & 0xFF]
    return fp


@dataclass(frozen=True)
class SchemaVersion:
    """One released version of one record schema."""

    name: str
    version: int
    schema: dict[str, Any]
    parsed: Any
    fingerprint: int

    @property
    def fingerprint_bytes(self) -> bytes:
        """The 8-byte little-endian fingerprint that single-object encoding puts after `C3 01`."""
        return self.fingerprint.to_bytes(8, "little")


def fingerprint_of(schema: dict[str, Any]) -> int:
    return crc64_avro(to_parsing_canonical_form(parse_schema(schema, _write_hint=False)).encode())


def _version(name: str, version: int, schema: dict[str, Any]) -> SchemaVersion:
    parsed = parse_schema(schema)  # keeps fastavro's parsed marker, so reads and writes skip re-parsing
    return SchemaVersion(name, version, schema, parsed, fingerprint_of(schema))


@dataclass(frozen=True)
class SchemaCatalogue:
    """Current schemas by record name and every released version by fingerprint."""

    current: dict[str, SchemaVersion]
    history: dict[str, tuple[SchemaVersion, ...]]
    by_fingerprint: dict[int, SchemaVersion]

    @classmethod
    def load(cls, directory: Path = SCHEMAS_DIR) -> SchemaCatalogue:
        history: dict[str, tuple[SchemaVersion, ...]] = {}
        for folder in sorted((directory / "history").iterdir(), key=lambda p: p.name):
            versions = sorted(folder.glob("v*.avsc"), key=lambda p: int(p.stem[1:]))
            history[folder.name] = tuple(_version(folder.name, int(p.stem[1:]), _read(p)) for p in versions)
        current: dict[str, SchemaVersion] = {}
        for path in sorted(directory.glob("*.avsc"), key=lambda p: p.name):
            released = history.get(path.stem, ())
            number = released[-1].version if released else 0
            current[path.stem] = _version(path.stem, number, _read(path))
        by_fingerprint = {v.fingerprint: v for versions in history.values() for v in versions}
        by_fingerprint.update({v.fingerprint: v for v in current.values() if v.fingerprint not in by_fingerprint})
        return cls(current, history, by_fingerprint)


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@cache
def default_catalogue() -> SchemaCatalogue:
    """The catalogue of this checkout's schemas/ folder, loaded once."""
    return SchemaCatalogue.load()
