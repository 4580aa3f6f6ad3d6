"""Jobs and their lifecycle: what a job asked for, where it is, and the history `explain` tells."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from events.models import Reason
from projections.value import Value


class JobState(StrEnum):
    """Submitted -> Queued -> Admitted -> Placed -> Running -> Succeeded | Failed | Cancelled, with
    Running -> Preempting -> Queued (resumes from its checkpoint) and Running -> Queued after a failure."""

    QUEUED = "queued"
    ADMITTED = "admitted"
    PLACED = "placed"
    RUNNING = "running"
    PREEMPTING = "preempting"
    INTERRUPTED = "interrupted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


ENDED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED})
#: States in which a job holds quota (and, from ADMITTED on, GPUs).
HOLDING = frozenset({JobState.ADMITTED, JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING})


#: Least-attained-service bands (Tiresias' discretised queues): band 0 below 1 GPU-hour received, then one band
#: per factor of 10, up to the last.
FIRST_BAND_GPU_MS = 3_600_000
LAST_BAND = 4


#: A gang without a time limit is ordered, when gangs go by deadline (AdmissionPolicy.earliest_deadline_first), as
#: if it had asked for 7 days (Slurm's default PriorityMaxAge): gangs submitted up to a week after it may pass it.
NO_LIMIT_DEADLINE_MS = 7 * 24 * 3_600_000


def service_band(gpu_ms: int) -> int:
    """The least-attained-service band of a job that has received `gpu_ms` GPU-milliseconds."""
    band, limit = 0, FIRST_BAND_GPU_MS
    while gpu_ms >= limit and band < LAST_BAND:
        band, limit = band + 1, limit * 10
    return band


@dataclass(frozen=True)
class Checkpoint(Value):
    checkpoint_id: str
    progress_ms: int
    at: int


@dataclass
class Job:
    """A gang and everything the log has said about it so far."""

    job_id: str
    team: str
    workers: int
    gpus_per_worker: int
    gpu_type: str
    priority: int
    preemptible: bool
    submitted_at: int
    submit_offset: int
    min_workers: int | None = None
    topology_required: str | None = None
    topology_preferred: str | None = None
    time_limit_ms: int | None = None
    max_restarts: int = 3
    state: JobState = JobState.QUEUED
    reason: Reason = Reason.SUBMITTED
    reason_offset: int = 0
    attempt: int = 1
    restarts: int = 0
    not_before: int = 0  # requeue back-off: not admitted before this time
    borrowed: int = 0
    admitted_workers: int = 0  # workers this attempt holds quota and GPUs for (JobAdmitted.gpus / gpus_per_worker)
    admitted_at: int | None = None  # when this attempt was admitted
    assignments: tuple[tuple[int, str, tuple[int, ...]], ...] = ()  # (worker, node, gpu indices)
    domain: str | None = None
    started_workers: frozenset[int] = frozenset()
    succeeded_workers: frozenset[int] = frozenset()
    running_since: int | None = None
    checkpoint: Checkpoint | None = None
    preempted_for: str | None = None
    preemption_deadline: int | None = None
    reserved_nodes: tuple[str, ...] = ()
    reserved_since: int | None = None
    #: capacity held for this waiting gang (CapacityHeld): its planned GPUs, the quota, the victims and the end
    held: tuple[tuple[int, str, tuple[int, ...]], ...] = ()
    held_quota: int = 0
    hold_victims: tuple[str, ...] = ()
    hold_until: int | None = None
    yielded_to: tuple[str, ...] = ()  # gangs it was preempted for, so none preempts it twice
    #: asked to make room by moving (consolidation): once preempted it is admitted again before other work
    moving: bool = False
    attained_gpu_ms: int = 0  # GPU-time its finished running periods received (least-attained-service order)
    ended_at: int | None = None
    history: list[tuple[int, int, str, str]] = field(default_factory=list)  # (offset, at, event type, reason)

    def __copy__(self) -> Job:
        """A shallow copy (the history list shared), field by field: the overlay keeps one of every job a decision
        it lays touches, and `copy.copy` of a compiled class goes through pickling's state, many times slower."""
        return Job(self.job_id, self.team, self.workers, self.gpus_per_worker, self.gpu_type,
                    self.priority, self.preemptible, self.submitted_at, self.submit_offset,
                    self.min_workers, self.topology_required, self.topology_preferred, self.time_limit_ms,
                    self.max_restarts, self.state, self.reason, self.reason_offset, self.attempt,
                    self.restarts, self.not_before, self.borrowed, self.admitted_workers, self.admitted_at,
                    self.assignments, self.domain, self.started_workers, self.succeeded_workers,
                    self.running_since, self.checkpoint, self.preempted_for, self.preemption_deadline,
                    self.reserved_nodes, self.reserved_since, self.held, self.held_quota, self.hold_victims,
                    self.hold_until, self.yielded_to, self.moving, self.attained_gpu_ms, self.ended_at,
                    self.history)

    # A gang's size never changes once submitted (a resubmission with another size is refused), so the sizes
    # quota checks and queue keys read many times a cycle are computed once (compiled, events/compiled.py, on each
    # read: as cheap there).
    @cached_property
    def gpus(self) -> int:
        """GPUs the whole gang asks for."""
        return self.workers * self.gpus_per_worker

    @cached_property
    def min_count(self) -> int:
        """The fewest workers the gang may run with: min_workers (Volcano minAvailable), else all of them."""
        return self.workers if self.min_workers is None else max(1, min(self.min_workers, self.workers))

    @cached_property
    def min_gpus(self) -> int:
        """GPUs of the smallest admissible gang."""
        return self.min_count * self.gpus_per_worker

    @property
    def held_gpus(self) -> int:
        """GPUs of quota this attempt holds: its admitted workers, possibly fewer than asked (min_workers)."""
        return self.admitted_workers * self.gpus_per_worker

    @property
    def holds_capacity(self) -> bool:
        return self.state in HOLDING

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def waiting_since(self) -> int:
        """When its current wait began: its submission, or the end of its back-off (what its wait is counted from)."""
        return self.submitted_at if self.submitted_at > self.not_before else self.not_before

    @property
    def has_hold(self) -> bool:
        """Whether capacity is held for this gang (CapacityHeld)."""
        return self.hold_until is not None

    def attained(self, now: int) -> int:
        """GPU-time it has received by `now`, its current running period included."""
        running = self.held_gpus * max(0, now - self.running_since) if self.running_since is not None else 0
        return self.attained_gpu_ms + running

    def next_band_at(self, now: int) -> int | None:
        """When, running on as it does, it reaches its next least-attained-service band; None if it never will
        (not running, holding no GPUs, or in the last band)."""
        gpus = self.held_gpus
        if self.running_since is None or not gpus:
            return None
        band = service_band(self.attained(now))
        if band >= LAST_BAND:
            return None
        limit = FIRST_BAND_GPU_MS * 10 ** band
        return self.running_since + -(-(limit - self.attained_gpu_ms) // gpus)  # the first ms it has `limit`

    @property
    def service_band(self) -> int:
        """Its least-attained-service band by its finished running periods (fixed while it waits)."""
        return service_band(self.attained_gpu_ms)

    def runtime_fraction(self) -> float | None:
        """The share of its time limit a job that succeeded on its first attempt ran (from its first worker's
        start to its end): what runtime forecasts learn from. None for any other job."""
        if self.state is not JobState.SUCCEEDED or not self.time_limit_ms or self.attempt != 1 or self.ended_at is None:
            return None
        began = next((at for _, at, kind, _ in reversed(self.history) if kind == "WorkerStarted"), None)
        return None if began is None else max(0, self.ended_at - began) / self.time_limit_ms

    def nodes(self) -> list[str]:
        return sorted({node for _, node, _ in self.assignments})

    def needs(self) -> tuple:
        """Everything admission looks at besides rank and time limit (the service band last): jobs with equal needs
        are admitted in rank order, and when the first is refused the others are refused for the same reason (a time limit
        matters only for backfill onto reserved nodes, which the admitter checks member by member)."""
        return (self.team, self.gpu_type, self.workers, self.gpus_per_worker, self.min_workers,
                self.topology_required, self.topology_preferred, self.service_band)

    def rank_key(self) -> tuple[int, int, int, str]:
        """Order within a team: priority first, then submit order (log offset breaks ties exactly)."""
        return (-self.priority, self.submitted_at, self.submit_offset, self.job_id)

    @property
    def deadline(self) -> int:
        """The end it asked for had it started at once: its submission plus its time limit (NO_LIMIT_DEADLINE_MS
        without one)."""
        return self.submitted_at + (self.time_limit_ms if self.time_limit_ms is not None else NO_LIMIT_DEADLINE_MS)

    def deadline_rank(self) -> tuple[int, int, int, str]:
        """Order within a team when gangs go by deadline: priority first, then the earliest deadline, then submit
        order."""
        return (-self.priority, self.deadline, self.submit_offset, self.job_id)
