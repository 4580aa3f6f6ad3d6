"""Renders an event model as its Avro record schema, so schemas/ and events/models.py cannot drift.

`gangway schemas write` uses it to refresh schemas/*.avsc; a test fails when a model and
its checked-in schema disagree. Each schema is self-contained: named types are inlined.
"""

from __future__ import annotations

import types
import typing
from enum import Enum
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

NAMESPACE = "gangway"

_PRIMITIVES: dict[type, str] = {str: "string", int: "long", bool: "boolean", bytes: "bytes", float: "double"}


def record_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The Avro schema of one model, as a JSON-ready dict."""
    return _record(model, defined=set())


def _record(model: type[BaseModel], defined: set[str]) -> dict[str, Any] | str:
    name = model.__name__
    if name in defined:
        return f"{NAMESPACE}.{name}"
    defined.add(name)
    fields = []
    hints = typing.get_type_hints(model)
    for field_name, info in model.model_fields.items():
        field: dict[str, Any] = {"name": field_name, "type": _type(hints[field_name], defined)}
        if info.description:
            field["doc"] = info.description
        default = _default(info)
        if default is not PydanticUndefined:
            field["default"] = default
        fields.append(field)
    schema: dict[str, Any] = {"type": "record", "name": name, "namespace": NAMESPACE}
    if model.__doc__:
        schema["doc"] = " ".join(model.__doc__.split())
    schema["fields"] = fields
    return schema


def _default(info: Any) -> Any:
    if info.default_factory is not None:
        return info.default_factory()
    if info.default is PydanticUndefined:
        return PydanticUndefined
    if isinstance(info.default, Enum):
        return info.default.value
    return info.default


def _type(annotation: Any, defined: set[str]) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"only Optional[X] unions are supported, got {annotation}")
        return ["null", _type(members[0], defined)]
    if origin is list:
        (item,) = typing.get_args(annotation)
        return {"type": "array", "items": _type(item, defined)}
    if origin is dict:
        key, value = typing.get_args(annotation)
        if key is not str:
            raise TypeError(f"Avro maps need string keys, got {annotation}")
        return {"type": "map", "values": _type(value, defined)}
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        name = annotation.__name__
        if name in defined:
            return f"{NAMESPACE}.{name}"
        defined.add(name)
        symbols = [member.value for member in annotation]
        # The default lets a reader that predates a new symbol still read the record.
        return {"type": "enum", "name": name, "namespace": NAMESPACE, "symbols": symbols, "default": symbols[0]}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _record(annotation, defined)
    if annotation in _PRIMITIVES:
        return _PRIMITIVES[annotation]
    raise TypeError(f"no Avro mapping for {annotation!r}")
