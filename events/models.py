"""Typed event models: one frozen class per Avro record in schemas/, the vocabulary of the log.

Resources are integers, times are integer milliseconds since the Unix epoch, and every
event carries an `Envelope`. Decisions fill the envelope's basis offset, policy version
and reason so that `explain` and `verify` can answer for them later.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field


class Reason(StrEnum):
    """Why a decision was made; one enum for the whole log so `explain` has one vocabulary."""

    UNSPECIFIED = "UNSPECIFIED"
    # admission
    SUBMITTED = "SUBMITTED"
    WITHIN_NOMINAL_QUOTA = "WITHIN_NOMINAL_QUOTA"
    BORROWED_FROM_COHORT = "BORROWED_FROM_COHORT"
    BACKFILLED = "BACKFILLED"
    QUOTA_EXHAUSTED = "QUOTA_EXHAUSTED"
    COHORT_EXHAUSTED = "COHORT_EXHAUSTED"
    BORROWING_LIMIT = "BORROWING_LIMIT"
    WAITING_BEHIND_RESERVATION = "WAITING_BEHIND_RESERVATION"
    WAITING_FOR_QUEUE_HEAD = "WAITING_FOR_QUEUE_HEAD"
    ADMISSION_LIMIT_PER_CYCLE = "ADMISSION_LIMIT_PER_CYCLE"
    HOLDS_RESERVATION = "HOLDS_RESERVATION"
    NOT_PLACEABLE_NOW = "NOT_PLACEABLE_NOW"
    REQUEUED = "REQUEUED"
    WOULD_DELAY_QUEUE_HEAD = "WOULD_DELAY_QUEUE_HEAD"
    # capacity held for a waiting gang
    HELD_FOR_PREEMPTION = "HELD_FOR_PREEMPTION"
    HELD_THROUGH_BACKOFF = "HELD_THROUGH_BACKOFF"
    HOLD_EXPIRED = "HOLD_EXPIRED"
    HOLD_STALE = "HOLD_STALE"
    NO_LONGER_NEEDED = "NO_LONGER_NEEDED"
    # rejection of invalid requests
    NO_GPUS_REQUESTED = "NO_GPUS_REQUESTED"
    UNKNOWN_TEAM = "UNKNOWN_TEAM"
    UNKNOWN_GPU_TYPE = "UNKNOWN_GPU_TYPE"
    UNKNOWN_PRIORITY_CLASS = "UNKNOWN_PRIORITY_CLASS"
    UNKNOWN_TOPOLOGY_LEVEL = "UNKNOWN_TOPOLOGY_LEVEL"
    LARGER_THAN_CELL = "LARGER_THAN_CELL"
    LARGER_THAN_TOPOLOGY_DOMAIN = "LARGER_THAN_TOPOLOGY_DOMAIN"
    LARGER_THAN_NODE = "LARGER_THAN_NODE"
    DUPLICATE_JOB = "DUPLICATE_JOB"
    UNKNOWN_JOB = "UNKNOWN_JOB"
    INVALID_REQUEST = "INVALID_REQUEST"
    # placement
    PLACED = "PLACED"
    NO_HEALTHY_NODES_OF_TYPE = "NO_HEALTHY_NODES_OF_TYPE"
    INSUFFICIENT_FREE_GPUS = "INSUFFICIENT_FREE_GPUS"
    TOPOLOGY_DOMAIN_TOO_SMALL = "TOPOLOGY_DOMAIN_TOO_SMALL"
    FRAGMENTED = "FRAGMENTED"
    PLACEMENT_SUPERSEDED = "PLACEMENT_SUPERSEDED"
    # preemption
    RECLAIM_LENT_QUOTA = "RECLAIM_LENT_QUOTA"
    HIGHER_PRIORITY = "HIGHER_PRIORITY"
    TIME_SHARED = "TIME_SHARED"  # the victim has received more GPU-time than the gang (least attained service)
    CONSOLIDATED = "CONSOLIDATED"  # the victim moves to free GPUs elsewhere so a gang that fits in number gets nodes
    CHECKPOINT_COMPLETED = "CHECKPOINT_COMPLETED"
    CHECKPOINT_DEADLINE_PASSED = "CHECKPOINT_DEADLINE_PASSED"
    # recovery and job endings
    HEARTBEAT_MISSED = "HEARTBEAT_MISSED"
    GPU_XID_HARDWARE = "GPU_XID_HARDWARE"
    GPU_XID_NODE = "GPU_XID_NODE"
    GPU_XID_APPLICATION = "GPU_XID_APPLICATION"
    NODE_FAILED = "NODE_FAILED"
    WORKER_FAILED = "WORKER_FAILED"
    RESTART_BUDGET_SPENT = "RESTART_BUDGET_SPENT"
    TIME_LIMIT_EXCEEDED = "TIME_LIMIT_EXCEEDED"  # it ran longer than its time limit (Slurm's TIMEOUT)
    WORKERS_NOT_STARTED = "WORKERS_NOT_STARTED"  # its workers did not all start in time (Kueue's waitForPodsReady)
    BACKOFF_SCHEDULED = "BACKOFF_SCHEDULED"
    ALL_WORKERS_SUCCEEDED = "ALL_WORKERS_SUCCEEDED"
    CANCELLED_BY_USER = "CANCELLED_BY_USER"
    HEALTH_CHECK_PASSED = "HEALTH_CHECK_PASSED"
    SPARE_REPLACES_FAILED_NODE = "SPARE_REPLACES_FAILED_NODE"
    OPERATOR = "OPERATOR"
    # records a cell refuses to fold (RecordRefused), or answers no decision for
    WRONG_CELL = "WRONG_CELL"
    OVERSIZED = "OVERSIZED"
    CONTROL_CHARACTER = "CONTROL_CHARACTER"  # an id or name holds a control or invisible formatting character
    TIME_OUT_OF_RANGE = "TIME_OUT_OF_RANGE"
    CONTRADICTS_STATE = "CONTRADICTS_STATE"
    NODE_IN_USE = "NODE_IN_USE"
    FOLD_FAILED = "FOLD_FAILED"
    DECISION_FAILED = "DECISION_FAILED"
    DECISION_UNENCODABLE = "DECISION_UNENCODABLE"
    # provenance (events/auth.py, services/intake.py): a record whose writer may not write it
    NOT_ITS_WRITER = "NOT_ITS_WRITER"


class XidAction(StrEnum):
    """What a GPU error means for the hardware: see services/recovery/xid.py for the table."""

    RETIRE_GPU = "RETIRE_GPU"
    CORDON_NODE = "CORDON_NODE"
    JOB_ONLY = "JOB_ONLY"


class Record(BaseModel):
    """Base of every Avro record: immutable, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def field_of(record: Record, name: str, default: object = None) -> object:
    """A field's value, or `default` when the record's type has no such field: what a fold asks of any event,
    without pydantic's slow path for a missing attribute."""
    return record.__dict__.get(name, default)


