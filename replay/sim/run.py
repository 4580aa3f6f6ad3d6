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
- `preemptions_per_job`; `futile_preemptions`: preemptions whose beneficiary was not admitted by the victim's
  checkpoint deadline plus one cycle (a tick), of which `futile_preemptions_with_fault` saw a node failure or
  GPU fault in the cell between the preemption and that time; `max_preemptions_of_one_job`.
- `gpu_hours_lost`: training progress discarded by preemptions and interruptions (progress since
  the checkpoint the next attempt resumes from), times the job's GPUs.
- `effective_training_ratio`: GPU-time of the training the succeeded jobs needed over all
  allocated GPU-time (start-up, restarts, checkpoint pauses and lost work are the difference).
- `multi_node_gangs_in_one_rack`: share of placements of multi-node gangs inside one rack.
- `stranded_gpus`: fragmentation, the GPU-time free on partly used nodes (some but not all of a node's GPUs
  free, counted against the largest node of its type) over capacity GPU-time while work waits or runs.
- `per_team`: per team `jobs`, `nominal_gpus`, `avg_queue_s`, `avg_jct_s` and
  `private_avg_queue_s`, the same team alone on a private cell of its nominal quota under the
  same policy (null when private runs are off), and `queue_vs_private` (shared / private).

With `estimates` on, the result also holds `estimates`: how the queue's estimated starts fared against the
real starts (replay/sim/estimates.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from events import models as m
from events.collector import rare_collections
from events.submission import job_submitted
from projections.jobs import JobState
from replay.runner import Observer, VirtualCell
from replay.sim.estimates import EstimateRecorder
from replay.sim.metrics import Meter, _r, percentile, summarize
from replay.sim.workload import COHORT, HOUR_MS, SimConfig, Workload, gpu_failures, private_workload
from services.agent.simulated import AgentTiming, SimulatedAgents
from services.policies import resolve
from services.policy import Policy


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
    estimates: dict | None = None  # how the estimated starts fared, when they were recorded


# --- running --------------------------------------------------------------------------------------


Progress = Callable[[int, int, int, int], None]  # (jobs ended, jobs, virtual ms, events)


def simulate(workload: Workload, policy: Policy, config: SimConfig, progress: Progress | None = None,
             observers: Sequence[Observer] = ()) -> RunOutcome:
    """Plays the workload through the deciders under `policy` and returns its measures; `observers` see every
    event of the log as it is folded (to keep the log, say)."""
    with rare_collections():
        return _simulate(workload, policy, config, progress, observers)


def _simulate(workload: Workload, policy: Policy, config: SimConfig, progress: Progress | None,
              observers: Sequence[Observer]) -> RunOutcome:
    wall0 = time.perf_counter()
    # The log is not kept: observers see each event as it is folded (an exported log, say), and memory and the
    # collector's work follow live work, not the 1.4 million events of a long trace.
    cell = VirtualCell(cell="sim", policy=policy, tick_ms=config.tick_s * 1000, keep_log=False)
    timing = AgentTiming(start_delay_ms=config.start_delay_s * 1000,
                         checkpoint_every_ms=config.checkpoint_every_s * 1000 if config.checkpoint_every_s else None,
                         checkpoint_cost_ms=config.checkpoint_cost_s * 1000,
                         restart_cost_ms=config.restart_cost_s * 1000,
                         repair_ms=config.repair_s * 1000 if config.repair_s is not None else None)
    agents = SimulatedAgents(timing=timing, durations={j.job_id: j.duration_ms for j in workload.jobs})
    meter = Meter(agents, sorted(workload.capacity()), cycle_ms=config.tick_s * 1000)
    cell.observers.extend([agents, meter])
    cell.side_observers.append(agents.heard)
    cell.observers.extend(observers)
    recorder = EstimateRecorder(policy) if config.estimates else None
    if recorder is not None:
        cell.observers.append(recorder)
    start = min(j.submit_ms for j in workload.jobs)
    _configure(cell, workload, config, start)
    for j in workload.jobs:
        cell.schedule(job_submitted(j.job_id, j.team, j.workers, j.gpus_per_worker, j.gpu_type, cell=cell.cell,
                                    at=j.submit_ms, max_restarts=config.max_restarts,
                                    time_limit_ms=_time_limit(j.duration_ms, config)))
    horizon = max(j.submit_ms + j.duration_ms for j in workload.jobs)
    for at, node, gpu, xid in gpu_failures(workload.nodes, start, horizon, config.failures_per_1000_gpu_days,
                                           config.seed):
        cell.schedule(m.GpuErrorReported(envelope=cell.envelope(at, f"agent/{node}"), node=node, gpu=gpu, xid=xid,
                                         message="simulated hardware failure"))
    _play(cell, meter, len(workload.jobs), progress)
    metrics, per_job = summarize(cell, workload, meter, start)
    series = {"sample_s": meter.sample_ms // 1000, "start_s": start // 1000,
              "gpus_in_use": [a for _, a, _ in meter.samples], "jobs_waiting": [w for _, _, w in meter.samples]}
    jct = sorted((j.ended_at - j.submitted_at) / 1000 for j in cell.all_jobs().values()
                 if j.state is JobState.SUCCEEDED)
    return RunOutcome(metrics, series, jct, cell.length, time.perf_counter() - wall0, per_job,
                      estimates=recorder.summary() if recorder is not None else None)


def _configure(cell: VirtualCell, workload: Workload, config: SimConfig, start: int) -> None:
    at = max(0, start - 1000)
    op = lambda: cell.envelope(at, "operator")  # noqa: E731
    cell.now = at
    # The simulator's clock is its own and skips ahead while nothing waits: no bound on how far a tick jumps.
    cell.append(m.CellConfigured(envelope=op(), topology_levels=["block", "rack"], max_tick_jump_ms=None,
                                 max_event_lead_ms=None))
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
            progress(meter.ended, jobs, cell.now, cell.length)
        upcoming = cell.next_scheduled_at()
        if state.queued or state.preempting:
            if upcoming is None or next_tick < upcoming:
                cell.now = next_tick
                before = cell.length
                cell.append(m.Tick(envelope=cell.envelope(next_tick, "clock")))
                next_tick += tick_ms
                if (upcoming is None and cell.length == before + 1 and not state.holding
                        and all(state.jobs[j].not_before <= next_tick for j in state.queued)):
                    break  # stuck: nothing will ever change
                continue
        elif upcoming is None:
            break
        elif next_tick < upcoming:
            next_tick = (upcoming // tick_ms + 1) * tick_ms if upcoming % tick_ms else upcoming
        cell.play_next()
    if progress is not None:
        progress(meter.ended, jobs, cell.now, cell.length)


def _time_limit(duration_ms: int, config: SimConfig) -> int | None:
    if config.time_limit_factor is None:
        return None
    return int(duration_ms * config.time_limit_factor) + 3_600_000


def run(workload: Workload, policy_name: str, config: SimConfig, progress: Progress | None = None,
        private_progress: Callable[[str], Progress | None] | None = None,
        observers: Sequence[Observer] = ()) -> tuple[dict, RunOutcome]:
    """Simulates one policy on the shared cell (and each team on its private cell) -> (result JSON, outcome);
    `observers` see the shared cell's log."""
    policy = resolve(policy_name)
    outcome = simulate(workload, policy, config, progress, observers)
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
        "jct_percentiles_s": [_r(percentile(outcome.jct_s, p)) for p in range(0, 101)],
    }
    if outcome.estimates is not None:
        result["estimates"] = outcome.estimates
    return result, outcome


def _knobs(policy: Policy) -> dict:
    knobs = asdict(policy)
    knobs.pop("version")
    return knobs
