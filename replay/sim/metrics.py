"""What a simulation measures while the log plays (GPU-time integrals, waits, preemptions, lost work)
and the metrics of the result JSON computed from it; the fields are listed in replay/sim/run.py."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol, cast

from events import models as m
from projections.cluster import CELL
from projections.jobs import JobState
from replay.runner import VirtualCell
from replay.sim.failed import DeciderFailed
from replay.sim.workload import HOUR_MS, Workload


class Work(Protocol):
    """What a meter asks about the training itself: how much an attempt had done, and how long each job needs
    (the simulated agents know it; a recorded log tells it, replay/audit/whatif.py)."""

    durations: Mapping[str, int]

    def progress(self, job_id: str, attempt: int, at: int) -> int | None: ...


_BROKEN = frozenset({m.Reason.DECISION_FAILED, m.Reason.DECISION_UNENCODABLE})


class Meter:
    """Observer that integrates GPU-time and follows every job while the log plays."""

    def __init__(self, agents: Work, gpu_types: Sequence[str], sample_ms: int = HOUR_MS,
                 cycle_ms: int = 60_000) -> None:
        self.agents = agents
        self.cycle_ms = cycle_ms  # one admission cycle: a preemption's beneficiary is due by its deadline plus this
        self.gpu_types = tuple(gpu_types)
        self.started = False  # whether an event was seen: `t` and `next_sample` count from the first
        self.t = 0
        self.sample_ms = sample_ms
        self.next_sample = 0
        self.samples: list[tuple[int, int, int]] = []  # (at, GPUs allocated, jobs waiting)
        self.busy_capacity = self.busy_allocated = 0  # GPU-ms while work waits or runs
        self.wait_capacity = self.wait_idle = 0  # GPU-ms while some job waits
        self.busy_stranded = 0  # GPU-ms free on partly used nodes while work waits or runs
        self.allocated_total = 0  # GPU-ms allocated overall
        self.held_since: dict[str, int] = {}
        self.held_ms: dict[str, int] = {}
        self.preemptions = self.interruptions = self.gpu_failures = 0
        self.lost_gpu_ms = 0
        self.multi_node = self.multi_node_one_rack = 0
        self.ended = 0
        self.preempted: dict[str, int] = {}  # job -> times preempted
        self.requests: dict[str, tuple[int, int]] = {}  # victim -> (asked at, due by) of its latest request
        self.admitted: dict[str, int] = {}  # job -> when it was last admitted
        self.due: dict[str, list[tuple[int, int]]] = {}  # beneficiary -> (asked at, due by) of its preempted victims
        self.futile: list[tuple[int, int]] = []  # (asked at, due by) of victims whose beneficiary came too late
        self.faults: list[int] = []  # times of hardware faults: node failures and GPU faults
        self.first_at: int | None = None
        self.now = (0, 0, 0, 0)  # (GPUs allocated, GPUs free, jobs waiting, GPUs stranded) after the last event

    def __call__(self, cell: VirtualCell, event: m.Event, offset: int) -> None:
        at = event.envelope.at
        if not self.started:
            self.started = True
            self.t = at
            self.next_sample = at - at % self.sample_ms + self.sample_ms
        elif at > self.t:
            self._advance(at)
        kind = type(event)
        if kind in _JOB_EVENTS:
            self._job_event(cell, event, kind, offset, at)
        elif kind is m.GpuErrorReported:
            self.gpu_failures += 1
        elif kind is m.PreemptionRequested:
            asked = cast(m.PreemptionRequested, event)
            self.requests[asked.job_id] = (at, max(at, asked.checkpoint_deadline) + self.cycle_ms)
        elif kind in (m.NodeFailed, m.GpuFaulted):
            self.faults.append(at)
        elif kind is m.RecordRefused and event.envelope.reason in _BROKEN:
            refusal = cast(m.RecordRefused, event)
            raise DeciderFailed(f"the {refusal.envelope.producer} failed on the record at offset "
                                f"{refusal.refused_offset} ({refusal.envelope.reason.value}): {refusal.detail}")
        if kind not in _KEEP_COUNTS:
            self._snapshot(cell)

    def _snapshot(self, cell: VirtualCell) -> None:
        """The state's GPU counts after this event: they hold until the next event's time."""
        state = cell.state
        free = stranded = 0
        histograms = state.cluster.histogram
        for gpu_type in self.gpu_types:
            histogram = histograms.get((gpu_type, CELL, ""), ())
            whole = len(histogram) - 1  # the largest node's GPUs: a node with all of them free is unused
            for f, c in enumerate(histogram):
                free += f * c
                if f < whole:
                    stranded += f * c
        self.now = (sum(state.tenancy.usage.values()), free, len(state.queued), stranded)

    def _advance(self, at: int) -> None:
        allocated, free, waiting, stranded = self.now
        capacity = allocated + free
        dt = at - self.t
        self.allocated_total += allocated * dt
        if waiting or allocated:
            self.busy_capacity += capacity * dt
            self.busy_allocated += allocated * dt
            self.busy_stranded += stranded * dt
        if waiting:
            self.wait_capacity += capacity * dt
            self.wait_idle += free * dt
        while self.next_sample <= at:
            self.samples.append((self.next_sample, allocated, waiting))
            self.next_sample += self.sample_ms
        self.t = at

    def _job_event(self, cell: VirtualCell, event: m.Event, kind: type, offset: int, at: int) -> None:
        job = cell.state.jobs.get(getattr(event, "job_id"))  # each of the job events names one
        if job is None:
            return
        if kind is m.JobSubmitted:
            if self.first_at is None:
                self.first_at = at
            return
        decided = job.reason_offset == offset  # folded, not superseded
        if job.holds_capacity:
            if job.job_id not in self.held_since:
                self.held_since[job.job_id] = at
        elif job.job_id in self.held_since:
            self.held_ms[job.job_id] = self.held_ms.get(job.job_id, 0) + at - self.held_since.pop(job.job_id)
        if not decided:
            return
        if kind is m.JobPlaced and job.state is JobState.PLACED:
            nodes = job.nodes()
            if len(nodes) > 1:
                self.multi_node += 1
                # a cell without topology levels has no racks: each node stands alone
                racks = {(cell.state.cluster.nodes[n].domains or (n,))[-1] for n in nodes}
                self.multi_node_one_rack += len(racks) == 1
        elif kind is m.JobAdmitted:
            self.admitted[job.job_id] = at
            for asked, due in self.due.pop(job.job_id, ()):
                if at > due:
                    self.futile.append((asked, due))
        elif kind is m.JobPreempted:
            self.preemptions += 1
            self.preempted[job.job_id] = self.preempted.get(job.job_id, 0) + 1
            asked, due = self.requests.pop(job.job_id, (at, at + self.cycle_ms))
            beneficiary = cast(m.JobPreempted, event).for_job_id
            if not asked <= self.admitted.get(beneficiary, -1) <= due:  # else its gang was admitted already
                self.due.setdefault(beneficiary, []).append((asked, due))
            self._lost(job, job.attempt - 1, at)
        elif kind is m.JobInterrupted:
            self.interruptions += 1
            self._lost(job, cast(m.JobInterrupted, event).attempt, at)
        elif kind in _ENDINGS:
            self.ended += 1

    def futile_preemptions(self) -> tuple[int, int]:
        """Preemptions whose beneficiary was not admitted by the victim's checkpoint deadline plus one cycle, and
        how many of them saw a hardware fault between the preemption and that time."""
        futile = self.futile + [entry for dues in self.due.values() for entry in dues]
        faulted = sum(1 for asked, due in futile if any(asked <= at <= due for at in self.faults))
        return len(futile), faulted

    def _lost(self, job, attempt: int, at: int) -> None:
        progress = self.agents.progress(job.job_id, attempt, at)
        if progress is None:
            return
        kept = job.checkpoint.progress_ms if job.checkpoint is not None else 0
        self.lost_gpu_ms += max(0, progress - kept) * job.gpus


#: Events after which GPUs allocated, GPUs free and jobs waiting are what they were before.
_KEEP_COUNTS = frozenset({m.CheckpointCompleted, m.WorkerStarted, m.WorkerExited, m.Tick, m.JobQueued,
                          m.PreemptionRequested, m.GpuErrorReported})
_ENDINGS = frozenset({m.JobSucceeded, m.JobFailed, m.JobCancelled, m.JobRejected})
_JOB_EVENTS = frozenset({m.JobSubmitted, m.JobAdmitted, m.JobPlaced, m.PlacementPending, m.JobPreempted,
                         m.JobInterrupted, *_ENDINGS})


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of sorted values (0 for none)."""
    if not values:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(values)))
    return values[min(rank, len(values)) - 1]


