"""Writes event models as Avro bodies of today's schemas, with code generated from the schemas: the writing
counterpart of events/decoder.py.

fastavro's writer walks the schema for every field of every record, over the dict `model_dump()` builds first:
about 19 µs for a JobPlaced, a tenth of the admitter's time in a burst. Here each event type gets one Python
function, written once from its schema, that reads the model's attributes in the schema's order and appends their
encoding. It writes only values of exactly the types a validated model holds (an int within a long, a str, a
bytes, a bool, an enum member, a nested model, a list or dict of those); anything else raises `Unwritable`, and the
caller then writes with fastavro, which writes or refuses it as it always has. So every event is written to the
same bytes either way (tests/unit/test_encoder.py checks both side by side).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events.models import Event
from events.schema_catalogue import SchemaVersion
from events.source import FunctionSource, full_name

#: A writer of one event type: event -> the record's bytes (the single-object header first).
Writer = Callable[[Event], bytes]

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
#: The primitive types an event's schema holds (no int, float, double or fixed: the writer refuses those).
_PRIMITIVES = ("null", "boolean", "long", "string", "bytes")


class Unwritable(ValueError):
    """A value the generated writer does not write: fastavro is asked instead."""


class _Writer(FunctionSource):
    """Writes one writer function's source: each `write_*` emits the lines that append a value's encoding."""

    def __init__(self, constants: dict[str, Any]) -> None:
        super().__init__(constants)
        self.names: dict[str, Any] = {}

    def varint(self, depth: int, n: str) -> None:
        """Appends the non-negative `n` (a zig-zagged long or a length) seven bits a byte, lowest first."""
        self.emit(depth, f"while {n} > 0x7F:")
        self.emit(depth + 1, f"a(({n} & 0x7F) | 0x80); {n} >>= 7")
        self.emit(depth, f"a({n})")

    def write(self, schema: Any, value: str, depth: int, space: str) -> None:
        if isinstance(schema, list):
            self.union(schema, value, depth, space)
            return
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                self.primitive(schema, value, depth)
                return
            self.write(self.names[schema if "." in schema else f"{space}.{schema}"], value, depth, space)
            return
        kind = schema["type"]
        if kind in ("record", "enum"):
            name = full_name(schema, space)
            self.names.setdefault(name, schema)
            inner = name.rsplit(".", 1)[0]
            self.record(schema, value, depth, inner) if kind == "record" else self.enum(schema, value, depth)
        elif kind == "array":
            self.blocks(value, depth, lambda item, d: self.write(schema["items"], item, d, space), "")
        elif kind == "map":
            self.blocks(value, depth, lambda item, d: self.write(schema["values"], item, d, space), "items")
        elif isinstance(kind, str) and kind in _PRIMITIVES:
            self.primitive(kind, value, depth)
        else:
            raise TypeError(f"no generated writer for the Avro type {schema!r}")

    def primitive(self, kind: str, value: str, depth: int) -> None:
        if kind == "null":
            self.emit(depth, f"if {value} is not None: raise _Unwritable")
        elif kind == "boolean":
            self.emit(depth, f"if {value} is True: a(1)")
            self.emit(depth, f"elif {value} is False: a(0)")
            self.emit(depth, "else: raise _Unwritable")
        elif kind == "long":
            n = self.local()
            self.emit(depth, f"if type({value}) is not int or not {_LONG_MIN} <= {value} <= {_LONG_MAX}: "
                             "raise _Unwritable")
            self.emit(depth, f"{n} = ({value} << 1) ^ ({value} >> 63)")
            self.varint(depth, n)
        else:  # string or bytes: the length, then the bytes
            raw, n = self.local(), self.local()
            check = "str" if kind == "string" else "bytes"
            self.emit(depth, f"if type({value}) is not {check}: raise _Unwritable")
            self.emit(depth, f"{raw} = {value}.encode()" if kind == "string" else f"{raw} = {value}")
            self.emit(depth, f"{n} = len({raw}) << 1")
            self.varint(depth, n)
            self.emit(depth, f"out += {raw}")

    def union(self, branches: list[Any], value: str, depth: int, space: str) -> None:
        if len(branches) != 2 or branches[0] != "null":
            raise TypeError(f"no generated writer for the union {branches!r}: only [null, X] is written")
        self.emit(depth, f"if {value} is None: a(0)")
        self.emit(depth, "else:")
        self.emit(depth + 1, "a(2)")
        self.write(branches[1], value, depth + 1, space)

    def enum(self, schema: dict[str, Any], value: str, depth: int) -> None:
        # by symbol: a StrEnum member is found as its value is (fastavro finds the symbol equal to the value)
        table = self.constant({symbol: _zigzag_bytes(i) for i, symbol in enumerate(schema["symbols"])}, "symbols")
        code = self.local()
        self.emit(depth, f"{code} = {table}.get({value}) if isinstance({value}, str) else None")
        self.emit(depth, f"if {code} is None: raise _Unwritable")
        self.emit(depth, f"out += {code}")

    def record(self, schema: dict[str, Any], value: str, depth: int, space: str) -> None:
        """Its fields by attribute, in the schema's order (a model of the same fields writes the same bytes as
        fastavro writes its dump; anything without them raises AttributeError, and fastavro is asked)."""
        for field in schema["fields"]:
            inner = self.local()
            self.emit(depth, f"{inner} = {value}.{field['name']}")
            self.write(field["type"], inner, depth, space)

    def blocks(self, value: str, depth: int, item: Callable[[str, int], None], pairs: str) -> None:
        """An array (a list) or a map (a dict of strings): one block of all its items, then an empty one."""
        n = self.local()
        self.emit(depth, f"if type({value}) is not {'dict' if pairs else 'list'}: raise _Unwritable")
        self.emit(depth, f"if {value}:")
        self.emit(depth + 1, f"{n} = len({value}) << 1")
        self.varint(depth + 1, n)
        element = self.local()
        if pairs:
            key = self.local()
            self.emit(depth + 1, f"for {key}, {element} in {value}.items():")
            self.primitive("string", key, depth + 2)
        else:
            self.emit(depth + 1, f"for {element} in {value}:")
        item(element, depth + 2)
        self.emit(depth, "a(0)")


def _zigzag_bytes(n: int) -> bytes:
    """A long's Avro encoding."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def generate(schema: dict[str, Any], header: bytes) -> tuple[str, dict[str, Any]]:
    """The source of a writer of records of `schema` (an event type's), each starting with `header`, and the
    constants it uses."""
    writer = _Writer({"_header": header})
    writer.emit(1, "out = bytearray(_header); a = out.append")
    writer.write(schema, "event", 1, "gangway")
    writer.emit(1, "return bytes(out)")
    return "def write(event):\n" + "\n".join(writer.lines) + "\n", writer.constants


_made: dict[int, Writer] = {}


def writer_for(version: SchemaVersion, header: bytes) -> Writer:
    """The writer of records of `version`, today's schema of its event type, each starting with `header` (made
    once)."""
    made = _made.get(version.fingerprint)
    if made is None:
        source, constants = generate(version.schema, header)
        scope = {"_Unwritable": Unwritable, **constants}
        exec(compile(source, f"<writer of {version.name}>", "exec"), scope)  # noqa: S102 - our own generated code
        made = _made[version.fingerprint] = scope["write"]
    return made