#: An envelope's origin when a reader found the record not signed by a writer that may write it
#: (events/signing.py): `unverified/<signer>` or `unverified/unsigned`. The fold refuses such a record.
UNVERIFIED = "unverified/"


class Envelope(Record):
    """What every event carries: identity, cell, time, provenance and, for decisions, the basis."""

    event_id: str = Field(description="unique id, derived from what caused the event")
    cell: str = Field(description="the scheduling domain, which is also the partition key")
    at: int = Field(description="event time, milliseconds since the Unix epoch (UTC)")
    producer: str = Field(description="component that wrote the event, e.g. admitter, launcher, agent/node-7")
    causation_id: str | None = Field(default=None, description="event_id of the event that caused this one")
    correlation_id: str | None = Field(default=None, description="id shared by everything one request set off (usually the job id)")
    basis_offset: int | None = Field(default=None, description="for decisions: log offset of the event the decision was made on")
    policy_version: str | None = Field(default=None, description="for decisions: version of the policy that made it")
    reason: Reason = Field(default=Reason.UNSPECIFIED, description="for decisions: why")
    origin: str | None = Field(default=None, description="for inputs taken in by the intake: the writer its input topic "
                                                         "proves, 'team/<T>', 'node/<N>' or 'operator'")
    origin_offset: int | None = Field(default=None, description="for inputs taken in by the intake: the record's offset "
                                                                "in its input topic")


class Event(Record):
    """An event on the log: an envelope plus the fields of its type."""

    envelope: Envelope
    #: True for events that a decider emits (as opposed to facts from outside the control plane).
    is_decision: ClassVar[bool] = False

    @property
    def at(self) -> int:
        return self.envelope.at

    @property
    def event_type(self) -> str:
        return type(self).__name__


class Decision(Event):
    """An event a Gangway service decided; its envelope names the basis offset and reason."""

    is_decision: ClassVar[bool] = True


