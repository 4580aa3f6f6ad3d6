"""Folds a batch of one cell's log into the read model's rows: pure, so a live projector, a rebuild and a test
fold the same records into the same rows whatever the batching.

`CellFold` keeps the folded `CellState` (saved beside the documents, so a restart resumes) and what the
documents were last written from: each job's indexed state and timeline length, each node's key and GPU
counts, the hourly series and the counters behind /metrics. `fold(records)` returns the rows to put
(bytes) or delete (None) and the stream items (decisions and requests) of the batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import Job, JobState
from projections.readmodel.documents import (
    GPU_STATES,
    cell_prefix,
    gpu_counts,
    index_keys,
    job_document,
    node_document,
    node_key,
    tenancy_document,
    timeline_entry,
)
from projections.snapshot import CELL_KEY, TENANCY_KEY, restore, rows

HOUR_MS = 3_600_000
#: Upper bounds (seconds) of the queue-wait histogram's buckets, Prometheus style.
WAIT_BUCKETS = (10, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400)
#: Inputs shown in the stream beside the decisions: what users asked for.
REQUESTS = (m.JobSubmitted, m.JobCancelRequested)
#: Reasons `evolve` notes for a decision it folded without effect.
NO_EFFECT = frozenset({"SUPERSEDED", m.Reason.PLACEMENT_SUPERSEDED.value})
_SERIES_FIELDS = ("submitted", "admitted", "placed", "succeeded", "failed", "cancelled", "rejected", "preempted",
                  "interrupted", "queue_wait_ms")


def dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class Changes:
    """What one batch changes: rows by key (None deletes) and the items it adds to the stream."""

    rows: dict[str, bytes | None] = field(default_factory=dict)
    stream: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CellFold:
    """One cell's read model as far as it is folded."""

    cell: str
    state: CellState = field(default_factory=CellState)
    jobs: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # job -> (indexed state, timeline length, detail)
    nodes: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)  # node -> (key, GPU counts)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # team -> job state -> jobs
    hours: dict[int, dict[str, int]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=lambda: {
        "admissions": {}, "preemptions": {}, "wait_buckets": [0] * len(WAIT_BUCKETS), "wait_count": 0,
        "wait_sum_ms": 0})

    @property
    def prefix(self) -> str:
        return cell_prefix(self.cell)

    def fold(self, records: Iterable[tuple[int, m.Event | None]]) -> Changes:
        """Folds (offset, event) records (None: an undecodable record, which only moves the offset)."""
        state, changes = self.state, Changes()
        if not state.cell:
            state.cell = self.cell
        events: dict[int, m.Event] = {}
        hours_touched: set[int] = set()
        leaving: dict[str, Job] = {}  # jobs that ended leave the state at a Tick: their last rows are still due
        for offset, event in records:
            if offset <= state.offset:
                continue  # re-delivered
            if event is None:
                state.offset = offset
                continue
            if isinstance(event, m.Tick):
                leaving.update(state.leaving())
            evolve(state, event, offset)
            events[offset] = event
            self._count(event, offset, hours_touched)
            if event.is_decision or isinstance(event, REQUESTS):
                changes.stream.append(self._stream_item(offset, event))
        dirty = set(state.dirty)
        state.dirty.clear()
        self._write_state(changes, dirty)
        self._write_jobs(changes, dirty, events, leaving)
        self._write_nodes(changes, {key[5:] for key in dirty if key.startswith("node/")})
        p = self.prefix
        for item in changes.stream:
            changes.rows[f"{p}dec/{item['offset']:012d}"] = dumps(item)
        for hour in sorted(hours_touched):
            changes.rows[f"{p}hour/{hour:015d}"] = dumps(self.hours[hour])
        changes.rows[f"{p}metrics"] = dumps(self.metrics)
        changes.rows[f"{p}summary"] = dumps(self.summary())
        changes.rows[f"{p}tenancy"] = dumps(tenancy_document(state))
        changes.rows[f"{p}offset"] = dumps(state.offset)
        return changes

    # --- rows -----------------------------------------------------------------------------------

    def _write_state(self, changes: Changes, dirty: set[str]) -> None:
        """The folded state's own rows (projections/snapshot.py), so a restart resumes the fold."""
        keys = sorted(k for k in dirty | {CELL_KEY, TENANCY_KEY} if not k.startswith("heartbeat/"))
        for key, value in rows(self.state, keys):
            changes.rows[f"{self.prefix}s/{key}"] = value

    def _write_jobs(self, changes: Changes, dirty: set[str], events: Mapping[int, m.Event],
                    leaving: Mapping[str, Job]) -> None:
        p = self.prefix
        for key in sorted(dirty):
            if not key.startswith("job/"):
                continue
            job = self.state.jobs.get(key[4:]) or leaving.get(key[4:])
            if job is None:
                continue
            before = self.jobs.get(job.job_id)
            indexed, written, detail = before if before is not None else (None, 0, "")
            for entry in job.history[written:]:
                item = timeline_entry(entry, events.get(entry[0]))
                changes.rows[f"{p}tl/{job.job_id}\x00{entry[0]:012d}"] = dumps(item)
                if entry[3] not in NO_EFFECT and (item["detail"] or entry[2] != "WorkerStarted"):
                    detail = item["detail"]
            if indexed != job.state.value:
                if indexed is not None:
                    for old in index_keys(self.cell, job, JobState(indexed)):
                        changes.rows[old] = None
                    self._add_count(job.team, indexed, -1)
                for new in index_keys(self.cell, job, job.state):
                    changes.rows[new] = b""
                self._add_count(job.team, job.state.value, 1)
            self.jobs[job.job_id] = (job.state.value, len(job.history), detail)
            changes.rows[f"{p}job/{job.job_id}"] = dumps(job_document(self.cell, job, detail, len(job.history)))

    def _write_nodes(self, changes: Changes, names: set[str]) -> None:
        """Rewrites the nodes whose GPUs, flags or domains changed."""
        state = self.state
        for name in sorted(names):
            node = state.cluster.nodes.get(name)
            if node is None:
                continue
            key = node_key(self.cell, state, node)
            document = node_document(state, node)
            old = self.nodes.get(name)
            if old is not None and old[0] != key:
                changes.rows[old[0]] = None
            self.nodes[name] = (key, gpu_counts(document))
            changes.rows[key] = dumps(document)

    def _add_count(self, team: str, job_state: str, n: int) -> None:
        by_state = self.counts.setdefault(team, {})
        by_state[job_state] = by_state.get(job_state, 0) + n
        if not by_state[job_state]:
            del by_state[job_state]

    # --- series and counters ----------------------------------------------------------------------

    def _count(self, event: m.Event, offset: int, hours: set[int]) -> None:
        """Hourly series and /metrics counters, from what the event did to the state (a superseded decision did
        nothing and counts for nothing)."""
        job = self.state.jobs.get(m.field_of(event, "job_id", ""))
        took = (job is not None and bool(job.history) and job.history[-1][0] == offset
                and job.history[-1][3] not in NO_EFFECT)
        what = {m.JobSubmitted: "submitted", m.JobAdmitted: "admitted", m.JobPlaced: "placed",
                m.JobSucceeded: "succeeded", m.JobFailed: "failed", m.JobCancelled: "cancelled",
                m.JobRejected: "rejected", m.JobPreempted: "preempted", m.JobInterrupted: "interrupted"}.get(type(event))
        if isinstance(event, m.RecordRefused):  # refused records, by reason (NOT_ITS_WRITER: forged or misrouted)
            refused = self.metrics.setdefault("refused", {})
            refused[event.envelope.reason.value] = refused.get(event.envelope.reason.value, 0) + 1
            return
        if what is None or not took:
            if isinstance(event, m.PreemptionRequested) and took:
                reasons = self.metrics["preemptions"]
                reasons[event.envelope.reason.value] = reasons.get(event.envelope.reason.value, 0) + 1
            return
        hour = event.envelope.at // HOUR_MS * HOUR_MS
        series = self.hours.setdefault(hour, dict.fromkeys(_SERIES_FIELDS, 0))
        series[what] += 1
        hours.add(hour)
        if isinstance(event, m.JobAdmitted):
            wait = max(0, event.envelope.at - job.waiting_since)
            series["queue_wait_ms"] += wait
            metrics = self.metrics
            metrics["admissions"][job.team] = metrics["admissions"].get(job.team, 0) + 1
            metrics["wait_count"] += 1
            metrics["wait_sum_ms"] += wait
            for i, bound in enumerate(WAIT_BUCKETS):
                if wait <= bound * 1000:
                    metrics["wait_buckets"][i] += 1
                    break

    def _stream_item(self, offset: int, event: m.Event) -> dict[str, Any]:
        job_id = m.field_of(event, "job_id", None)
        job = self.state.jobs.get(job_id) if job_id else None
        return {"cell": self.cell, "offset": offset, "at": event.envelope.at, "type": type(event).__name__,
                "kind": "decision" if event.is_decision else "request", "job_id": job_id,
                "team": job.team if job is not None else m.field_of(event, "team", None),
                "node": m.field_of(event, "node", None), "reason": event.envelope.reason.value,
                "detail": timeline_entry((offset, event.envelope.at, "", ""), event)["detail"]}

    def summary(self) -> dict[str, Any]:
        state = self.state
        gpus = dict.fromkeys(GPU_STATES, 0)
        for _, counts in self.nodes.values():
            for name, n in counts.items():
                gpus[name] += n
        by_state: dict[str, int] = {}
        for counts in self.counts.values():
            for name, n in counts.items():
                by_state[name] = by_state.get(name, 0) + n
        return {"cell": self.cell, "offset": state.offset, "now": state.now, "levels": list(state.cluster.levels),
                "nodes": len(state.cluster.nodes), "gpus": gpus, "jobs": by_state,
                "jobs_by_team": {team: dict(sorted(c.items())) for team, c in sorted(self.counts.items())},
                "gpu_types": state.cluster.gpu_types()}

    # --- from stored rows ---------------------------------------------------------------------------

    def initial_rows(self) -> dict[str, bytes]:
        """The rows of a cell whose log is empty so far (a summary to show, offset -1)."""
        return {f"{self.prefix}summary": dumps(self.summary()), f"{self.prefix}offset": dumps(self.state.offset),
                f"{self.prefix}tenancy": dumps(tenancy_document(self.state)), f"{self.prefix}metrics": dumps(self.metrics)}

    @classmethod
    def restore(cls, cell: str, stored: Mapping[str, bytes]) -> CellFold:
        """The fold as it was saved, from the cell's rows (keys without the cell prefix)."""
        fold = cls(cell)
        snapshot = {k[2:]: v for k, v in stored.items() if k.startswith("s/")}
        if CELL_KEY not in snapshot:
            return fold
        fold.state = restore(snapshot)
        fold.state.dirty.clear()
        fold.state.cluster.changed.clear()
        for key, value in stored.items():
            if key.startswith("job/"):
                doc = json.loads(value)
                fold.jobs[doc["job_id"]] = (doc["state"], doc["timeline_length"], doc["detail"])
                fold._add_count(doc["team"], doc["state"], 1)
            elif key.startswith("node\x00"):
                doc = json.loads(value)
                fold.nodes[doc["name"]] = (fold.prefix + key, gpu_counts(doc))
            elif key.startswith("hour/"):
                fold.hours[int(key[5:])] = json.loads(value)
        if "metrics" in stored:
            fold.metrics = json.loads(stored["metrics"])
        return fold
