"""Benchmark of the pure core: gangs admitted and placed per second on one cell (10,000 GPUs by default).

1,250 nodes x 8 GPUs in racks of 10 and blocks of 5 racks (block > rack > node), 16 teams in one
cohort, and 10,000 gangs whose sizes are the first 10,000 jobs of the merged ITP trace, all
submitted at once (`--nodes 12500 --jobs 100000` for a 100,000-GPU cell). Phase 1 folds the submissions (placed workers start at once, as
agents would report); phase 2 completes running jobs one by one (their workers exit, recovery ends them) so
that queued gangs are admitted as capacity frees. Prints decisions per second for each
phase, and with --profile the functions where the time goes. The cyclic garbage collector is paced as a running
service paces it (events/collector.py `BetweenBatches`, each record a batch); `--default-collector` leaves it at
Python's default pace.

    python tests/benchmarks/bench_core.py [--nodes 1250] [--jobs 10000] [--policy gangway-3] [--profile]
                                          [--default-collector]

`--against DIR` (another checkout of Gangway, e.g. `git worktree add /tmp/before <commit>`) runs the same
benchmark there and here `--runs` times, alternating, each a process of its own, and prints the medians side by side.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import re
import statistics
import subprocess
import sys
import time
from itertools import cycle, islice
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from events import models as m  # noqa: E402
from events.collector import BetweenBatches  # noqa: E402
from events.submission import job_submitted  # noqa: E402
from events.traces import gang_shape, itp_jobs  # noqa: E402
from projections.jobs import JobState  # noqa: E402
from replay.runner import VirtualCell  # noqa: E402
from services.policies import resolve  # noqa: E402
from services.policy import DEFAULT_POLICY, Policy  # noqa: E402

TEAMS = [f"team{i:02d}" for i in range(16)]


def build_cell(nodes: int = 1250, policy: Policy = DEFAULT_POLICY) -> VirtualCell:
    cell = VirtualCell(tick_ms=10**12, policy=policy)
    op = lambda: cell.envelope(0, "operator")  # noqa: E731
    cell.append(m.CellConfigured(envelope=op(), topology_levels=["block", "rack"]))
    for i in range(nodes):
        rack = i // 10
        cell.append(m.NodeRegistered(envelope=op(), node=f"n{i:04d}", gpu_type="H100", gpus=8,
                                     labels={"block": f"b{rack // 5:02d}", "rack": f"r{rack:03d}"}))
    cell.append(m.CohortDefined(envelope=op(), cohort="all"))
    for team in TEAMS:
        cell.append(m.TeamDefined(envelope=op(), team=team, cohort="all"))
        cell.append(m.QuotaSet(envelope=op(), team=team, gpu_type="H100", nominal=nodes * 8 // len(TEAMS)))
    return cell


def start_workers(cell: VirtualCell, event: m.Event, offset: int) -> None:
    """Node agents' part: every placed worker starts at once, so jobs run and are possible victims."""
    if isinstance(event, m.JobPlaced):
        for a in event.assignments:
            cell.schedule(m.WorkerStarted(envelope=cell.envelope(event.envelope.at, "agent"), job_id=event.job_id,
                                          attempt=event.attempt, worker=a.worker, node=a.node))


def submissions(cell: VirtualCell, count: int) -> list[m.JobSubmitted]:
    out = []
    for i, trace_job in enumerate(islice(cycle(itp_jobs()), count)):  # the trace again when it runs out
        workers, per_worker = gang_shape(trace_job.gpus)
        out.append(job_submitted(f"j{i:06d}", TEAMS[i % len(TEAMS)], workers, per_worker, "H100", cell=cell.cell, at=1))
    return out


