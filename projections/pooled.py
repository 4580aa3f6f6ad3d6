"""Quota usage that remembers each pool's use: a dict subclass, so it stays out of the compiled core
(events/compiled.py), which cannot compile a class whose mutators wrap dict's."""

from __future__ import annotations

from collections.abc import Mapping


class PooledUsage(dict):
    """Quota usage per (team, GPU type) that remembers each pool's use (`Tenancy.pool_used`) until an entry
    changes: an admission cycle checks quota tens of times for each change of usage. Configuration must not
    change while one is in use."""

    __slots__ = ("pools",)

    def __init__(self, usage: Mapping[tuple[str, str], int] = {}) -> None:  # noqa: B006 (never mutated)
        super().__init__(usage)
        self.pools: dict[tuple[str, str], int] = {}

    def __setitem__(self, key: tuple[str, str], value: int) -> None:
        self.pools.clear()
        super().__setitem__(key, value)

    def __delitem__(self, key: tuple[str, str]) -> None:
        self.pools.clear()
        super().__delitem__(key)

    def _changed(method):  # noqa: N805 (wraps dict's other mutators, which bypass __setitem__)
        def changed(self, *args, **kwargs):
            self.pools.clear()
            return method(self, *args, **kwargs)
        return changed

    update = _changed(dict.update)
    pop = _changed(dict.pop)
    popitem = _changed(dict.popitem)
    setdefault = _changed(dict.setdefault)
    clear = _changed(dict.clear)
    __ior__ = _changed(dict.__ior__)
    del _changed
