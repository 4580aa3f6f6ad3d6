"""The simulator's progress bar on stderr."""

from __future__ import annotations

import sys
import time

from replay.sim.workload import DAY_MS


class ProgressBar:
    """A one-line progress bar on stderr, redrawn at most every 0.2 s."""

    def __init__(self, label: str, stream=None, width: int = 30) -> None:
        self.label, self.stream, self.width = label, stream or sys.stderr, width
        self.last = 0.0
        self.t0 = time.monotonic()

    def __call__(self, ended: int, jobs: int, now_ms: int, events: int) -> None:
        wall = time.monotonic()
        if wall - self.last < 0.2 and ended < jobs:
            return
        self.last = wall
        done = ended / jobs if jobs else 1.0
        bar = "#" * int(done * self.width)
        self.stream.write(f"\r{self.label:<22} [{bar:<{self.width}}] {done:4.0%} {ended:,}/{jobs:,} jobs, "
                          f"day {now_ms / DAY_MS:5.1f}, {events:,} events, {wall - self.t0:5.1f} s ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()
