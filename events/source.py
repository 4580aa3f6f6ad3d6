"""The source of a generated function, line by line: what the Avro readers (events/decoder.py) and writers
(events/encoder.py) written from the schemas share."""

from __future__ import annotations

from typing import Any


class FunctionSource:
    """The lines of one function's body, its locals named as they are made, and the constants its lines name."""

    def __init__(self, constants: dict[str, Any]) -> None:
        self.constants = constants
        self.lines: list[str] = []
        self.count = 0

    def local(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def constant(self, value: Any, hint: str) -> str:
        name = f"_{hint}_{len(self.constants)}"
        self.constants[name] = value
        return name

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def full_name(schema: dict[str, Any], space: str) -> str:
    """A named Avro type's full name: its own if dotted, else its namespace's (or `space`) and its name."""
    name = schema["name"]
    return name if "." in name else f"{schema.get('namespace', space)}.{name}"
