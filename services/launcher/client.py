"""The Python SDK: submit, cancel, get, list and wait for jobs; apply teams, cohorts and priority classes;
cordon nodes. Reads come from one read model (projections/read_model.py) folded by one log reader;
writes are events, checked against that model first so that a request that cannot be right writes nothing.

Submission is idempotent: the client chooses the job id (the document's name, or one derived from a
request id). The same submission twice is one job; the same id with another spec is refused with the
fields that differ. The admitter judges the same way when two clients race (services/admitter/decide.py).

    from services.launcher import Client
    with Client() as client:
        job_id = client.submit("examples/train.yaml")
        print(client.wait(job_id).state)
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from events import models as m
from events.clock import VirtualClock, epoch_from_env, speedup_from_env
from events.launcher.requests import (
    APPLY_ORDER,
    cancel_request,
    cordon_request,
    definition_events,
    differences,
    submission,
)
from events.launcher.spec import (
    NAME,
    NAME_RULE,
    Cohort,
    Document,
    Job,
    SpecError,
    load_documents,
    parse_document,
    with_paths_from,
)
from events.log import InputWriter
from events.reader import LogReader, default_bootstrap
from events.shown import shown
from events.topics import TopicNames, cells_from_env, topic_names, topic_prefix
from events.tracing import Tracer
from projections.cluster import NODE_LEVEL
from projections.jobs import ENDED, JobState
from projections.read_model import Attempt, ReadModel
from projections.readmodel.documents import MOST_COHORT_DEPTH
from projections.usage import NodeStatus, TeamUsage, node_status, team_usage
from projections.validate import MAX_DETAIL_LENGTH, refusal, request_problem
from services.core.forecast import Estimate, forecast
from services.policies import UnknownPolicy, resolve
from services.policy import DEFAULT_POLICY


class LauncherError(Exception):
    """A request that cannot be carried out; the message is one line (or one per problem) for the user."""


@dataclass(frozen=True)
class JobStatus:
    """A job as `gangway jobs` and `gangway job` show it."""

    job_id: str
    team: str
    state: str
    gpus: int
    shape: str  # workers x GPUs per worker and type, e.g. "2x1 H100"
    reason: str
    detail: str
    queue_position: int | None  # 1 = next in the cell's admission order; None when not queued
    team_position: int | None  # 1 = next of its team
    estimated_start: int | None  # event time (ms) the forecast expects it to start, when queued and known
    start_basis: str  # how that estimate was made, or why there is none
    submitted_at: int
    age_s: float
    attempt: int
    restarts: int
    placement: list[dict] = field(default_factory=list)  # the current attempt's workers: worker, node, gpus
    attempts: list[dict] = field(default_factory=list)
    checkpoint_step: int | None = None
    spec: dict = field(default_factory=dict)
    earliest_start: int | None = None  # the interval the estimated start lies in (services/core/forecast.py)
    latest_start: int | None = None

    @property
    def ended(self) -> bool:
        return JobState(self.state) in ENDED

    def as_dict(self) -> dict:
        return asdict(self)


#: How long a write waits to see its records on the cell's log (the intake takes them in within milliseconds).
INTAKE_WAIT_S = 30.0

#: What `wait` can wait for, besides a predicate.
UNTIL = {"ended": lambda s: s.ended, "running": lambda s: s.state == JobState.RUNNING or s.ended,
         "placed": lambda s: s.state in (JobState.PLACED, JobState.RUNNING) or s.ended}


#: How long `wait` looks for a job it does not see yet (one just submitted) before saying there is none.
SUBMISSION_VISIBLE_S = 10.0


class Client:
    """A launcher for one cell. It keeps one log reader and folds the cell's log as it reads on."""

    def __init__(self, bootstrap_servers: str | None = None, cell: str | None = None, *,
                 cells: Sequence[str] | None = None, topics: TopicNames | None = None, producer: str = "launcher",
                 clock: VirtualClock | None = None) -> None:
        self.bootstrap = bootstrap_servers or default_bootstrap()
        self.cells = tuple(cells or cells_from_env())
        self.cell = cell or self.cells[0]
        if self.cell not in self.cells:
            raise LauncherError(f"unknown cell {self.cell!r}; cells: {', '.join(self.cells)} ($GANGWAY_CELLS)")
        self.topics = topics or topic_names()
        self.producer_name = producer
        self.clock = clock or VirtualClock.anchored(speedup_from_env(), epoch_from_env())
        self.model = ReadModel()
        self._reader = LogReader([self.cell], self.bootstrap, all_cells=self.cells, topics=self.topics)
        self._writer: InputWriter | None = None
        self._in_flight: set[str] = set()  # event ids this client wrote that the cell's log does not show yet
        self._tracer: Tracer | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._reader.close()
        if self._writer is not None:
            self._writer.flush()
        if self._tracer is not None:
            self._tracer.shutdown()

    # --- reading ----------------------------------------------------------------------------------

    def refresh(self) -> ReadModel:
        """Folds what the log holds now, from where the last read stopped."""
        for record in self._reader.read():
            if record.event is not None:
                self._fold(record.offset, record.event)
        return self.model

    def follow(self, timeout: float) -> None:
        """Folds what arrives within `timeout` seconds (for live views)."""
        for record in self._reader.follow(timeout):
            if record.event is not None:
                self._fold(record.offset, record.event)

    def _fold(self, offset: int, event: m.Event) -> None:
        self._in_flight.discard(event.envelope.event_id)
        self.model.fold(offset, event)

    def get(self, job_id: str) -> JobStatus:
        return self._appeared(job_id, within=0)

    def list(self, team: str | None = None, states: Iterable[str] = (), include_ended: bool = False) -> list[JobStatus]:
        """Jobs in submission order; ended ones only with `include_ended` or when `states` names them."""
        self.refresh()
        wanted = {JobState(s) for s in states}
        positions = self._estimates()
        jobs = sorted(self.model.jobs(), key=lambda j: (j.submit_offset, j.job_id))
        return [self._status(job.job_id, positions) for job in jobs
                if (team is None or job.team == team)
                and (job.state in wanted if wanted else include_ended or not job.ended)]

    def wait(self, job_id: str, until: str | Callable[[JobStatus], bool] = "ended", timeout: float | None = None,
             on_change: Callable[[JobStatus], None] | None = None) -> JobStatus:
        """Follows the log until the job is `ended` (default), `running`, `placed`, or `until(status)` holds.
        Raises TimeoutError after `timeout` seconds; `on_change` sees each new state."""
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive, finite number of seconds, not {timeout!r}")
        done = UNTIL[until] if isinstance(until, str) else until
        deadline = None if timeout is None else time.monotonic() + timeout
        status = self._appeared(job_id, SUBMISSION_VISIBLE_S if timeout is None else min(timeout, SUBMISSION_VISIBLE_S))
        seen = None
        while True:
            if on_change is not None and (status.state, status.reason) != seen:
                seen = (status.state, status.reason)
                on_change(status)
            if done(status):
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {status.state} ({status.reason}) after {timeout:g} s")
            self.follow(0.5)
            status = self._status(job_id, self._estimates())

    def _appeared(self, job_id: str, within: float) -> JobStatus:
        """The job's status, following the log for up to `within` seconds while it is not there: a submission
        just committed becomes readable only once its transaction's markers are written."""
        self.refresh()
        give_up = time.monotonic() + within
        while (status := self._status(job_id, self._estimates())) is None:
            if time.monotonic() >= give_up:
                raise LauncherError(f"no job {job_id!r} in cell {self.cell}")
            self.follow(0.2)
        return status

    def teams(self) -> list[TeamUsage]:
        self.refresh()
        return team_usage(self.model.state)

    def nodes(self) -> list[NodeStatus]:
        self.refresh()
        return node_status(self.model.state)

    # --- writing ----------------------------------------------------------------------------------

    def submit(self, spec: Job | dict | str | Path, *, team: str | None = None, job_id: str | None = None,
               request_id: str | None = None) -> str:
        """Submits one job and returns its id (see `submit_all`)."""
        return self.submit_all([spec], team=team, job_id=job_id, request_id=request_id)[0]

    def submit_all(self, specs: Sequence[Job | dict | str | Path], *, team: str | None = None,
                   job_id: str | None = None, request_id: str | None = None) -> list[str]:
        """Submits jobs in one transaction, all or none. A job's id is `job_id`, else derived from
        `request_id` (the name plus a digest of it), else its name. A job already submitted with the
        same spec is not written again; any problem (a bad document, an unknown team or priority class,
        a spec for another cell, an id taken by another spec, an id that is not a name) raises `LauncherError`
        and writes nothing."""
        jobs = [with_paths_from(job, Path.cwd()) for spec in specs for job in self._jobs(spec, team)]
        chosen_ids = job_ids(jobs, job_id, request_id)
        self.refresh()
        at = self.clock.now_ms()
        ids, events, problems = [], [], []
        for job, chosen in zip(jobs, chosen_ids):
            event = submission(job, chosen, self.cell, at, self.producer_name)
            problem = self._refusal(job, event) or (f"job id {chosen} appears twice in this request"
                                                    if chosen in ids else None)
            if problem:
                problems.append(f"{job.name}: {problem}")
            ids.append(chosen)
            if chosen not in self.model.submissions:
                events.append(event)
        if problems:
            raise LauncherError("\n".join(problems))
        self._write(events)
        return ids

    def cancel(self, *job_ids: str) -> list[str]:
        """Asks to cancel jobs that have not ended; an unknown or ended job is an error and nothing is written."""
        self.refresh()
        problems = []
        for job_id in job_ids:
            job = self.model.job(job_id)
            if job is None:
                problems.append(f"{job_id}: no such job in cell {self.cell}")
            elif job.ended:
                problems.append(f"{job_id}: already {job.state.value}")
        if problems:
            raise LauncherError("\n".join(problems))
        at = self.clock.now_ms()
        self._write([cancel_request(job_id, self.cell, at, self.producer_name, team=self.model.job(job_id).team)
                     for job_id in job_ids])
        return list(job_ids)

    def apply(self, documents: Sequence[Document | str | Path]) -> list[tuple[str, str]]:
        """Writes teams, cohorts and priority classes (in that dependency order) in one transaction and
        says for each `configured` or `unchanged`. Jobs are submitted with `submit`."""
        docs: list[Document] = []
        for item in documents:
            docs += load_documents(item) if isinstance(item, (str, Path)) else [item]
        jobs = [d.name for d in docs if isinstance(d, Job)]
        if jobs:
            raise LauncherError(f"{', '.join(jobs)}: jobs are submitted with `gangway submit`, not applied")
        foreign = [f"{d.name}: for cell {d.metadata.cell}" for d in docs if d.metadata.cell not in (None, self.cell)]
        if foreign:
            raise LauncherError("\n".join(f"{f}, not {self.cell}" for f in foreign))
        self.refresh()
        at = self.clock.now_ms()
        cohorts = {d.name for d in docs if d.kind == "Cohort"} | set(self.model.state.tenancy.cohort_parent)
        problems = [f"team {d.name}: cohort {d.spec.cohort!r} is not defined (apply a kind: Cohort)"
                    for d in docs if d.kind == "Team" and d.spec.cohort not in (None, *cohorts)]
        problems += cohort_chain_problems(self.model.state.tenancy.cohort_parent,
                                           {d.name: d.spec.parent for d in docs if isinstance(d, Cohort)})
        if problems:
            raise LauncherError("\n".join(problems))
        outcome, events = [], []
        for kind in APPLY_ORDER:
            for doc in sorted((d for d in docs if isinstance(d, kind)), key=lambda d: d.name):
                wanted = definition_events(doc, self.cell, at, self.producer_name)
                fresh = [e for e in wanted if not self._holds(e)]
                events += fresh
                outcome.append((f"{doc.kind.lower()}/{doc.name}", "configured" if fresh else "unchanged"))
        self._write(events)
        return outcome

    def cordon(self, node: str, cordon: bool = True, detail: str = "") -> None:
        if len(detail) > MAX_DETAIL_LENGTH:
            raise LauncherError(f"the reason is {len(detail):,} characters; at most {MAX_DETAIL_LENGTH:,}")
        self.refresh()
        if node not in self.model.state.cluster.nodes:
            raise LauncherError(f"no node {node!r} in cell {self.cell}")
        self._write([cordon_request(node, cordon, self.cell, self.clock.now_ms(), detail)])

    # --- helpers ----------------------------------------------------------------------------------

    def _jobs(self, spec: Job | dict | str | Path, team: str | None) -> list[Job]:
        if isinstance(spec, Job):
            docs: list[Document] = [spec if team is None else spec.model_copy(
                update={"metadata": spec.metadata.model_copy(update={"team": team})})]
        elif isinstance(spec, dict):
            docs = [parse_document(spec, spec.get("metadata", {}).get("name", "job"), team)]
        else:
            docs = load_documents(spec, team)
        others = [d.name for d in docs if not isinstance(d, Job)]
        if others:
            raise SpecError([f"{', '.join(others)}: not a job "
                             "(teams, cohorts and priority classes go to `gangway apply`)"])
        return docs  # type: ignore[return-value]

    def _refusal(self, job: Job, event: m.JobSubmitted) -> str | None:
        """Why the cell would refuse this submission outright, judged on the folded log; None if it would not."""
        state = self.model.state
        if job.metadata.cell not in (None, self.cell):
            return f"the spec is for cell {job.metadata.cell}, this client submits to {self.cell}"
        old = self.model.submissions.get(event.job_id)
        if old is not None:
            changed = differences(old, event)
            return f"job id {event.job_id} is taken by another spec ({'; '.join(changed)})" if changed else None
        refused = refusal(state, event)  # what the cell itself would refuse to fold
        if refused is not None:
            return refused.detail
        unrunnable = request_problem(event, state.limits)
        if unrunnable is not None:
            return unrunnable[1]
        if event.team not in state.tenancy.teams:
            known = ", ".join(sorted(state.tenancy.teams)) or "none yet: `gangway apply` a kind: Team"
            return f"team {event.team!r} is not defined (teams: {known})"
        if event.priority_class is not None and event.priority_class not in state.tenancy.priority_classes:
            known = ", ".join(sorted(state.tenancy.priority_classes)) or "none"
            return f"priority class {event.priority_class!r} is not defined (classes: {known})"
        if event.gpu_type not in state.cluster.gpu_types():
            types = ", ".join(state.cluster.gpu_types()) or "none"
            return f"no {event.gpu_type!r} nodes in cell {self.cell} (types: {types})"
        levels = [*state.cluster.levels, NODE_LEVEL]
        for level in (event.topology_required, event.topology_preferred):
            if level is not None and level not in levels:
                return f"topology level {level!r} is not one of: {', '.join(levels)}"
        return None

    def _holds(self, event: m.Event) -> bool:
        """Whether the folded configuration already says what `event` says."""
        tenancy = self.model.state.tenancy
        if isinstance(event, m.CohortDefined):
            return event.cohort in tenancy.cohort_parent and tenancy.cohort_parent[event.cohort] == event.parent
        if isinstance(event, m.PriorityClassDefined):
            known = tenancy.priority_classes.get(event.name)
            return known is not None and (known.value, known.preemptible) == (event.value, event.preemptible)
        if isinstance(event, m.TeamDefined):
            known = tenancy.teams.get(event.team)
            rules = known.preemption if known is not None else None
            return known is not None and (known.cohort, known.weight_milli) == (event.cohort, event.weight_milli) and (
                rules.within_team, rules.reclaim_within_cohort, rules.borrow_within_cohort,
                rules.max_priority_threshold) == (
                *(None if rule is None else rule.value
                  for rule in (event.within_team, event.reclaim_within_cohort, event.borrow_within_cohort)),
                event.max_priority_threshold)
        if isinstance(event, m.QuotaSet):
            known = tenancy.quotas.get((event.team, event.gpu_type))
            return known is not None and (known.nominal, known.borrowing_limit, known.lending_limit) == (
                event.nominal, event.borrowing_limit, event.lending_limit)
        return False

    def _write(self, events: Sequence[m.Event]) -> None:
        if not events:
            return
        if self._writer is None:
            self._writer = InputWriter(self.bootstrap, self.topics, self.cells, topic_prefix())
            self._tracer = Tracer("launcher")
        # Each submission starts its job's trace; its traceparent travels in the record's headers.
        headers = {}
        for event in events:
            if isinstance(event, m.JobSubmitted):
                with self._tracer.span(f"submit {event.job_id}", attributes={
                        "job": event.job_id, "team": event.team, "gpus": event.workers * event.gpus_per_worker}) as span:
                    headers[event.envelope.event_id] = [("traceparent", span.traceparent)] if span.traceparent else None
        self._writer.write(events, headers=lambda e: headers.get(e.envelope.event_id))
        self._await_taken_in([e.envelope.event_id for e in events])

    def _await_taken_in(self, event_ids: Sequence[str]) -> None:
        """Reads on until the intake has taken what was just written into the cell's log, so what this client
        writes next (a job after its team's definition) and reads next already sees it."""
        self._in_flight.update(event_ids)
        gives_up = time.monotonic() + INTAKE_WAIT_S
        while self._in_flight:
            if time.monotonic() >= gives_up:
                missing = sorted(self._in_flight)
                self._in_flight.clear()
                raise LauncherError(f"{len(missing)} written record(s) ({missing[0]}...) not on cell {self.cell}'s log "
                                    f"after {INTAKE_WAIT_S:g} s: is the intake running (`gangway run intake`)? Refused "
                                    f"inputs are in the dead-letter topic")
            self.follow(0.2)

    def _estimates(self) -> dict[str, Estimate]:
        """Queue position and estimated start of every queued job (services/core/forecast.py), under the policy
        the admitter records in its decisions."""
        try:
            policy = resolve(self.model.policy_version) if self.model.policy_version else DEFAULT_POLICY
        except UnknownPolicy:
            policy = DEFAULT_POLICY
        return forecast(self.model.state, policy)

    def _status(self, job_id: str, estimates: dict[str, Estimate]) -> JobStatus | None:
        model = self.model
        job = model.job(job_id)
        if job is None:
            return None
        submitted = model.submissions.get(job_id)
        estimate = estimates.get(job_id)
        return JobStatus(
            job_id=job.job_id, team=job.team, state=job.state.value, gpus=job.gpus,
            shape=f"{job.workers}x{job.gpus_per_worker} {job.gpu_type}", reason=job.reason.value,
            detail=model.details.get(job_id, ""),
            queue_position=estimate.cell_position if estimate else None,
            team_position=estimate.team_position if estimate else None,
            estimated_start=estimate.start if estimate else None,
            start_basis=f"{estimate.basis.value}: {estimate.detail}" if estimate else "", submitted_at=job.submitted_at,
            age_s=max(0.0, (self.clock.now_ms() - job.submitted_at) / 1000), attempt=job.attempt,
            restarts=job.restarts,
            placement=[{"worker": w, "node": n, "gpus": list(g)} for w, n, g in job.assignments],
            attempts=[_attempt(a) for _, a in sorted(model.attempts.get(job_id, {}).items())],
            checkpoint_step=model.checkpoint_step(job),
            spec=submitted.model_dump(mode="json", exclude={"envelope"}) if submitted else {},
            earliest_start=estimate.earliest if estimate else None, latest_start=estimate.latest if estimate else None)


