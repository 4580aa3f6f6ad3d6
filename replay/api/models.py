"""The API's response bodies as pydantic models: they make the OpenAPI document, and every response is
validated against them (FastAPI's response_model), so the document and the answers cannot drift apart."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class Error(BaseModel):
    """Every 4xx answer: a machine-readable code and a sentence for people."""

    error: str = Field(description="bad_request, unauthorized, forbidden, not_found")
    message: str


class Sort(StrEnum):
    submitted = "submitted"  # oldest first
    newest = "-submitted"
    priority = "priority"  # highest first, then oldest
    lowest_priority = "-priority"


class NodeStateName(StrEnum):
    idle = "idle"
    busy = "busy"
    reserved = "reserved"
    cordoned = "cordoned"
    failed = "failed"
    spare = "spare"


class GpuCounts(BaseModel):
    busy: int = 0
    free: int = 0
    reserved: int = 0
    cordoned: int = 0
    failed: int = 0
    spare: int = 0


class Lag(BaseModel):
    offset: int = Field(description="last offset folded into the read model")
    behind: int = Field(description="records between the projector and the end of the log")
    seconds: float = Field(description="seconds since the projector last stood at the end of the log")


class CellSummary(BaseModel):
    cell: str
    offset: int
    now: int = Field(description="event time of the last folded event (ms)")
    levels: list[str]
    nodes: int
    gpu_types: list[str]
    gpus: GpuCounts
    jobs: dict[str, int] = Field(description="jobs by state")
    jobs_by_team: dict[str, dict[str, int]] = Field(description="team -> state -> jobs")
    lag: Lag


class Gpu(BaseModel):
    index: int
    state: str
    team: str | None = None
    job_id: str | None = Field(None, description="hidden from other teams' tokens")


class Node(BaseModel):
    name: str
    gpu_type: str
    gpus: int
    state: NodeStateName
    domains: dict[str, str]
    spare: bool
    reserved_for: str | None = None
    gpu: list[Gpu]


class NodeList(BaseModel):
    levels: list[str]
    nodes: list[Node]


class Spec(BaseModel):
    workers: int
    gpus_per_worker: int
    gpu_type: str
    gpus: int
    priority: int
    preemptible: bool
    min_workers: int | None = None
    topology_required: str | None = None
    topology_preferred: str | None = None
    time_limit_ms: int | None = None
    max_restarts: int


class JobSummary(BaseModel):
    """A row of the job table (Lookout's columns)."""

    job_id: str
    team: str
    state: str
    reason: str
    detail: str
    priority: int
    gpus: int
    gpu_type: str
    submitted_at: int
    updated_at: int = Field(description="event time of the job's last transition")
    attempt: int
    nodes: list[str]


class JobPage(BaseModel):
    jobs: list[JobSummary]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null after the last")


class WorkerPlacement(BaseModel):
    worker: int
    node: str
    gpus: list[int]


class Placement(BaseModel):
    domain: str | None = None
    nodes: list[str]
    workers: list[WorkerPlacement]


class Checkpoint(BaseModel):
    checkpoint_id: str
    progress_ms: int
    at: int


class TimelineEntry(BaseModel):
    offset: int
    at: int
    type: str
    reason: str
    detail: str


class Estimate(BaseModel):
    """Where a waiting job stands, and when it should start (services/core/forecast.py)."""

    team_position: int
    team_waiting: int
    cell_position: int
    cell_waiting: int
    estimated_start: int | None = Field(description="event time (ms), null when it cannot be estimated")
    earliest_start: int | None = Field(default=None, description="the interval the start should lie in: its start if "
                                                                 "work ends early (event time, ms)")
    latest_start: int | None = Field(default=None, description="... and if work runs to its time limits")
    basis: str = Field(description="now, time_limits, reservation, backoff, queue_drain, unknown_end, behind_unknown, "
                                   "too_large, beyond_horizon")
    detail: str
    waits_for: list[str]


class JobDetail(BaseModel):
    cell: str
    job_id: str
    team: str
    state: str
    reason: str
    detail: str
    spec: Spec
    submitted_at: int
    admitted_at: int | None = None
    running_since: int | None = None
    ended_at: int | None = None
    updated_at: int
    attempt: int
    restarts: int
    not_before: int
    borrowed: int
    gpus_held: int
    placement: Placement
    reserved_nodes: list[str]
    preempted_for: str | None = None
    preemption_deadline: int | None = None
    checkpoint: Checkpoint | None = None
    queue: Estimate | None = Field(description="for a queued job: its position and estimated start")
    timeline: list[TimelineEntry]


class TeamQuota(BaseModel):
    gpu_type: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    used: int
    borrowed: int
    lent: int
    weighted_share: float


class Team(BaseModel):
    team: str
    cohort: str | None = None
    weight: float
    quotas: list[TeamQuota]


class CohortNode(BaseModel):
    name: str
    kind: str = Field(description="cohort or team")
    children: list[CohortNode]


class WaitingJob(BaseModel):
    job_id: str
    reason: str
    detail: str
    team_position: int
    cell_position: int
    estimated_start: int | None = None
    basis: str


class TeamQueue(BaseModel):
    team: str
    waiting: int
    reasons: dict[str, int] = Field(description="waiting jobs by the reason they were last given")
    jobs: list[WaitingJob] = Field(description="the first waiting jobs in team order; empty for other teams' tokens")


class HourlyPoint(BaseModel):
    hour: int = Field(description="start of the hour, event time (ms)")
    submitted: int
    admitted: int
    placed: int
    succeeded: int
    failed: int
    cancelled: int
    rejected: int
    preempted: int
    interrupted: int
    queue_wait_ms: int = Field(description="summed queue wait of the jobs admitted in the hour")


class StreamItem(BaseModel):
    """A decision or request on the log, as the stream and the decisions list show it."""

    cell: str
    offset: int
    at: int
    type: str
    kind: str = Field(description="decision or request")
    job_id: str | None = None
    team: str | None = None
    node: str | None = None
    reason: str
    detail: str


class Health(BaseModel):
    status: str = Field(description="ok, or lagging when a cell is more than 5 s behind its log")
    cells: dict[str, Lag]