# --- cell, tenancy and priority configuration (operators) --------------------------------


class CellConfigured(Event):
    """Declares a cell's topology levels, outermost first (the node level is implicit), and the bounds of what
    the cell accepts: larger or stranger records are refused (RecordRefused), never folded."""

    topology_levels: list[str] = Field(description="e.g. ['block', 'rack']: node labels name the domain at each level")
    max_gpus_per_node: int = Field(default=64, description="a node registering more GPUs is refused")
    max_workers: int = Field(default=4096, description="a gang of more workers is rejected")
    max_name_length: int = Field(default=253, description="longest id or name (job, team, node, GPU type, ...)")
    max_tick_jump_ms: int | None = Field(
        default=3_600_000, description="a Tick this far past the cell's clock is refused; null: any (virtual-time runs)")
    max_event_lead_ms: int | None = Field(
        default=3_600_000, description="event stamps count at most this far past the clock (the latest Tick); a "
                                       "submission stamped this far before it is refused; null: unbounded")


class CohortDefined(Event):
    """A cohort of teams that lend and borrow; cohorts may nest under a parent."""

    cohort: str
    parent: str | None = None


class PreemptionRule(StrEnum):
    """Kueue's vocabulary for whom a team's waiting gangs may preempt (each knob allows some of these)."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
    ANY = "Any"


class TeamDefined(Event):
    """A team (queue) in a cohort, with its fair-sharing weight in thousandths and its preemption policy (Kueue's
    ClusterQueue `preemption`); a rule left null follows the policy's default (services/preemptor/policy.py)."""

    team: str
    cohort: str | None = None
    weight_milli: int = 1000
    within_team: PreemptionRule | None = Field(
        default=None, description="victims in the team itself: Never, LowerPriority or LowerOrNewerEqualPriority")
    reclaim_within_cohort: PreemptionRule | None = Field(
        default=None, description="when its gang fits its nominal quota, victims in borrowing teams of its cohort: "
                                  "Never, LowerPriority or Any")
    borrow_within_cohort: PreemptionRule | None = Field(
        default=None, description="when its gang must borrow, victims in borrowing teams of its cohort: Never or "
                                  "LowerPriority")
    max_priority_threshold: int | None = Field(
        default=None, description="with borrow_within_cohort: only victims of at most this priority")


class QuotaSet(Event):
    """A team's quota for one GPU type: nominal GPUs, how much it may borrow and lend (null = unlimited)."""

    team: str
    gpu_type: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


class PriorityClassDefined(Event):
    """A priority class: higher value schedules first; preemptible jobs may be evicted for others."""

    name: str
    value: int
    preemptible: bool = True


# --- jobs (launcher tools) ---------------------------------------------------------------


class JobSubmitted(Event):
    """A gang of `workers` x `gpus_per_worker` GPUs of one type, admitted and placed all or nothing
    (with `min_workers`: as many workers as fit, at least that many)."""

    job_id: str
    team: str
    workers: int
    gpus_per_worker: int
    gpu_type: str
    priority_class: str | None = None
    min_workers: int | None = Field(default=None, description="gang minimum (Volcano minAvailable): admitted with as many workers as fit, at least this many; null = all workers")
    topology_required: str | None = Field(default=None, description="all workers inside one domain of this level")
    topology_preferred: str | None = Field(default=None, description="prefer one domain of this level, best effort")
    time_limit_ms: int | None = Field(default=None, description="longest a run may take: backfill plans around reservations with it, and under gangway-3 a run that exceeds it ends the job (JobFailed, TIME_LIMIT_EXCEEDED)")
    max_restarts: int = 3
    labels: dict[str, str] = Field(default_factory=dict)
    command: list[str] = Field(default_factory=list, description="what each worker runs (program and its arguments); empty for simulated work")
    env: dict[str, str] = Field(default_factory=dict, description="environment of each worker, on top of the agent's")
    working_dir: str | None = Field(default=None, description="directory the workers start in (default: the agent's work directory for the worker)")
    checkpoint_dir: str | None = Field(default=None, description="where the job keeps its checkpoints, shared by every attempt (GANGWAY_CHECKPOINT_DIR)")


class JobCancelRequested(Event):
    """A user asks to cancel a job, wherever it is in its lifecycle."""

    job_id: str
    team: str | None = Field(default=None, description="the team asking, which must be the job's own")


# --- nodes, GPUs and heartbeats (node agents) ----------------------------------------------


