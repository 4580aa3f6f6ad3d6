"""What if another policy had run the cell: a recorded log's inputs re-driven through policy P in virtual time,
measured with the simulator's metrics beside what really happened.

What is re-driven, at its recorded time and in its recorded order: the operators' configuration (cell, cohorts,
teams, quotas, priority classes), submissions and cancels, node facts (registrations, GPU errors, health checks,
cordons), the clock's ticks, and heartbeat silences (a node recovery failed for silence heartbeats last at the
time its failure records). Worker facts become the simulated agents' model of the work (services/agent/
simulated.py): each job that succeeded needs the training time it had when it succeeded; a job that had not
succeeded by the end of the log needs longer than the window (its length is unknown); the agents' start delay,
checkpoint period and pause, checkpoint-on-request delay and restart cost are the medians the log shows
(`calibrated`). A worker's crash (a non-zero exit) is not re-driven: it belongs to an attempt P may never
make. Decisions are P's own.

With a cut (`--from`), the log up to the cut is folded as recorded (P takes over the cell as it was), the jobs
holding GPUs there keep the worker facts their current attempt recorded after the cut, and the inputs after the
cut are re-driven. Both runs end at the time of the last record compared; both are measured the same way
(replay/sim/metrics.py), lost work from the progress the log's own worker facts imply.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from events import models as m
from projections.jobs import JobState
from projections.validate import LATEST_MS
from replay.audit.text import table
from replay.runner import VirtualCell
from replay.sim.metrics import Meter, summarize
from replay.sim.workload import NodeSpec, SimJob, Workload
from services.agent.simulated import AgentTiming, SimulatedAgents
from services.policy import Policy

#: Inputs from outside the control plane that do not depend on its decisions.
REDRIVEN = (m.CellConfigured, m.CohortDefined, m.TeamDefined, m.QuotaSet, m.PriorityClassDefined, m.JobSubmitted,
            m.JobCancelRequested, m.NodeRegistered, m.GpuErrorReported, m.NodeHealthCheckPassed, m.NodeCordoned,
            m.NodeUncordoned, m.Tick)
WORKER_FACTS = (m.WorkerStarted, m.WorkerExited, m.CheckpointCompleted)
#: The metrics compared, in the order shown.
SHOWN = ("jobs", "succeeded", "unfinished", "avg_jct_s", "p99_jct_s", "avg_queue_s", "p99_queue_s", "preemptions",
         "gpu_hours_lost", "utilization", "idle_while_waiting")


@dataclass
class Comparison:
    cell: str
    recorded_policy: str
    policy: str
    cut: int  # offset up to which the log stands as recorded (-1: P from the start)
    until: int  # event time both runs end at
    recorded: dict = field(default_factory=dict)
    whatif: dict = field(default_factory=dict)
    movers: list[dict] = field(default_factory=list)


class LoggedWork:
    """Observer of a log's worker facts: how far each attempt got, and for jobs that succeeded, the training time
    they needed. Progress is that of the attempt's latest checkpoint plus the time since it; before its first,
    what it resumed from plus the time its whole gang ran, less a resumed attempt's `restart_cost_ms`."""

    def __init__(self, restart_cost_ms: int = 0) -> None:
        self.restart_cost_ms = restart_cost_ms
        self.started: dict[str, tuple[int, int, int]] = {}  # job -> (attempt, running since, restored progress)
        self.saved: dict[str, tuple[int, int, int]] = {}  # job -> (attempt, at, progress) of its latest checkpoint
        self.durations: dict[str, int] = {}

    def __call__(self, cell: VirtualCell, event: m.Event, offset: int) -> None:
        job = cell.state.jobs.get(m.field_of(event, "job_id", ""))
        if job is None:
            return
        if isinstance(event, m.WorkerStarted) and job.state is JobState.RUNNING and job.running_since == event.at:
            if self.started.get(job.job_id, (0,))[0] != job.attempt:
                restored = job.checkpoint.progress_ms if job.checkpoint is not None else 0
                self.started[job.job_id] = (job.attempt, event.at, restored)
        elif isinstance(event, m.CheckpointCompleted) and job.attempt == event.attempt and (
                job.checkpoint is not None and job.checkpoint.checkpoint_id == event.checkpoint_id):
            self.saved[job.job_id] = (event.attempt, event.at, event.progress_ms)
        elif isinstance(event, m.JobSucceeded) and job.state is JobState.SUCCEEDED:
            self.durations[job.job_id] = self.progress(job.job_id, job.attempt, event.at) or 0

    def progress(self, job_id: str, attempt: int, at: int) -> int | None:
        saved = self.saved.get(job_id)
        if saved is not None and saved[0] == attempt and saved[1] <= at:
            return saved[2] + at - saved[1]
        started = self.started.get(job_id)
        if started is None or started[0] != attempt:
            return None
        restart = self.restart_cost_ms if attempt > 1 else 0
        return started[2] + max(0, at - started[1] - restart)


