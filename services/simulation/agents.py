"""Simulated node agents: start placed workers, run them for their duration, checkpoint on a
period and on request, report exits, and heartbeat. They react to decisions in the log and
schedule their reports in virtual time, so a run is deterministic."""

from __future__ import annotations

from dataclasses import dataclass, field

from events import models as m
from projections.jobs import JobState


@dataclass
class AgentTiming:
    start_delay_ms: int = 1_000
    checkpoint_every_ms: int | None = 30 * 60_000
    checkpoint_delay_ms: int = 30_000  # time to write a checkpoint when asked
    heartbeat_every_ms: int | None = None  # None: no heartbeats (silence detection off)


@dataclass
class SimulatedAgents:
    """Agents for every node of one virtual cell; `durations` says how long each job trains."""

    timing: AgentTiming = field(default_factory=AgentTiming)
    durations: dict[str, int] = field(default_factory=dict)  # job id -> training time needed, ms
    silenced: set[str] = field(default_factory=set)  # nodes whose heartbeats stopped
    fail_exit: dict[str, tuple[int, int]] = field(default_factory=dict)  # job -> (worker, code) on next exit
    _started: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # job -> (attempt, at, restored ms)

    def __call__(self, cell, event: m.Event, offset: int) -> None:
        if isinstance(event, m.JobPlaced):
            self._start(cell, event)
        elif isinstance(event, m.PreemptionRequested):
            self._checkpoint_on_request(cell, event)
        elif isinstance(event, m.WorkerStarted) and event.worker == 0:
            self._run(cell, event)
        elif isinstance(event, m.CheckpointCompleted):
            self._next_periodic_checkpoint(cell, event)
        elif isinstance(event, m.NodeRegistered) and self.timing.heartbeat_every_ms:
            self._heartbeat(cell, event.node, event.envelope.at)
        elif isinstance(event, m.NodeHeartbeat):
            self._heartbeat(cell, event.node, event.envelope.at + self.timing.heartbeat_every_ms)

    def _heartbeat(self, cell, node: str, at: int) -> None:
        if node not in self.silenced:
            cell.schedule(m.NodeHeartbeat(envelope=cell.envelope(at, f"agent/{node}"), node=node, seq=at))

    def _start(self, cell, placed: m.JobPlaced) -> None:
        at = placed.envelope.at + self.timing.start_delay_ms
        for a in placed.assignments:
            cell.schedule(m.WorkerStarted(envelope=cell.envelope(at, f"agent/{a.node}", placed.job_id),
                                          job_id=placed.job_id, attempt=placed.attempt, worker=a.worker, node=a.node))

    def _run(self, cell, started: m.WorkerStarted) -> None:
        job = cell.state.jobs.get(started.job_id)
        if job is None:
            return
        restored = job.checkpoint.progress_ms if job.checkpoint else 0
        self._started[job.job_id] = (started.attempt, started.envelope.at, restored)
        end = started.envelope.at + max(0, self.durations.get(job.job_id, 3_600_000) - restored)
        failing = self.fail_exit.pop(job.job_id, None)
        for worker, node, _ in job.assignments:
            code = failing[1] if failing and failing[0] == worker else 0
            cell.schedule(m.WorkerExited(envelope=cell.envelope(end, f"agent/{node}", job.job_id), job_id=job.job_id,
                                         attempt=started.attempt, worker=worker, node=node, exit_code=code))
        every = self.timing.checkpoint_every_ms
        if every and started.envelope.at + every < end:
            self._schedule_checkpoint(cell, job.job_id, started.attempt, started.envelope.at + every)

    def progress(self, job_id: str, attempt: int, at: int) -> int | None:
        """Training time a job has done by `at` in this attempt, or None when that attempt is not running."""
        started = self._started.get(job_id)
        if started is None or started[0] != attempt:
            return None
        _, since, restored = started
        return min(restored + max(0, at - since), self.durations.get(job_id, 3_600_000))

    def _schedule_checkpoint(self, cell, job_id: str, attempt: int, at: int) -> None:
        progress = self.progress(job_id, attempt, at)
        if progress is None:
            return
        job = cell.state.jobs[job_id]
        node = job.assignments[0][1] if job.assignments else "-"
        cell.schedule(m.CheckpointCompleted(envelope=cell.envelope(at, f"agent/{node}", job_id), job_id=job_id,
                                            attempt=attempt, checkpoint_id=f"{job_id}/a{attempt}/{at}",
                                            progress_ms=progress))

    def _next_periodic_checkpoint(self, cell, done: m.CheckpointCompleted) -> None:
        job = cell.state.jobs.get(done.job_id)
        every = self.timing.checkpoint_every_ms
        if job is None or job.state is not JobState.RUNNING or job.attempt != done.attempt or not every:
            return
        if done.progress_ms + every < self.durations.get(job.job_id, 3_600_000):
            self._schedule_checkpoint(cell, job.job_id, done.attempt, done.envelope.at + every)

    def _checkpoint_on_request(self, cell, request: m.PreemptionRequested) -> None:
        job = cell.state.jobs.get(request.job_id)
        if job is None or job.state is not JobState.PREEMPTING:
            return
        at = request.envelope.at + self.timing.checkpoint_delay_ms
        if at <= request.checkpoint_deadline:
            self._schedule_checkpoint(cell, job.job_id, job.attempt, at)
