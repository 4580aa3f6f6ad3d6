"""Trace-driven simulation: replays job traces through the four deciders in virtual time, and measures.

A shell over the pure core (like the Kafka service): it builds a cell, defines one team per trace
(the ITP cluster id or the trace file name), sets each team's nominal quota to its share of the
average demand, submits every trace job at its submit time, and lets the simulated agents run,
checkpoint, restart and fail the workers. Randomness lives here only: GPU failures are drawn from
a Poisson process with `random.Random(seed)` before the run and injected as `GpuErrorReported`
facts, so the same seed gives the same log and the same result, byte for byte.

Tenancy (synthetic, as the traces have no teams): every team is in one cohort; its nominal quota
is its share of the trace's GPU-seconds times the cell's GPUs, in whole nodes, but at least its
largest job (so each job can run on the team's private cluster and under a static partition).

Metrics (all times in seconds, GPU-time integrated piecewise between events):

- `jobs`: jobs submitted; `succeeded`, `failed`, `rejected`, `unfinished` (still waiting when
  nothing more could happen).
- `avg_jct_s`, `p50_jct_s`, `p99_jct_s`: job completion time (end - submit) of succeeded jobs.
- `avg_queue_s`, `p99_queue_s`: time a succeeded job did not hold GPUs between submit and end
  (first wait plus every wait after a preemption or failure, back-off included).
- `makespan_s`: first submission to last job end.
- `utilization`: allocated GPU-time over capacity GPU-time while work waits or runs.
- `idle_while_waiting`: free GPU-time over capacity GPU-time while at least one job waits.
- `preemptions`, `interruptions` (hardware failures and crashes hitting a job), `gpu_failures`.
- `gpu_hours_lost`: training progress discarded by preemptions and interruptions (progress since
  the checkpoint the next attempt resumes from), times the job's GPUs.
- `effective_training_ratio`: GPU-time of the training the succeeded jobs needed over all
  allocated GPU-time (start-up, restarts, checkpoint pauses and lost work are the difference).
- `multi_node_gangs_in_one_rack`: share of placements of multi-node gangs inside one rack.
- `per_team`: per team `jobs`, `nominal_gpus`, `avg_queue_s`, `avg_jct_s` and
  `private_avg_queue_s`, the same team alone on a private cell of its nominal quota under the
  same policy (null when private runs are off), and `queue_vs_private` (shared / private).
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from events import models as m
from projections.cluster import CELL
from projections.jobs import JobState
from services.policies import CATALOGUE
from services.policy import Policy
from services.simulation.agents import AgentTiming, SimulatedAgents
from services.simulation.runner import VirtualCell
from services.simulation.traces import TraceJob, TraceNode, gang_shape, read_jobs, read_nodes, trace_files

UNIFORM_GPU_TYPE = "gpu"
COHORT = "all"
DAY_MS = 86_400_000
HOUR_MS = 3_600_000
#: Hardware Xid codes drawn for a GPU failure: a double-bit ECC error retires the GPU, a GPU that
#: fell off the bus cordons its node (services/recovery/xid.py).
FAILURE_XIDS = (48, 79)


@dataclass(frozen=True)
class SimConfig:
    """Everything about a run except the trace and the policy."""

    gpus: int | None = None  # uniform cell size; None with `nodes_csv`
    gpus_per_node: int = 8
    nodes_per_rack: int = 16
    racks_per_block: int = 8
    nodes_csv: str | None = None  # heterogeneous cell from a node list (Alibaba openb)
    seed: int = 0
    tick_s: int = 60
    checkpoint_every_s: int | None = 30 * 60
    checkpoint_cost_s: int = 30
    restart_cost_s: int = 120
    start_delay_s: int = 1
    failures_per_1000_gpu_days: float = 0.5
    repair_s: int | None = 24 * 3600
    max_restarts: int = 3
    #: Users ask for a wall-clock limit as Slurm users do: this many times the job's real duration plus an
    #: hour (None: no limit). Backfill onto a gang's reserved nodes needs it to know when they come free.
    time_limit_factor: float | None = 2.0
    borrowing_limit: float | None = None  # fraction of a team's nominal; None: unlimited
    lending_limit: float | None = None  # fraction of a team's nominal; None: all of it
    private: bool = True  # also run each team alone on a private cell of its nominal quota


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_type: str
    gpus: int
    block: str
    rack: str


@dataclass(frozen=True)
class SimJob:
    job_id: str
    team: str
    submit_ms: int
    duration_ms: int
    gpus: int
    gpu_type: str
    workers: int
    gpus_per_worker: int


@dataclass
class Workload:
    """Jobs and cell of one run, with the teams' nominal quotas per GPU type."""

    jobs: list[SimJob]
    nodes: list[NodeSpec]
    quotas: dict[str, dict[str, int]]  # team -> gpu type -> nominal GPUs
    traces: list[str] = field(default_factory=list)

    @property
    def teams(self) -> list[str]:
        return sorted(self.quotas)

    def capacity(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.gpu_type] = out.get(n.gpu_type, 0) + n.gpus
        return dict(sorted(out.items()))