def measure(events: Sequence[m.Event], cell: str, workload: Workload, until: int,
            restart_cost_ms: int = 0) -> tuple[dict, dict, LoggedWork]:
    """The simulator's metrics of a log, folded as it stands (no decider runs)."""
    replayed = VirtualCell(cell=cell, deciders=[])
    work = LoggedWork(restart_cost_ms)
    meter = Meter(work, sorted(workload.capacity()))
    replayed.observers.extend([work, meter])
    for event in events:
        if event.envelope.at <= until:
            replayed.append(event)
    work.durations = {**_never(workload, until), **work.durations}
    metrics, per_job = summarize(replayed, workload, meter, _start(events))
    return metrics, per_job, work


def compare(records: Sequence[tuple[int, m.Event]], cell: str, policy: Policy, cut: int = -1, movers: int = 10,
            recorded_policy: str = "") -> Comparison:
    """Re-drives the records' inputs after `cut` through `policy` and compares it with the record. Records stamped
    outside any cell's time are left out: the fold refuses them, and they would stretch the window without end."""
    records = [(o, e) for o, e in records if 0 <= e.envelope.at <= LATEST_MS]
    events = [e for _, e in records]
    until = max((e.envelope.at for e in events), default=0)
    workload = workload_of(events)
    timing = calibrated(events)
    recorded, recorded_jobs, work = measure(events, cell, workload, until, timing.restart_cost_ms)
    run = redrive(records, cell, policy, cut, work.durations, until, timing)
    whatif, whatif_jobs, _ = measure(run.log, cell, workload, until, timing.restart_cost_ms)
    out = Comparison(cell, recorded_policy, policy.version, cut, until,
                     {k: recorded[k] for k in SHOWN}, {k: whatif[k] for k in SHOWN})
    out.movers = most_moved(recorded_jobs, whatif_jobs, movers)
    return out


def redrive(records: Sequence[tuple[int, m.Event]], cell: str, policy: Policy, cut: int, durations: dict[str, int],
            until: int, timing: AgentTiming | None = None) -> VirtualCell:
    """The cell run under `policy` from the cut on, with simulated agents calibrated on the recorded worker facts."""
    events = [e for _, e in records]
    run = VirtualCell(cell=cell, policy=policy)
    agents = SimulatedAgents(timing=timing or calibrated(events),
                             durations={**_never(workload_of(events), until), **durations})
    prefix = [(o, e) for o, e in records if o <= cut]
    for _, event in prefix:
        run.append_recorded(event)
    run.now = prefix[-1][1].envelope.at if prefix else 0
    holding = {job_id: run.state.jobs[job_id].attempt for job_id in run.state.holding}
    run.observers.append(agents)
    for offset, event in records:
        if offset <= cut:
            continue
        if isinstance(event, REDRIVEN):
            run.schedule(event)
        elif isinstance(event, WORKER_FACTS) and holding.get(event.job_id) == event.attempt:
            run.schedule(event)  # the attempt running at the cut ends as it did
        elif isinstance(event, m.NodeFailed) and event.envelope.reason is m.Reason.HEARTBEAT_MISSED and (
                event.last_heartbeat_at is not None):
            last = m.Envelope(event_id=f"whatif-heartbeat-{offset}", cell=cell, at=event.last_heartbeat_at,
                              producer=f"agent/{event.node}")
            run.schedule(m.NodeHeartbeat(envelope=last, node=event.node, seq=offset))
    while (at := run.next_scheduled_at()) is not None and at <= until:
        run.play_next()
    return run


