"""Pacing of Python's cyclic garbage collector for bulk work: reading a whole log, replaying or simulating it.

Such work allocates millions of small objects that either stay (the records, the jobs) or die young without
cycles. At the default rate the collector spent about half of a log read and a fifth of a simulation scanning
what it cannot free. Inside `rare_collections()` it runs far less often and never over what existed before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Allocations between two collections of the youngest generation (Python's default is 700).
YOUNG_THRESHOLD = 100_000

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