def _r(x: float, digits: int = 1) -> float:
    return round(x, digits)


def summarize(cell: VirtualCell, workload: Workload, meter: Meter, start: int) -> tuple[dict, dict]:
    state = cell.state
    per_job: dict[str, tuple[str, float | None, float | None]] = {}
    jct: list[int] = []
    queue: list[int] = []
    per_team: dict[str, dict] = {t: {"jobs": 0, "queue_ms": 0, "jct_ms": 0, "succeeded": 0} for t in workload.teams}
    useful = 0
    counts = {"succeeded": 0, "failed": 0, "rejected": 0, "cancelled": 0, "unfinished": 0}
    last_end = start
    durations = meter.agents.durations
    jobs = cell.all_jobs()
    for job_id in sorted(jobs):
        job = jobs[job_id]
        team = per_team[job.team]
        team["jobs"] += 1
        if job.state is JobState.SUCCEEDED:
            counts["succeeded"] += 1
            ended = cast(int, job.ended_at)  # every ended job has its end
            total = ended - job.submitted_at
            waited = total - meter.held_ms.get(job_id, 0)
            jct.append(total)
            queue.append(waited)
            team["queue_ms"] += waited
            team["jct_ms"] += total
            team["succeeded"] += 1
            last_end = max(last_end, ended)
            useful += durations[job_id] * job.gpus
            per_job[job_id] = (job.state.value, waited / 1000, total / 1000)
            continue
        per_job[job_id] = (job.state.value, None, None)
        if job.ended_at is not None:
            last_end = max(last_end, job.ended_at)
        if job.state.value in counts:
            counts[job.state.value] += 1
        else:
            counts["unfinished"] += 1
    jct.sort()
    queue.sort()
    return _metric_dict(state, counts, jct, queue, last_end, start, meter, useful, per_team, workload), per_job


