"""A cell's projection in RocksDB (rocksdict): the rows an event batch changed and the offset of
the last folded event go into one write batch, so a restart resumes exactly where it stopped."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from projections.cell import CellState
from projections.snapshot import CELL_KEY, TENANCY_KEY, all_keys, restore, rows


class StoreMismatch(RuntimeError):
    """A store folded from one log opened to resume on another."""


class ProjectionStore:
    """One cell's state in its own RocksDB directory."""

    def __init__(self, path: Path | str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self.path = Path(path)
        self._db = Rdict(str(path), Options(raw_mode=True))

    def load(self) -> CellState | None:
        """The stored state (its `offset` is the last folded event), or None for an empty store. Raises
        OutdatedSnapshot (projections/snapshot.py) for a state an older Gangway saved."""
        if self._db.get(CELL_KEY.encode()) is None:
            return None
        stored = {key.decode(): value for key, value in self._db.items() if _is_state_row(key)}
        return restore(stored)

    def bind(self, log: str) -> None:
        """Ties the store to the log it folds (e.g. `<cluster id>/<topic>/<partition>`): a new store takes the
        name, a store folded from another log refuses, since its offsets mean nothing here."""
        bound = self._db.get(b"log")
        if bound is None:
            self._db[b"log"] = log.encode()
        elif bound.decode() != log:
            raise StoreMismatch(f"the projection in {self.path} was folded from {bound.decode()}, not {log}: "
                                f"move it away (or give another --state-dir) to rebuild from this log")

    def extra(self, name: str) -> bytes | None:
        """A row the caller saved beside the state (a service's assumed decisions, say)."""
        return self._db.get(f"extra/{name}".encode())

    def extras(self, prefix: str) -> dict[str, bytes]:
        """The caller's rows whose names start with `prefix`, by name."""
        start = f"extra/{prefix}".encode()
        found = {}
        for key, value in self._db.items(from_key=start):
            if not key.startswith(start):
                break
            found[key.decode().removeprefix("extra/")] = value
        return found

    def save(self, state: CellState, extra: Mapping[str, bytes | None] = {}, everything: bool = False) -> None:
        """Writes the rows changed since the last save, the offset, and `extra` (None deletes a row), atomically.
        With `everything` (and for a state that does not track its changed rows) every row is written and the
        rows of what the state no longer holds are deleted."""
        batch = WriteBatch(raw_mode=True)
        if everything or not state.tracks_rows:
            keys = all_keys(state)
            for stale in sorted(self._state_keys() - set(keys)):
                batch.delete(stale.encode())
        else:
            keys = sorted(state.dirty | {CELL_KEY, TENANCY_KEY})
        for key, value in rows(state, keys):
            if value is None:
                batch.delete(key.encode())
            else:
                batch.put(key.encode(), value)
        for name, value in sorted(extra.items()):
            if value is None:
                batch.delete(f"extra/{name}".encode())
            else:
                batch.put(f"extra/{name}".encode(), value)
        self._db.write(batch)
        state.dirty.clear()

    def clear(self) -> None:
        """Deletes the state and the caller's rows; the store stays bound to its log."""
        batch = WriteBatch(raw_mode=True)
        for key in [k for k in self._db.keys() if k != b"log"]:
            batch.delete(key)
        self._db.write(batch)

    def _state_keys(self) -> set[str]:
        return {key.decode() for key in self._db.keys() if _is_state_row(key)}

    def close(self) -> None:
        self._db.close()


def _is_state_row(key: bytes) -> bool:
    """A row of the state, not the caller's extras nor the name of the log it was folded from."""
    return not key.startswith(b"extra/") and key != b"log"
