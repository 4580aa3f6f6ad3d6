"""Job, team, cohort and priority-class documents, as users write them in YAML and `gangway submit` /
`gangway apply` read them, validated with errors that name the field (`spec.workers: must be ≥ 1`).

The shape follows Kubernetes / Kueue / Volcano: `kind`, `metadata` (name, team, cell, labels) and
`spec`. A Job is `workers` x `gpus_per_worker` GPUs of one type (a gang, all or nothing, or with
`min_workers` as many as fit), with what each worker runs and where the job checkpoints.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from events import yamlfile
from events.durations import parse_duration
from events.shown import shown

NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$"
NAME = re.compile(NAME_PATTERN)
#: What a name may be, said in words.
NAME_RULE = "letters, digits, '.', '_', '-' (at most 128), beginning and ending with a letter or digit"
Name = Annotated[str, Field(pattern=NAME_PATTERN, description="letters, digits, '.', '_', '-' (at most 128)")]
Duration = Annotated[int, BeforeValidator(parse_duration), Field(gt=0)]


class SpecError(ValueError):
    """A document is not valid: one line per problem, each naming the file and the field."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # `workers: true` is no 1, `"2"` no 2


class Metadata(Strict):
    name: Name
    team: Name | None = Field(default=None, description="jobs: the team (queue) the job is charged to")
    cell: Name | None = Field(default=None, description="the cell the document is for (default: the client's)")
    labels: dict[str, str] = Field(default_factory=dict)


class Topology(Strict):
    required: Name | None = Field(default=None, description="every worker inside one domain of this level")
    preferred: Name | None = Field(default=None, description="one domain of this level if possible")


class JobBody(Strict):
    workers: int = Field(ge=1, le=10_000)
    gpus_per_worker: int = Field(ge=1, le=1_024)
    gpu_type: Name
    min_workers: int | None = Field(default=None, ge=1, description="gang minimum (Volcano minAvailable)")
    priority_class: Name | None = None
    topology: Topology = Field(default_factory=Topology)
    time_limit: Duration | None = Field(default=None, description="90s, 30m, 2h...; lets the job backfill, and a run past it ends the job (TIME_LIMIT_EXCEEDED)")
    command: list[str] = Field(min_length=1, description="program and arguments each worker runs")
    args: list[str] = Field(default_factory=list, description="appended to command (as Kubernetes does)")
    env: dict[str, str] = Field(default_factory=dict)
    working_dir: str | None = None
    checkpoint_dir: str | None = Field(default=None, description="shared storage for the job's checkpoints")
    restart_budget: int = Field(default=3, ge=0, le=1_000, description="restarts after failures before it fails")

    @model_validator(mode="after")
    def _minimum_within_gang(self) -> JobBody:
        if self.min_workers is not None and self.min_workers > self.workers:
            raise _field_error("min_workers", f"must be ≤ workers ({self.workers})")
        bad = [k for k in self.env if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)]
        if bad:
            raise _field_error("env", f"{bad[0]!r} is not an environment variable name")
        return self


class Named(Strict):
    """A document: its kind, its metadata (the name first) and its spec."""

    metadata: Metadata

    @property
    def name(self) -> str:
        return self.metadata.name


class Job(Named):
    kind: Literal["Job"]
    spec: JobBody

    @model_validator(mode="after")
    def _has_team(self) -> Job:
        if self.metadata.team is None:
            raise _field_error("metadata.team", "required (or give --team)")
        return self


#: More GPUs than any cell holds: a quota beyond it is a mistake (and past what the log's numbers hold).
MOST_GPUS = 1_000_000_000


class Quota(Strict):
    nominal: int = Field(ge=0, le=MOST_GPUS)
    borrowing_limit: int | None = Field(default=None, ge=0, le=MOST_GPUS, description="null: may borrow without limit")
    lending_limit: int | None = Field(default=None, ge=0, le=MOST_GPUS, description="null: may lend all of its nominal")

    @model_validator(mode="after")
    def _lends_at_most_its_nominal(self) -> Quota:
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise _field_error("lending_limit", f"must be ≤ nominal ({self.nominal}): a team lends only its own")
        return self


def _quota(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"nominal": value}
    if isinstance(value, dict):
        return value
    raise ValueError("a whole number of GPUs (the nominal) or {nominal, borrowing_limit, lending_limit}")


class BorrowWithinCohort(Strict):
    """Kueue's borrowWithinCohort: whom a gang that must borrow may evict in the cohort's borrowing teams."""

    policy: Literal["Never", "LowerPriority"] = "LowerPriority"
    max_priority_threshold: int | None = Field(default=None, ge=-1_000_000_000, le=1_000_000_000,
                                               description="only victims of at most this priority")


def _borrow_shorthand(value: Any) -> Any:
    return {"policy": value} if isinstance(value, str) else value


class TeamPreemption(Strict):
    """Whom the team's waiting gangs may preempt (Kueue's ClusterQueue `preemption`); a rule left out follows the
    cell's policy (LowerPriority, Any, LowerPriority with no threshold by default)."""

    within_team: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] | None = None
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] | None = None
    borrow_within_cohort: Annotated[BorrowWithinCohort, BeforeValidator(_borrow_shorthand)] | None = None

    @model_validator(mode="after")
    def _borrowing_needs_reclaim(self) -> TeamPreemption:
        if (self.reclaim_within_cohort == "Never" and self.borrow_within_cohort is not None
                and self.borrow_within_cohort.policy != "Never"):
            raise _field_error("borrow_within_cohort", "needs reclaim_within_cohort other than Never "
                                                       "(Never takes no victim in the cohort at all)")
        return self