@dataclass
class RunOutcome:
    """One simulated run: its metrics, plot data and how much work it took."""

    metrics: dict
    series: dict
    jct_s: list[float]
    events: int
    wall_s: float
    per_job: dict[str, tuple[str, float | None, float | None]] = field(default_factory=dict)  # id -> (state, queue s, JCT s)
    private_events: int = 0  # the private-cluster runs, when there are any
    private_wall_s: float = 0.0


# --- building the cell and the workload -----------------------------------------------------------


def uniform_nodes(gpus: int, gpus_per_node: int = 8, nodes_per_rack: int = 16, racks_per_block: int = 8,
                  gpu_type: str = UNIFORM_GPU_TYPE, prefix: str = "n") -> list[NodeSpec]:
    """ceil(gpus / gpus_per_node) identical nodes in racks and blocks (block > rack > node)."""
    count = -(-gpus // gpus_per_node)
    width = len(str(max(count - 1, 0)))
    return [NodeSpec(f"{prefix}{i:0{width}d}", gpu_type, gpus_per_node, f"b{i // (nodes_per_rack * racks_per_block)}",
                     f"r{i // nodes_per_rack}") for i in range(count)]


def listed_nodes(nodes: Sequence[TraceNode], nodes_per_rack: int = 16, racks_per_block: int = 8) -> list[NodeSpec]:
    """A heterogeneous cell from a node list: racks hold nodes of one GPU type, in list order."""
    out, by_type = [], {}
    for node in nodes:
        by_type.setdefault(node.gpu_type, []).append(node)
    for gpu_type, members in sorted(by_type.items()):
        for i, node in enumerate(members):
            rack = i // nodes_per_rack
            out.append(NodeSpec(node.name, gpu_type, node.gpus, f"{gpu_type}-b{rack // racks_per_block}",
                                f"{gpu_type}-r{rack}"))
    return sorted(out, key=lambda n: n.name)


def node_size(nodes: Sequence[NodeSpec]) -> dict[str, int]:
    """GPU type -> GPUs of its largest node."""
    out: dict[str, int] = {}
    for n in nodes:
        out[n.gpu_type] = max(out.get(n.gpu_type, 0), n.gpus)
    return out


def nominal_quotas(demand: dict[str, int], biggest: dict[str, int], capacity: int, unit: int) -> dict[str, int]:
    """Splits `capacity` GPUs in whole `unit`s by each team's share of `demand` (GPU-seconds), with
    each team getting at least its biggest job; largest remainder, ties by team name."""
    teams = sorted(demand)
    units = capacity // unit
    need = {t: -(-biggest.get(t, 0) // unit) for t in teams}
    if sum(need.values()) > units:
        raise ValueError(f"a cell of {capacity} GPUs cannot give every team its largest job "
                         f"({sum(need.values()) * unit} GPUs needed); use more --gpus")
    fixed: dict[str, int] = {}
    while True:
        free = [t for t in teams if t not in fixed]
        left = units - sum(fixed.values())
        total = sum(demand[t] for t in free) or 1
        under = [t for t in free if left * demand[t] < need[t] * total]
        if not under:
            break
        fixed.update({t: need[t] for t in under})
    share = {t: divmod(left * demand[t], total) for t in free}
    out = {**fixed, **{t: q for t, (q, _) in share.items()}}
    spare = units - sum(out.values())
    for t in sorted(free, key=lambda t: (-share[t][1], t))[:spare]:
        out[t] += 1
    return {t: out[t] * unit for t in teams}


def build_workload(traces: Sequence[Path], config: SimConfig, limit: int | None = None) -> Workload:
    """Reads the traces and builds the cell, the jobs (one team per trace file) and the quotas."""
    files = [f for path in traces for f in trace_files(Path(path))]
    rows = read_jobs(files)
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise ValueError("the traces hold no job")
    if config.nodes_csv:
        nodes = listed_nodes(read_nodes(Path(config.nodes_csv)), config.nodes_per_rack, config.racks_per_block)
    else:
        nodes = uniform_nodes(resolve_gpus(config.gpus, rows), config.gpus_per_node, config.nodes_per_rack,
                              config.racks_per_block)
    workload = make_workload(rows, nodes, config.seed)
    workload.traces = [f.name for f in files]
    return workload


def average_demand(rows: Sequence[TraceJob]) -> float:
    """GPUs busy on average over the arrival span: total GPU-seconds / (last - first submit)."""
    span = max(1, max(r.submit_s for r in rows) - min(r.submit_s for r in rows))
    return sum(r.gpus * r.duration_s for r in rows) / span


def resolve_gpus(gpus: int | str | None, rows: Sequence[TraceJob]) -> int:
    """An int, or 'F x' (e.g. '1.2x'): F times the average demand, rounded to the nearest GPU."""
    if gpus is None:
        raise ValueError("give the cell size: --gpus N, --gpus 1.2x, or --nodes-csv")
    if isinstance(gpus, str) and gpus.endswith("x"):
        return max(1, round(float(gpus[:-1]) * average_demand(rows)))
    return int(gpus)


def make_workload(rows: Sequence[TraceJob], nodes: list[NodeSpec], seed: int = 0) -> Workload:
    """Jobs (with GPU type and gang shape) and nominal quotas for the given cell."""
    sizes = node_size(nodes)
    capacity: dict[str, int] = {}
    for n in nodes:
        capacity[n.gpu_type] = capacity.get(n.gpu_type, 0) + n.gpus
    types = sorted(capacity)
    rng = random.Random(seed)
    jobs = []
    for row in rows:
        if len(types) == 1:
            gpu_type = types[0]
        else:  # heterogeneous cell: a type that can hold the job, with odds by capacity
            fits = [t for t in types if capacity[t] >= row.gpus] or [max(types, key=lambda t: (capacity[t], t))]
            gpu_type = rng.choices(fits, weights=[capacity[t] for t in fits])[0]
        workers, per_worker = gang_shape(row.gpus, sizes[gpu_type])
        jobs.append(SimJob(f"{row.cluster}-{row.row:05d}", row.cluster, row.submit_s * 1000, row.duration_s * 1000,
                           workers * per_worker, gpu_type, workers, per_worker))
    quotas: dict[str, dict[str, int]] = {team: {} for team in sorted({j.team for j in jobs})}
    for gpu_type in types:
        demand = {t: 0 for t in quotas}
        biggest = {t: 0 for t in quotas}
        for j in jobs:
            if j.gpu_type == gpu_type:
                demand[j.team] += j.gpus * (j.duration_ms // 1000)
                biggest[j.team] = max(biggest[j.team], j.gpus)
        for team, nominal in nominal_quotas(demand, biggest, capacity[gpu_type], sizes[gpu_type]).items():
            quotas[team][gpu_type] = nominal
    return Workload(jobs, nodes, quotas)


def private_workload(workload: Workload, team: str, config: SimConfig) -> Workload:
    """The team alone on a cell of its nominal quota (same node sizes and topology shape)."""
    sizes = node_size(workload.nodes)
    nodes: list[NodeSpec] = []
    for gpu_type, nominal in sorted(workload.quotas[team].items()):
        if nominal:
            nodes += uniform_nodes(nominal, sizes[gpu_type], config.nodes_per_rack, config.racks_per_block,
                                   gpu_type, prefix=f"{gpu_type}-n" if len(sizes) > 1 else "n")
    jobs = [j for j in workload.jobs if j.team == team]
    return Workload(jobs, nodes, {team: dict(workload.quotas[team])}, workload.traces)


# --- failures (the only randomness) ---------------------------------------------------------------


def gpu_failures(nodes: Sequence[NodeSpec], start_ms: int, end_ms: int, per_1000_gpu_days: float,
                 seed: int) -> list[tuple[int, str, int, int]]:
    """(at, node, GPU index, Xid) of per-GPU failures: a Poisson process over all GPUs of the cell."""
    gpus = sum(n.gpus for n in nodes)
    rate_per_ms = gpus * per_1000_gpu_days / 1000 / DAY_MS
    if rate_per_ms <= 0 or end_ms <= start_ms:
        return []
    rng = random.Random(f"failures-{seed}")
    slots = [(n.name, i) for n in nodes for i in range(n.gpus)]
    out, at = [], start_ms
    while True:
        at += max(1, round(rng.expovariate(rate_per_ms)))
        if at >= end_ms:
            return out
        node, gpu = slots[rng.randrange(len(slots))]
        out.append((at, node, gpu, rng.choice(FAILURE_XIDS)))


# --- measuring ------------------------------------------------------------------------------------


class Meter:
    """Observer that integrates GPU-time and follows every job while the log plays."""

    def __init__(self, agents: SimulatedAgents, gpu_types: Sequence[str], sample_ms: int = HOUR_MS) -> None:
        self.agents = agents
        self.gpu_types = tuple(gpu_types)
        self.t: int | None = None
        self.sample_ms = sample_ms
        self.next_sample: int | None = None
        self.samples: list[tuple[int, int, int]] = []  # (at, GPUs allocated, jobs waiting)
        self.busy_capacity = self.busy_allocated = 0  # GPU-ms while work waits or runs
        self.wait_capacity = self.wait_idle = 0  # GPU-ms while some job waits
        self.allocated_total = 0  # GPU-ms allocated overall
        self.held_since: dict[str, int] = {}
        self.held_ms: dict[str, int] = {}
        self.preemptions = self.interruptions = self.gpu_failures = 0
        self.lost_gpu_ms = 0
        self.multi_node = self.multi_node_one_rack = 0
        self.ended = 0
        self.first_at: int | None = None
        self.now = (0, 0, 0)  # (GPUs allocated, GPUs free, jobs waiting) after the last event

    def __call__(self, cell: VirtualCell, event: m.Event, offset: int) -> None:
        at = event.envelope.at
        if self.t is None:
            self.t = at
            self.next_sample = at - at % self.sample_ms + self.sample_ms
        elif at > self.t:
            self._advance(at)
        kind = type(event)
        if kind in _JOB_EVENTS:
            self._job_event(cell, event, kind, offset, at)
        elif kind is m.GpuErrorReported:
            self.gpu_failures += 1
        if kind not in _KEEP_COUNTS:
            self._snapshot(cell)

    def _snapshot(self, cell: VirtualCell) -> None:
        """The state's GPU counts after this event: they hold until the next event's time."""
        state = cell.state
        free = 0
        histograms = state.cluster.histogram
        for gpu_type in self.gpu_types:
            free += sum(f * c for f, c in enumerate(histograms.get((gpu_type, CELL, ""), ())))
        self.now = (sum(state.tenancy.usage.values()), free, len(state.queued))

    def _advance(self, at: int) -> None:
        allocated, free, waiting = self.now
        capacity = allocated + free
        dt = at - self.t
        self.allocated_total += allocated * dt
        if waiting or allocated:
            self.busy_capacity += capacity * dt
            self.busy_allocated += allocated * dt
        if waiting:
            self.wait_capacity += capacity * dt
            self.wait_idle += free * dt
        while self.next_sample <= at:
            self.samples.append((self.next_sample, allocated, waiting))
            self.next_sample += self.sample_ms
        self.t = at

    def _job_event(self, cell: VirtualCell, event: m.Event, kind: type, offset: int, at: int) -> None:
        job = cell.state.jobs.get(event.job_id)
        if job is None:
            return
        if kind is m.JobSubmitted:
            if self.first_at is None:
                self.first_at = at
            return
        decided = job.reason_offset == offset  # folded, not superseded
        if job.holds_capacity:
            if job.job_id not in self.held_since:
                self.held_since[job.job_id] = at
        elif job.job_id in self.held_since:
            self.held_ms[job.job_id] = self.held_ms.get(job.job_id, 0) + at - self.held_since.pop(job.job_id)
        if not decided:
            return
        if kind is m.JobPlaced and job.state is JobState.PLACED:
            nodes = job.nodes()
            if len(nodes) > 1:
                self.multi_node += 1
                racks = {cell.state.cluster.nodes[n].domains[-1] for n in nodes}
                self.multi_node_one_rack += len(racks) == 1
        elif kind is m.JobPreempted:
            self.preemptions += 1
            self._lost(job, job.attempt - 1, at)
        elif kind is m.JobInterrupted:
            self.interruptions += 1
            self._lost(job, event.attempt, at)
        elif kind in _ENDINGS:
            self.ended += 1

    def _lost(self, job, attempt: int, at: int) -> None:
        progress = self.agents.progress(job.job_id, attempt, at)
        if progress is None:
            return
        kept = job.checkpoint.progress_ms if job.checkpoint is not None else 0
        self.lost_gpu_ms += max(0, progress - kept) * job.gpus


#: Events after which GPUs allocated, GPUs free and jobs waiting are what they were before.
_KEEP_COUNTS = frozenset({m.CheckpointCompleted, m.WorkerStarted, m.WorkerExited, m.Tick, m.JobQueued,
                          m.PreemptionRequested, m.GpuErrorReported})
_ENDINGS = frozenset({m.JobSucceeded, m.JobFailed, m.JobCancelled, m.JobRejected})
_JOB_EVENTS = frozenset({m.JobSubmitted, m.JobAdmitted, m.JobPlaced, m.PlacementPending, m.JobPreempted,
                         m.JobInterrupted, *_ENDINGS})


# --- running --------------------------------------------------------------------------------------


Progress = Callable[[int, int, int, int], None]  # (jobs ended, jobs, virtual ms, events)


def simulate(workload: Workload, policy: Policy, config: SimConfig, progress: Progress | None = None) -> RunOutcome:
    """Plays the workload through the deciders under `policy` and returns its measures."""
    wall0 = time.perf_counter()
    cell = VirtualCell(cell="sim", policy=policy, tick_ms=config.tick_s * 1000)
    timing = AgentTiming(start_delay_ms=config.start_delay_s * 1000,
                         checkpoint_every_ms=config.checkpoint_every_s * 1000 if config.checkpoint_every_s else None,
                         checkpoint_cost_ms=config.checkpoint_cost_s * 1000,
                         restart_cost_ms=config.restart_cost_s * 1000,
                         repair_ms=config.repair_s * 1000 if config.repair_s is not None else None)
    agents = SimulatedAgents(timing=timing, durations={j.job_id: j.duration_ms for j in workload.jobs})
    meter = Meter(agents, sorted(workload.capacity()))
    cell.observers.extend([agents, meter])
    start = min(j.submit_ms for j in workload.jobs)
    _configure(cell, workload, config, start)
    for j in workload.jobs:
        cell.schedule(m.JobSubmitted(envelope=cell.envelope(j.submit_ms, f"launcher/{j.team}", j.job_id),
                                     job_id=j.job_id, team=j.team, workers=j.workers, gpus_per_worker=j.gpus_per_worker,
                                     gpu_type=j.gpu_type, max_restarts=config.max_restarts,
                                     time_limit_ms=_time_limit(j.duration_ms, config)))
    horizon = max(j.submit_ms + j.duration_ms for j in workload.jobs)
    for at, node, gpu, xid in gpu_failures(workload.nodes, start, horizon, config.failures_per_1000_gpu_days,
                                           config.seed):
        cell.schedule(m.GpuErrorReported(envelope=cell.envelope(at, f"agent/{node}"), node=node, gpu=gpu, xid=xid,
                                         message="simulated hardware failure"))
    _play(cell, meter, len(workload.jobs), progress)
    metrics, per_job = _metrics(cell, workload, meter, start)
    series = {"sample_s": meter.sample_ms // 1000, "start_s": start // 1000,
              "gpus_in_use": [a for _, a, _ in meter.samples], "jobs_waiting": [w for _, _, w in meter.samples]}
    jct = sorted((j.ended_at - j.submitted_at) / 1000 for j in cell.state.jobs.values()
                 if j.state is JobState.SUCCEEDED)
    return RunOutcome(metrics, series, jct, len(cell.log), time.perf_counter() - wall0, per_job)


def _configure(cell: VirtualCell, workload: Workload, config: SimConfig, start: int) -> None:
    at = max(0, start - 1000)
    op = lambda: cell.envelope(at, "operator")  # noqa: E731
    cell.now = at
    cell.append(m.CellConfigured(envelope=op(), topology_levels=["block", "rack"]))
    for n in workload.nodes:
        cell.append(m.NodeRegistered(envelope=op(), node=n.name, gpu_type=n.gpu_type, gpus=n.gpus,
                                     labels={"block": n.block, "rack": n.rack}))
    cell.append(m.CohortDefined(envelope=op(), cohort=COHORT))
    for team in workload.teams:
        cell.append(m.TeamDefined(envelope=op(), team=team, cohort=COHORT))
        for gpu_type, nominal in sorted(workload.quotas[team].items()):
            borrow = None if config.borrowing_limit is None else int(nominal * config.borrowing_limit)
            lend = None if config.lending_limit is None else int(nominal * config.lending_limit)
            cell.append(m.QuotaSet(envelope=op(), team=team, gpu_type=gpu_type, nominal=nominal,
                                   borrowing_limit=borrow, lending_limit=lend))


def _play(cell: VirtualCell, meter: Meter, jobs: int, progress: Progress | None) -> None:
    """Plays scheduled events and clock ticks in time order until nothing more can happen.

    Ticks are skipped while nothing waits (no queued or preempting job): such a tick decides
    nothing. When nothing is scheduled and a tick decides nothing while no job holds GPUs and no
    back-off is pending, the waiting jobs can never run: the run stops and counts them unfinished."""
    state = cell.state
    tick_ms = cell.tick_ms
    first = cell.next_scheduled_at()
    next_tick = (first // tick_ms + 1) * tick_ms if first is not None else 0
    steps = 0
    while True:
        steps += 1
        if progress is not None and steps % 2048 == 0:
            progress(meter.ended, jobs, cell.now, len(cell.log))
        upcoming = cell.next_scheduled_at()
        if state.queued or state.preempting:
            if upcoming is None or next_tick < upcoming:
                cell.now = next_tick
                before = len(cell.log)
                cell.append(m.Tick(envelope=cell.envelope(next_tick, "clock")))
                next_tick += tick_ms
                if (upcoming is None and len(cell.log) == before + 1 and not state.holding
                        and all(state.jobs[j].not_before <= next_tick for j in state.queued)):
                    break  # stuck: nothing will ever change
                continue
        elif upcoming is None:
            break
        elif next_tick < upcoming:
            next_tick = (upcoming // tick_ms + 1) * tick_ms if upcoming % tick_ms else upcoming
        cell.play_next()
    if progress is not None:
        progress(meter.ended, jobs, cell.now, len(cell.log))


def _time_limit(duration_ms: int, config: SimConfig) -> int | None:
    if config.time_limit_factor is None:
        return None
    return int(duration_ms * config.time_limit_factor) + 3_600_000


def _percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of sorted values (0 for none)."""
    if not values:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(values)))
    return values[min(rank, len(values)) - 1]


def _r(x: float, digits: int = 1) -> float:
    return round(x, digits)


def _metrics(cell: VirtualCell, workload: Workload, meter: Meter, start: int) -> tuple[dict, dict]:
    state = cell.state
    per_job: dict[str, tuple[str, float | None, float | None]] = {}
    jct: list[int] = []
    queue: list[int] = []
    per_team: dict[str, dict] = {t: {"jobs": 0, "queue_ms": 0, "jct_ms": 0, "succeeded": 0} for t in workload.teams}
    useful = 0
    counts = {"succeeded": 0, "failed": 0, "rejected": 0, "cancelled": 0, "unfinished": 0}
    last_end = start
    durations = meter.agents.durations
    for job_id in sorted(state.jobs):
        job = state.jobs[job_id]
        team = per_team[job.team]
        team["jobs"] += 1
        if job.state is JobState.SUCCEEDED:
            counts["succeeded"] += 1
            total = job.ended_at - job.submitted_at
            waited = total - meter.held_ms.get(job_id, 0)
            jct.append(total)
            queue.append(waited)
            team["queue_ms"] += waited
            team["jct_ms"] += total
            team["succeeded"] += 1
            last_end = max(last_end, job.ended_at)
            useful += durations[job_id] * job.gpus
            per_job[job_id] = (job.state.value, waited / 1000, total / 1000)
            continue
        per_job[job_id] = (job.state.value, None, None)
        if job.ended_at is not None:
            last_end = max(last_end, job.ended_at)
        if job.state.value in counts:
            counts[job.state.value] += 1
        else:
            counts["unfinished"] += 1
    jct.sort()
    queue.sort()
    return _metric_dict(state, counts, jct, queue, last_end, start, meter, useful, per_team, workload), per_job


def _metric_dict(state, counts, jct, queue, last_end, start, meter, useful, per_team, workload) -> dict:
    n = len(jct) or 1
    return {
        "jobs": len(state.jobs),
        **counts,
        "avg_jct_s": _r(sum(jct) / n / 1000),
        "p50_jct_s": _r(_percentile(jct, 50) / 1000),
        "p99_jct_s": _r(_percentile(jct, 99) / 1000),
        "avg_queue_s": _r(sum(queue) / n / 1000),
        "p50_queue_s": _r(_percentile(queue, 50) / 1000),
        "p99_queue_s": _r(_percentile(queue, 99) / 1000),
        "makespan_s": _r((last_end - start) / 1000),
        "utilization": _r(meter.busy_allocated / meter.busy_capacity, 4) if meter.busy_capacity else 0.0,
        "idle_while_waiting": _r(meter.wait_idle / meter.wait_capacity, 4) if meter.wait_capacity else 0.0,
        "preemptions": meter.preemptions,
        "interruptions": meter.interruptions,
        "gpu_failures": meter.gpu_failures,
        "gpu_hours_lost": _r(meter.lost_gpu_ms / HOUR_MS),
        "effective_training_ratio": _r(useful / meter.allocated_total, 4) if meter.allocated_total else 0.0,
        "multi_node_gangs": meter.multi_node,
        "multi_node_gangs_in_one_rack": _r(meter.multi_node_one_rack / meter.multi_node, 4) if meter.multi_node else 1.0,
        "per_team": {
            t: {"jobs": v["jobs"], "nominal_gpus": sum(workload.quotas[t].values()),
                "avg_queue_s": _r(v["queue_ms"] / max(v["succeeded"], 1) / 1000),
                "avg_jct_s": _r(v["jct_ms"] / max(v["succeeded"], 1) / 1000)}
            for t, v in per_team.items()
        },
    }


def run(workload: Workload, policy_name: str, config: SimConfig, progress: Progress | None = None,
        private_progress: Callable[[str], Progress | None] | None = None) -> tuple[dict, RunOutcome]:
    """Simulates one policy on the shared cell (and each team on its private cell) -> (result JSON, outcome)."""
    policy = CATALOGUE[policy_name]
    outcome = simulate(workload, policy, config, progress)
    metrics = outcome.metrics
    if config.private and len(workload.teams) > 1:
        for team in workload.teams:
            alone = private_workload(workload, team, config)
            if not alone.jobs:
                continue
            private = simulate(alone, policy, config, private_progress(team) if private_progress else None)
            outcome.private_events += private.events
            outcome.private_wall_s += private.wall_s
            entry = metrics["per_team"][team]
            entry["private_avg_queue_s"] = private.metrics["avg_queue_s"]
    elif len(workload.teams) == 1:  # alone already: the shared cell is the team's private cluster
        entry = metrics["per_team"][workload.teams[0]]
        entry["private_avg_queue_s"] = entry["avg_queue_s"]
    for entry in metrics["per_team"].values():
        private = entry.setdefault("private_avg_queue_s", None)
        entry["queue_vs_private"] = (_r(entry["avg_queue_s"] / private, 3) if private else None)
    result = {
        "policy": {"name": policy_name, "version": policy.version, "knobs": _knobs(policy)},
        "trace": {"files": workload.traces, "jobs": len(workload.jobs), "teams": workload.teams,
                  "span_s": (max(j.submit_ms for j in workload.jobs) - min(j.submit_ms for j in workload.jobs)) // 1000,
                  "gpu_hours": _r(sum(j.gpus * j.duration_ms for j in workload.jobs) / HOUR_MS)},
        "cluster": {"gpus": sum(n.gpus for n in workload.nodes), "nodes": len(workload.nodes),
                    "gpu_types": workload.capacity(), "nodes_per_rack": config.nodes_per_rack,
                    "racks_per_block": config.racks_per_block,
                    "source": Path(config.nodes_csv).name if config.nodes_csv else "uniform",
                    "quotas": {t: workload.quotas[t] for t in workload.teams}},
        "config": {k: v for k, v in asdict(config).items() if k not in ("gpus", "nodes_csv")},
        "metrics": metrics,
        "events": outcome.events,
        "series": outcome.series,
        "jct_percentiles_s": [_r(_percentile(outcome.jct_s, p)) for p in range(0, 101)],
    }
    return result, outcome


def _knobs(policy: Policy) -> dict:
    knobs = asdict(policy)
    knobs.pop("version")
    return knobs


class ProgressBar:
    """A one-line progress bar on stderr, redrawn at most every 0.2 s."""

    def __init__(self, label: str, stream=None, width: int = 30) -> None:
        self.label, self.stream, self.width = label, stream or sys.stderr, width
        self.last = 0.0
        self.t0 = time.monotonic()

    def __call__(self, ended: int, jobs: int, now_ms: int, events: int) -> None:
        wall = time.monotonic()
        if wall - self.last < 0.2 and ended < jobs:
            return
        self.last = wall
        done = ended / jobs if jobs else 1.0
        bar = "#" * int(done * self.width)
        self.stream.write(f"\r{self.label:<22} [{bar:<{self.width}}] {done:4.0%} {ended:,}/{jobs:,} jobs, "
                          f"day {now_ms / DAY_MS:5.1f}, {events:,} events, {wall - self.t0:5.1f} s ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def with_config(config: SimConfig, **changes) -> SimConfig:
    return replace(config, **changes)