def calibrated(events: Sequence[m.Event]) -> AgentTiming:
    """The agents' timing the log shows, as medians: start delay (placed to started), checkpoint period (training
    between periodic checkpoints) and pause (time between them beyond that), checkpoint-on-request delay, and the
    restart cost of a resumed attempt (time to its first checkpoint beyond the training it saved)."""
    placed: dict[tuple[str, int], int] = {}
    started: dict[tuple[str, int], tuple[int, int]] = {}  # attempt -> (started at, progress restored)
    saved: dict[str, int] = {}  # job -> progress of its latest checkpoint
    attempt: dict[str, int] = {}  # job -> its current attempt (a late checkpoint of an earlier one does not count)
    asked: dict[str, int] = {}
    last: dict[tuple[str, int], tuple[int, int]] = {}  # attempt -> (at, progress) of its latest checkpoint
    delays, periods, pauses, answers, firsts = [], [], [], [], []
    for e in events:
        if isinstance(e, (m.JobPlaced, m.JobRequeued)):
            attempt[e.job_id] = e.attempt
        elif isinstance(e, m.JobPreempted):
            attempt[e.job_id] = attempt.get(e.job_id, 1) + 1
        if isinstance(e, m.JobPlaced):
            placed[(e.job_id, e.attempt)] = e.at
        elif isinstance(e, m.WorkerStarted) and (e.job_id, e.attempt) in placed:
            delays.append(e.at - placed.pop((e.job_id, e.attempt)))
            started[(e.job_id, e.attempt)] = (e.at, saved.get(e.job_id, 0))
        elif isinstance(e, m.PreemptionRequested):
            asked[e.job_id] = e.at
        elif isinstance(e, m.CheckpointCompleted) and e.attempt == attempt.get(e.job_id, 1):
            key = (e.job_id, e.attempt)
            if e.job_id in asked:
                answers.append(e.at - asked.pop(e.job_id))
            elif key in last:
                periods.append(e.progress_ms - last[key][1])
                pauses.append(e.at - last[key][0] - periods[-1])
            elif e.attempt > 1 and key in started:
                firsts.append((e.at - started[key][0], e.progress_ms - started[key][1]))
            last[key] = (e.at, e.progress_ms)
            saved[e.job_id] = max(saved.get(e.job_id, 0), e.progress_ms)
    default = AgentTiming()
    median = lambda values, otherwise: int(statistics.median(values)) if values else otherwise  # noqa: E731
    pause = max(0, median(pauses, 0))
    return AgentTiming(start_delay_ms=median(delays, default.start_delay_ms),
                       checkpoint_every_ms=median(periods, None), checkpoint_cost_ms=pause,
                       checkpoint_delay_ms=median(answers, default.checkpoint_delay_ms),
                       restart_cost_ms=max(0, median([took - trained - pause for took, trained in firsts], 0)))


def workload_of(events: Sequence[m.Event]) -> Workload:
    """The jobs, nodes and nominal quotas a log declares, in the simulator's terms (for its metrics)."""
    jobs: dict[str, SimJob] = {}
    nodes: dict[str, NodeSpec] = {}
    quotas: dict[str, dict[str, int]] = {}
    for e in events:
        if isinstance(e, m.JobSubmitted) and e.job_id not in jobs:
            jobs[e.job_id] = SimJob(e.job_id, e.team, e.at, 0, e.workers * e.gpus_per_worker, e.gpu_type, e.workers,
                                    e.gpus_per_worker)
            quotas.setdefault(e.team, {})
        elif isinstance(e, m.NodeRegistered):
            nodes[e.node] = NodeSpec(e.node, e.gpu_type, e.gpus, "", "")
        elif isinstance(e, m.TeamDefined):
            quotas.setdefault(e.team, {})
        elif isinstance(e, m.QuotaSet):
            quotas.setdefault(e.team, {})[e.gpu_type] = e.nominal
    return Workload(list(jobs.values()), list(nodes.values()), quotas)


def _never(workload: Workload, until: int) -> dict[str, int]:
    """A training time no job finishes within the window: for jobs whose length the log does not tell."""
    return {j.job_id: max(0, until - j.submit_ms) + 86_400_000 for j in workload.jobs}


def _start(events: Sequence[m.Event]) -> int:
    return min((e.at for e in events if isinstance(e, m.JobSubmitted)), default=0)


def most_moved(before: dict, after: dict, count: int) -> list[dict]:
    """Jobs whose outcome moved most: a changed end state first, then the largest change of completion time."""
    rows = []
    for job_id in sorted(set(before) & set(after)):
        (state_a, queue_a, jct_a), (state_b, queue_b, jct_b) = before[job_id], after[job_id]
        delta = None if jct_a is None or jct_b is None else round(jct_b - jct_a, 1)
        if state_a == state_b and not delta:
            continue
        rows.append({"job": job_id, "recorded": state_a, "whatif": state_b, "recorded_jct_s": jct_a,
                     "whatif_jct_s": jct_b, "recorded_queue_s": queue_a, "whatif_queue_s": queue_b,
                     "jct_change_s": delta})
    rows.sort(key=lambda r: (r["recorded"] == r["whatif"], -abs(r["jct_change_s"] or 0), r["job"]))
    return rows[:count]


def render(c: Comparison) -> str:
    since = "from the start of the log" if c.cut < 0 else f"from offset {c.cut}"
    head = (f"cell {c.cell}: recorded ({c.recorded_policy or 'as logged'}) against {c.policy}, {since}, "
            "inputs re-driven in virtual time")
    rows = [[k, _v(c.recorded[k]), _v(c.whatif[k])] for k in SHOWN]
    out = [head, table(rows, ["METRIC", "RECORDED", c.policy])]
    if c.movers:
        out += ["", "jobs whose outcome moved most"]
        out.append(table([[r["job"], r["recorded"], r["whatif"], _v(r["recorded_jct_s"]), _v(r["whatif_jct_s"]),
                           _v(r["jct_change_s"])] for r in c.movers],
                         ["JOB", "RECORDED", "WHATIF", "JCT S", "WHATIF JCT S", "CHANGE S"]))
    return "\n".join(out)


def _v(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 1 else f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)
