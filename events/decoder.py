"""Reads Avro bodies of today's event schemas straight into event models, with code generated from the schemas.

A generic Avro reader interprets the schema for every field of every record and hands back dicts that pydantic
then validates: about 15 µs a record, most of an audit's read. Here each event type gets one Python function,
written once from its schema, that reads its fields in order and builds the models directly. The schema
already guarantees every type the model declares (the models have no other constraints: `events/models.py`),
so nothing is lost by not validating again; bytes that do not follow the schema raise `Damaged`. Records of an
older schema version still go through fastavro's schema resolution and pydantic (events/codec.py,
events/logfile.py).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from enum import Enum
from typing import Any

from pydantic import BaseModel

from events.models import EVENT_TYPES_BY_NAME, Event
from events.schema_catalogue import SchemaVersion
from events.source import FunctionSource, full_name

#: A reader of one event type: (buffer, position, end) -> (event, position after it).
Reader = Callable[[bytes, int, int], tuple[Event, int]]

_PRIMITIVE_WIDTH = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4, "double": 8, "string": 1, "bytes": 1}


class Damaged(ValueError):
    """Bytes that do not follow the schema they claim; the message says where."""


def _varint_tail(buf: bytes, p: int, first: int) -> tuple[int, int]:
    """A zig-zag long whose first byte (`first`, at p - 1) says more bytes follow."""
    n = first & 0x7F
    shift = 7
    while True:
        b = buf[p]
        p += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            if n >> 64:
                raise Damaged(f"a long beyond 64 bits at byte {p}")
            return (n >> 1) ^ -(n & 1), p
        shift += 7
        if shift > 63:
            raise Damaged(f"a long of more than 10 bytes at byte {p}")


def _sized_tail(buf: bytes, p: int, end: int, decode: bool) -> tuple[str | bytes, int]:
    """A string or bytes at p whose length takes more than a byte (or is negative)."""
    n, p = read_long(buf, p)
    if n < 0 or p + n > end:
        raise Damaged(f"a length of {n} bytes at byte {p}")
    raw = buf[p:p + n]
    return (raw.decode() if decode else raw), p + n


def _bad(what: str, p: int) -> Damaged:
    return Damaged(f"{what} at byte {p}")


class _Writer(FunctionSource):
    """Writes one reader function's source: each `read_*` emits the lines that leave a value in a new local."""

    def __init__(self, names: dict[str, Any], models: dict[str, type[BaseModel]], enums: dict[str, type[Enum]],
                 constants: dict[str, Any]) -> None:
        super().__init__(constants)
        self.names, self.models, self.enums = names, models, enums

    def long(self, depth: int, small: bool = False) -> str:
        """A zig-zag varint; a `small` one (a length, a count) rarely takes more than a byte, so its longer
        form is a call, while a time or an offset takes several and reads them inline."""
        v = self.local()
        self.emit(depth, "b = buf[p]; p += 1")
        self.emit(depth, f"if b < 0x80: {v} = (b >> 1) ^ -(b & 1)")
        if small:
            self.emit(depth, f"else: {v}, p = _varint_tail(buf, p, b)")
            return v
        self.emit(depth, "else:")
        self.emit(depth + 1, "n = b & 0x7F; s = 7; b = buf[p]; p += 1")
        self.emit(depth + 1, "while b >= 0x80:")
        self.emit(depth + 2, "n |= (b & 0x7F) << s; s += 7; b = buf[p]; p += 1")
        self.emit(depth + 2, "if s > 63: raise _bad('a long of more than 10 bytes', p)")
        self.emit(depth + 1, "n |= b << s")
        self.emit(depth + 1, "if n >> 64: raise _bad('a long beyond 64 bits', p)")
        self.emit(depth + 1, f"{v} = (n >> 1) ^ -(n & 1)")
        return v

    def sized(self, depth: int, decode: bool) -> str:
        """A string or bytes. A length below 64 is one even byte, read inline; a slice past the end leaves the
        position past it, which the caller's check of the final position refuses."""
        v = self.local()
        self.emit(depth, "n = buf[p]")
        self.emit(depth, "if n < 0x80 and not n & 1:")
        self.emit(depth + 1, f"e = p + 1 + (n >> 1); {v} = buf[p + 1:e]{'.decode()' if decode else ''}; p = e")
        self.emit(depth, f"else: {v}, p = _sized_tail(buf, p, end, {decode})")
        return v

    def read(self, schema: Any, depth: int, space: str) -> str:
        if isinstance(schema, list):
            return self.union(schema, depth, space)
        if isinstance(schema, str):
            if schema in _PRIMITIVE_WIDTH:
                return self.primitive(schema, depth)
            return self.read(self.names[schema if "." in schema else f"{space}.{schema}"], depth, space)
        kind = schema["type"]
        if kind in ("record", "enum"):
            name = full_name(schema, space)
            self.names.setdefault(name, schema)
            space = name.rsplit(".", 1)[0]
            return self.record(schema, name, depth, space) if kind == "record" else self.enum(schema, name, depth)
        if kind == "array":
            return self.blocks(depth, lambda d: [self.read(schema["items"], d, space)], space, schema["items"])
        if kind == "map":
            return self.blocks(depth, lambda d: [self.sized(d, True), self.read(schema["values"], d, space)],
                               space, None)
        if isinstance(kind, str) and kind in _PRIMITIVE_WIDTH:
            return self.primitive(kind, depth)
        raise TypeError(f"no generated reader for the Avro type {schema!r}")

    def primitive(self, kind: str, depth: int) -> str:
        if kind in ("long", "int"):
            return self.long(depth)
        if kind in ("string", "bytes"):
            return self.sized(depth, kind == "string")
        v = self.local()
        if kind == "null":
            self.emit(depth, f"{v} = None")
        elif kind == "boolean":
            self.emit(depth, "b = buf[p]; p += 1")
            self.emit(depth, "if b > 1: raise _bad('a boolean of {}'.format(b), p)")
            self.emit(depth, f"{v} = b == 1")
        else:
            raise TypeError(f"no generated reader for the Avro type {kind}: no event has one")
        return v

    def union(self, branches: list[Any], depth: int, space: str) -> str:
        v = self.local()
        if len(branches) == 2 and branches[0] == "null":  # an optional field: its index is one byte, 0 or 2
            self.emit(depth, "b = buf[p]; p += 1")
            self.emit(depth, f"if b == 0: {v} = None")
            self.emit(depth, "elif b == 2:")
            self.emit(depth + 1, f"{v} = {self.read(branches[1], depth + 1, space)}")
            self.emit(depth, "else: raise _bad('union branch {}'.format((b >> 1) ^ -(b & 1)), p)")
            return v
        index = self.long(depth, small=True)
        for i, branch in enumerate(branches):
            self.emit(depth, f"{'if' if i == 0 else 'elif'} {index} == {i}:")
            self.emit(depth + 1, f"{v} = {self.read(branch, depth + 1, space)}")
        self.emit(depth, f"else: raise _bad('union branch {{}} of {len(branches)}'.format({index}), p)")
        return v

    def enum(self, schema: dict[str, Any], name: str, depth: int) -> str:
        members = tuple(self.enums[name](symbol) for symbol in schema["symbols"])
        v = self.local()
        if len(members) <= 64:  # every index is one byte: a table by that byte (None where no symbol is)
            table = self.constant(tuple(members[b >> 1] if not b & 1 and b >> 1 < len(members) else None
                                        for b in range(0x80)), "symbols")
            self.emit(depth, "b = buf[p]; p += 1")
            self.emit(depth, f"{v} = {table}[b] if b < 0x80 else None")
            self.emit(depth, f"if {v} is None: raise _bad('symbol {{}} of {name}'.format(read_long(buf, p - 1)[0]), p)")
            return v
        table = self.constant(members, "symbols")
        index = self.long(depth, small=True)
        self.emit(depth, f"if not 0 <= {index} < {len(members)}: raise _bad('symbol {{}} of {name}'.format({index}), p)")
        self.emit(depth, f"{v} = {table}[{index}]")
        return v

    def record(self, schema: dict[str, Any], name: str, depth: int, space: str) -> str:
        values = [(f["name"], self.read(f["type"], depth, space)) for f in schema["fields"]]
        model = self.models[name]
        if [field for field, _ in values] != list(model.model_fields):
            raise TypeError(f"{name}'s schema and model list different fields: run `gangway schemas write`")
        cls = self.constant(model, "model")
        # Every field was read, so every field is set: frozen models never change the set, and a copy gets its own
        names = self.constant(set(model.model_fields), "fields")
        v = self.local()
        body = ", ".join(f"{field!r}: {value}" for field, value in values)
        self.emit(depth, f"{v} = _new({cls}); _dict({v}, {{{body}}})")
        self.emit(depth, f"_fields_set({v}, {names}); _extra({v}, None); _private({v}, None)")
        return v

    def blocks(self, depth: int, item: Callable[[int], list[str]], space: str, items: Any) -> str:
        """An array or map: blocks of items, each block's count first (negative: its byte size follows)."""
        v = self.local()
        self.emit(depth, f"{v} = []" if items is not None else f"{v} = {{}}")
        self.emit(depth, "while True:")
        count = self.long(depth + 1, small=True)
        self.emit(depth + 1, f"if {count} == 0: break")
        self.emit(depth + 1, f"if {count} < 0:")
        self.emit(depth + 2, f"{count} = -{count}")
        self.long(depth + 2, small=True)
        if items is None or self.width(items, space):  # every item takes a byte at least: a count cannot lie
            self.emit(depth + 1, f"if {count} > end - p: raise _bad('a block of {{}} items'.format({count}), p)")
        self.emit(depth + 1, f"for _ in range({count}):")
        parts = item(depth + 2)
        self.emit(depth + 2, f"{v}.append({parts[0]})" if items is not None else f"{v}[{parts[0]}] = {parts[1]}")
        return v

    def width(self, schema: Any, space: str) -> int:
        """The fewest bytes a value of the schema takes."""
        if isinstance(schema, list):
            return 1
        if isinstance(schema, str):
            if schema in _PRIMITIVE_WIDTH:
                return _PRIMITIVE_WIDTH[schema]
            schema = self.names[schema if "." in schema else f"{space}.{schema}"]
        kind = schema["type"]
        if kind == "record":
            return sum(self.width(f["type"], space) for f in schema["fields"])
        return _PRIMITIVE_WIDTH.get(kind, 1)


