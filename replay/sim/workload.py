"""A simulation's workload and cell: jobs from traces (one team per trace), nodes in racks and blocks,
nominal quotas by each team's share of the demand, the run's configuration, and the seeded GPU failures
(the only randomness, drawn before the run so the same seed gives the same log)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from events.traces import TraceJob, TraceNode, gang_shape, read_jobs, read_nodes, trace_files
from projections.validate import LATEST_MS

UNIFORM_GPU_TYPE = "gpu"
COHORT = "all"
DAY_MS = 86_400_000
HOUR_MS = 3_600_000
#: Ten times the 100,000-GPU cell the core is benchmarked on: a bigger one is a mistake, not a cell to build.
MOST_GPUS = 1_000_000
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
    estimates: bool = False  # record every waiting job's estimated start and score it (replay/sim/estimates.py)


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
    last = max(r.submit_s + r.duration_s for r in rows)
    if last * 1000 > LATEST_MS:  # the cell would refuse such times, and tick through all of it first
        raise ValueError(f"a job of the traces ends {last:,} s after their start, beyond the {LATEST_MS // 1000:,} s "
                         f"a cell's time holds")
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
    try:
        if isinstance(gpus, str) and gpus.endswith("x"):
            factor = float(gpus[:-1])
            if not 0 < factor < 1e6:
                raise ValueError
            count = max(1, round(factor * average_demand(rows)))
        else:
            count = int(gpus)
    except ValueError:
        raise ValueError(f"--gpus {gpus}: give a number of GPUs (more than 0) or a factor of the average demand "
                         f"such as 1.2x") from None
    if count < 1:
        raise ValueError(f"--gpus {gpus}: a cell needs at least one GPU")
    if count > MOST_GPUS:
        raise ValueError(f"--gpus {gpus}: {count:,} GPUs, more than the {MOST_GPUS:,} a simulated cell may hold")
    return count


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


def with_config(config: SimConfig, **changes) -> SimConfig:
    return replace(config, **changes)