class TeamBody(Strict):
    cohort: Name | None = None
    weight: float = Field(default=1.0, ge=0.001, le=1_000, allow_inf_nan=False,
                          description="fair-sharing weight, in thousandths (0.001 to 1000)")
    quotas: dict[Name, Annotated[Quota, BeforeValidator(_quota)]] = Field(
        default_factory=dict,
        description="per GPU type: a number (the nominal) or {nominal, borrowing_limit, lending_limit}")
    preemption: TeamPreemption = Field(default_factory=TeamPreemption)


class Team(Named):
    kind: Literal["Team"]
    spec: TeamBody = Field(default_factory=TeamBody)


class CohortBody(Strict):
    parent: Name | None = None


class Cohort(Named):
    kind: Literal["Cohort"]
    spec: CohortBody = Field(default_factory=CohortBody)


class PriorityClassBody(Strict):
    value: int = Field(ge=-1_000_000_000, le=1_000_000_000, description="higher schedules first")
    preemptible: bool = True


class PriorityClass(Named):
    kind: Literal["PriorityClass"]
    spec: PriorityClassBody


Document = Job | Team | Cohort | PriorityClass
KINDS: dict[str, type[Document]] = {"Job": Job, "Team": Team, "Cohort": Cohort, "PriorityClass": PriorityClass}


def _field_error(path: str, message: str) -> ValueError:
    return ValueError(f"@{path}@ {message}")


def parse_document(raw: Any, where: str, team: str | None = None) -> Document:
    """One document from its YAML data; `team` fills a Job's metadata.team (the CLI's --team)."""
    if not isinstance(raw, dict):
        raise SpecError([f"{where}: a document must be a mapping with kind, metadata and spec"])
    kind = raw.get("kind")
    if kind not in KINDS:
        raise SpecError([f"{where}: kind: must be one of {', '.join(KINDS)} (got {shown(kind)})"])
    if team is not None and kind == "Job":
        metadata = raw.get("metadata")
        if isinstance(metadata, dict):
            raw = {**raw, "metadata": {**metadata, "team": team}}
    try:
        return KINDS[kind].model_validate(raw)
    except ValidationError as error:
        raise SpecError([f"{where}: {problem}" for problem in _problems(error)]) from None


def _problems(error: ValidationError) -> list[str]:
    """`spec.workers: must be ≥ 1` for each error, in document order."""
    out = []
    for item in error.errors():
        path = ".".join(str(part) if len(str(part)) <= 40 else shown(part) for part in item["loc"]
                        if not str(part).startswith("function-"))
        message = _message(item)
        if message.startswith("@"):  # a cross-field check names its own field
            field, message = message[1:].split("@ ", 1)
            path = ".".join(p for p in (path, field) if p)
        out.append(f"{path}: {message}" if path else message)
    return out


def _message(item: dict) -> str:
    kind, ctx = item["type"], item.get("ctx", {})
    if kind == "value_error":
        return str(ctx.get("error", item["msg"]))
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "greater_than_equal":
        return f"must be ≥ {ctx['ge']}"
    if kind == "greater_than":
        return f"must be > {ctx['gt']}"
    if kind == "less_than_equal":
        return f"must be ≤ {ctx['le']}"
    if kind == "string_pattern_mismatch":
        return f"{shown(item['input'])} is not a valid name (letters, digits, '.', '_', '-')"
    if kind == "too_short":
        return "must not be empty"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}"
    return item["msg"][0].lower() + item["msg"][1:]


def load_documents(path: str | Path, team: str | None = None) -> list[Document]:
    """Every document of a YAML file (several separated by `---`); a `SpecError` lists all problems found."""
    path = Path(path)
    try:
        loaded = [doc for doc in yamlfile.load_all(path.read_text()) if doc is not None]
    except OSError as error:
        raise SpecError([f"{path}: cannot read: {error.strerror}"]) from None
    except UnicodeDecodeError as error:
        raise SpecError([f"{path}: not text (UTF-8): byte {error.start} is {error.object[error.start]:#04x}"]) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise SpecError([f"{path}: not valid YAML{at}: {getattr(error, 'problem', error)}"]) from None
    if not loaded:
        raise SpecError([f"{path}: no documents"])
    documents, problems = [], []
    for i, raw in enumerate(loaded):
        where = str(path) if len(loaded) == 1 else f"{path}[{i}]"
        try:
            documents.append(parse_document(raw, where, team))
        except SpecError as error:
            problems += error.problems
    if problems:
        raise SpecError(problems)
    return documents


def with_paths_from(job: Job, base: Path) -> Job:
    """The job with its working and checkpoint directories absolute, relative ones taken from `base` (as sbatch
    does, the working directory defaults to where the job was submitted from)."""
    spec = job.spec
    working = base / (spec.working_dir or ".")
    checkpoints = base / spec.checkpoint_dir if spec.checkpoint_dir else None
    return job.model_copy(update={"spec": spec.model_copy(update={
        "working_dir": str(working.resolve()), "checkpoint_dir": str(checkpoints.resolve()) if checkpoints else None})})


def valid_name(name: str) -> bool:
    return bool(NAME.match(name))
