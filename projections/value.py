"""A base for the state's immutable values (frozen dataclasses): a copy of one is the value itself. Compiled
(events/compiled.py), `copy` would otherwise rebuild a frozen dataclass field by field, which it refuses."""

from __future__ import annotations

from typing import Any


class Value:
    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        return self
