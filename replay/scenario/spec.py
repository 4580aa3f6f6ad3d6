"""The scenario file format as pydantic models: what operators and tests write (docs/scenarios.md).

The loader checks the shape of a file (types, durations, one action per input, one check per
expectation, names an expectation refers to); it does not judge requests the core judges itself,
so a scenario can submit an invalid job and expect its rejection.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeInt,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from events.durations import format_duration, parse_duration
from events.models import EVENT_TYPES_BY_NAME, Reason
from projections.jobs import JobState
from services.policies import GANGWAY, overridden

Duration = Annotated[NonNegativeInt, BeforeValidator(parse_duration)]
#: A scenario is a cell of hand-made size played for a while: bounds well past any such, short of exhausting memory.
MOST_NODES = 100_000
LONGEST_MS = 366 * 86_400_000  # a year


def _within_a_year(ms: int) -> int:
    if ms > LONGEST_MS:
        raise ValueError(f"{format_duration(ms)} is longer than a scenario may run ({format_duration(LONGEST_MS)})")
    return ms


class Spec(BaseModel):
    """Every part of a scenario: immutable, and a misspelt key is an error rather than ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- the cell ------------------------------------------------------------------------------


class NodeSpec(Spec):
    name: str
    gpus: PositiveInt
    gpu_type: str
    labels: dict[str, str] = {}
    spare: bool = False


class Generate(Spec):
    count: int = Field(ge=1, le=MOST_NODES)
    gpus: int = Field(ge=1, le=1_024)
    gpu_type: str
    nodes_per_rack: PositiveInt = 4
    racks_per_block: PositiveInt = 2
    prefix: str = "n"
    spare: bool = False  # every generated node is a hot spare
    spares_per_rack: NonNegativeInt = 0  # the last nodes of each rack are hot spares


class Generator(Spec):
    generate: Generate


def _node_kind(value: Any) -> str:
    return "generate" if isinstance(value, dict) and "generate" in value else "node"


NodeEntry = Annotated[Annotated[NodeSpec, Tag("node")] | Annotated[Generator, Tag("generate")],
                      Discriminator(_node_kind)]


class CellSpec(Spec):
    topology: list[str] = []
    nodes: list[NodeEntry] = Field(min_length=1)


# --- tenancy -------------------------------------------------------------------------------


def _nominal_shorthand(value: Any) -> Any:
    return {"nominal": value} if isinstance(value, int) and not isinstance(value, bool) else value


class QuotaSpec(Spec):
    nominal: NonNegativeInt
    borrowing_limit: NonNegativeInt | None = None
    lending_limit: NonNegativeInt | None = None


class PreemptionSpec(Spec):
    """A team's preemption rules (Kueue's ClusterQueue `preemption`); a rule left out follows the policy."""

    within_team: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] | None = None
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] | None = None
    borrow_within_cohort: Literal["Never", "LowerPriority"] | None = None
    max_priority_threshold: int | None = None


class TeamSpec(Spec):
    name: str
    cohort: str | None = None
    weight: float = Field(default=1.0, ge=0.001, le=1_000, allow_inf_nan=False)  # kept in thousandths
    quota: dict[str, Annotated[QuotaSpec, BeforeValidator(_nominal_shorthand)]] = {}
    preemption: PreemptionSpec = PreemptionSpec()


class CohortSpec(Spec):
    name: str
    parent: str | None = None


class PriorityClassSpec(Spec):
    name: str
    value: int
    preemptible: bool = True


class AgentSpec(Spec):
    start_delay: Duration = 1_000
    checkpoint_every: Duration | None = 30 * 60_000
    checkpoint_delay: Duration = 30_000
    heartbeat_every: Duration | None = None


# --- inputs --------------------------------------------------------------------------------


class Submit(Spec):
    job: str
    team: str
    workers: int = 1
    gpus_per_worker: int
    gpu_type: str | None = None  # default: the cell's only GPU type
    priority_class: str | None = None
    min_workers: int | None = None
    topology_required: str | None = None
    topology_preferred: str | None = None
    time_limit: Duration | None = None
    runs_for: Duration | None = None  # how long the simulated job trains (default 1h)
    max_restarts: int = 3


class JobRef(Spec):
    job: str


class CheckpointSpec(Spec):
    job: str
    progress: Duration | None = None  # default: the training time the agent has done


class WorkerExit(Spec):
    job: str
    worker: int = 0
    code: int = 1
    on_finish: bool = False  # arm the agent: the worker exits with `code` when its run ends


class GpuError(Spec):
    node: str
    gpu: int
    xid: int


class QuotaChange(Spec):
    team: str
    gpu_type: str | None = None
    nominal: NonNegativeInt
    borrowing_limit: NonNegativeInt | None = None
    lending_limit: NonNegativeInt | None = None


ACTIONS = ("submit", "cancel", "checkpoint_completed", "worker_exited", "node_failed", "gpu_error",
           "heartbeat_silence", "quota_change", "cordon", "uncordon", "health_check_passed", "record")