def _types_of(model: type[BaseModel], models: dict[str, type[BaseModel]], enums: dict[str, type[Enum]]) -> None:
    """Every model and enum a model's fields reach, by their Avro full names. Raises TypeError for a model whose
    validation checks more than the types its schema guarantees: a generated reader would skip that check."""
    checks = model.__pydantic_decorators__
    constrained = [name for name, info in model.model_fields.items() if info.metadata]
    if checks.field_validators or checks.model_validators or checks.validators or checks.root_validators or constrained:
        raise TypeError(f"{model.__name__} has validators or constrained fields ({', '.join(constrained) or 'its own'})"
                        f": records of it cannot skip pydantic's validation (events/decoder.py)")
    models[f"gangway.{model.__name__}"] = model
    for hint in typing.get_type_hints(model).values():
        for kind in (hint, *typing.get_args(hint), *(a for h in typing.get_args(hint) for a in typing.get_args(h))):
            if isinstance(kind, type) and issubclass(kind, BaseModel) and f"gangway.{kind.__name__}" not in models:
                _types_of(kind, models, enums)
            elif isinstance(kind, type) and issubclass(kind, Enum):
                enums[f"gangway.{kind.__name__}"] = kind


def generate(model: type[Event], schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The source of a reader of `model`'s records written with `schema`, and the constants it uses."""
    models: dict[str, type[BaseModel]] = {}
    enums: dict[str, type[Enum]] = {}
    _types_of(model, models, enums)
    writer = _Writer({}, models, enums, {})
    writer.emit(1, f"return {writer.read(schema, 1, 'gangway')}, p")
    return "def read(buf, p, end):\n" + "\n".join(writer.lines) + "\n", writer.constants


#: How a model instance is made without validating: the slots pydantic itself fills (every BaseModel has them).
_CONSTRUCTION = {"_new": object.__new__, "_dict": BaseModel.__dict__["__dict__"].__set__,
                 **{f"_{slot}": BaseModel.__dict__[f"__pydantic_{slot}__"].__set__
                    for slot in ("fields_set", "extra", "private")}}


_made: dict[int, Reader] = {}


def reader_for(version: SchemaVersion) -> Reader:
    """The reader of records written with `version`, a schema of today's model of its event type (made once)."""
    made = _made.get(version.fingerprint)
    if made is None:
        source, constants = generate(EVENT_TYPES_BY_NAME[version.name], version.schema)
        scope = {"_varint_tail": _varint_tail, "_sized_tail": _sized_tail, "_bad": _bad, "read_long": read_long,
                 **_CONSTRUCTION, **constants}
        exec(compile(source, f"<reader of {version.name}>", "exec"), scope)  # noqa: S102 - our own generated code
        made = _made[version.fingerprint] = scope["read"]
    return made


def read_long(buf: bytes, p: int) -> tuple[int, int]:
    """One zig-zag long at p, and the position after it."""
    b = buf[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    return _varint_tail(buf, p + 1, b)