def _metric_dict(state, counts, jct, queue, last_end, start, meter, useful, per_team, workload) -> dict:
    n = len(jct) or 1
    futile, faulted = meter.futile_preemptions()
    return {
        "jobs": sum(counts.values()),
        **counts,
        "avg_jct_s": _r(sum(jct) / n / 1000),
        "p50_jct_s": _r(percentile(jct, 50) / 1000),
        "p99_jct_s": _r(percentile(jct, 99) / 1000),
        "avg_queue_s": _r(sum(queue) / n / 1000),
        "p50_queue_s": _r(percentile(queue, 50) / 1000),
        "p99_queue_s": _r(percentile(queue, 99) / 1000),
        "makespan_s": _r((last_end - start) / 1000),
        "utilization": _r(meter.busy_allocated / meter.busy_capacity, 4) if meter.busy_capacity else 0.0,
        "idle_while_waiting": _r(meter.wait_idle / meter.wait_capacity, 4) if meter.wait_capacity else 0.0,
        "preemptions": meter.preemptions,
        "preemptions_per_job": _r(meter.preemptions / sum(counts.values()), 3) if sum(counts.values()) else 0.0,
        "futile_preemptions": futile,
        "futile_preemptions_with_fault": faulted,
        "max_preemptions_of_one_job": max(meter.preempted.values(), default=0),
        "interruptions": meter.interruptions,
        "gpu_failures": meter.gpu_failures,
        "gpu_hours_lost": _r(meter.lost_gpu_ms / HOUR_MS),
        "effective_training_ratio": _r(useful / meter.allocated_total, 4) if meter.allocated_total else 0.0,
        "multi_node_gangs": meter.multi_node,
        "multi_node_gangs_in_one_rack": _r(meter.multi_node_one_rack / meter.multi_node, 4) if meter.multi_node else 1.0,
        "stranded_gpus": _r(meter.busy_stranded / meter.busy_capacity, 4) if meter.busy_capacity else 0.0,
        "per_team": {
            t: {"jobs": v["jobs"], "nominal_gpus": sum(workload.quotas[t].values()),
                "avg_queue_s": _r(v["queue_ms"] / max(v["succeeded"], 1) / 1000),
                "avg_jct_s": _r(v["jct_ms"] / max(v["succeeded"], 1) / 1000)}
            for t, v in per_team.items()
        },
    }
