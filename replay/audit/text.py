"""How the audit commands write times, durations and lists: the same text from a live cell and from its file."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone


def clock(at: int | None) -> str:
    """An event time in UTC, to the second (milliseconds when it has them)."""
    if at is None:
        return "-"
    try:
        moment = datetime.fromtimestamp(at / 1000, timezone.utc)
    except (ValueError, OverflowError, OSError):  # beyond the calendar (a record the fold refused as out of range)
        return f"{at} ms"
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    return text + (f".{at % 1000:03d}" if at % 1000 else "")


def span(ms: int | None) -> str:
    """A duration as people read it: 45 s, 12 min, 3 h 5 min, 2 d 4 h."""
    if ms is None:
        return "-"
    seconds = max(0, ms) // 1000
    if seconds < 120:
        return f"{seconds} s" if seconds or not ms else f"{ms} ms"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172_800:
        minutes = seconds % 3600 // 60
        return f"{seconds // 3600} h" + (f" {minutes} min" if minutes else "")
    hours = seconds % 86400 // 3600
    return f"{seconds // 86400} d" + (f" {hours} h" if hours else "")


def names(items: Iterable[str], most: int = 6) -> str:
    items = list(items)
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def table(rows: list[list[str]], headers: list[str]) -> str:
    """Fixed-width columns; the last column is left as long as it is."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    lines = []
    for row in [headers, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(row, widths)] + [str(row[-1])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