class RawRecord(BaseModel):
    """Any input record as a launcher or agent could write it, however wrong: `type` names the event, `cell` and
    `stamped` override its envelope (default: the scenario's cell, the input's time), the rest are its fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str
    cell: str | None = None
    stamped: int | None = None

    @model_validator(mode="after")
    def _an_input_type(self) -> RawRecord:
        kind = EVENT_TYPES_BY_NAME.get(self.type)
        if kind is None or kind.is_decision:
            raise ValueError(f"{self.type!r} is not an input event type")
        return self

    @property
    def fields(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _job_shorthand(value: Any) -> Any:
    return {"job": value} if isinstance(value, str) else value


class Input(Spec):
    at: Duration
    submit: Submit | None = None
    cancel: str | None = None
    checkpoint_completed: Annotated[CheckpointSpec, BeforeValidator(_job_shorthand)] | None = None
    worker_exited: WorkerExit | None = None
    node_failed: str | None = None
    gpu_error: GpuError | None = None
    heartbeat_silence: str | None = None
    quota_change: QuotaChange | None = None
    cordon: str | None = None
    uncordon: str | None = None
    health_check_passed: str | None = None
    record: RawRecord | None = None

    @model_validator(mode="after")
    def _one_action(self) -> Input:
        given = [a for a in ACTIONS if getattr(self, a) is not None]
        if len(given) != 1:
            raise ValueError(f"an input needs exactly one of: {', '.join(ACTIONS)} (got {', '.join(given) or 'none'})")
        return self

    @property
    def action(self) -> str:
        return next(a for a in ACTIONS if getattr(self, a) is not None)


# --- expectations ----------------------------------------------------------------------------

CHECKS = ("state", "reason", "same_domain", "gpus_in_use", "preempted", "rejected", "on_nodes", "node_state",
          "retired_gpus", "logged")
NodeStatus = Literal["healthy", "cordoned", "fault_cordoned", "failed", "spare", "active_spare"]


class Expect(Spec):
    at: Duration | None = None  # default: `until`; for preempted / rejected / logged it means "by then"
    job: str | None = None
    team: str | None = None
    node: str | None = None
    gpu_type: str | None = None
    state: JobState | None = None
    reason: Reason | None = None
    same_domain: str | None = None
    gpus_in_use: NonNegativeInt | None = None
    preempted: bool | None = None
    for_job: str | None = None
    rejected: Reason | None = None
    on_nodes: list[str] | None = None
    node_state: NodeStatus | None = None
    retired_gpus: list[int] | None = None
    logged: str | None = None
    count: NonNegativeInt | None = None  # with `logged`: exactly this many (default: at least one)

    @model_validator(mode="after")
    def _one_check(self) -> Expect:
        given = [c for c in CHECKS if getattr(self, c) is not None and not (c == "reason" and self.logged)]
        if len(given) != 1:
            raise ValueError(f"an expectation needs exactly one of: {', '.join(CHECKS)} (got {', '.join(given) or 'none'})")
        subject = {"gpus_in_use": "team", "node_state": "node", "retired_gpus": "node", "logged": None}.get(given[0], "job")
        if subject and getattr(self, subject) is None:
            raise ValueError(f"`{given[0]}` needs a `{subject}`")
        if self.logged is not None and self.logged not in EVENT_TYPES_BY_NAME:
            raise ValueError(f"unknown event type {self.logged!r}")
        return self

    @property
    def check(self) -> str:
        """The kind of check; with `logged`, `reason` filters the events rather than being a check."""
        return "logged" if self.logged else next(c for c in CHECKS if getattr(self, c) is not None)

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.model_dump(exclude_none=True, mode="json").items() if k != "at"]
        return ("at " + format_duration(self.at) + ": " if self.at is not None else "at end: ") + ", ".join(parts)


# --- the file --------------------------------------------------------------------------------

class Scenario(Spec):
    name: str
    description: str = ""
    cell: CellSpec
    teams: list[TeamSpec] = []
    cohorts: list[CohortSpec] = []
    priority_classes: list[PriorityClassSpec] = []
    policy: dict[str, Any] = {}
    agents: AgentSpec = AgentSpec()
    tick: Annotated[PositiveInt, BeforeValidator(parse_duration)] = 10_000
    until: Annotated[NonNegativeInt, BeforeValidator(parse_duration), AfterValidator(_within_a_year)]
    inputs: list[Input] = []
    expect: list[Expect] = []

    @property
    def gpu_types(self) -> list[str]:
        return sorted({(e.generate if isinstance(e, Generator) else e).gpu_type for e in self.cell.nodes})

    @field_validator("policy")
    @classmethod
    def _known_knobs(cls, policy: dict[str, Any]) -> dict[str, Any]:
        overridden(GANGWAY, policy)  # raises ValueError naming the unknown section or knob
        return policy

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        jobs = {i.submit.job for i in self.inputs if i.submit}
        teams = {t.name for t in self.teams}
        for n, e in enumerate(self.expect):
            where = f"expect[{n}]"
            if e.job is not None and e.job not in jobs:
                raise ValueError(f"{where}: job {e.job!r} is never submitted")
            if e.team is not None and e.team not in teams:
                raise ValueError(f"{where}: team {e.team!r} is not defined")
            if e.at is not None and e.at > self.until:
                raise ValueError(f"{where}: at {format_duration(e.at)} is after until {format_duration(self.until)}")
        for n, item in enumerate(self.inputs):
            spec = item.submit or item.quota_change
            if spec is not None and spec.gpu_type is None and len(self.gpu_types) != 1:
                raise ValueError(f"inputs[{n}]: gpu_type is needed, the cell has {', '.join(self.gpu_types)}")
        if any(i.heartbeat_silence for i in self.inputs) and not self.agents.heartbeat_every:
            raise ValueError("heartbeat_silence needs agents.heartbeat_every (nodes that never heartbeat cannot fall silent)")
        return self