def count(cell: VirtualCell, start: int, kind: type) -> int:
    return sum(1 for e in cell.log[start:] if isinstance(e, kind))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_250, help="nodes of 8 GPUs")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--completions", type=int, default=2_000, help="running jobs to complete in phase 2")
    parser.add_argument("--policy", default="gangway", help="a policy name or recorded version (default gangway)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--default-collector", action="store_true",
                        help="Python's own pace of the cyclic garbage collector, not a running service's")
    parser.add_argument("--against", type=Path, metavar="DIR", help="another checkout to time side by side")
    parser.add_argument("--runs", type=int, default=3, help="runs in each checkout with --against (default 3)")
    args = parser.parse_args()
    if args.against is not None:
        if not (args.against / "tests" / "benchmarks" / "bench_core.py").is_file():
            parser.error(f"--against {args.against}: not a checkout of Gangway (no tests/benchmarks/bench_core.py)")
        return side_by_side(args.against, args.runs, sys.argv[1:])

    cell = build_cell(args.nodes, resolve(args.policy))
    cell.observers.append(start_workers)
    jobs = submissions(cell, args.jobs)
    profiler = cProfile.Profile() if args.profile else None

    collector = BetweenBatches(paced=not args.default_collector)

    start_offset = len(cell.log)
    if profiler:
        profiler.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    for job in jobs:
        cell.append(job)
        cell.run_until(1)  # the workers start
        collector.after_poll(1)
    phase1, cpu1 = time.perf_counter() - t0, time.process_time() - c0
    admitted1, placed1 = count(cell, start_offset, m.JobAdmitted), count(cell, start_offset, m.JobPlaced)
    decisions1 = sum(1 for e in cell.log[start_offset:] if e.is_decision)

    start_offset = len(cell.log)
    running = [j for j in sorted(cell.state.holding) if cell.state.jobs[j].state is JobState.RUNNING]
    t0, c0 = time.perf_counter(), time.process_time()
    for job_id in running[: args.completions]:
        job = cell.state.jobs[job_id]
        for worker, node, _ in job.assignments:  # the agents report each worker's exit; recovery ends the job
            cell.append(m.WorkerExited(envelope=cell.envelope(2, "agent"), job_id=job_id, attempt=job.attempt,
                                       worker=worker, node=node, exit_code=0))
        cell.run_until(2)
        collector.after_poll(1)
    phase2, cpu2 = time.perf_counter() - t0, time.process_time() - c0
    if profiler:
        profiler.disable()
    admitted2, placed2 = count(cell, start_offset, m.JobAdmitted), count(cell, start_offset, m.JobPlaced)
    completed = min(len(running), args.completions)
    queued = len(cell.state.queued)

    print(f"cell: {args.nodes:,} nodes x 8 GPUs = {args.nodes * 8:,} GPUs, block > rack > node; {args.jobs:,} ITP-sized gangs")
    print(f"phase 1 (submit all): {phase1:.2f} s, {decisions1:,} decisions, {admitted1:,} admitted, {placed1:,} placed "
          f"-> {placed1 / phase1:,.0f} gangs admitted+placed/s, {args.jobs / phase1:,.0f} submissions folded/s "
          f"(CPU {cpu1:.2f} s: {placed1 / cpu1:,.0f} per CPU-second)")
    print(f"phase 2 (complete {completed:,} running gangs, queue {queued:,} left): {phase2:.2f} s, {admitted2:,} admitted, "
          f"{placed2:,} placed -> {placed2 / phase2:,.0f} gangs admitted+placed/s, "
          f"{completed / phase2:,.0f} completions/s (CPU {cpu2:.2f} s: {placed2 / cpu2:,.0f} per CPU-second)")
    print(f"collector: {'Python default' if args.default_collector else 'as a running service paces it'}, "
          f"{collector.seconds:.2f} s in collections")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
    return 0


#: The figures each phase prints: gangs admitted and placed per second (wall), and per CPU-second.
FIGURES = re.compile(r"^phase (\d).*-> ([\d,]+) gangs admitted\+placed/s.*: ([\d,]+) per CPU-second\)$", re.M)


def side_by_side(against: Path, runs: int, argv: list[str]) -> int:
    """The benchmark in this checkout and in `against`, alternating so both meet the machine in the same state."""
    own = [a for i, a in enumerate(argv) if a not in ("--against", "--runs", "--profile")
           and (i == 0 or argv[i - 1] not in ("--against", "--runs"))]
    trees = {"this": ROOT, "against": against.resolve()}
    figures: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for _ in range(runs):
        for name, tree in trees.items():
            out = subprocess.run([sys.executable, "tests/benchmarks/bench_core.py", *own], cwd=tree, check=True,
                                 capture_output=True, text=True).stdout
            for phase, wall, cpu in FIGURES.findall(out):
                figures.setdefault((phase, name), []).append((int(wall.replace(",", "")), int(cpu.replace(",", ""))))
    for (phase, name), runs_of in sorted(figures.items()):
        wall = statistics.median(w for w, _ in runs_of)
        cpu = statistics.median(c for _, c in runs_of)
        print(f"phase {phase} {name:8} {str(trees[name]):40} median of {len(runs_of)}: {wall:>7,.0f} placed/s, "
              f"{cpu:>7,.0f} per CPU-second (runs: {', '.join(f'{w:,}' for w, _ in runs_of)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
