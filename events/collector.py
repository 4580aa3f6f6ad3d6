"""Pacing of Python's cyclic garbage collector for bulk work (reading a whole log, replaying or simulating it) and
for a running service.

Such work allocates millions of small objects that either stay (the records, the jobs) or die young without
cycles. At the default rate the collector spent about half of a log read and a fifth of a simulation scanning
what it cannot free. Inside `rare_collections()` it runs far less often and never over what existed before; a
service's loop paces it with `BetweenBatches`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: Allocations between two collections of the youngest generation (Python's default is 700).
YOUNG_THRESHOLD = 100_000
#: Seconds between two full sweeps of a running service (`BetweenBatches`). A sweep scans everything: 125 ms with
#: 10,000 gangs in the state, 2.1 s with 100,000 (3.2 million objects), and it found nothing to free in either.
SWEEP_EVERY_S = 3600.0

_depth = 0  # nested uses keep the outermost one's settings until it ends


@contextmanager
def rare_collections() -> Iterator[None]:
    """Collections are rare meanwhile, and skip the objects there before; as before afterwards. Nests."""
    global _depth
    _depth += 1
    if _depth > 1:
        try:
            yield
        finally:
            _depth -= 1
        return
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 50, 100)
    try:
        yield
    finally:
        _depth -= 1
        gc.set_threshold(*threshold)
        gc.unfreeze()


@contextmanager
def paused_collections() -> Iterator[None]:
    """No collection meanwhile: for decoding, whose objects (dicts, lists, event models) hold no cycles, so
    nothing it makes needs the collector. Inside `rare_collections()` what it made is then set aside with
    the rest (until that ends) instead of scanned once more by the next collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _depth:
            gc.freeze()
        if was:
            gc.enable()


def long_lived_from_here() -> None:
    """For a long-running process that has started: what exists now (its modules, classes and schemas) is never
    garbage, so the cyclic collector stops scanning it. Each full collection of a running service scanned all of
    it, stalling the service 58-104 ms at a time under load; now 2-33 ms (docs/benchmarks.md). Objects set aside
    so are still freed when their last reference goes. No collection first: at a service's start it found a few
    hundred objects and took 40-240 ms of the start under load."""
    gc.freeze()


class BetweenBatches:
    """Pacing of the collector for a service that folds batches of records into a state it keeps.

    What survives a batch (the state it folded, the decisions in flight) lives on, and the service makes almost no
    reference cycles (a burst of 6,000 gangs left 15 objects for the collector to free). Yet each full collection
    scanned the whole state again: 13% of the admitter's time in that burst. So after each batch what exists is set
    aside (`gc.freeze()`, which costs the same at any size) and collections scan only what the batch after it makes.
    A cycle that was still alive when set aside is freed by a full sweep every SWEEP_EVERY_S: at the first poll
    that finds nothing to read once one is due, or after any poll once one is due twice over (a cell whose
    heartbeats never let a poll come back empty). `seconds` is the time the collector took meanwhile, sweeps
    included; with `paced` False the collector keeps Python's pace and is only timed (for a benchmark's side by
    side). Instances may overlap: the last to close restores Python's pace and lets go of what was set aside."""

    def __init__(self, sweep_every_s: float = SWEEP_EVERY_S, paced: bool = True) -> None:
        global _pacing, _threshold_before
        self.sweep_every_s, self.paced = sweep_every_s, paced
        self.swept_at = time.monotonic()
        self.sweeps = 0
        self.seconds = 0.0
        self._began = 0.0
        if paced:
            if not _pacing:
                _threshold_before = gc.get_threshold()
                gc.set_threshold(YOUNG_THRESHOLD, 50, 100)
            _pacing += 1
        gc.callbacks.append(self._timed)

    def _timed(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began

    def after_poll(self, records: int) -> None:
        """Called after each poll and its batch: `records` it read (0: a quiet poll)."""
        if not self.paced:
            return
        due = time.monotonic() - self.swept_at
        if due >= self.sweep_every_s and (not records or due >= 2 * self.sweep_every_s):
            gc.unfreeze()
            gc.collect()
            self.swept_at = time.monotonic()
            self.sweeps += 1
        gc.freeze()

    def close(self) -> None:
        """Stops timing the collector; the last paced instance to close restores Python's pace and lets go of what
        was set aside (a cycle among it is then freed by the next full collection)."""
        global _pacing
        gc.callbacks.remove(self._timed)
        if self.paced:
            _pacing -= 1
            if not _pacing:
                gc.set_threshold(*_threshold_before)
                gc.unfreeze()


_pacing = 0  # paced BetweenBatches not yet closed
_threshold_before = gc.get_threshold()  # Python's pace before the first of them
