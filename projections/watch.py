"""`gangway watch`: a live terminal view of one cell, folded from its log like any projection:
GPUs in use and queue depth per team, quota and borrowing, node health, and the latest decisions."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field

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
    events: int = 0

    def fold(self, offset: int, event: m.Event) -> None:
        evolve(self.state, event, offset)
        self.events += 1
        if event.is_decision:
            self.decided[type(event).__name__] += 1
            self.recent.append((offset, event))

    def render(self) -> str:
        state = self.state
        tenancy = state.tenancy
        lines = [f"cell {state.cell or '-'}  offset {state.offset}  events {self.events:,}  "
                 f"event time {time.strftime('%H:%M:%S', time.gmtime(state.now / 1000)) if state.now else '-'}"]
        nodes = list(state.cluster.nodes.values())
        gpus = sum(n.gpus for n in nodes if n.schedulable)
        busy = sum(len(n.holder) for n in nodes)
        lines.append(f"nodes {len(nodes)} ({sum(n.failed for n in nodes)} failed, "
                     f"{sum(n.cordoned for n in nodes)} cordoned)  GPUs in use {busy}/{gpus}")
        lines.append("")
        lines.append(f"{'team':14} {'in use':>7} {'nominal':>8} {'borrowed':>9} {'queued':>7} {'running':>8} {'done':>6}")
        by_team: dict[str, Counter] = {}
        for job in state.jobs.values():
            by_team.setdefault(job.team, Counter())[job.state] += 1
        for team in sorted(set(tenancy.teams) | set(by_team)):
            used = sum(v for (t, _), v in tenancy.usage.items() if t == team)
            nominal = sum(q.nominal for (t, _), q in tenancy.quotas.items() if t == team)
            counts = by_team.get(team, Counter())
            lines.append(f"{team:14} {used:>7} {nominal:>8} {max(0, used - nominal):>9} {counts[JobState.QUEUED]:>7} "
                         f"{counts[JobState.RUNNING] + counts[JobState.PLACED]:>8} {counts[JobState.SUCCEEDED]:>6}")
        lines.append("")
        lines.append("decisions: " + "  ".join(f"{k} {v}" for k, v in sorted(self.decided.items())))
        lines.append("latest:")
        for offset, event in self.recent:
            subject = getattr(event, "job_id", None) or getattr(event, "node", "")
            lines.append(f"  {offset:>7}  {type(event).__name__:20} {subject:22} {event.envelope.reason.value}")
        return "\n".join(lines)


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
        last = 0.0
        while not stopping:
            for record in reader.poll(0.2):
                if record.event is not None:
                    view.fold(record.offset, record.event)
            if time.monotonic() - last >= args.interval:
                sys.stdout.write("\x1b[H\x1b[2J" + view.render() + "\n")
                sys.stdout.flush()
                last = time.monotonic()
    return 0
