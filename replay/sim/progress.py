"""The simulator's progress bars on stderr, drawn by rich (one live display shared by every bar of a run;
animated only on a terminal)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from replay.sim.workload import DAY_MS


def _stderr() -> Console:
    """stderr; off a terminal wide enough that a bar's line is never cut."""
    console = Console(stderr=True)
    return console if console.is_terminal else Console(stderr=True, width=160)


class ProgressBar:
    """One bar: jobs ended of all, simulated day, events; updated at most every 0.2 s."""

    _shared: Progress | None = None
    _open = 0

    def __init__(self, label: str) -> None:
        if ProgressBar._shared is None:
            ProgressBar._shared = Progress(
                TextColumn("{task.description:<22}"), BarColumn(), TaskProgressColumn(), MofNCompleteColumn(),
                TextColumn("jobs, day {task.fields[day]:5.1f}, {task.fields[events]:,} events"), TimeElapsedColumn(),
                console=_stderr(), transient=False)
            ProgressBar._shared.start()
        ProgressBar._open += 1
        self.progress = ProgressBar._shared
        self.task = self.progress.add_task(label, total=None, day=0.0, events=0)
        self.last = 0.0

    def __call__(self, ended: int, jobs: int, now_ms: int, events: int) -> None:
        wall = time.monotonic()
        if wall - self.last < 0.2 and ended < jobs:
            return
        self.last = wall
        self.progress.update(self.task, completed=ended, total=jobs, day=now_ms / DAY_MS, events=events)

    def close(self) -> None:
        self.progress.stop_task(self.task)
        ProgressBar._open -= 1
        if ProgressBar._open == 0:
            self.progress.stop()
            ProgressBar._shared = None
