"""How launcher commands print: rich tables on a terminal (colours only there), or JSON / YAML for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "json", "yaml")
STATE_STYLES = {"running": "green", "succeeded": "bold green", "queued": "yellow", "preempting": "magenta",
                "failed": "red", "rejected": "red", "cancelled": "dim", "placed": "cyan", "admitted": "cyan",
                "ready": "green", "cordoned": "yellow", "failed-node": "red"}


def console(stream=None) -> Console:
    """A console that colours only a terminal and, elsewhere, never wraps rows."""
    stream = stream or sys.stdout
    terminal = stream.isatty()
    return Console(file=stream, width=None if terminal else 250, no_color=not terminal, highlight=False,
                   force_terminal=terminal)


def emit(rows: Sequence[Any], form: str, columns: Sequence[tuple[str, Callable[[Any], Any]]],
         title: str | None = None, out: Console | None = None) -> None:
    """Rows as a table of `columns` (header, getter), or every field as JSON or YAML."""
    out = out or console()
    if form != "table":
        data = [asdict(r) if is_dataclass(r) else r for r in rows]
        text = json.dumps(data, indent=2) if form == "json" else yaml.safe_dump(data, sort_keys=False)
        out.file.write(text if text.endswith("\n") else text + "\n")
        return
    out.print(table_of(rows, columns, title))


def table_of(rows: Sequence[Any], columns: Sequence[tuple[str, Callable[[Any], Any]]],
             title: str | None = None) -> Table:
    """A rich table of `columns` (header, getter) over `rows`, states in colour."""
    table = Table(title=title, box=None, header_style="bold", pad_edge=False)
    for header, _ in columns:
        table.add_column(header, no_wrap=True)
    for row in rows:
        table.add_row(*(_cell(get(row)) for _, get in columns))
    return table


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = str(value)
    style = STATE_STYLES.get(text)
    return f"[{style}]{text}[/]" if style else text.replace("[", r"\[")


def age(seconds: float) -> str:
    """kubectl's AGE: 45s, 3m, 2h5m, 3d."""
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60}m"
    return f"{s // 86400}d"
