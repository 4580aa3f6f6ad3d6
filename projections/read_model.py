"""The read model of launcher tools and node agents: a cell's state folded by `evolve`, plus what that
state does not keep and they need: each job's submission as written (its command, environment,
checkpoint directory), its attempts (placement, workers started and exited, how each ended), the
step of every checkpoint, rejections, and where each node is reached. Pure: fold events in log order."""

from __future__ import annotations

from dataclasses import dataclass, field

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import Job


@dataclass
class Attempt:
    """One run of a job: where it was placed and what became of its workers."""

    attempt: int
    placed_at: int
    assignments: tuple[tuple[int, str, tuple[int, ...]], ...]  # (worker, node, GPU indices)
    started: dict[int, int] = field(default_factory=dict)  # worker -> time it started
    exits: dict[int, int] = field(default_factory=dict)  # worker -> exit code
    outcome: str = ""  # how it ended (preempted, interrupted, succeeded, failed, cancelled); "" while it runs
    ended_at: int | None = None
    resumed_from_step: int | None = None  # the checkpoint step it started from


@dataclass
class ReadModel:
    state: CellState = field(default_factory=CellState)
    submissions: dict[str, m.JobSubmitted] = field(default_factory=dict)  # job id -> the submission that made it
    attempts: dict[str, dict[int, Attempt]] = field(default_factory=dict)
    rejections: dict[str, m.JobRejected] = field(default_factory=dict)  # job id -> its latest rejection
    request_rejections: dict[str, m.RequestRejected] = field(default_factory=dict)  # request event id -> rejection
    checkpoint_steps: dict[str, int] = field(default_factory=dict)  # checkpoint id -> step
    addresses: dict[str, str] = field(default_factory=dict)  # node -> address
    details: dict[str, str] = field(default_factory=dict)  # job id -> detail of the latest decision about it
    policy_version: str | None = None  # the admitter's, as its latest decision records it
    finished: dict[str, Job] = field(default_factory=dict)  # jobs that ended: the cell's state lets them go


    def fold(self, offset: int, event: m.Event) -> None:
        job_id = m.field_of(event, "job_id", None)
        before = self.state.jobs.get(job_id) if job_id else None
        attempt_before = before.attempt if before is not None else None
        if isinstance(event, m.Tick):  # the jobs that ended leave the cell's state now; their readers keep them
            self.finished.update(self.state.leaving())
        evolve(self.state, event, offset)
        job = self.state.jobs.get(job_id) if job_id else None
        if job is not None and event.is_decision and job.reason_offset == offset:  # a decision the fold accepted
            self.details[job.job_id] = m.field_of(event, "detail", "")
        if event.is_decision and event.envelope.producer == "admitter" and event.envelope.policy_version:
            self.policy_version = event.envelope.policy_version
        if isinstance(event, m.JobSubmitted):
            self.submissions.setdefault(event.job_id, event)
        elif isinstance(event, m.JobRejected):
            self.rejections[event.job_id] = event
        elif isinstance(event, m.RequestRejected):
            self.request_rejections[event.request_event_id] = event
        elif isinstance(event, m.NodeRegistered) and event.address:
            self.addresses[event.node] = event.address
        elif job is not None:
            self._job_event(job, event, attempt_before)

    def _job_event(self, job: Job, event: m.Event, attempt_before: int | None) -> None:
        runs = self.attempts.setdefault(job.job_id, {})
        if isinstance(event, m.JobPlaced):
            if job.reason_offset == self.state.offset:  # accepted by the fold, not superseded
                checkpoint = job.checkpoint.checkpoint_id if job.checkpoint else None
                runs[event.attempt] = Attempt(event.attempt, event.at, job.assignments,
                                              resumed_from_step=self.checkpoint_steps.get(checkpoint or ""))
        elif isinstance(event, m.WorkerStarted) and event.attempt in runs:
            runs[event.attempt].started.setdefault(event.worker, event.at)
        elif isinstance(event, m.WorkerExited) and event.attempt in runs:
            runs[event.attempt].exits[event.worker] = event.exit_code
        elif isinstance(event, m.CheckpointCompleted) and event.step is not None:
            if job.checkpoint is not None and job.checkpoint.checkpoint_id == event.checkpoint_id:
                self.checkpoint_steps[event.checkpoint_id] = event.step
        elif isinstance(event, m.JobPreempted | m.JobInterrupted | m.JobSucceeded | m.JobFailed | m.JobCancelled):
            attempt = event.attempt if isinstance(event, m.JobInterrupted) else attempt_before
            run = runs.get(attempt)
            if run is not None and not run.outcome and job.reason_offset == self.state.offset:
                run.outcome = type(event).__name__.removeprefix("Job").lower()
                run.ended_at = event.at

    def job(self, job_id: str) -> Job | None:
        return self.state.jobs.get(job_id) or self.finished.get(job_id)

    def jobs(self) -> list[Job]:
        """Every job, live and ended."""
        return [*self.finished.values(), *(j for j in self.state.jobs.values() if j.job_id not in self.finished)]

    def checkpoint_step(self, job: Job) -> int | None:
        """The step of the job's latest checkpoint, which its next attempt resumes from."""
        return self.checkpoint_steps.get(job.checkpoint.checkpoint_id) if job.checkpoint else None

    def current_attempt(self, job: Job) -> Attempt | None:
        return self.attempts.get(job.job_id, {}).get(job.attempt)