def _attempt(a: Attempt) -> dict:
    return {"attempt": a.attempt, "placed_at": a.placed_at, "workers": [
        {"worker": w, "node": n, "gpus": list(g), "started_at": a.started.get(w), "exit_code": a.exits.get(w)}
        for w, n, g in a.assignments], "resumed_from_step": a.resumed_from_step, "outcome": a.outcome or "running",
        "ended_at": a.ended_at}


def cohort_chain_problems(known: dict[str, str | None], applied: dict[str, str | None]) -> list[str]:
    """Cohorts applied whose chain of parents comes back to itself, or is deeper than the cohort tree nests."""
    parents = {**known, **applied}
    problems = []
    for name in sorted(applied):
        chain, at = [name], parents.get(name)
        while at is not None and at not in chain and len(chain) <= MOST_COHORT_DEPTH:
            chain.append(at)
            at = parents.get(at)
        if at is not None and at in chain:
            problems.append(f"cohort {name}: its parents come back to it ({' -> '.join([*chain, at])})")
        elif len(chain) > MOST_COHORT_DEPTH:
            problems.append(f"cohort {name}: more than {MOST_COHORT_DEPTH} cohorts deep")
    return problems


def job_ids(jobs: Sequence[Job], job_id: str | None, request_id: str | None) -> list[str]:
    """Each job's id: `job_id`, else derived from `request_id` (the name plus a digest of it), else its name. An id
    names directories on the nodes and paths of the query API, so it must be a name; else `LauncherError`."""
    if (job_id is not None or request_id) and len(jobs) != 1:
        raise LauncherError("a job id or request id names exactly one job")
    ids = [job_id if job_id is not None else (_derived_id(job.name, request_id) if request_id else job.name)
           for job in jobs]
    bad = [f"{job.name}: job id {shown(chosen)} is not a name: {NAME_RULE}"
           for job, chosen in zip(jobs, ids) if not NAME.fullmatch(chosen)]
    if bad:
        raise LauncherError("\n".join(bad))
    return ids


def _derived_id(name: str, request_id: str) -> str:
    return f"{name}-{hashlib.sha256(request_id.encode()).hexdigest()[:10]}"