class NodeRegistered(Event):
    """A node joins the cell: GPU type and count, and its domain at each topology level."""

    node: str
    gpu_type: str
    gpus: int
    labels: dict[str, str] = Field(default_factory=dict, description="topology level -> domain name")
    spare: bool = Field(default=False, description="hot spare: held back to replace failed nodes in its domain")
    address: str | None = Field(default=None, description="host name or IP where the node's workers are reached (MASTER_ADDR of a gang whose worker 0 runs here)")


class NodeHeartbeat(Event):
    """A node agent is alive (heartbeat topic, short retention)."""

    node: str
    seq: int


class GpuErrorReported(Event):
    """A node agent saw an Xid error on one of its GPUs."""

    node: str
    gpu: int
    xid: int
    message: str = ""


class NodeHealthCheckPassed(Event):
    """A node agent's health checks pass again (after a failure or a fatal-Xid cordon)."""

    node: str


class NodeCordoned(Event):
    """An operator's cordon: no new work goes to the node until NodeUncordoned (health checks leave it)."""

    node: str
    detail: str = ""


class NodeUncordoned(Event):
    """An operator lifts their cordon; recovery's own (failure, fatal Xid) stays until NodeRecovered."""

    node: str
    detail: str = ""


# --- worker lifecycle and checkpoints (node agents) ----------------------------------------


class WorkerStarted(Event):
    """A placed worker of a job is running on its node."""

    job_id: str
    attempt: int
    worker: int
    node: str


class WorkerExited(Event):
    """A worker ended; exit code 0 is success."""

    job_id: str
    attempt: int
    worker: int
    node: str
    exit_code: int


class CheckpointCompleted(Event):
    """A job saved a checkpoint covering `progress_ms` of its training time."""

    job_id: str
    attempt: int
    checkpoint_id: str
    progress_ms: int
    step: int | None = Field(default=None, description="the training step the checkpoint holds, as the job reported it; a resumed attempt starts there")


class Tick(Event):
    """The clock: makes time advance at a definite position in the log."""


# --- decisions: admitter -------------------------------------------------------------------


class JobQueued(Decision):
    """The job waits for quota or capacity; the reason says which."""

    job_id: str
    team: str
    detail: str = ""
    reserved_nodes: list[str] = Field(default_factory=list, description="nodes held back for this gang while it waits")




class JobRejected(Decision):
    """The submission can never be scheduled as asked."""

    job_id: str
    detail: str = ""


class RequestRejected(Decision):
    """A non-job request (quota, team, node...) was invalid; nothing changed."""

    request_event_id: str
    request_type: str
    detail: str = ""


class JobCancelled(Decision):
    """The job ended by request; its quota and GPUs are released."""

    job_id: str


class WorkerAssignment(Record):
    """One worker bound to a node and concrete GPU indices."""

    worker: int
    node: str
    gpus: list[int]


class JobAdmitted(Decision):
    """Quota is reserved for the `gpus` of the admitted workers (the whole gang, or with min_workers as
    many as fit; `borrowed` GPUs from the cohort) and held by the planned topology assignment,
    which the placer binds or re-plans."""

    job_id: str
    team: str
    gpu_type: str
    gpus: int
    borrowed: int = 0
    assignments: list[WorkerAssignment] = Field(default_factory=list)
    domain: str | None = None


class CapacityReleased(Decision):
    """A hold ends without the gang having been admitted on it; the detail says why."""

    job_id: str
    detail: str = ""


# --- decisions: placer ---------------------------------------------------------------------


class JobPlaced(Decision):
    """Every admitted worker of the gang is bound to a node and GPU indices."""

    job_id: str
    attempt: int
    assignments: list[WorkerAssignment]
    domain: str | None = Field(default=None, description="the tightest topology domain holding all workers")


class PlacementPending(Decision):
    """The admitted gang cannot be placed now; the reason names the binding constraint."""

    job_id: str
    detail: str = ""


# --- decisions: preemptor ------------------------------------------------------------------


class PreemptionRequested(Decision):
    """Asks the victim to checkpoint by the deadline so `for_job_id` can run."""

    job_id: str
    for_job_id: str
    checkpoint_deadline: int


class PreemptionWithdrawn(Decision):
    """The gang a victim was making room for no longer needs it (admitted on other capacity, or ended) before the
    victim was preempted: the victim keeps running (a checkpoint it took meanwhile is kept like any other)."""

    job_id: str
    for_job_id: str
    detail: str = ""


