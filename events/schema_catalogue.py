"""The schemas/ folder as data: each record's current schema and every version ever released.

Layout: `schemas/<Name>.avsc` is the current schema (what readers resolve to) and
`schemas/history/<Name>/v<N>.avsc` keeps every released version, the newest equal to the
current one. Writers' fingerprints map to these versions, so old records stay readable. The released versions
are read when first needed (a record of an older version, the schemas command): every process reads the current
ones, and fingerprinting all versions took a fifth of a second of each start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, cached_property
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


class SchemaCatalogue:
    """Current schemas by record name and every released version by fingerprint."""

    def __init__(self, directory: Path, current: dict[str, SchemaVersion]) -> None:
        self.directory = directory
        self.current = current
        self._current_by_fingerprint = {v.fingerprint: v for v in current.values()}

    @classmethod
    def load(cls, directory: Path = SCHEMAS_DIR) -> SchemaCatalogue:
        current: dict[str, SchemaVersion] = {}
        for path in sorted(directory.glob("*.avsc"), key=lambda p: p.name):
            released = _released(directory, path.stem)
            current[path.stem] = _version(path.stem, int(released[-1].stem[1:]) if released else 0, _read(path))
        return cls(directory, current)

    @cached_property
    def history(self) -> dict[str, tuple[SchemaVersion, ...]]:
        """Every released version of each record, oldest first."""
        return {folder.name: tuple(_version(folder.name, int(p.stem[1:]), _read(p))
                                   for p in _released(self.directory, folder.name))
                for folder in sorted((self.directory / "history").iterdir(), key=lambda p: p.name)}

    @cached_property
    def by_fingerprint(self) -> dict[int, SchemaVersion]:
        """Every version, released or current, by fingerprint."""
        by_fingerprint = {v.fingerprint: v for versions in self.history.values() for v in versions}
        by_fingerprint.update({f: v for f, v in self._current_by_fingerprint.items() if f not in by_fingerprint})
        return by_fingerprint

    def writer(self, fingerprint: int) -> SchemaVersion | None:
        """The version a record with this fingerprint was written with: a current one without reading the rest."""
        return self._current_by_fingerprint.get(fingerprint) or self.by_fingerprint.get(fingerprint)


def _released(directory: Path, name: str) -> list[Path]:
    """The files of a record's released versions, oldest first."""
    return sorted((directory / "history" / name).glob("v*.avsc"), key=lambda p: int(p.stem[1:]))


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@cache
def default_catalogue() -> SchemaCatalogue:
    """The catalogue of this checkout's schemas/ folder, loaded once."""
    return SchemaCatalogue.load()
