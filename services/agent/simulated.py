"""Simulated node agents: start placed workers, run them for their duration, checkpoint on a
period and on request, report exits, and heartbeat. They react to decisions in the log and
schedule their reports in virtual time, so a run is deterministic.

Costs: a restarted attempt (after a preemption or a failure) first spends `restart_cost_ms`
loading its checkpoint, and every periodic checkpoint pauses training for `checkpoint_cost_ms`;
neither makes progress, so both lengthen the job. A node whose GPU failed is repaired after
`repair_ms` and registers again."""

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
    checkpoint_cost_ms: int = 0  # training pauses this long for each periodic checkpoint
    restart_cost_ms: int = 0  # a restarted attempt spends this long before it makes progress
    repair_ms: int | None = None  # None: failed hardware stays out; else repaired after this long


@dataclass
class SimulatedAgents:
    """Agents for every node of one virtual cell; `durations` says how long each job trains."""

    timing: AgentTiming = field(default_factory=AgentTiming)
    durations: dict[str, int] = field(default_factory=dict)  # job id -> training time needed, ms
    silenced: set[str] = field(default_factory=set)  # nodes whose heartbeats stopped
    fail_exit: dict[str, tuple[int, int]] = field(default_factory=dict)  # job -> (worker, code) on next exit
    _started: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # job -> (attempt, at, restored, restart ms)
    _nodes: dict[str, m.NodeRegistered] = field(default_factory=dict)  # as registered, for re-registering after repair

    def __call__(self, cell, event: m.Event, offset: int) -> None:
        if isinstance(event, m.JobPlaced):
            self._start(cell, event)
        elif isinstance(event, m.PreemptionRequested):
            self._checkpoint_on_request(cell, event)
        elif isinstance(event, m.WorkerStarted) and event.worker == 0:
            self._run(cell, event)
        elif isinstance(event, m.CheckpointCompleted):
            self._next_periodic_checkpoint(cell, event)
        elif isinstance(event, m.NodeRegistered):
            self._nodes[event.node] = event
            if self.timing.heartbeat_every_ms:
                self._heartbeat(cell, event.node, event.envelope.at)
        elif isinstance(event, m.GpuFaulted) and self.timing.repair_ms is not None:
            self._repair(cell, event)

    def heard(self, cell, heartbeat: m.NodeHeartbeat) -> None:
        """A heartbeat went out (side input, not on the log): the next one is due a period later."""
        self._heartbeat(cell, heartbeat.node, heartbeat.envelope.at + (self.timing.heartbeat_every_ms or 0))

    def _heartbeat(self, cell, node: str, at: int) -> None:
        if node not in self.silenced:
            cell.schedule(m.NodeHeartbeat(envelope=cell.envelope(at, f"agent/{node}"), node=node, seq=at))

    def _start(self, cell, placed: m.JobPlaced) -> None:
        job = cell.state.jobs.get(placed.job_id)
        if job is None or job.state is not JobState.PLACED or job.attempt != placed.attempt or \
                [(w, n) for w, n, _ in job.assignments] != [(a.worker, a.node) for a in placed.assignments]:
            return  # a placement the cell did not take (superseded, stale): no worker starts for it
        at = placed.envelope.at + self.timing.start_delay_ms
        for a in placed.assignments:
            cell.schedule(m.WorkerStarted(envelope=cell.envelope(at, f"agent/{a.node}", placed.job_id),
                                          job_id=placed.job_id, attempt=placed.attempt, worker=a.worker, node=a.node))

    def _run(self, cell, started: m.WorkerStarted) -> None:
        job = cell.state.jobs.get(started.job_id)
        if job is None or job.attempt != started.attempt or job.state not in (JobState.PLACED, JobState.RUNNING) \
                or not any(w == started.worker and n == started.node for w, n, _ in job.assignments):
            return  # a start the cell did not take (its attempt lost, or not where it is placed): it runs nothing
        timing = self.timing
        restored = job.checkpoint.progress_ms if job.checkpoint else 0
        restart = timing.restart_cost_ms if started.attempt > 1 else 0
        t0 = started.envelope.at
        self._started[job.job_id] = (started.attempt, t0, restored, restart)
        remaining = max(0, self.durations.get(job.job_id, 3_600_000) - restored)
        every = timing.checkpoint_every_ms or 0  # 0: no periodic checkpoints
        pauses = (remaining - 1) // every if every and remaining > 0 else 0  # periodic checkpoints before the end
        end = t0 + restart + remaining + pauses * timing.checkpoint_cost_ms
        failing = self.fail_exit.pop(job.job_id, None)
        for worker, node, _ in job.assignments:
            code = failing[1] if failing and failing[0] == worker else 0
            cell.schedule(m.WorkerExited(envelope=cell.envelope(end, f"agent/{node}", job.job_id), job_id=job.job_id,
                                         attempt=started.attempt, worker=worker, node=node, exit_code=code))
        if pauses:
            first = t0 + restart + every + timing.checkpoint_cost_ms
            self._schedule_checkpoint(cell, job.job_id, started.attempt, first, restored + every)

    def progress(self, job_id: str, attempt: int, at: int) -> int | None:
        """Training time the job's attempt has accumulated by `at` (None if that attempt never ran)."""
        started = self._started.get(job_id)
        if started is None or started[0] != attempt:
            return None
        _, since, restored, restart = started
        elapsed = at - since - restart
        if elapsed <= 0:
            return restored
        every, cost = self.timing.checkpoint_every_ms, self.timing.checkpoint_cost_ms
        if every and cost:
            cycles, rest = divmod(elapsed, every + cost)
            elapsed = cycles * every + min(rest, every)
        return min(restored + elapsed, self.durations.get(job_id, 3_600_000))

    def _schedule_checkpoint(self, cell, job_id: str, attempt: int, at: int, progress: int | None) -> None:
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
            self._schedule_checkpoint(cell, job.job_id, done.attempt,
                                      done.envelope.at + every + self.timing.checkpoint_cost_ms,
                                      done.progress_ms + every)

    def _checkpoint_on_request(self, cell, request: m.PreemptionRequested) -> None:
        job = cell.state.jobs.get(request.job_id)
        if job is None or job.state is not JobState.PREEMPTING:
            return
        at = request.envelope.at + self.timing.checkpoint_delay_ms
        if at <= request.checkpoint_deadline:
            self._schedule_checkpoint(cell, job.job_id, job.attempt, at, self.progress(job.job_id, job.attempt, at))

    def _repair(self, cell, fault: m.GpuFaulted) -> None:
        """Hardware comes back `repair_ms` after a fault that took it out of service (a retired GPU or a
        cordoned node): the repaired node passes its health checks, and recovery returns it whole."""
        if fault.action is m.XidAction.JOB_ONLY or fault.node not in self._nodes:
            return
        back = fault.envelope.at + (self.timing.repair_ms or 0)  # called with a repair time only
        cell.schedule(m.NodeHealthCheckPassed(envelope=cell.envelope(back, f"agent/{fault.node}"), node=fault.node))
