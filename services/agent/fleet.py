"""A simulated fleet of node agents: register, heartbeat, run placed workers, checkpoint, exit, fail.

`Fleet` is the agents' logic for every node of some cells, without Kafka: `observe` folds each
event of the main log (in log order) and reacts to it by setting timers; `fire(now)` runs the
timers that are due and queues the events they produce; `drain` hands those to the writer
(`services/agent/fleet_cli.py`, the Kafka loop). It is the Kafka twin of `services/agent/simulated.py`.

Determinism. The fleet is outside the control plane: its reports are *inputs*, recorded on the
log like a launcher's submissions, and replay reads them back instead of re-running the fleet.
Deciders only read event time from events, so the same log gives the same decisions whatever
the fleet's wall-clock timing was. The fleet itself is as reproducible as an outside world can be:
- job reports are stamped with the time they were *due* (the decision they answer plus a start
  delay, a duration, a checkpoint period), not with the wall clock, so their content depends
  only on the log the fleet read; a slow fleet writes them later, never differently;
- failures come from `random.Random(seed)` (services/agent/failures.py) as offsets from the
  fleet's start, so a seed gives the same node losses and Xid errors at the same points of its run;
- only heartbeats carry the virtual "now" (they say "alive now"), which is what recovery's
  silence detection compares with the clock's ticks. Clock, fleet and load must therefore share
  the speedup and the epoch (events/clock.py).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from events import models as m
from events.models import XidAction
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import JobState
from services.agent.failures import FIRST_BUSY, HOUR_MS, Failure, FailureSpec, failure_schedule
from services.agent.simulated import AgentTiming

DEFAULT_DURATION_MS = HOUR_MS  # a job without a `duration_ms` label trains for an hour
HEALTH_CHECK_MS = 60_000  # a node recovery failed while it was fine passes its checks this much later


@dataclass(frozen=True)
class FleetSpec:
    """The shape of each cell's fleet: nodes x GPUs, grouped into racks and blocks."""

    nodes: int
    gpus_per_node: int = 8
    nodes_per_rack: int = 4
    racks_per_block: int | None = None  # None: one block holds every rack
    gpu_type: str = "H100"

    def layout(self, cell: str) -> list[tuple[str, dict[str, str]]]:
        """(node name, topology labels) for every node of a cell: `<cell>-b<block>-r<rack>-n<i>`."""
        racks = -(-self.nodes // self.nodes_per_rack)
        per_block = self.racks_per_block or racks
        out = []
        for i in range(self.nodes):
            rack = i // self.nodes_per_rack
            block = rack // per_block
            out.append((f"{cell}-b{block}-r{rack}-n{i}", {"block": f"b{block}", "rack": f"r{rack}"}))
        return out


class Timers:
    """A heap of actions keyed by event time; ties fire in the order they were set."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Callable[[int], None]]] = []
        self._seq = itertools.count()

    def at(self, due: int, action: Callable[[int], None]) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), action))

    def next_due(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def fire(self, now: int) -> int:
        """Runs every action due by `now` (including ones set by actions fired here) with its due time."""
        fired = 0
        while self._heap and self._heap[0][0] <= now:
            due, _, action = heapq.heappop(self._heap)
            action(due)
            fired += 1
        return fired

    def __len__(self) -> int:
        return len(self._heap)


@dataclass
class Run:
    """One attempt of a job on this fleet; timers act only while it is the job's current run."""

    job_id: str
    attempt: int
    workers: tuple[tuple[int, str], ...]  # (worker, node)
    duration_ms: int
    started_at: int | None = None
    restored_ms: int = 0  # training time already saved by the checkpoint it resumed from

    @property
    def end(self) -> int:
        assert self.started_at is not None
        return self.started_at + max(0, self.duration_ms - self.restored_ms)

    def progress(self, at: int) -> int:
        assert self.started_at is not None
        return min(self.duration_ms, self.restored_ms + max(0, at - self.started_at))

    @property
    def nodes(self) -> set[str]:
        return {node for _, node in self.workers}


@dataclass
class CellAgents:
    """The agents' view of one cell: the folded log, job durations, the runs they are executing."""

    cell: str
    nodes: dict[str, dict[str, str]]  # name -> topology labels
    state: CellState = field(default_factory=CellState)
    durations: dict[str, int] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    outbox: list[tuple[m.Event, bool]] = field(default_factory=list)  # (event, goes to the heartbeat topic)


class Fleet:
    """Node agents for every node of `cells`; see the module docstring for how time is handled."""

    def __init__(self, cells: Sequence[str], spec: FleetSpec, timing: AgentTiming | None = None,
                 failures: FailureSpec | None = None) -> None:
        self.spec, self.timing, self.failures = spec, timing or AgentTiming(heartbeat_every_ms=5_000), failures or FailureSpec()
        self.cells = {cell: CellAgents(cell, dict(spec.layout(cell)), CellState(cell=cell)) for cell in cells}
        self.node_cell = {node: cell for cell, agents in self.cells.items() for node in agents.nodes}
        self.timers = Timers()
        self.lost: set[str] = set()
        self.heartbeat_seq: dict[str, int] = {}
        self.now = 0
        self._injected = False

    # --- the log ---------------------------------------------------------------------------------

    def observe(self, cell: str, event: m.Event, offset: int, live: bool = True) -> None:
        """Folds one event of the cell's log; reacts to it only when `live` (not while catching up)."""
        agents = self.cells[cell]
        evolve(agents.state, event, offset)
        if isinstance(event, m.JobSubmitted):
            agents.durations[event.job_id] = int(event.labels.get("duration_ms", DEFAULT_DURATION_MS))
        if not live:
            return
        if isinstance(event, m.JobPlaced):
            self._placed(agents, event)
        elif isinstance(event, m.PreemptionRequested):
            self._checkpoint_requested(agents, event)
        elif isinstance(event, (m.JobPreempted, m.JobCancelled, m.JobSucceeded, m.JobFailed)):
            agents.runs.pop(event.job_id, None)
        elif isinstance(event, m.JobInterrupted):
            run = agents.runs.get(event.job_id)
            if run is not None and run.attempt == event.attempt:
                del agents.runs[event.job_id]
        elif isinstance(event, m.NodeFailed) and event.node in agents.nodes:
            self._stop_runs_on(agents, event.node)
            if event.node not in self.lost:  # declared dead while fine (a slow heartbeat): checks pass soon
                self._health_check_at(agents, event.node, event.at + HEALTH_CHECK_MS)
        elif isinstance(event, m.GpuFaulted) and event.action is XidAction.CORDON_NODE and event.node in agents.nodes:
            self._health_check_at(agents, event.node, event.at + self.failures.repair_ms)

    def register(self, now: int) -> None:
        """Configures each cell and registers the nodes the log does not know yet; starts heartbeats and failures."""
        self.now = now
        for agents in self.cells.values():
            if agents.state.cluster.levels != ("block", "rack"):
                self._emit(agents, m.CellConfigured(envelope=self._envelope(agents, now, f"fleet/{agents.cell}", "configure"),
                                                    topology_levels=["block", "rack"]))
            for node, labels in agents.nodes.items():
                if node not in agents.state.cluster.nodes:
                    self._emit(agents, m.NodeRegistered(envelope=self._envelope(agents, now, f"agent/{node}", "register"),
                                                        node=node, gpu_type=self.spec.gpu_type,
                                                        gpus=self.spec.gpus_per_node, labels=labels))
        self.timers.at(now, self._heartbeats)
        schedule = failure_schedule(sorted(self.node_cell), self.spec.gpus_per_node, self.failures, now)
        self._next_failure(schedule)

    def adopt(self, now: int) -> None:
        """After catching up with the log: carries on the runs already placed on this fleet's nodes."""
        self.now = now
        for agents in self.cells.values():
            for job in sorted(agents.state.jobs.values(), key=lambda j: j.job_id):
                if job.state not in (JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING) or not job.assignments:
                    continue
                run = Run(job.job_id, job.attempt, tuple((w, n) for w, n, _ in job.assignments),
                          agents.durations.get(job.job_id, DEFAULT_DURATION_MS))
                if not run.nodes <= agents.nodes.keys():
                    continue
                agents.runs[job.job_id] = run
                if job.state is JobState.PLACED:
                    self.timers.at(now, lambda due, a=agents, r=run: self._start(a, r, None, due))
                else:  # workers restart from the last checkpoint: no new WorkerStarted
                    self._begin(agents, run, now)

    def fire(self, now: int) -> int:
        self.now = max(self.now, now)
        return self.timers.fire(now)

    def drain(self) -> dict[str, list[tuple[m.Event, bool]]]:
        """The events produced since the last drain, per cell, in the order they happened."""
        out = {cell: agents.outbox for cell, agents in self.cells.items() if agents.outbox}
        for cell in out:
            self.cells[cell].outbox = []
        return out

    def put_back(self, cell: str, events: list[tuple[m.Event, bool]]) -> None:
        """A cell's events drained but not written (the broker did not take them): first in its next drain."""
        self.cells[cell].outbox[:0] = events

    # --- jobs ------------------------------------------------------------------------------------

    def _placed(self, agents: CellAgents, placed: m.JobPlaced) -> None:
        job = agents.state.jobs.get(placed.job_id)
        workers = tuple((a.worker, a.node) for a in placed.assignments)
        if (job is None or job.attempt != placed.attempt or job.state is not JobState.PLACED
                or tuple((w, n) for w, n, _ in job.assignments) != workers):
            return  # superseded: the fold did not accept this placement
        run = Run(placed.job_id, placed.attempt, workers, agents.durations.get(placed.job_id, DEFAULT_DURATION_MS))
        if not run.nodes <= agents.nodes.keys():
            return  # not our nodes
        agents.runs[run.job_id] = run
        self.timers.at(placed.at + self.timing.start_delay_ms, lambda due: self._start(agents, run, placed, due))

    def _start(self, agents: CellAgents, run: Run, placed: m.JobPlaced | None, due: int) -> None:
        if agents.runs.get(run.job_id) is not run:
            return
        if run.nodes & self.lost:
            del agents.runs[run.job_id]  # a worker cannot start on a dead node: the gang hangs until recovery acts
            return
        for worker, node in run.workers:
            self._emit(agents, m.WorkerStarted(
                envelope=self._envelope(agents, due, f"agent/{node}", f"{run.job_id}-a{run.attempt}-w{worker}-started",
                                        run.job_id, placed),
                job_id=run.job_id, attempt=run.attempt, worker=worker, node=node))
            if self.failures.fail_node in (node, FIRST_BUSY) and not self._injected:
                self._injected = True
                self.timers.at(due + self.failures.fail_at_ms, lambda at, n=node: self._lose(n, at))
        self._begin(agents, run, due)

    def _begin(self, agents: CellAgents, run: Run, at: int) -> None:
        """The run trains from `at`, resuming from the job's last checkpoint; sets its end and first checkpoint."""
        job = agents.state.jobs.get(run.job_id)
        run.started_at = at
        run.restored_ms = job.checkpoint.progress_ms if job is not None and job.checkpoint is not None else 0
        self.timers.at(run.end, lambda due: self._end(agents, run, due))
        every = self.timing.checkpoint_every_ms
        if every and at + every < run.end:
            self.timers.at(at + every, lambda due: self._checkpoint(agents, run, due, periodic=True))

    def _checkpoint(self, agents: CellAgents, run: Run, due: int, periodic: bool) -> None:
        if agents.runs.get(run.job_id) is not run or run.started_at is None:
            return
        node = run.workers[0][1]
        self._emit(agents, m.CheckpointCompleted(
            envelope=self._envelope(agents, due, f"agent/{node}", f"{run.job_id}-a{run.attempt}-ckpt-{due}{'' if periodic else '-asked'}",
                                    run.job_id),
            job_id=run.job_id, attempt=run.attempt, checkpoint_id=f"{run.job_id}/a{run.attempt}/{due}",
            progress_ms=run.progress(due)))
        every = self.timing.checkpoint_every_ms
        if periodic and every and due + every < run.end:
            self.timers.at(due + every, lambda at: self._checkpoint(agents, run, at, periodic=True))

    def _checkpoint_requested(self, agents: CellAgents, request: m.PreemptionRequested) -> None:
        run = agents.runs.get(request.job_id)
        due = request.at + self.timing.checkpoint_delay_ms
        if run is not None and run.started_at is not None and due <= request.checkpoint_deadline:
            self.timers.at(due, lambda at: self._checkpoint(agents, run, at, periodic=False))

    def _end(self, agents: CellAgents, run: Run, due: int) -> None:
        if agents.runs.get(run.job_id) is not run:
            return
        del agents.runs[run.job_id]
        for worker, node in run.workers:
            self._emit(agents, m.WorkerExited(
                envelope=self._envelope(agents, due, f"agent/{node}", f"{run.job_id}-a{run.attempt}-w{worker}-exited",
                                        run.job_id),
                job_id=run.job_id, attempt=run.attempt, worker=worker, node=node, exit_code=0))

    def _stop_runs_on(self, agents: CellAgents, node: str) -> None:
        for job_id in [j for j, run in agents.runs.items() if node in run.nodes]:
            del agents.runs[job_id]

    # --- nodes -----------------------------------------------------------------------------------

    def _heartbeats(self, due: int) -> None:
        """One heartbeat per live node, stamped with the present; the next round one period later."""
        for agents in self.cells.values():
            for node in agents.nodes:
                if node not in self.lost:
                    seq = self.heartbeat_seq[node] = self.heartbeat_seq.get(node, 0) + 1
                    self._emit(agents, m.NodeHeartbeat(
                        envelope=self._envelope(agents, self.now, f"agent/{node}", f"hb-{seq}-{self.now}"), node=node, seq=seq),
                        heartbeat=True)
        self.timers.at(self.now + (self.timing.heartbeat_every_ms or 5_000), self._heartbeats)

    def _next_failure(self, schedule: Iterator[Failure]) -> None:
        failure = next(schedule, None)
        if failure is not None:
            self.timers.at(failure.at, lambda due: (self._inject(failure, due), self._next_failure(schedule)))

    def _inject(self, failure: Failure, due: int) -> None:
        if failure.node in self.lost:
            return  # already down: nothing more can go wrong with it
        if failure.xid is None:
            self._lose(failure.node, due)
            return
        agents = self.cells[self.node_cell[failure.node]]
        self._emit(agents, m.GpuErrorReported(
            envelope=self._envelope(agents, due, f"agent/{failure.node}", f"xid-{failure.xid}-{due}"),
            node=failure.node, gpu=failure.gpu, xid=failure.xid, message=f"injected Xid {failure.xid}"))

    def _lose(self, node: str, due: int) -> None:
        """The node goes silent: no heartbeats, and the gangs with a worker on it hang (no more reports)."""
        if node in self.lost:
            return
        self.lost.add(node)
        agents = self.cells[self.node_cell[node]]
        self._stop_runs_on(agents, node)
        self.timers.at(due + self.failures.repair_ms, lambda at: self._repair(node, at))

    def _repair(self, node: str, due: int) -> None:
        self.lost.discard(node)  # heartbeats resume with the next round
        self._health_check_at(self.cells[self.node_cell[node]], node, due)

    def _health_check_at(self, agents: CellAgents, node: str, due: int) -> None:
        def passed(at: int) -> None:
            if node not in self.lost:
                self._emit(agents, m.NodeHealthCheckPassed(
                    envelope=self._envelope(agents, at, f"agent/{node}", f"health-{at}"), node=node))
        self.timers.at(due, passed)

    # --- output ----------------------------------------------------------------------------------

    def _emit(self, agents: CellAgents, event: m.Event, heartbeat: bool = False) -> None:
        agents.outbox.append((event, heartbeat))

    def _envelope(self, agents: CellAgents, at: int, producer: str, what: str, job_id: str | None = None,
                  cause: m.Event | None = None) -> m.Envelope:
        """Ids name the reporter and what happened (unique per attempt or time), so a report can be traced."""
        return m.Envelope(event_id=f"{producer}/{what}", cell=agents.cell, at=at,
                          producer=producer, correlation_id=job_id,
                          causation_id=cause.envelope.event_id if cause is not None else None)


def trace_placement(tracer, record, nodes: set[str]) -> None:
    """A span in the job's trace when a traced placement puts workers on these nodes: the agent takes them on."""
    event = record.event
    if not isinstance(event, m.JobPlaced) or not tracer.on:
        return
    parent = record.header("traceparent")
    mine = sorted({a.node for a in event.assignments if a.node in nodes})
    if parent and mine:
        with tracer.span(f"agent start {event.job_id}", parent=parent,
                         attributes={"job": event.job_id, "node": ",".join(mine), "attempt": event.attempt,
                                     "placed_offset": record.offset}):
            pass
