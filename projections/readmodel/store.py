"""The read model in RocksDB (rocksdict), shaped for the query API: one write batch per folded batch of the log
(its rows and the cell's offset together), and the lookups the API makes — a job, its timeline, a page of jobs
through a secondary index, nodes in topology order, teams, the stream's backlog, the hourly series.

Keys, per cell under `c/<cell>/`: `offset`, `summary`, `tenancy`, `metrics`; `s/...` the folded state's rows;
`job/<id>`; `tl/<id>\\0<offset>` a timeline entry; `ix\\0<sort>\\0<filters>\\0<values...>\\0<sort key>\\0<id>` the
job indexes; `node\\0<domain>...\\0<name>`; `dec/<offset>` decisions and requests; `hour/<start ms>`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict, WriteBatch

from projections.readmodel.documents import SEP, cell_prefix, index_prefix
from projections.readmodel.fold import CellFold, Changes

_END = b"\xff"  # greater than any byte of a UTF-8 key


class ReadModelStore:
    """The read model of some cells in one RocksDB directory."""

    def __init__(self, path: Path | str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self.path = Path(path)
        self._db = Rdict(str(path), Options(raw_mode=True))

    def close(self) -> None:
        self._db.close()

    # --- writing ------------------------------------------------------------------------------------

    def apply(self, changes: Changes | Mapping[str, bytes | None]) -> None:
        """Writes a batch's rows (the cell's offset among them) atomically."""
        rows = changes.rows if isinstance(changes, Changes) else changes
        batch = WriteBatch(raw_mode=True)
        for key, value in rows.items():
            if value is None:
                batch.delete(key.encode())
            else:
                batch.put(key.encode(), value)
        self._db.write(batch)

    def load(self, cell: str) -> CellFold:
        """The cell's fold as saved (a fresh one when the store holds nothing of it)."""
        prefix = cell_prefix(cell)
        wanted = ("s/", "job/", "node" + SEP, "hour/", "metrics")
        stored = {key: value for key, value in self._scan(prefix) if key.startswith(wanted)}
        return CellFold.restore(cell, stored)

    def rows(self, cell: str | None = None) -> dict[str, bytes]:
        """Every row (of one cell), for comparing two read models."""
        return dict(self._scan(cell_prefix(cell) if cell else ""))

    def _scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        """(key without `prefix`, value) of every row under `prefix`, in key order."""
        raw = prefix.encode()
        for key, value in self._db.items(from_key=raw):
            if not key.startswith(raw):
                break
            yield key[len(raw):].decode(), value

    # --- reading ------------------------------------------------------------------------------------

    def _json(self, key: str) -> Any:
        value = self._db.get(key.encode())
        return None if value is None else json.loads(value)

    def offset(self, cell: str) -> int | None:
        return self._json(f"{cell_prefix(cell)}offset")

    def summary(self, cell: str) -> dict[str, Any] | None:
        return self._json(f"{cell_prefix(cell)}summary")

    def tenancy(self, cell: str) -> dict[str, Any] | None:
        return self._json(f"{cell_prefix(cell)}tenancy")

    def metrics(self, cell: str) -> dict[str, Any] | None:
        return self._json(f"{cell_prefix(cell)}metrics")

    def job(self, cell: str, job_id: str) -> dict[str, Any] | None:
        return self._json(f"{cell_prefix(cell)}job/{job_id}")

    def timeline(self, cell: str, job_id: str) -> list[dict[str, Any]]:
        return [json.loads(v) for _, v in self._scan(f"{cell_prefix(cell)}tl/{job_id}{SEP}")]

    def jobs(self, cell: str, filters: Mapping[str, str], sort: str, descending: bool, limit: int,
             after: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """Up to `limit` jobs matching `filters` (team, state, priority) in `sort` order, after the position
        `after` (a previous page's cursor); and the cursor of the next page, or None after the last."""
        prefix = index_prefix(cell, sort, dict(filters)).encode()
        it = self._db.iter()
        if descending:
            it.seek_for_prev(prefix + (after.encode() if after is not None else _END))
        else:
            it.seek(prefix + (after.encode() if after is not None else b""))
        ids, last = [], None
        while it.valid() and len(ids) <= limit:
            key = it.key()
            if not key.startswith(prefix):
                break
            position = key[len(prefix):].decode()
            if position != after:
                ids.append(position.rsplit(SEP, 1)[1])
                if len(ids) <= limit:
                    last = position
            it.prev() if descending else it.next()
        more = len(ids) > limit
        ids = ids[:limit]
        base = cell_prefix(cell)
        values = self._db.get([f"{base}job/{job_id}".encode() for job_id in ids]) if ids else []
        return [json.loads(v) for v in values if v is not None], (last if more else None)

    def nodes(self, cell: str, labels: list[str] = ()) -> list[dict[str, Any]]:
        """Nodes in topology order, within the domain named by `labels` (outermost level first) if given."""
        prefix = SEP.join([f"{cell_prefix(cell)}node", *labels]) + (SEP if labels else "")
        return [json.loads(v) for k, v in self._scan(prefix if labels else f"{cell_prefix(cell)}node{SEP}")]

    def decisions(self, cell: str, after: int = -1, limit: int = 1000) -> list[dict[str, Any]]:
        """Stream items (decisions and requests) after offset `after`, oldest first."""
        out = []
        prefix = f"{cell_prefix(cell)}dec/".encode()
        for key, value in self._db.items(from_key=prefix + f"{after + 1:012d}".encode()):
            if not key.startswith(prefix) or len(out) >= limit:
                break
            out.append(json.loads(value))
        return out

    def latest_decisions(self, cell: str, limit: int) -> list[dict[str, Any]]:
        """The last `limit` stream items, newest first."""
        out = []
        prefix = f"{cell_prefix(cell)}dec/".encode()
        for key, value in self._db.items(from_key=prefix + _END, backwards=True):
            if not key.startswith(prefix) or len(out) >= limit:
                break
            out.append(json.loads(value))
        return out

    def hours(self, cell: str, since: int = 0) -> list[dict[str, Any]]:
        """The hourly series from hour `since` (ms) on, oldest first."""
        return [dict(json.loads(v), hour=int(k)) for k, v in self._scan(f"{cell_prefix(cell)}hour/")
                if int(k) >= since]
