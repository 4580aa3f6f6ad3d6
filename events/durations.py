"""Durations as people write them in scenario files: '90s', '5m', '2h', '1h30m', '250ms' or milliseconds."""

from __future__ import annotations

import re
from typing import Any

from events.shown import shown

_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d)")


def parse_duration(value: Any) -> Any:
    """Milliseconds from a duration string or an integer; other values pass through for the model to judge."""
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if text.isdigit():
            return int(text)
        parts = _PART.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            return sum(int(n) * _UNITS[u] for n, u in parts)
    raise ValueError(f"not a duration: {shown(value)} (write 90s, 5m, 2h, 1h30m or milliseconds)")


def format_duration(ms: int) -> str:
    """The shortest readable form: 0s, 250ms, 90s -> 1m30s, 2h."""
    if ms % 1000:
        return f"{ms}ms"
    out, rest = "", ms // 1000
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out or "0s"