class JobPreempted(Decision):
    """The victim's GPUs and quota are released; it is requeued to resume from its checkpoint."""

    job_id: str
    for_job_id: str
    checkpoint_id: str | None = None


class CapacityHeld(Decision):
    """GPUs and quota held for one waiting gang, which alone may use them, until it is admitted, ends, or `until`
    passes: what a preemption frees for the gang it was made for (the preemptor), or a failed node's gang's
    surviving GPUs and the spare that replaces the node, through its back-off (recovery). `assignments` is the
    gang's planned placement: GPUs free now or held by `victims`, which the preemptor asks to checkpoint once
    the hold is on the log."""

    job_id: str
    team: str
    gpu_type: str
    gpus: int = Field(description="quota held for the gang: the GPUs it will take")
    assignments: list[WorkerAssignment] = Field(default_factory=list)
    victims: list[str] = Field(default_factory=list, description="jobs to preempt for it, by the deadline `until`")
    until: int = Field(description="the gang is admitted by then, or the admitter releases the hold")
    detail: str = ""


# --- decisions: recovery -------------------------------------------------------------------


class NodeFailed(Decision):
    """The node is lost; evidence: its last heartbeat and the silence threshold."""

    node: str
    last_heartbeat_at: int | None = None
    threshold_ms: int = 0


class GpuFaulted(Decision):
    """A GPU error classified by its Xid code into what happens to the hardware."""

    node: str
    gpu: int
    xid: int
    action: XidAction


class NodeRecovered(Decision):
    """A failed or Xid-cordoned node passed its health checks; an operator's cordon still holds."""

    node: str


class SpareActivated(Decision):
    """A hot spare in the failed node's domain joins the schedulable pool."""

    node: str
    replaces: str


class JobInterrupted(Decision):
    """The job's hardware failed under it (or a worker crashed); it stops and may restart."""

    job_id: str
    attempt: int
    node: str | None = None
    detail: str = ""


class JobRequeued(Decision):
    """The job goes back to the queue, resuming from its last checkpoint after `not_before`."""

    job_id: str
    attempt: int
    resume_checkpoint_id: str | None = None
    not_before: int = 0


class JobSucceeded(Decision):
    """Every worker exited 0."""

    job_id: str


class JobFailed(Decision):
    """The job will not run again (restart budget spent, or it cannot run)."""

    job_id: str
    detail: str = ""


# --- refusals -----------------------------------------------------------------------------


class RecordRefused(Decision):
    """A record the cell did not fold (or could not answer): too large, stamped out of range, naming another
    cell, contradicting the state, or one a decider failed on. The log records it, so replay refuses it too."""

    refused_offset: int
    refused_type: str
    refused_event_id: str
    detail: str = ""


# --- dead letters --------------------------------------------------------------------------


class DeadLetter(Event):
    """Bytes a service could not decode, kept with the reason (dead-letter topic); a large value is cut to its
    first bytes, with the whole value's size and SHA-256."""

    source_topic: str
    source_partition: int
    source_offset: int
    key: bytes | None = None
    value: bytes | None = None
    error: str
    value_size: int | None = None
    value_sha256: str | None = None


#: Every event type on the log, in catalogue order; one Avro record (schemas/<Name>.avsc) each.
EVENT_TYPES: tuple[type[Event], ...] = (
    CellConfigured,
    CohortDefined,
    TeamDefined,
    QuotaSet,
    PriorityClassDefined,
    JobSubmitted,
    JobCancelRequested,
    NodeRegistered,
    NodeHeartbeat,
    GpuErrorReported,
    NodeHealthCheckPassed,
    NodeCordoned,
    NodeUncordoned,
    WorkerStarted,
    WorkerExited,
    CheckpointCompleted,
    Tick,
    JobQueued,
    JobAdmitted,
    JobRejected,
    RequestRejected,
    JobCancelled,
    JobPlaced,
    PlacementPending,
    PreemptionRequested,
    PreemptionWithdrawn,
    JobPreempted,
    CapacityHeld,
    CapacityReleased,
    NodeFailed,
    GpuFaulted,
    NodeRecovered,
    SpareActivated,
    JobInterrupted,
    JobRequeued,
    JobSucceeded,
    JobFailed,
    RecordRefused,
    DeadLetter,
)

EVENT_TYPES_BY_NAME: dict[str, type[Event]] = {cls.__name__: cls for cls in EVENT_TYPES}
