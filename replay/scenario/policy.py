"""Policy overrides from a scenario: `{section: {knob: value}}` over services/policy.py's defaults."""

from __future__ import annotations

import dataclasses
from typing import Any

from events.durations import parse_duration
from services.policy import DEFAULT_POLICY, Policy


def policy_from(overrides: dict[str, Any]) -> Policy:
    """The default policy with the given knobs replaced; `_ms` knobs take durations ('5m') and may
    be written without the suffix. Raises ValueError naming an unknown section, knob or bad value."""
    policy = DEFAULT_POLICY
    for section, knobs in overrides.items():
        if section == "version":
            policy = dataclasses.replace(policy, version=str(knobs))
            continue
        current = getattr(policy, section, None)
        if not dataclasses.is_dataclass(current):
            sections = [f.name for f in dataclasses.fields(Policy) if f.name != "version"]
            raise ValueError(f"unknown policy section {section!r} (one of: {', '.join(sections)})")
        if not isinstance(knobs, dict):
            raise ValueError(f"policy.{section} must be a mapping of knob: value")
        fields = {f.name: f for f in dataclasses.fields(current)}
        changes = {}
        for knob, value in knobs.items():
            name = knob if knob in fields else f"{knob}_ms"
            if name not in fields:
                raise ValueError(f"unknown knob policy.{section}.{knob} (one of: {', '.join(fields)})")
            changes[name] = _coerce(section, name, getattr(current, name), value)
        policy = dataclasses.replace(policy, **{section: dataclasses.replace(current, **changes)})
    return policy


def _coerce(section: str, name: str, default: Any, value: Any) -> Any:
    where = f"policy.{section}.{name}"
    if name.endswith("_ms"):
        if value is None:
            raise ValueError(f"{where} must be a duration, not null")
        try:
            return parse_duration(value)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, not {value!r}")
        return value
    if (value is None and default is None) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"{where} must be an integer{' or null' if default is None else ''}, not {value!r}")
