"""`gangway watch`: a live terminal view of one cell, folded from its log like any projection:
GPUs in use and queue depth per team, quota and borrowing, node health, and the latest decisions.
Drawn with rich: a live screen on a terminal, plain text screens when piped."""

from __future__ import annotations

import argparse
import io
import os
import signal
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from events import models as m
from events.reader import LogReader
from events.topics import cells_from_env
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import JobState


@dataclass
class CellView:
    """The folded cell plus the recent decisions worth showing."""

    state: CellState = field(default_factory=CellState)
    recent: deque = field(default_factory=lambda: deque(maxlen=10))
    decided: Counter = field(default_factory=Counter)
    succeeded: Counter = field(default_factory=Counter)  # by team: ended jobs leave the state, the view counts them
    events: int = 0

    def fold(self, offset: int, event: m.Event) -> None:
        job = self.state.jobs.get(m.field_of(event, "job_id") or "")
        evolve(self.state, event, offset)
        if isinstance(event, m.JobSucceeded) and job is not None and job.state is JobState.SUCCEEDED:
            self.succeeded[job.team] += 1
        self.events += 1
        if event.is_decision:
            self.decided[type(event).__name__] += 1
            self.recent.append((offset, event))

    def renderable(self) -> Group:
        """The screen as rich renderables: the cell's totals, a row per team, the latest decisions."""
        state = self.state
        tenancy = state.tenancy
        when = time.strftime("%H:%M:%S", time.gmtime(state.now / 1000)) if state.now else "-"
        nodes = list(state.cluster.nodes.values())
        gpus = sum(n.gpus for n in nodes if n.schedulable)
        busy = sum(len(n.holder) for n in nodes)
        header = Text(f"cell {state.cell or '-'}  offset {state.offset}  events {self.events:,}  event time {when}\n"
                      f"nodes {len(nodes)} ({sum(n.failed for n in nodes)} failed, "
                      f"{sum(n.cordoned for n in nodes)} cordoned)  GPUs in use {busy}/{gpus}")
        teams = Table(box=None, header_style="bold", pad_edge=False)
        for name in ("team", "in use", "nominal", "borrowed", "queued", "running", "done"):
            teams.add_column(name, justify="left" if name == "team" else "right")
        by_team: dict[str, Counter] = {}
        for job in state.jobs.values():
            by_team.setdefault(job.team, Counter())[job.state] += 1
        for team in sorted(set(tenancy.teams) | set(by_team)):
            used = sum(v for (t, _), v in tenancy.usage.items() if t == team)
            nominal = sum(q.nominal for (t, _), q in tenancy.quotas.items() if t == team)
            counts = by_team.get(team, Counter())
            borrowed = max(0, used - nominal)
            teams.add_row(team, str(used), str(nominal), f"[yellow]{borrowed}[/]" if borrowed else "0",
                          str(counts[JobState.QUEUED]), str(counts[JobState.RUNNING] + counts[JobState.PLACED]),
                          str(self.succeeded[team]))
        decided = Text("decisions: " + "  ".join(f"{k} {v}" for k, v in sorted(self.decided.items())))
        latest = Table(box=None, show_header=False, pad_edge=False, title="latest:", title_justify="left")
        for _ in range(4):
            latest.add_column()
        for offset, event in self.recent:
            subject = m.field_of(event, "job_id", None) or m.field_of(event, "node", "")
            latest.add_row(str(offset), type(event).__name__, subject, event.envelope.reason.value)
        return Group(header, Text(""), teams, Text(""), decided, latest)

    def render(self, width: int = 120) -> str:
        """The screen as plain text (no colours), for logs, summaries and tests."""
        console = Console(file=io.StringIO(), width=width, no_color=True, force_terminal=False)
        console.print(self.renderable())
        return console.file.getvalue().rstrip("\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--cell", default=None, help="the cell to watch (default: the first of $GANGWAY_CELLS)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between screen refreshes")
    parser.add_argument("--once", action="store_true", help="read what the log holds now, print once, exit")


def run(args: argparse.Namespace) -> int:
    cells = cells_from_env()
    cell = args.cell or cells[0]
    view = CellView()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    with LogReader([cell], args.bootstrap_servers, all_cells=cells) as reader:
        if args.once:
            for record in reader.read():
                if record.event is not None:
                    view.fold(record.offset, record.event)
            print(view.render())
            return 0
        out = Console()
        with Live(view.renderable(), console=out, auto_refresh=False, screen=out.is_terminal) as live:
            last = 0.0
            while not stopping:
                for record in reader.follow(0.2):
                    if record.event is not None:
                        view.fold(record.offset, record.event)
                if time.monotonic() - last >= args.interval:
                    if out.is_terminal:
                        live.update(view.renderable(), refresh=True)
                    else:  # piped: one screen per interval, as text
                        print(view.render(), "\n", flush=True)
                    last = time.monotonic()
    return 0
