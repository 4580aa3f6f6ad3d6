"""Benchmark of a cell's memory over its history: a million jobs through one cell of the simulator.

One 8,000-GPU cell (1,000 nodes x 8 GPUs, racks of 10, four teams in a cohort) runs the four deciders as the
simulator does, with jobs whose sizes are the merged ITP trace's (cycled), one submitted every half virtual
second and running 5 to 15 virtual minutes, so about as much work is live at any time as the cell holds.
At each checkpoint (by default 100k, 500k and 1M jobs ended) it prints the process's resident memory, the jobs
the state holds, and the state saved to a fresh RocksDB store: its size on disk and the time (and memory) a
fresh process takes to restore it, as a service does when it starts. The log is not kept (the simulator's
cell is told not to), so what grows is the state alone.

    python tests/benchmarks/bench_state.py [--jobs 1000000] [--at 100000,500000,1000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from events import models as m  # noqa: E402
from events.submission import job_submitted  # noqa: E402
from events.traces import gang_shape, itp_jobs  # noqa: E402
from projections.store import ProjectionStore  # noqa: E402
from replay.runner import VirtualCell  # noqa: E402

TEAMS = ["team0", "team1", "team2", "team3"]
NODES, GPUS = 1_000, 8
SUBMIT_EVERY_MS = 500
MINUTE = 60_000

#: Run in a fresh process: restore the store, print the seconds it took and the resident memory after.
RESTORE = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
def rss_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
from projections.store import ProjectionStore
t0 = time.perf_counter()
store = ProjectionStore(sys.argv[1])
state = store.load()
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "jobs": len(state.jobs), "rss_mb": rss_mb()}))
"""


def rss_mb() -> float:
    """Resident memory of this process now, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build_cell() -> VirtualCell:
    cell = VirtualCell(tick_ms=10_000, keep_ended=False, keep_log=False)
    op = lambda: cell.envelope(0, "operator")  # noqa: E731
    cell.append(m.CellConfigured(envelope=op(), topology_levels=["rack"]))
    for i in range(NODES):
        cell.append(m.NodeRegistered(envelope=op(), node=f"n{i:04d}", gpu_type="H100", gpus=GPUS,
                                     labels={"rack": f"r{i // 10:03d}"}))
    cell.append(m.CohortDefined(envelope=op(), cohort="all"))
    for team in TEAMS:
        cell.append(m.TeamDefined(envelope=op(), team=team, cohort="all"))
        cell.append(m.QuotaSet(envelope=op(), team=team, gpu_type="H100", nominal=NODES * GPUS // len(TEAMS)))
    return cell


def agents(durations: dict[str, int]):
    """The node agents' part: a placed gang's workers start at once and all exit when its run is over."""
    def observe(cell: VirtualCell, event: m.Event, offset: int) -> None:
        if not isinstance(event, m.JobPlaced):
            return
        at = event.envelope.at
        end = at + durations.pop(event.job_id, 10 * MINUTE)
        for a in event.assignments:
            cell.schedule(m.WorkerStarted(envelope=cell.envelope(at, "agent"), job_id=event.job_id,
                                          attempt=event.attempt, worker=a.worker, node=a.node), at)
            cell.schedule(m.WorkerExited(envelope=cell.envelope(end, "agent"), job_id=event.job_id,
                                         attempt=event.attempt, worker=a.worker, node=a.node, exit_code=0), end)
    return observe


def restore_in_fresh_process(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", RESTORE, str(path), str(ROOT)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"restoring the store failed:\n{out.stderr}")
    return json.loads(out.stdout)


def checkpoint(cell: VirtualCell, ended: int, started: float) -> None:
    with tempfile.TemporaryDirectory(prefix="gangway-bench-state-") as tmp:
        store = ProjectionStore(Path(tmp) / "store")
        t0 = time.perf_counter()
        store.save(cell.state, everything=True)
        saved = time.perf_counter() - t0
        store.close()
        disk = sum(f.stat().st_size for f in (Path(tmp) / "store").rglob("*") if f.is_file())
        restored = restore_in_fresh_process(Path(tmp) / "store")
    print(f"{ended:>9,} ended | {len(cell.state.jobs):>7,} jobs in state, {len(cell.state.retired):>9,} ids kept | "
          f"RSS {rss_mb():7.1f} MiB | store {disk / 2**20:6.1f} MiB, saved in {saved:5.2f} s | "
          f"restore {restored['seconds']:5.2f} s, {restored['rss_mb']:6.1f} MiB | {time.perf_counter() - started:6.0f} s",
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--at", default="100000,500000,1000000", help="ended-job counts to measure at")
    args = parser.parse_args()
    marks = sorted(int(x) for x in args.at.split(","))

    print(f"cell: {NODES:,} nodes x {GPUS} GPUs; one job every {SUBMIT_EVERY_MS} ms (virtual), 5-15 min each; "
          f"RSS at start {rss_mb():.1f} MiB", flush=True)
    cell = build_cell()
    durations: dict[str, int] = {}
    cell.observers.append(agents(durations))
    ended = 0

    def count_ended(cell: VirtualCell, event: m.Event, offset: int) -> None:
        nonlocal ended
        if isinstance(event, (m.JobSucceeded, m.JobFailed, m.JobCancelled, m.JobRejected)):
            ended += 1
    cell.observers.append(count_ended)

    started = time.perf_counter()
    sizes = cycle([gang_shape(min(j.gpus, 64)) for j in itp_jobs(limit=20_000)])
    at = MINUTE
    for i, (workers, per_worker) in enumerate(islice(sizes, args.jobs)):
        job_id = f"j{i:07d}"
        durations[job_id] = (5 + i * 7 % 11) * MINUTE
        cell.run_until(at)
        cell.append(job_submitted(job_id, TEAMS[i % len(TEAMS)], workers, per_worker, "H100", cell=cell.cell, at=at,
                                  time_limit_ms=16 * MINUTE))
        at += SUBMIT_EVERY_MS
        while marks and ended >= marks[0]:
            checkpoint(cell, ended, started)
            marks.pop(0)
    while marks and cell.next_scheduled_at() is not None:
        cell.run_until(cell.next_scheduled_at() + cell.tick_ms)
        while marks and ended >= marks[0]:
            checkpoint(cell, ended, started)
            marks.pop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
